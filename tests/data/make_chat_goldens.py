#!/usr/bin/env python3
"""Makes tests/data/tiny-glm4v/chat_golden.json: what transformers' apply_chat_template
renders with the fixture's chat template (GLM-4.1V's, verbatim) for chat messages the engine
must render the same: content as a string, content as OpenAI-style lists (the "openai"
content format: parts in place), multi-turn with assistant replies, no generation prompt;
and vLLM's "string" content format (GLM4V_SPEC.md section 5.2: the list flattened before the
template, image placeholders first, then the texts, joined by newlines).

Needs transformers (a developer's tool, not run by the build):
  /tmp/hf/bin/python tests/data/make_chat_goldens.py"""
import json
import os

import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
DIR = os.path.join(HERE, "tiny-glm4v")
PLACEHOLDER = "<|begin_of_image|><|image|><|end_of_image|>"

SCREEN = '** Screen Info **\n\n{"current_app": "System Home"}'
CASES = [
    ("string", True, [{"role": "user", "content": "hello"}]),
    ("openai", True, [{"role": "system", "content": "You are a phone agent."},
                      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": SCREEN}]}]),
    ("openai", True, [{"role": "user", "content": [{"type": "text", "text": "Compare"}, {"type": "image"},
                                                   {"type": "text", "text": "with"}, {"type": "image"}]}]),
    ("openai", True, [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                      {"role": "assistant", "content": "<think>x</think><answer>do(action=\"Back\")"},
                      {"role": "user", "content": "next"}]),
    ("openai", False, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                       {"role": "assistant", "content": "a"}]),
    ("string", True, [{"role": "system", "content": "You are a phone agent."},
                      {"role": "user", "content": [{"type": "text", "text": "Task: open Chrome"},
                                                   {"type": "image"}, {"type": "text", "text": SCREEN}]},
                      {"role": "assistant", "content": "<answer>do(action=\"Launch\", app=\"Chrome\")"},
                      {"role": "user", "content": [{"type": "text", "text": SCREEN}]}]),
    ("string", True, [{"role": "user", "content": [{"type": "image"}, {"type": "image"}]},
                      {"role": "user", "content": [{"type": "text", "text": "see " + PLACEHOLDER}, {"type": "image"},
                                                   {"type": "image"}]}]),
]


def flatten(messages):
    """vLLM's string content format: placeholders first, then the texts, joined by newlines."""
    out = []
    for m in messages:
        if isinstance(m["content"], str):
            out.append(m)
            continue
        text = "\n".join(p["text"] for p in m["content"] if p["type"] == "text")
        images = sum(p["type"] == "image" for p in m["content"])
        missing = images - text.count(PLACEHOLDER)  # vLLM's _get_full_multimodal_text_prompt
        assert missing >= 0
        out.append({"role": m["role"], "content": "\n".join([PLACEHOLDER] * missing + [text]) if images else text})
    return out


def main():
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(DIR, "tokenizer.json"))
    with open(os.path.join(DIR, "chat_template.jinja")) as f:
        tokenizer.chat_template = f.read()
    cases = []
    for fmt, gen, messages in CASES:
        shown = flatten(messages) if fmt == "string" else messages
        rendered = tokenizer.apply_chat_template(shown, tokenize=False, add_generation_prompt=gen)
        cases.append({"content_format": fmt, "add_generation_prompt": gen, "messages": messages, "rendered": rendered})
    with open(os.path.join(DIR, "chat_golden.json"), "w") as f:
        json.dump({"generator": f"transformers {transformers.__version__} apply_chat_template", "cases": cases}, f,
                  indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
