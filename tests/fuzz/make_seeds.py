#!/usr/bin/env python3
"""Writes valid seed inputs for every fuzz target into DIR/TARGET/, from the
fixtures: the fuzzers start from inputs that load, so mutations reach deep.
Usage: make_seeds.py DIR AUTOGLM_COMPILE"""
import json, os, struct, subprocess, sys

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
FIXTURES = ["tiny-glm", "tiny-glm4", "tiny-chatglm"]


def put(out, target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def byte_alphabet():
    """GPT-2's byte-level alphabet: byte -> the character tokenizer.json spells it with."""
    spell, nxt = {}, 256
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
        spell[b] = chr(b if printable else nxt)
        nxt += 0 if printable else 1
    return spell


def main(out, compile_tool):
    small = {"model.norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
             "lm_head.weight": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [16, 32]},
             "__metadata__": {"format": "pt"}}
    text = json.dumps(small).encode()
    put(out, "safetensors", "small", struct.pack("<Q", len(text)) + text + struct.pack("<4f", 1, 2, 3, 4) + bytes(16))
    for fixture in FIXTURES:
        blob = open(os.path.join(DATA, fixture, "model.safetensors"), "rb").read()
        n = struct.unpack("<Q", blob[:8])[0]
        header = json.loads(blob[8:8 + n])
        names = sorted(k for k in header if k != "__metadata__")
        if fixture == "tiny-glm":  # the index target's shards are copies of this file
            shards = {k: "model-0000%d-of-00002.safetensors" % (1 + i % 2) for i, k in enumerate(names)}
            put(out, "index", "two-shards", json.dumps({"metadata": {"total_size": len(blob) - 8 - n},
                                                       "weight_map": shards}))
        put(out, "config", fixture, open(os.path.join(DATA, fixture, "config.json"), "rb").read())
        plan = os.path.join(out, fixture + ".agplan")
        for tp in (1, 2):  # a sharded plan too: its collectives run as in-process ranks
            subprocess.run([compile_tool, "--model", os.path.join(DATA, fixture), "-o", plan, "--max-batch-tokens",
                            "8", "--max-seqs", "2", "--tp", str(tp)], check=True, stdout=subprocess.DEVNULL)
            put(out, "plan", fixture + ("" if tp == 1 else "-tp%d" % tp), open(plan, "rb").read()[32:])
            os.remove(plan)
    for tp in (1, 2):  # weight formats: int4 groups, fp8 head and K/V rows, int8 down_proj (a policy rule)
        plan = os.path.join(out, "quantized.agplan")
        policy = os.path.join(out, "policy.txt")
        open(policy, "w").write("*.down_proj: int8\n")
        subprocess.run([compile_tool, "--model", os.path.join(DATA, "tiny-glm4"), "-o", plan, "--max-batch-tokens", "8",
                        "--max-seqs", "2", "--tp", str(tp), "--quantize", "int4:g32", "--quantize-policy", policy],
                       check=True, stdout=subprocess.DEVNULL)
        put(out, "plan", "tiny-glm4-int4" + ("" if tp == 1 else "-tp%d" % tp), open(plan, "rb").read()[32:])
        os.remove(plan)
        os.remove(policy)
    spell = byte_alphabet()
    merges = ["th", "he", "the", " t", " the", "in", "ing", "ab", "bc", "abc"]
    tiktoken = [bytes([b]) for b in range(256)] + [m.encode() for m in merges]
    import base64
    put(out, "tiktoken", "small", "".join("%s %d\n" % (base64.b64encode(t).decode(), i) for i, t in enumerate(tiktoken)))
    vocab = {"".join(spell[c] for c in t): i for i, t in enumerate(tiktoken)}
    added = [{"id": len(tiktoken) + i, "content": c, "special": True}
             for i, c in enumerate(["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>"])]
    put(out, "tokenizer_json", "small", json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                                                    "added_tokens": added}))
    put(out, "chat", "turns", json.dumps([{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "hello <|user|> \u4f60\u597d"},
                                          {"role": "assistant", "content": "hi"}]))
    put(out, "chat", "text", "the <|user|> thing\n\n  123 \xff")
    chat = json.dumps({"model": "glm", "messages": [{"role": "user", "content": "hi"}],
                       "stream": True, "stream_options": {"include_usage": True},
                       "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "n": 2,
                       "stop": ["\n"], "logprobs": True, "top_logprobs": 2, "seed": 1})
    put(out, "openai", "chat", chat)
    put(out, "json", "chat", chat)
    images = os.path.join(DATA, "tiny-glm4v", "images")
    for name in sorted(os.listdir(images)):
        put(out, "image", name, open(os.path.join(images, name), "rb").read())
    put(out, "openai", "completion", json.dumps({"model": "glm", "prompt": [5, 17, 42], "echo": True,
                                                 "logprobs": 1, "return_token_ids": True, "ignore_eos": True}))
    put(out, "openai", "biased", json.dumps({"model": "glm", "prompt": "x", "logit_bias": {"5": -100, "17": 2.5},
                                             "stop_token_ids": [1, 2], "min_tokens": 3, "max_tokens": 8,
                                             "include_stop_str_in_output": True, "skip_special_tokens": False}))
    put(out, "openai", "json-mode", json.dumps({"model": "glm", "messages": [{"role": "user", "content": "{}"}],
                                                "response_format": {"type": "json_object"}, "max_tokens": 8}))
    put(out, "openai", "json-schema", json.dumps({"model": "glm", "prompt": "x", "max_tokens": 8, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "strict": True, "schema": {
            "type": "object", "properties": {"b": {"type": "integer"}, "a": {"enum": ["x", 1]}}, "required": ["b"]}}}}))
    put(out, "openai", "tools", json.dumps({"model": "glm", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "1.5e-05"}],
        "tools": [{"type": "function", "function": {"name": "f", "description": "\u5929\n", "parameters": {
            "type": "object", "properties": {"b": {"type": "integer", "maximum": 1e-3}, "a": {"type": "string"}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": False}))
    put(out, "openai", "guided", json.dumps({"model": "glm", "messages": [{"role": "user", "content": "x"}],
                                             "guided_choice": ["yes", "no"], "max_tokens": 4}))
    put(out, "openai", "guided-json", json.dumps({"model": "glm", "prompt": "x", "guided_json": '{"type": "array"}',
                                                  "structured_outputs": {"choice": ["a"]}}))
    put(out, "json_schema", "bounded", json.dumps({"type": "object", "properties": {"s": {"type": "string", "minLength": 2,
        "maxLength": 40}, "l": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 36}}}) + "\0" +
        '{"s": "' + "a" * 38 + '", "l": [' + ",".join(["1"] * 34))
    step = {"type": "object", "properties": {"thought": {"type": "string", "maxLength": 8},
            "action": {"anyOf": [{"$ref": "#/$defs/tap"}, {"type": "object", "properties": {"type": {"const": "finish"}}}]}},
            "required": ["thought", "action"], "$defs": {"tap": {"type": "object", "properties": {
                "type": {"const": "tap"}, "xy": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}},
                "required": ["type", "xy"]}}}
    put(out, "json_schema", "step", json.dumps(step) + "\0" + '{"thought": "ok", "action": {"type": "tap", "xy": [1, -20]}}')
    put(out, "json_schema", "tree", json.dumps({"type": "array", "items": {"anyOf": [{"$ref": "#"}, {"type": ["number", "null"]}]}}) +
        "\0" + "[[1.5e3, null], [[]], -0]")
    put(out, "json_schema", "integer-bounds", json.dumps({"type": "object", "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 1080}, "y": {"type": "integer", "exclusiveMinimum": -3.5,
        "exclusiveMaximum": 2400}, "n": {"type": ["integer", "null"], "maximum": -999999999999990}}}) + "\0" +
        '{"x": 1080, "y": -3, "n": -1000000000000000}')
    put(out, "json_schema", "number-bounds", json.dumps({"type": "object", "properties": {
        "t": {"type": "number", "minimum": 0, "maximum": 1}, "p": {"type": "number", "exclusiveMinimum": 0},
        "d": {"type": ["number", "null"], "minimum": -3, "exclusiveMaximum": 2.0}}}) + "\0" +
        '{"t": 1.000, "p": 0.0001, "d": -2.999}')
    put(out, "json_schema", "map", json.dumps({"additionalProperties": {"enum": ["a", 1, [True]]}}) + "\0" + '{"k": [true], "\\u00e9": 1}')


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
