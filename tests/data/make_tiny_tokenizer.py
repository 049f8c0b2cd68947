#!/usr/bin/env python3
"""Writes tests/data/tiny-glm4/tokenizer.model: a small tiktoken-format BPE
vocabulary for the tiny GLM-4 fixture (our own, not GLM-4's): the 256 bytes,
then 44 merges of common English pieces (each made of two earlier tokens), so
300 ordinary tokens; GLM-4's 14 special tokens follow as ids 300-313, inside
the fixture's 320-row embedding. It lets autoglm-serve and autoglm-run take
text with the bundled model. Not committed (tokenizer files in the repository
are mistaken for third-party vocabularies): tools/bootstrap and the server
tests generate it. Deterministic."""
import base64
import os

MERGES = ["th", "he", "in", "er", "an", "re", "on", " t", " a", "en", "at", "ou", "ed", "nd", "es", "or", "is",
          "it", "al", "ar", "st", "to", "nt", "ng", "le", "se", " s", " w", " o", " the", "the", "ing", " and",
          "ll", "llo", "hello", " hello", "lo", " i", " is", "ha", "hat", " w" + "hat", "you"]


def main():
    tokens = [bytes([b]) for b in range(256)]
    for m in MERGES:
        t = m.encode()
        assert t not in tokens, m
        assert any(t[:i] in tokens and t[i:] in tokens for i in range(1, len(t))), m
        tokens.append(t)
    assert len(tokens) == 300, len(tokens)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-glm4", "tokenizer.model")
    with open(path, "w") as f:
        for i, t in enumerate(tokens):
            f.write("%s %d\n" % (base64.b64encode(t).decode(), i))


if __name__ == "__main__":
    main()
