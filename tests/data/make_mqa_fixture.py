#!/usr/bin/env python3
"""Makes tests/data/tiny-glm-mqa: a multi-query GLM (8 query heads, 1 KV head) with random
weights, and golden.json with Hugging Face transformers' answers for it, in the shared
fixtures' format (../shared/fixtures/README.md). The engine's tensor-parallel tests run it at
tp 2, 4 and 8 (every rank holds the one KV head).

Needs torch and transformers (a developer's tool, not run by the build):
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
  /tmp/hf/bin/python tests/data/make_mqa_fixture.py
"""
import json
import os

import torch
import transformers
from transformers import GlmConfig, GlmForCausalLM

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-glm-mqa")
CASES = [[5, 17, 42, 7, 99, 3, 250], [200, 11, 11, 11, 64, 8, 130, 77, 190, 2, 45, 160, 33, 9, 240, 101, 17, 5]]
NEW_TOKENS = 12


def main():
    torch.manual_seed(1234)
    config = GlmConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=8, num_key_value_heads=1, head_dim=8, partial_rotary_factor=0.5,
                       attention_bias=True, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                       tie_word_embeddings=False, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                       torch_dtype="float32")
    model = GlmForCausalLM(config).eval()
    with torch.no_grad():  # weights large enough that greedy choices are clear (std 0.02 makes ties)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    # The golden comes from a fresh load of the saved checkpoint, as a user has it: a model
    # kept in memory (or cast and cast back) can hold buffers a real load recomputes.
    model = GlmForCausalLM.from_pretrained(OUT, dtype=torch.float32).eval()
    cases = []
    with torch.no_grad():
        for prompt in CASES:
            ids = list(prompt)
            for _ in range(NEW_TOKENS):  # greedy, recomputed from scratch at each step (no cache)
                logits = model(torch.tensor([ids]), use_cache=False).logits[0]
                ids.append(int(torch.argmax(logits[-1])))
            logits = model(torch.tensor([ids]), use_cache=False).logits[0]
            top2 = torch.topk(logits, 2, dim=-1).values
            cases.append({"input_ids": prompt, "new_tokens": ids[len(prompt):],
                          "logits": [[float(v) for v in row] for row in logits],
                          "top1_top2_gap": [float(g) for g in (top2[:, 0] - top2[:, 1])]})
    golden = {"generator": f"transformers {transformers.__version__} GlmForCausalLM",
              "compute": "float32 on CPU", "weights_dtype": "float32",
              "logits_rows": "one per position of input_ids + new_tokens; row i = next-token logits after tokens 0..i",
              "cases": cases}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
