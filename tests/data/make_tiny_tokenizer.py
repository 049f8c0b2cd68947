#!/usr/bin/env python3
"""Writes tests/data/tiny-glm4/tokenizer.model: a small tiktoken-format BPE
vocabulary for the tiny GLM-4 fixture (our own, not GLM-4's): the 256 bytes,
then 44 merges of common English pieces (each made of two earlier tokens), so
300 ordinary tokens; GLM-4's 14 special tokens follow as ids 300-313, inside
the fixture's 320-row embedding. It lets autoglm-serve and autoglm-run take
text with the bundled model.

It also writes tests/data/tiny-glm4v/tokenizer.json, the same 300 ordinary
tokens as an HF byte-level BPE (as GLM-4.1V ships its tokenizer) with
GLM-4.1V's added tokens from 300 in GLM-4.1V's order (<|image|> 314, ...,
</answer> 319). Not committed (tokenizer files in the repository are mistaken
for third-party vocabularies): tools/bootstrap and the tests generate them.
Deterministic."""
import base64
import json
import os

MERGES = ["th", "he", "in", "er", "an", "re", "on", " t", " a", "en", "at", "ou", "ed", "nd", "es", "or", "is",
          "it", "al", "ar", "st", "to", "nt", "ng", "le", "se", " s", " w", " o", " the", "the", "ing", " and",
          "ll", "llo", "hello", " hello", "lo", " i", " is", "ha", "hat", " w" + "hat", "you"]


# GLM-4's pre-tokenizer regex (../shared/GLM_SPEC.md).
GLM4_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
# GLM-4.1V's added tokens in its order (151329 + i there, 300 + i here).
GLM4V_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                  "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
                  "<|end_of_video|>", "<|image|>", "<|video|>", "<think>", "</think>", "<answer>", "</answer>"]

# Added tokens that are text in the answer (not "special"): the phone agent reads them in `content`.
SHOWN_IN_OUTPUT = {"<think>", "</think>", "<answer>", "</answer>"}


def ordinary_tokens():
    tokens = [bytes([b]) for b in range(256)]
    for m in MERGES:
        t = m.encode()
        assert t not in tokens, m
        assert any(t[:i] in tokens and t[i:] in tokens for i in range(1, len(t))), m
        tokens.append(t)
    assert len(tokens) == 300, len(tokens)
    return tokens


def byte_alphabet():
    """GPT-2's byte-level alphabet: byte -> the character tokenizer.json spells it with."""
    spell, nxt = {}, 256
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
        spell[b] = chr(b if printable else nxt)
        nxt += 0 if printable else 1
    return spell


def hf_tokenizer_json(tokens):
    """tokens as an HF byte-level BPE: merges in rank order, so HF's merge priority is tiktoken's rank."""
    spell = byte_alphabet()
    word = lambda t: "".join(spell[b] for b in t)
    rank = {t: i for i, t in enumerate(tokens)}
    merges = []
    for t in tokens[256:]:
        # The split whose halves have the lowest ranks (the pair BPE joins last).
        cut = min(range(1, len(t)), key=lambda i: max(rank.get(t[:i], 1 << 30), rank.get(t[i:], 1 << 30)))
        merges.append("%s %s" % (word(t[:cut]), word(t[cut:])))
    added = [{"id": 300 + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": c not in SHOWN_IN_OUTPUT} for i, c in enumerate(GLM4V_SPECIALS)]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": GLM4_REGEX}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                                "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {word(t): i for i, t in enumerate(tokens)}, "merges": merges}}


def main():
    tokens = ordinary_tokens()
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "tiny-glm4", "tokenizer.model"), "w") as f:
        for i, t in enumerate(tokens):
            f.write("%s %d\n" % (base64.b64encode(t).decode(), i))
    if os.path.isdir(os.path.join(here, "tiny-glm4v")):
        with open(os.path.join(here, "tiny-glm4v", "tokenizer.json"), "w") as f:
            json.dump(hf_tokenizer_json(tokens), f, ensure_ascii=False)


if __name__ == "__main__":
    main()
