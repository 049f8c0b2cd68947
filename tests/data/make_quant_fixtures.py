#!/usr/bin/env python3
"""Makes the pre-quantized fixtures tests/data/tiny-glm-{gptq,gptq8,gptq-channel,awq,ct-w4a16,
ct-w4a16-actorder,ct-w4a16-gidx,ct-w8a16,ct-fp8,ct-fp8-kv,ct-kv-int8,ct-fp8-dynamic,ct-w8a8-int8}: tiny-glm's weights with every linear (the LM head too where the format's
defaults quantize it) stored the way GPTQ, AWQ and compressed-tensors checkpoints store them
(../shared/QUANT_NOTES.md section 1), and golden.json with Hugging Face transformers' answers.

The two -kv fixtures add a compressed-tensors kv_cache_scheme: a static scale per layer for K and
one for V (model.layers.N.self_attn.k_scale / v_scale, amax over the golden prompts / 448 or / 127,
as llm-compressor's min-max observer calibrates them), fp8 E4M3 beside fp8 weights, int8 beside
dense ones. transformers keeps such a cache in full precision, so their golden is transformers with
its eager attention wrapped to store K (after the rotary) and V the way vLLM's cache does:
s * e4m3(clamp(x / s, +-448)), or s * clamp(rne(x / s), +-127).

The oracle chain: compressed-tensors fixtures are compressed by the compressed-tensors library
itself and the golden is transformers loading the quantized checkpoint (its compressed-tensors
integration decompresses on load). GPTQ and AWQ need CUDA libraries to load in transformers, so
their packing follows the reference packers (AutoGPTQ's qlinear pack, AutoAWQ's pack with its
nibble order), their dequantization is written here from the same references, and the golden is
transformers on a fresh load of the dequantized dense checkpoint.
Needs torch, transformers and compressed-tensors (a developer's tool, not run by the build):
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors compressed-tensors
  /tmp/hf/bin/python tests/data/make_quant_fixtures.py
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

DATA = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(DATA, "tiny-glm")
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_up_proj", "down_proj")
NEW_TOKENS = 12


def base_weights():
    return {k: v.numpy().astype(np.float32) for k, v in load_file(os.path.join(BASE, "model.safetensors")).items()}


def is_linear(name):
    return name.endswith(".weight") and any(f".{l}." in name for l in LINEARS)


ROW_PARALLEL = ("o_proj", "down_proj")


def quantize_inputs(model, input_args, tp=1):
    """Each quantized linear's input fake-quantized by compressed-tensors' own dynamic path
    (compute_dynamic_scales_and_zp, fake_quantize): transformers' decompressed load (run_compressed
    False, the only one on a CPU) drops the input_activations scheme and multiplies full-precision
    inputs, so the W8A8 goldens put it back, module by module, as the library's forward does.
    tp > 1: the row-parallel linears' inputs (o_proj, down_proj) rounded in tp equal slices, each
    with its own scale, as vLLM's W8A8 layers do on each rank (and this engine at that tp)."""
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp
    args = QuantizationArgs(**input_args)

    def rounded(module, x):
        scale, zp = compute_dynamic_scales_and_zp(value=x, args=args, module=module)
        return fake_quantize(x=x, scale=scale, zero_point=zp, args=args)

    def hook(module, inputs):
        return (rounded(module, inputs[0]),) + tuple(inputs[1:])

    def sliced_hook(module, inputs):
        parts = inputs[0].chunk(tp, dim=-1)
        return (torch.cat([rounded(module, p.contiguous()) for p in parts], dim=-1),) + tuple(inputs[1:])
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name != "lm_head":
            sliced = tp > 1 and name.split(".")[-1] in ROW_PARALLEL
            module.register_forward_pre_hook(sliced_hook if sliced else hook)


def golden(model_dir, load_kwargs=None, input_args=None, tp=1):
    """transformers' greedy tokens and logits for tiny-glm's golden prompts, from a fresh load."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **(load_kwargs or {})).eval()
    if input_args is not None:
        quantize_inputs(model, input_args, tp)
    prompts = [c["input_ids"] for c in json.load(open(os.path.join(BASE, "golden.json")))["cases"]]
    cases = []
    with torch.no_grad():
        for prompt in prompts:
            ids = list(prompt)
            for _ in range(NEW_TOKENS):
                logits = model(torch.tensor([ids]), use_cache=False).logits[0]
                ids.append(int(torch.argmax(logits[-1])))
            logits = model(torch.tensor([ids]), use_cache=False).logits[0]
            top2 = torch.topk(logits, 2, dim=-1).values
            cases.append({"input_ids": prompt, "new_tokens": ids[len(prompt):],
                          "logits": [[float(v) for v in row] for row in logits],
                          "top1_top2_gap": [float(g) for g in (top2[:, 0] - top2[:, 1])]})
    return {"generator": f"transformers {transformers.__version__} {type(model).__name__}",
            "compute": "float32 on CPU", "weights_dtype": "quantized (see config.json)",
            "logits_rows": "one per position of input_ids + new_tokens; row i = next-token logits after tokens 0..i",
            "cases": cases}


def write_fixture(name, tensors, quantization_config, dense=None, load_kwargs=None):
    """tensors: the quantized checkpoint; dense: its dequantized weights for the golden (None: load it quantized)."""
    # safetensors' numpy writer stores the buffer as it lies: transposed views must be made C-ordered.
    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    dense = None if dense is None else {k: np.ascontiguousarray(v) for k, v in dense.items()}
    out = os.path.join(DATA, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    config = json.load(open(os.path.join(BASE, "config.json")))
    for f in ("generation_config.json",):
        shutil.copy(os.path.join(BASE, f), out)
    with tempfile.TemporaryDirectory() as tmp:
        if dense is not None:
            json.dump(config, open(os.path.join(tmp, "config.json"), "w"))
            save_file(dense, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
            g = golden(tmp)
    config["quantization_config"] = quantization_config
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    if dense is None:
        g = golden(out, load_kwargs)
    json.dump(g, open(os.path.join(out, "golden.json"), "w"))
    print("wrote", out)


def quantized_linears():
    """tiny-glm's tensors split: (tensors, dense) holding its other weights, and (key, module, value)
    for each linear, for a maker to store quantized in tensors and dequantized in dense."""
    tensors, dense, linears = {}, {}, []
    for key, value in base_weights().items():
        if is_linear(key):
            linears.append((key, key[:-len(".weight")], value))
        else:
            tensors[key] = dense[key] = value
    return tensors, dense, linears


# ---- GPTQ (AutoGPTQ's quantizer and qlinear pack) ----

def gptq_quantize(w, bits, group, sym, act_order, rng):
    """w [N, K] -> q [N, K] codes, scale [K/g, N], zero [K/g, N], g_idx [K] (GPTQ's find_params per group)."""
    n, k = w.shape
    maxq = 2 ** bits - 1
    perm = rng.permutation(k) if act_order else np.arange(k)
    g_idx = np.empty(k, dtype=np.int32)
    g_idx[perm] = np.arange(k) // group
    scale = np.zeros((k // group, n), np.float32)
    zero = np.zeros((k // group, n), np.int32)
    q = np.zeros((n, k), np.int32)
    for g in range(k // group):
        cols = perm[g * group:(g + 1) * group]
        x = w[:, cols]
        xmin, xmax = np.minimum(x.min(1), 0), np.maximum(x.max(1), 0)
        if sym:
            xmax = np.maximum(np.abs(xmin), xmax)
            xmin = -xmax
        s = (xmax - xmin) / maxq
        s[s == 0] = 1
        z = np.full(n, (maxq + 1) // 2) if sym else np.round(-xmin / s)
        s = s.astype(np.float16)  # the checkpoint stores fp16 scales; quantize with them
        s32 = s.astype(np.float32)
        q[:, cols] = np.clip(np.round(x / s32[:, None]) + z[:, None], 0, maxq)
        scale[g], zero[g] = s32, z
    return q, scale, zero, g_idx


def pack_along(values, bits, axis):
    """Packs non-negative codes into int32 along `axis`: element i in word i // (32/bits), bits (i % pf) * bits."""
    pf = 32 // bits
    v = np.moveaxis(values.astype(np.uint32), axis, 0)
    out = np.zeros((v.shape[0] // pf,) + v.shape[1:], np.uint32)
    for j in range(pf):
        out |= (v[j::pf] & (2 ** bits - 1)) << (bits * j)
    return np.moveaxis(out, 0, axis).view(np.int32)


def make_gptq(name, bits, sym, act_order, v2, group_size=32):
    """group_size -1: per channel (one group of every input, scales [1, N])."""
    rng = np.random.default_rng(7)
    tensors, dense, linears = quantized_linears()
    for key, module, value in linears:
        group = value.shape[1] if group_size == -1 else group_size
        q, scale, zero, g_idx = gptq_quantize(value, bits, group, sym, act_order, rng)
        tensors[module + ".qweight"] = pack_along(q.T, bits, 0)                 # [K/pf, N]
        tensors[module + ".qzeros"] = pack_along(zero - (0 if v2 else 1), bits, 1)  # [K/g, N/pf], v1 holds z - 1
        tensors[module + ".scales"] = scale.astype(np.float16)
        tensors[module + ".g_idx"] = g_idx
        dense[key] = (scale[g_idx, :].T * (q - zero[g_idx, :].T)).astype(np.float32)
    config = {"quant_method": "gptq", "bits": bits, "group_size": group_size, "sym": sym, "desc_act": act_order,
              "static_groups": False, "true_sequential": True, "lm_head": False,
              "checkpoint_format": "gptq_v2" if v2 else "gptq"}
    write_fixture(name, tensors, config, dense)


# ---- AWQ (AutoAWQ's zero-point quantizer and GEMM packing) ----

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_pack(codes):
    """codes [K, N] -> int32 [K, N/8]: nibble i of word j holds column 8j + AWQ_ORDER[i]."""
    k, n = codes.shape
    out = np.zeros((k, n // 8), np.uint32)
    for i, col in enumerate(AWQ_ORDER):
        out |= (codes[:, col::8].astype(np.uint32) & 15) << (4 * i)
    return out.view(np.int32)


def make_awq(name):
    tensors, dense, linears = quantized_linears()
    for key, module, value in linears:
        n, k = value.shape
        x = value.reshape(n, k // 32, 32)
        lo, hi = x.min(2), x.max(2)
        s = (np.maximum(hi - lo, 1e-5) / 15).astype(np.float16).astype(np.float32)
        z = np.clip(-np.round(lo / s), 0, 15)
        q = np.clip(np.round(x / s[:, :, None]) + z[:, :, None], 0, 15).astype(np.int32)
        tensors[module + ".qweight"] = awq_pack(q.reshape(n, k).T)          # [K, N/8]
        tensors[module + ".qzeros"] = awq_pack(z.T.astype(np.int32))        # [K/g, N/8]
        tensors[module + ".scales"] = s.T.astype(np.float16)                # [K/g, N]
        dense[key] = (s[:, :, None] * (q - z[:, :, None])).reshape(n, k).astype(np.float32)
    config = {"quant_method": "awq", "version": "gemm", "bits": 4, "group_size": 32, "zero_point": True,
              "modules_to_not_convert": ["lm_head"]}
    write_fixture(name, tensors, config, dense)


# ---- compressed-tensors (the library compresses; transformers decompresses on load) ----

def make_compressed_tensors(name, weights_args, fmt, ignore, input_args=None):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from transformers import CompressedTensorsConfig
    args = QuantizationArgs(**weights_args)
    # W8A8: each token's input row quantized with its own dynamic scale (llm-compressor's presets).
    inputs = None if input_args is None else json.loads(QuantizationArgs(**input_args).model_dump_json())
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    w = base_weights()
    tensors = {}
    for key, value in w.items():
        module = key[:-len(".weight")]
        head = key == "lm_head.weight"
        if not (is_linear(key) or (head and "lm_head" not in ignore)):
            tensors[key] = value
            continue
        x = torch.from_numpy(value)
        if args.strategy == "group":
            xg = x.reshape(x.shape[0], -1, args.group_size)
            lo, hi = xg.amin(2), xg.amax(2)
        else:
            lo, hi = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
        scale, zp = calculate_qparams(lo, hi, args)
        if fmt in ("float-quantized", "int-quantized"):
            dtype = torch.float8_e4m3fn if fmt == "float-quantized" else torch.int8
            q = quantize(x=x, scale=scale, zero_point=zp, args=args, dtype=dtype)
            tensors[module + ".weight"] = q
            tensors[module + ".weight_scale"] = scale.to(torch.float32)
            continue
        state = {"weight": x, "weight_scale": scale.to(torch.float32), "weight_zero_point": zp}
        for k2, v2 in PackedQuantizationCompressor.compress(state, scheme).items():
            tensors[f"{module}.{k2}"] = v2
    tensors = {k: (v if isinstance(v, torch.Tensor) else torch.from_numpy(v)).contiguous() for k, v in tensors.items()}
    out = os.path.join(DATA, name)
    config = {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
              "config_groups": {"group_0": {"targets": ["Linear"], "weights": json.loads(args.model_dump_json()),
                                            "input_activations": inputs, "output_activations": None}},
              "ignore": ignore}
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    shutil.copy(os.path.join(BASE, "generation_config.json"), out)
    base_config = json.load(open(os.path.join(BASE, "config.json")))
    base_config["quantization_config"] = config
    json.dump(base_config, open(os.path.join(out, "config.json"), "w"), indent=2)
    from safetensors.torch import save_file as save_torch
    save_torch(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    g = golden(out, {"quantization_config": CompressedTensorsConfig(run_compressed=False)}, input_args)
    if input_args is not None:
        g["input_activations"] = "fake-quantized per token by compressed-tensors (see quantize_inputs)"
        g2 = golden(out, {"quantization_config": CompressedTensorsConfig(run_compressed=False)}, input_args, tp=2)
        g2["input_activations"] = "as golden.json, o_proj and down_proj inputs rounded in 2 slices (vLLM at tp 2)"
        json.dump(g2, open(os.path.join(out, "golden_tp2.json"), "w"))
    json.dump(g, open(os.path.join(out, "golden.json"), "w"))
    print("wrote", out)


def make_ct_gidx(name):
    """compressed-tensors int4 (symmetric, groups of 32) with the older `actorder: group` layout:
    group g holds inputs perm[32 g, 32 g + 32) and weight_g_idx says each input's group. Today's
    library refuses to write it, so the codes are computed here (symmetric min-max per group, as the
    library's calculate_qparams) and packed by the library's pack_to_int32; the golden is
    transformers on the dequantized dense checkpoint, as for GPTQ."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32 as pack
    rng = np.random.default_rng(11)
    tensors, dense, linears = quantized_linears()
    for key, module, value in linears:
        n, k = value.shape
        perm = rng.permutation(k)
        g_idx = np.empty(k, dtype=np.int32)
        g_idx[perm] = np.arange(k) // 32
        scale = np.zeros((n, k // 32), np.float32)
        q = np.zeros((n, k), np.int8)
        for g in range(k // 32):
            cols = perm[g * 32:(g + 1) * 32]
            amax = np.abs(value[:, cols]).max(1)
            s_g = np.where(amax > 0, amax / 7.5, 1.0).astype(np.float32)  # calculate_qparams: range / (q_max - q_min) / 2
            q[:, cols] = np.clip(np.round(value[:, cols] / s_g[:, None]), -8, 7)
            scale[:, g] = s_g
        tensors[module + ".weight_packed"] = pack(torch.from_numpy(q), 4).numpy()
        tensors[module + ".weight_scale"] = scale
        tensors[module + ".weight_shape"] = np.array([n, k], dtype=np.int64)
        tensors[module + ".weight_g_idx"] = g_idx
        dense[key] = (scale[:, g_idx] * q).astype(np.float32)
    config = {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
              "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                            "weights": {"num_bits": 4, "type": "int", "symmetric": True, "group_size": 32,
                                                        "strategy": "group", "dynamic": False, "actorder": "group"}}},
              "ignore": ["lm_head"]}
    write_fixture(name, tensors, config, dense)


# ---- compressed-tensors kv_cache_scheme (static per-layer K and V scales) ----

class KvFakeQuant:
    """Wraps the GLM eager attention: observes each layer's K/V amax, or stores K and V through
    8-bit codes of the layer's static scales (None: as they are)."""

    def __init__(self, fp8):
        import transformers.models.glm.modeling_glm as glm
        self.glm, self.fp8, self.scales, self.amax = glm, fp8, None, {}
        self.original = glm.eager_attention_forward

    def quant(self, x, s):
        if self.fp8:
            return (x / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32) * s
        return torch.round(x / s).clamp(-127.0, 127.0) * s

    def __enter__(self):
        def attention(module, query, key, value, *args, **kwargs):
            layer = module.layer_idx
            if self.scales is None:
                a = self.amax.setdefault(layer, [0.0, 0.0])
                a[0] = max(a[0], float(key.abs().max()))
                a[1] = max(a[1], float(value.abs().max()))
            else:
                key = self.quant(key, self.scales[layer][0])
                value = self.quant(value, self.scales[layer][1])
            return self.original(module, query, key, value, *args, **kwargs)
        self.glm.eager_attention_forward = attention
        return self

    def __exit__(self, *exc):
        self.glm.eager_attention_forward = self.original


def add_kv_cache_scheme(name, fp8, weights_fixture=None):
    """tests/data/<name>: <weights_fixture>'s checkpoint (tiny-glm's dense one when None) with a
    static KV-cache scheme calibrated on the golden prompts."""
    from safetensors.torch import save_file as save_torch
    source = os.path.join(DATA, weights_fixture) if weights_fixture else BASE
    load_kwargs = {"attn_implementation": "eager"}
    if weights_fixture:
        from transformers import CompressedTensorsConfig
        load_kwargs["quantization_config"] = CompressedTensorsConfig(run_compressed=False)
    levels = 448.0 if fp8 else 127.0
    with KvFakeQuant(fp8) as hook:
        golden(source, load_kwargs)  # calibration: the prompts and transformers' own continuations
        scales = {layer: [max(a, 1e-6) / levels for a in amax] for layer, amax in hook.amax.items()}
        hook.scales = {layer: [torch.tensor(s, dtype=torch.float32) for s in pair] for layer, pair in scales.items()}
        g = golden(source, load_kwargs)
    out = os.path.join(DATA, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    shutil.copy(os.path.join(BASE, "generation_config.json"), out)
    tensors = load_file(os.path.join(source, "model.safetensors"))
    for layer, (k, v) in sorted(scales.items()):
        # llm-compressor stores one-value scales in the checkpoint's dtype; fp32 here, shape [1] for K, [] for V.
        tensors[f"model.layers.{layer}.self_attn.k_scale"] = torch.tensor([k], dtype=torch.float32)
        tensors[f"model.layers.{layer}.self_attn.v_scale"] = torch.tensor(v, dtype=torch.float32)
    config = json.load(open(os.path.join(source, "config.json")))
    q = config.get("quantization_config") or {"quant_method": "compressed-tensors", "format": "dense",
                                              "quantization_status": "compressed", "config_groups": {}}
    q["kv_cache_scheme"] = {"num_bits": 8, "type": "float" if fp8 else "int", "symmetric": True,
                            "strategy": "tensor", "dynamic": False, "group_size": None}
    config["quantization_config"] = q
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    save_torch(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    g["kv_cache"] = f"{'fp8 e4m3' if fp8 else 'int8'} codes of static per-layer scales (see make_quant_fixtures.py)"
    json.dump(g, open(os.path.join(out, "golden.json"), "w"))
    print("wrote", out)


TOKEN_DYNAMIC = {"num_bits": 8, "symmetric": True, "strategy": "token", "dynamic": True}


def main():
    only = set(sys.argv[1:])  # fixture names to remake; none: all of them
    if only:
        makers = {"tiny-glm-ct-fp8-dynamic": make_fp8_dynamic, "tiny-glm-ct-w8a8-int8": make_w8a8_int8}
        for name in only:
            makers[name]()
        return
    make_gptq("tiny-glm-gptq", bits=4, sym=True, act_order=True, v2=False)
    make_gptq("tiny-glm-gptq8", bits=8, sym=False, act_order=False, v2=True)
    make_awq("tiny-glm-awq")
    make_compressed_tensors("tiny-glm-ct-w4a16", {"num_bits": 4, "type": "int", "symmetric": True,
                                                  "strategy": "group", "group_size": 32}, "pack-quantized", ["lm_head"])
    make_compressed_tensors("tiny-glm-ct-w8a16", {"num_bits": 8, "type": "int", "symmetric": False,
                                                  "strategy": "channel"}, "pack-quantized", ["lm_head"])
    make_compressed_tensors("tiny-glm-ct-fp8", {"num_bits": 8, "type": "float", "symmetric": True,
                                                "strategy": "channel"}, "float-quantized", [])
    # llm-compressor's GPTQ default today: activation ordering during calibration only ("weight",
    # alias "static"), the plain group layout (the g_idx "group" ordering is gone from the library).
    make_compressed_tensors("tiny-glm-ct-w4a16-actorder", {"num_bits": 4, "type": "int", "symmetric": False,
                                                          "strategy": "group", "group_size": 32, "actorder": "weight"},
                            "pack-quantized", ["lm_head"])
    make_gptq("tiny-glm-gptq-channel", bits=4, sym=True, act_order=False, v2=False, group_size=-1)
    make_ct_gidx("tiny-glm-ct-w4a16-gidx")
    add_kv_cache_scheme("tiny-glm-ct-fp8-kv", fp8=True, weights_fixture="tiny-glm-ct-fp8")
    add_kv_cache_scheme("tiny-glm-ct-kv-int8", fp8=False)
    make_fp8_dynamic()
    make_w8a8_int8()


# llm-compressor's FP8_DYNAMIC preset: FP8 weights per channel, FP8 inputs per token.
def make_fp8_dynamic():
    make_compressed_tensors("tiny-glm-ct-fp8-dynamic", {"num_bits": 8, "type": "float", "symmetric": True,
                                                        "strategy": "channel"}, "float-quantized", ["lm_head"],
                            input_args=dict(TOKEN_DYNAMIC, type="float"))


# llm-compressor's W8A8 int8 preset: int8 weights per channel (symmetric, unpacked), int8 inputs per token.
def make_w8a8_int8():
    make_compressed_tensors("tiny-glm-ct-w8a8-int8", {"num_bits": 8, "type": "int", "symmetric": True,
                                                      "strategy": "channel"}, "int-quantized", ["lm_head"],
                            input_args=dict(TOKEN_DYNAMIC, type="int"))


if __name__ == "__main__":
    main()
