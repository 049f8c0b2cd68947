#!/usr/bin/env python3
"""Writes the fuzz targets' regression corpora (tests/fuzz/corpus/TARGET/*):
the hostile inputs of issue 11, each one a file. Run from the repository root
after a build (the plan cases start from a plan that build/tools/autoglm-compile
writes). Crashes that fuzzing finds are added to the corpora by hand."""
import json, os, struct, subprocess, tempfile, zlib

from make_seeds import byte_alphabet

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tiny-glm")


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors_cases():
    # Two small tensors, well formed, then broken one way each.
    header = {"model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "lm_head.weight": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [16, 32]}}
    data = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0) + bytes(range(16))
    text = json.dumps(header).encode()
    # Length one short of a padded header: parses, but every tensor would be read one byte shifted.
    put("safetensors", "header-length-one-short", struct.pack("<Q", len(text) + 1) + text + b"  " + data)
    put("safetensors", "bytes-no-tensor-owns", struct.pack("<Q", len(text)) + text + data + b"\0" * 16)
    evil = dict(header)
    evil["evil\r\x1b]0;t\x07"] = header["model.norm.weight"]
    text = json.dumps(evil).encode()
    put("safetensors", "control-characters-in-a-name", struct.pack("<Q", len(text)) + text + data)
    put("safetensors", "header-length-minus-one", struct.pack("<q", -1) + text + data)


def index_cases():
    names = {"model.norm.weight": "model.safe\0tensors"}
    put("index", "nul-in-shard-name", json.dumps({"weight_map": names}))
    put("index", "escape-in-shard-name", json.dumps({"weight_map": {"x": "\x1b[2J.safetensors"}}))
    put("index", "path-in-shard-name", json.dumps({"weight_map": {"x": "../model.safetensors"}}))


def config_cases():
    base = json.load(open(os.path.join(TINY, "config.json")))
    for field, value in [("num_hidden_layers", 2**31), ("hidden_size", 10**9), ("head_dim", 2**40),
                         ("vocab_size", 2**40), ("intermediate_size", 2**50), ("num_attention_heads", 2**33),
                         ("max_position_embeddings", 10**9), ("model_type", "\x1b[31mglm")]:
        c = dict(base)
        c[field] = value
        put("config", field, json.dumps(c))
    chatglm = json.load(open(os.path.join(TINY, "..", "tiny-chatglm", "config.json")))
    chatglm["seq_length"] = 10**9
    put("config", "chatglm-seq-length", json.dumps(chatglm))


def skip_type_dims(payload, pos):
    """Past a type's dims: rank, then (symbol, offset) each."""
    rank = struct.unpack("<I", payload[pos:pos + 4])[0]
    pos += 4
    for _ in range(rank):
        pos += 4 + struct.unpack("<I", payload[pos:pos + 4])[0] + 8
    return pos


def plan_cases():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.agplan")
        subprocess.run(["build/tools/autoglm-compile", "--model", TINY, "-o", path], check=True,
                       stdout=subprocess.DEVNULL)
        payload = open(path, "rb").read()[32:]
    decoder = payload.find(struct.pack("<I", 7) + b"decoder")  # the first program's name
    bounds_at = decoder + 11
    pos = bounds_at + 4
    for _ in range(struct.unpack("<I", payload[bounds_at:bounds_at + 4])[0]):  # (symbol, bound) pairs
        pos += 4 + struct.unpack("<I", payload[pos:pos + 4])[0] + 8
    arena_at = pos
    put("plan", "arena-2-pow-62", payload[:arena_at] + struct.pack("<q", 2**62) + payload[arena_at + 8:])
    # The decoder's inputs (name, type): %tokens wired in where %slot_mapping belongs (a fuzzing find:
    # both are i32[T], and kernels index memory with the slot mapping).
    pos, names = arena_at + 8 + 4, []
    for _ in range(struct.unpack("<I", payload[arena_at + 8:arena_at + 12])[0]):
        n = struct.unpack("<I", payload[pos:pos + 4])[0]
        names.append(payload[pos + 4:pos + 4 + n].decode())
        pos = skip_type_dims(payload, pos + 4 + n + 1)  # name, dtype, dims
    i32_t = bytes([4]) + struct.pack("<I", 1) + struct.pack("<I", 1) + b"T" + struct.pack("<q", 0)
    record = lambda index: bytes([2]) + struct.pack("<q", index) + i32_t
    slot = payload.find(record(names.index("slot_mapping")), pos)
    assert slot >= 0
    put("plan", "fuzzed-tokens-as-slot-mapping",
        payload[:slot] + record(names.index("tokens")) + payload[slot + len(record(0)):])
    key = struct.pack("<I", 5) + b"heads" + b"\0"
    edited = bytearray(payload)
    at = edited.find(key)
    while at >= 0:
        edited[at + len(key):at + len(key) + 8] = struct.pack("<q", 4 + 2**62)
        at = edited.find(key, at + 1)
    put("plan", "heads-4-plus-2-pow-62", bytes(edited))
    # Model facts that disagree with the config behind a fingerprint that agrees (issue 20).
    layout_end = 4 + struct.unpack("<I", payload[:4])[0]
    positions_at = layout_end + 24                              # vocab, hidden, layers, positions
    put("plan", "positions-4096", payload[:positions_at] + struct.pack("<q", 4096) + payload[positions_at + 8:])
    eos_at = layout_end + 32
    count = struct.unpack("<I", payload[eos_at:eos_at + 4])[0]
    put("plan", "eos-list-gains-an-id", payload[:eos_at] + struct.pack("<I", count + 1) +
        payload[eos_at + 4:eos_at + 4 + 8 * count] + struct.pack("<q", 7) + payload[eos_at + 4 + 8 * count:])
    for name, attr, value in [("eps-inf", b"eps", float("inf")), ("theta-5e-324", b"theta", 5e-324)]:
        key = struct.pack("<I", len(attr)) + attr + b"\x01"   # a float attribute
        at = payload.find(key)
        assert at >= 0, name
        at += len(key)
        put("plan", name, payload[:at] + struct.pack("<d", value) + payload[at + 8:])


def quantized_plan_cases():
    """Weight formats a plan's reader or validation must refuse (issue 18)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.agplan")
        subprocess.run(["build/tools/autoglm-compile", "--model", TINY, "-o", path, "--quantize", "int4:g32"],
                       check=True, stdout=subprocess.DEVNULL)
        payload = open(path, "rb").read()[32:]

    def format_at(tensor):
        """Offset of the format (kind u8, group u32, symmetric u8) of the piece that reads `tensor`."""
        key = struct.pack("<I", len(tensor)) + tensor
        at = payload.find(key, payload.find(key) + 1)  # the weight's name first, then its piece's tensor
        if at < 0:
            at = payload.find(key)  # a piece of a fused weight (q of the QKV): named once
        assert at >= 0, tensor
        pos = at + len(key)
        rank = struct.unpack("<I", payload[pos:pos + 4])[0]
        return pos + 4 + 8 * rank + 8 + 8 + 1 + 4      # shape, rows, shard axis and parts

    def with_format(tensor, kind, group, symmetric):
        at = format_at(tensor)
        return payload[:at] + struct.pack("<BIB", kind, group, symmetric) + payload[at + 6:]

    put("plan", "int8-embedding-table", with_format(b"model.embed_tokens.weight", 2, 0, 1))
    put("plan", "weight-format-code-9", with_format(b"lm_head.weight", 9, 0, 1))
    put("plan", "int4-group-48", with_format(b"lm_head.weight", 3, 48, 0))
    put("plan", "fp8-with-groups", with_format(b"model.layers.0.mlp.down_proj.weight", 1, 32, 1))
    act = format_at(b"lm_head.weight") + 6  # the input rows' quantization (W8A8) ends the format
    put("plan", "input-quant-code-9", payload[:act] + bytes([9]) + payload[act + 1:])
    embed = format_at(b"model.embed_tokens.weight") + 6
    put("plan", "input-quant-on-a-bf16-weight", payload[:embed] + bytes([1]) + payload[embed + 1:])
    q = format_at(b"model.layers.0.self_attn.q_proj.weight") + 6  # q's rows only: k and v keep theirs
    put("plan", "input-quant-on-one-piece", payload[:q] + bytes([1]) + payload[q + 1:])
    at = act + 1  # the packing code follows
    put("plan", "packing-code-9", payload[:at] + bytes([9]) + payload[at + 1:])
    put("plan", "awq-packing-on-fp8", payload[:at] + bytes([3]) + payload[at + 1:])


def png_header(width, height):
    chunk = b"IHDR" + struct.pack(">II", width, height) + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))


def image_cases():
    images = os.path.join(os.path.dirname(TINY), "tiny-glm4v", "images")
    png = open(os.path.join(images, "rgb.png"), "rb").read()
    jpeg = open(os.path.join(images, "q90-420.jpg"), "rb").read()
    webp = open(os.path.join(images, "lossy.webp"), "rb").read()
    put("image", "png-100000-squared-header", png_header(100000, 100000) + png[33:])
    put("image", "png-truncated", png[:len(png) // 2])
    put("image", "jpeg-truncated", jpeg[:len(jpeg) // 2])
    put("image", "jpeg-header-only", jpeg[:20])
    put("image", "webp-truncated", webp[:-40])
    put("image", "png-aspect-ratio-300", png_header(300, 1) + png[33:])


def tokenizer_cases():
    # The byte-level vocabulary of 256 single bytes, as tokenizer.json spells it.
    spell = byte_alphabet()
    vocab = {spell[b]: b for b in range(256)}
    for name, added in [("id-2-pow-63", {"id": 2**63, "content": "<a>"}),
                        ("id-2-pow-31-minus-1", {"id": 2**31 - 1, "content": "<b>"}),
                        ("id-2-pow-32", {"id": 2**32 + 7, "content": "<c>"}),
                        ("empty-content", {"id": 300, "content": ""})]:
        put("tokenizer_json", name, json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                                                "added_tokens": [added]}))
    put("tiktoken", "rank-out-of-order", "IQ== 0\nIg== 5\n")
    put("tiktoken", "not-base64", "IQ== 0\n!!!! 1\n")


def chat_cases():
    put("chat", "many-special-tokens", json.dumps([{"role": "user", "content": "<|user|>" * 2000}]))
    put("chat", "unknown-role", json.dumps([{"role": "\x1b[2Jroot", "content": "x"}]))
    put("chat", "special-text-in-prompt", "<|user|>" * 4000 + "<|system")
    ph = "<|begin_of_image|><|image|><|end_of_image|>"
    put("chat", "content-parts", json.dumps([
        {"role": "system", "content": [{"type": "text", "text": "s"}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                                     {"type": "text", "text": "** Screen Info **"}, {"image": "b.png"}]},
        {"role": "assistant", "content": "<think>x</think><answer>do(action=\"Back\")"}]))
    put("chat", "more-placeholders-than-images", json.dumps([
        {"role": "user", "content": [{"type": "text", "text": ph * 3}, {"type": "image"}]}]))
    put("chat", "bad-parts", json.dumps([{"role": "user", "content": [{"type": "audio"}, 3, {"type": "text"}]}]))


def openai_cases():
    put("openai", "huge-max-tokens", '{"model": "m", "prompt": "x", "max_tokens": 18446744073709551615}')
    put("openai", "invalid-utf8", b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}')
    put("openai", "nested-deep", '{"model": ' + "[" * 5000 + "]" * 5000 + "}")
    put("openai", "ids-past-int32", '{"model": "m", "prompt": [4294967296, -1]}')
    # Round 3 (issue 20): each crashed the server.
    put("openai", "content-part-type-not-a-string",
        '{"model": "m", "messages": [{"role": "user", "content": [{"type": 5, "text": "x"}, {"type": null}]}]}')
    put("openai", "stop-nested-60000-deep", '{"model": "m", "prompt": "a", "stop": ' + "[" * 60000 + "]" * 60000 + "}")
    put("openai", "messages-nested-objects",
        '{"model": "m", "messages": ' + '{"a":' * 30000 + "1" + "}" * 30000 + "}")


if __name__ == "__main__":
    safetensors_cases()
    index_cases()
    config_cases()
    plan_cases()
    quantized_plan_cases()
    tokenizer_cases()
    chat_cases()
    openai_cases()
    image_cases()
