#!/usr/bin/env python3
"""Makes tests/data/tiny-glm4v: a tiny random GLM-4.1V (Glm4vForConditionalGeneration, the
AutoGLM-Phone-9B architecture) checkpoint as Hugging Face ships one, and Hugging Face
transformers' answers for it (../shared/GLM4V_SPEC.md section 9 is the recipe):

  config.json, generation_config.json, model.safetensors (bf16), preprocessor_config.json,
  chat_template.jinja (GLM-4.1V's, verbatim), the images the cases use (PNG, RGBA PNG, JPEG);
  golden.json: per case the prompt ids (image tokens expanded), the images and their grids,
  the 3-D positions and rope delta, N greedy tokens (recomputed from scratch each step), the
  chat messages and the text transformers' apply_chat_template renders for them;
  golden.safetensors: per case `logits` [P + N, vocab] (F32; row i: the next-token logits
  after tokens 0..i), `pixel_values` (F32, the default processor's, torchvision backend) and
  `vision` (F32, the merger's rows); and `resize*`, `composite.*`, `decode.*` (U8): the image
  pipeline's pieces on their own (torchvision's uint8 antialiased bicubic resize at assorted
  sizes, alpha composited on white, PIL's decoding of every format in images/).

The tokenizer (tokenizer.json) is ours, made by make_tiny_tokenizer.py (not committed); the
prompt ids come from the same rank-BPE the engine runs (`encode` below), on text rendered by
transformers. Goldens are computed in fp32 from a fresh load of the saved bf16 checkpoint.

Needs torch, torchvision, transformers, pillow (a developer's tool, not run by the build):
  python3 -m venv /tmp/hf && /tmp/hf/bin/pip install torch torchvision transformers pillow
  /tmp/hf/bin/python tests/data/make_glm4v_fixture.py
Made with transformers 5.24.0, torch 2.15.0, torchvision 0.29.2, Pillow 13.0.0."""
import io
import json
import os
import sys

import numpy as np
import regex
import torch
import transformers
from PIL import Image
from safetensors.torch import save_file
from torchvision.transforms.v2 import functional as tvF
from transformers import Glm4vConfig, Glm4vForConditionalGeneration
from transformers.image_transforms import convert_to_rgb
from transformers.models.glm4v.image_processing_glm4v import Glm4vImageProcessor

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny-glm4v")
sys.path.insert(0, HERE)
import make_tiny_tokenizer as tok  # noqa: E402

SPECIAL = {t: 300 + i for i, t in enumerate(tok.GLM4V_SPECIALS)}
IMAGE, BEGIN_IMAGE, END_IMAGE = SPECIAL["<|image|>"], SPECIAL["<|begin_of_image|>"], SPECIAL["<|end_of_image|>"]
VOCAB = 336  # 320 tokens, the embedding padded
NEW_TOKENS = 6
PLACEHOLDER = "<|begin_of_image|><|image|><|end_of_image|>"

# GLM-4.1V-9B-Thinking's chat template, verbatim (GLM4V_SPEC.md section 5.1).
CHAT_TEMPLATE = """[gMASK]<sop>
{%- for msg in messages %}
    {%- if msg.role == 'system' %}
<|system|>
{{ msg.content }}
    {%- elif msg.role == 'user' %}
<|user|>{{ '\\n' }}

        {%- if msg.content is string %}
{{ msg.content }}
        {%- else %}
            {%- for item in msg.content %}
                {%- if item.type == 'video' or 'video' in item %}
<|begin_of_video|><|video|><|end_of_video|>
                {%- elif item.type == 'image' or 'image' in item %}
<|begin_of_image|><|image|><|end_of_image|>
                {%- elif item.type == 'text' %}
{{ item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
    {%- elif msg.role == 'assistant' %}
        {%- if msg.metadata %}
<|assistant|>{{ msg.metadata }}
{{ msg.content }}
        {%- else %}
<|assistant|>
{{ msg.content }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{% if add_generation_prompt %}<|assistant|>
{% endif %}"""

SYSTEM = "The current date: 2026-12-02\n# Setup\nYou are a phone agent. Answer with <think>...</think><answer>...</answer>."


def encode(text):
    """Rank BPE over GLM-4's pre-tokenizer pieces, special-token text as its ids: what the engine runs."""
    tokens = tok.ordinary_tokens()
    rank = {t: i for i, t in enumerate(tokens)}
    ids = []
    pattern = "(" + "|".join(regex.escape(s) for s in sorted(SPECIAL, key=len, reverse=True)) + ")"
    for part in regex.split(pattern, text):
        if part in SPECIAL:
            ids.append(SPECIAL[part])
            continue
        for piece in regex.findall(tok.GLM4_REGEX, part):
            parts = [bytes([b]) for b in piece.encode()]
            while len(parts) > 1:
                best = min(range(len(parts) - 1), key=lambda i: (rank.get(parts[i] + parts[i + 1], 1 << 30), i))
                if parts[best] + parts[best + 1] not in rank:
                    break
                parts[best:best + 2] = [parts[best] + parts[best + 1]]
            ids.extend(rank[p] for p in parts)
    return ids


def make_config():
    return Glm4vConfig(
        text_config={"vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 192, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
                     "rms_norm_eps": 1e-5, "attention_bias": True, "pad_token_id": SPECIAL["<|endoftext|>"],
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": 0.5, "mrope_section": [2, 3, 3]}},
        vision_config={"depth": 2, "hidden_size": 32, "num_heads": 2, "patch_size": 14, "temporal_patch_size": 2,
                       "spatial_merge_size": 2, "image_size": 56, "out_hidden_size": 128, "intermediate_size": 96,
                       "rms_norm_eps": 1e-5, "hidden_act": "silu", "in_channels": 3},
        image_token_id=IMAGE, video_token_id=SPECIAL["<|video|>"], image_start_token_id=BEGIN_IMAGE,
        image_end_token_id=END_IMAGE, video_start_token_id=SPECIAL["<|begin_of_video|>"],
        video_end_token_id=SPECIAL["<|end_of_video|>"], tie_word_embeddings=False, dtype="bfloat16")


def init_weights(model):
    """Weights large enough for clear greedy choices (std 0.02 makes ties), exact in bf16."""
    torch.manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "position_embedding" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn_like(p) * (1.5 / fan_in ** 0.5))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def make_images():
    """Screenshot-like content: gradients, blocks, text-like stripes and noise; deterministic."""
    rng = np.random.default_rng(7)

    def picture(h, w, channels=3):
        y, x = np.mgrid[0:h, 0:w]
        img = np.zeros((h, w, channels), np.float64)
        img[..., 0] = 255 * x / max(w - 1, 1)
        img[..., 1] = 255 * y / max(h - 1, 1)
        img[..., 2] = 128 + 100 * np.sin(x / 3.0) * np.cos(y / 5.0)
        img[(y // 7 + x // 7) % 3 == 0, :3] = [30, 200, 90]
        img[(y % 11 < 2), :3] = 250
        img[..., :3] += rng.normal(0, 12, (h, w, 3))
        if channels == 4:
            img[..., 3] = np.clip(255 * (0.3 + 0.7 * x / max(w - 1, 1)), 0, 255)
            img[:h // 4, :, 3] = 0
            img[h // 4:h // 2, :, 3] = 255
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    files = {}
    Image.fromarray(picture(56, 84)).save(os.path.join(OUT, "screen-84x56.png"))
    files["screen-84x56.png"] = (56, 84)
    Image.fromarray(picture(220, 300)).save(os.path.join(OUT, "screen-300x220.png"))
    files["screen-300x220.png"] = (220, 300)
    Image.fromarray(picture(90, 60, 4), "RGBA").save(os.path.join(OUT, "overlay-60x90.png"))
    files["overlay-60x90.png"] = (90, 60)
    Image.fromarray(picture(70, 100)).save(os.path.join(OUT, "photo-100x70.jpg"), quality=90)
    files["photo-100x70.jpg"] = (70, 100)
    return files


def decode_cases():
    """Small files of every format the engine reads, and PIL's RGB for each (after compositing on white)."""
    rng = np.random.default_rng(11)
    images = os.path.join(OUT, "images")
    os.makedirs(images, exist_ok=True)
    rgb = rng.integers(0, 256, (17, 23, 3), dtype=np.uint8)
    rgba = np.concatenate([rgb, rng.integers(0, 256, (17, 23, 1), dtype=np.uint8)], axis=2)
    gray = rng.integers(0, 256, (17, 23), dtype=np.uint8)
    out = {}

    def keep(name, save):
        path = os.path.join(images, name)
        save(path)
        with Image.open(path) as im:
            out[name] = convert_to_rgb(im, return_numpy=True)

    keep("rgb.png", lambda p: Image.fromarray(rgb).save(p))
    keep("rgba.png", lambda p: Image.fromarray(rgba, "RGBA").save(p))
    keep("gray.png", lambda p: Image.fromarray(gray, "L").save(p))
    keep("gray-alpha.png", lambda p: Image.fromarray(rgba[..., 2:], "LA").save(p))
    pal = Image.fromarray(rgb).quantize(16)
    pal.info["transparency"] = 3
    keep("palette-trns.png", lambda p: pal.save(p, transparency=3))
    keep("rgb16.png", lambda p: Image.fromarray((rgb.astype(np.uint16) * 257 + 3).astype(">u2").reshape(17, 23 * 3)
                                                .view(np.uint8).reshape(17, 23, 6)[..., ::2], "RGB").save(p))
    keep("q90-420.jpg", lambda p: Image.fromarray(rgb).save(p, quality=90))
    keep("q95-444.jpg", lambda p: Image.fromarray(rgb).save(p, quality=95, subsampling=0))
    keep("gray.jpg", lambda p: Image.fromarray(gray, "L").save(p, quality=85))
    keep("progressive.jpg", lambda p: Image.fromarray(rgb).save(p, quality=80, progressive=True))
    keep("lossy.webp", lambda p: Image.fromarray(rgb).save(p, quality=80))
    keep("lossless-alpha.webp", lambda p: Image.fromarray(rgba, "RGBA").save(p, lossless=True))
    return out


def resize_cases():
    """torchvision's uint8 antialiased bicubic (what the default processor runs) at assorted shapes."""
    rng = np.random.default_rng(5)
    cases = []
    for (h, w), (oh, ow) in [((56, 84), (84, 112)), ((90, 60), (112, 84)), ((17, 23), (29, 61)),
                             ((97, 33), (40, 33)), ((31, 64), (31, 16)), ((300, 7), (28, 56)),
                             ((5, 200), (56, 28)), ((64, 64), (63, 65)), ((120, 80), (28, 28)),
                             ((13, 13), (98, 91))]:
        img = rng.integers(0, 256, (3, h, w), dtype=np.uint8)
        img[:, h // 3:h // 2] = 255  # saturated runs: clamping is exercised
        img[:, :, w // 2:w // 2 + 2] = 0
        t = torch.from_numpy(img)
        out = tvF.resize(t, [oh, ow], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
        cases.append((img, out.numpy()))
    return cases


def composite_cases():
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, (32, 256, 4), dtype=np.uint8)
    rgba[0, :, 3] = np.arange(256)  # every alpha against the same colour
    rgba[0, :, :3] = 77
    rgba[1, :, 3] = np.arange(256)
    rgba[1, :, :3] = 0
    rgba[2, :, 3] = np.arange(256)
    rgba[2, :, :3] = 255
    return rgba, convert_to_rgb(Image.fromarray(rgba, "RGBA"), return_numpy=True)


def main():
    os.makedirs(OUT, exist_ok=True)
    if not os.path.exists(os.path.join(OUT, "tokenizer.json")):
        tok.main()
    config = make_config()
    model = Glm4vForConditionalGeneration(config).eval()
    init_weights(model)
    model.to(torch.bfloat16).save_pretrained(OUT, safe_serialization=True)
    with open(os.path.join(OUT, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": False, "do_sample": False,
                   "eos_token_id": [SPECIAL["<|endoftext|>"], SPECIAL["<|user|>"], SPECIAL["<|observation|>"],
                                    SPECIAL["</answer>"]],
                   "pad_token_id": SPECIAL["<|endoftext|>"]}, f, indent=2)
    with open(os.path.join(OUT, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    processor = Glm4vImageProcessor(size={"shortest_edge": 12544, "longest_edge": 47040})
    processor.save_pretrained(OUT)
    files = make_images()

    # A fresh load of the saved checkpoint, computed in fp32: what a user's transformers computes.
    model = Glm4vForConditionalGeneration.from_pretrained(OUT, dtype=torch.float32).eval()
    processor = Glm4vImageProcessor.from_pretrained(OUT)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(OUT, "tokenizer.json"))
    tokenizer.chat_template = CHAT_TEMPLATE

    def user(text, image=None):  # vLLM's "string" content format: the image placeholder first, then "\n"
        return {"role": "user", "content": (PLACEHOLDER + "\n" if image else "") + text}, ([image] if image else [])

    cases = [
        ("one image, upscaled", [{"role": "system", "content": SYSTEM},
                                 user("** Screen Info **\n\n{\"current_app\": \"System Home\"}", "screen-84x56.png")]),
        ("one image, downscaled", [user("Open the chrome browser.", "screen-300x220.png")]),
        ("two images, one RGBA, several turns", [
            {"role": "system", "content": SYSTEM},
            user("What is on the overlay?", "overlay-60x90.png"),
            {"role": "assistant", "content": "<think>a translucent panel</think><answer>do(action=\"Tap\")</answer>"},
            user("And on this photo? Compare them.", "photo-100x70.jpg")]),
        ("text only", [{"role": "system", "content": SYSTEM}, user("hello, what is the thing you said?")]),
    ]
    golden_cases, tensors = [], {}
    for index, (title, turns) in enumerate(cases):
        messages = [t[0] if isinstance(t, tuple) else t for t in turns]
        images = [name for t in turns if isinstance(t, tuple) for name in t[1]]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = encode(text)
        pixel_values, grids = None, []
        if images:
            pil = [Image.open(os.path.join(OUT, name)) for name in images]
            features = processor(images=pil, return_tensors="pt")
            pixel_values, grids = features["pixel_values"], features["image_grid_thw"].tolist()
        expanded = []
        grid_iter = iter(grids)
        for i in ids:
            if i == IMAGE:
                t, gh, gw = next(grid_iter)
                expanded.extend([IMAGE] * (t * gh * gw // 4))
            else:
                expanded.append(i)
        seq = list(expanded)
        with torch.no_grad():
            for step in range(NEW_TOKENS + 1):
                kwargs = {}
                if images:
                    kwargs = {"pixel_values": pixel_values, "image_grid_thw": torch.tensor(grids)}
                input_ids = torch.tensor([seq])
                mm = (input_ids == IMAGE).to(torch.int32)
                out = model(input_ids=input_ids, mm_token_type_ids=mm, use_cache=False, **kwargs)
                logits = out.logits[0]
                if step < NEW_TOKENS:
                    seq.append(int(torch.argmax(logits[-1])))
            mm = (torch.tensor([seq]) == IMAGE).to(torch.int32)
            positions, delta = model.model.get_rope_index(torch.tensor([seq]), mm,
                                                         torch.tensor(grids) if grids else None)
            if images:
                vision = model.model.get_image_features(pixel_values, torch.tensor(grids), return_dict=True)
                tensors["case%d.vision" % index] = torch.cat(vision.pooler_output, dim=0).contiguous()
                tensors["case%d.pixel_values" % index] = pixel_values.contiguous()
        tensors["case%d.logits" % index] = logits.contiguous()
        top2 = torch.topk(logits, 2, dim=-1).values
        golden_cases.append({
            "title": title, "messages": messages, "images": images, "rendered": text,
            "input_ids": expanded, "new_tokens": seq[len(expanded):], "image_grid_thw": grids,
            "position_ids": positions[:, 0, :].tolist(), "rope_delta": int(delta.reshape(-1)[0]),
            "top1_top2_gap": [float(g) for g in (top2[:, 0] - top2[:, 1])]})

    for i, (src, dst) in enumerate(resize_cases()):  # uint8 data stays U8
        tensors["resize%d.in" % i] = torch.from_numpy(src)
        tensors["resize%d.out" % i] = torch.from_numpy(dst)
    rgba, rgb = composite_cases()
    tensors["composite.rgba"] = torch.from_numpy(rgba)
    tensors["composite.rgb"] = torch.from_numpy(np.ascontiguousarray(rgb))
    for name, rgb in decode_cases().items():
        tensors["decode." + name] = torch.from_numpy(np.ascontiguousarray(rgb))
    save_file(tensors, os.path.join(OUT, "golden.safetensors"))
    golden = {"generator": "transformers %s Glm4vForConditionalGeneration; torch %s; torchvision %s"
                           % (transformers.__version__, torch.__version__, __import__("torchvision").__version__),
              "compute": "float32 on CPU, from a fresh load of the bf16 checkpoint",
              "logits_rows": "golden.safetensors caseI.logits: one per position of input_ids + new_tokens",
              "image_files": {name: list(hw) for name, hw in files.items()},
              "cases": golden_cases}
    with open(os.path.join(OUT, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
