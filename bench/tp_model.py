#!/usr/bin/env python3
"""Tensor parallelism on paper: GLM-4-9B's decode step at tp 1, 2, 4, 8 on H200s joined by NVLink.

Compiles the model at each degree with autoglm-compile (--config, bf16), reads the plan's own
numbers back with autoglm-inspect --json (bytes each rank streams per step, KV bytes per token,
collectives), and models a batch-1 decode step at a 512-token context as

    weights and KV at 4.45 TB/s per GPU (divided by the streaming efficiency)
  + the collectives one after another, at an assumed latency per all-reduce / all-gather.

Two all-reduce implementations are modelled, both in the code: NCCL inside a CUDA graph (across
nodes, without peer access, and for messages over 512 KB) and the one-shot all-reduce over NVLink
peer memory fused with the residual add and norm (kernels/cuda/allreduce.cu: one node, decode
sizes). The latencies are assumptions, not measurements: see bench/RESULTS.md. Usage:

  python3 bench/tp_model.py [--build build] [--markdown]
"""
import argparse
import json
import os
import subprocess
import tempfile

GLM4_9B = {"model_type": "glm", "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
           "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 151552,
           "rms_norm_eps": 1.5625e-07, "attention_bias": True, "max_position_embeddings": 131072,
           "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "eos_token_id": [151329, 151336, 151338], "dtype": "bfloat16"}
BANDWIDTH = 4.45e12  # bytes/s read per H200 (measured, tool library H200.md)
EFFICIENCY = 0.80    # streaming efficiency predicted for our single-GPU decode (RESULTS.md)
CONTEXT = 512
# Assumed latency (us) of one 8 KB all-reduce at tp = 2, 4, 8.
NCCL_US = {1: 0.0, 2: 6.0, 4: 8.0, 8: 10.0}      # NCCL in a CUDA graph (NVIDIA/nccl#1259: ~6 us at 2 H100s)
ONE_SHOT_US = {1: 0.0, 2: 3.0, 4: 3.5, 8: 4.5}   # each rank reads its peers' 8 KB over NVLink, in the epilogue kernel


def plan_numbers(build, tp, tmp):
    config = os.path.join(tmp, "config.json")
    with open(config, "w") as f:
        json.dump(GLM4_9B, f)
    plan = os.path.join(tmp, f"tp{tp}.agplan")
    subprocess.run([os.path.join(build, "tools/autoglm-compile"), "--config", config, "--dtype", "bf16", "--tp",
                    str(tp), "--max-batch-tokens", "512", "-o", plan], check=True, capture_output=True)
    out = subprocess.run([os.path.join(build, "tools/autoglm-inspect"), "--json", plan], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in (1, 2, 4, 8):
            j = plan_numbers(args.build, tp, tmp)
            weights = j["weight_bytes_read_per_step"]
            kv = j["kv_bytes_per_token"] * CONTEXT
            stream_ms = (weights + kv) / BANDWIDTH * 1e3
            layers = j["layers"]
            all_reduces = j["collectives_per_layer"] * layers
            gathers = j["collectives"] - all_reduces
            logits_kb = GLM4_9B["vocab_size"] // tp * 2 / 1024
            gather_ms = gathers * NCCL_US[tp] / 1e3  # the logits all-gather is NCCL's in both
            nccl_ms = stream_ms / EFFICIENCY + all_reduces * NCCL_US[tp] / 1e3 + gather_ms
            one_shot_ms = stream_ms / EFFICIENCY + all_reduces * ONE_SHOT_US[tp] / 1e3 + gather_ms
            rows.append((tp, weights / 1e9, kv / 1e6, all_reduces, gathers, logits_kb,
                         f'{j["launches_per_layer"]} / {j["launches_per_layer_nccl"]}', stream_ms, nccl_ms, one_shot_ms))
    print("| tp | weight GB streamed per rank | KV MB per rank (512 tokens) | all-reduces per step (8 KB each) "
          "| all-gathers (KB per rank) | launches per layer (one-shot / NCCL) | floor ms (4.45 TB/s) | model, NCCL ms | "
          "model, one-shot all-reduce ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tp, w, kv, ar, ag, kb, launches, floor, nccl, one in rows:
        print(f"| {tp} | {w:.2f} | {kv:.1f} | {ar} | {ag} ({kb:.0f}) | {launches} | {floor:.2f} | {nccl:.2f} | "
              f"{one:.2f} |")


if __name__ == "__main__":
    main()
