#!/usr/bin/env python3
"""The quantization accuracy report (issue 18): for each fixture and weight
format (with its default policy), the greedy tokens and logits of the
quantized plan against the full-precision (f32) plan, on the fixture's golden
prompts, on the CPU. Prompt rows are teacher-forced, so they compare position
for position; generated rows compare until the first token that differs.

  python3 bench/quant_accuracy.py [--build build] [--new-tokens 16]

Then the 8-bit KV caches (fp8, int8) against the bf16 cache over long generations.
Prints Markdown tables for bench/RESULTS.md."""
import argparse, json, os, subprocess, tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = ["tiny-glm", "tiny-glm4", "tiny-chatglm", "tiny-glm-mqa"]
FORMATS = ["fp8e4m3", "int8", "int8:g32:asym", "int4:g32", "int4:g32:sym",
           "fp8e4m3:act-fp8", "int8:act-int8"]  # the last two W8A8: input rows rounded per token too
# Rows whose inputs are no multiple of 32 need another format (tiny-glm4's FFN is 200 wide).
POLICY = {"tiny-glm4": "*.down_proj: int8\n"}


def run(build, fixture, ids, new_tokens, quantize, policy_file, kv=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [os.path.join(build, "tools", "autoglm-run"), "--model", os.path.join(ROOT, "tests", "data", fixture),
               "--dtype", "bf16" if kv else "f32", "--prompt-ids", ",".join(map(str, ids)),
               "--max-new-tokens", str(new_tokens), "--output-json", out.name]
        if quantize:
            cmd += ["--quantize", quantize]
            if policy_file:
                cmd += ["--quantize-policy", policy_file]
        if kv:
            cmd += ["--kv-cache-dtype", kv]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.load(open(out.name))


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)


def compare(build, fixture, fmt, new_tokens, policy_file, kv=None):
    """Over the golden prompts: teacher-forced rows (the prompt's, then each generated row whose
    context still agrees), their top-1 agreement and worst |difference|; greedy tokens equal before
    the first difference, of all generated."""
    cases = json.load(open(os.path.join(ROOT, "tests", "data", fixture, "golden.json")))["cases"]
    rows = agree = same = total = 0
    worst = 0.0
    for case in cases:
        ids = case["input_ids"]
        ref = run(build, fixture, ids, new_tokens, None, None, "auto" if kv else None)
        got = run(build, fixture, ids, new_tokens, fmt, policy_file, kv)
        first = 0
        while first < len(ref["new_tokens"]) and got["new_tokens"][first] == ref["new_tokens"][first]:
            first += 1
        same += first
        total += len(ref["new_tokens"])
        # Row r predicts the token after position r: its context agrees while r < len(prompt) + first.
        for a, b in list(zip(got["logits"], ref["logits"]))[:len(ids) + first]:
            rows += 1
            agree += argmax(a) == argmax(b)
            worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
    return rows, agree, worst, same, total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--kv-new-tokens", type=int, default=96)
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated weight formats to report")
    parser.add_argument("--no-kv", action="store_true", help="skip the 8-bit KV-cache table")
    args = parser.parse_args()
    print("| fixture | format (default policy) | top-1 agreement, teacher-forced rows | worst logit difference | "
          "greedy tokens before the first difference |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fixture in FIXTURES:
            policy_file = None
            if fixture in POLICY:
                policy_file = os.path.join(tmp, fixture + ".policy")
                open(policy_file, "w").write(POLICY[fixture])
            for fmt in args.formats.split(","):
                rows, agree, worst, same, total = compare(args.build, fixture, fmt, args.new_tokens, policy_file)
                note = " (+ `*.down_proj: int8`)" if policy_file else ""
                print(f"| {fixture} | {fmt}{note} | {agree}/{rows} | {worst:.4f} | {same}/{total} |")
    if args.no_kv:
        return
    # The 8-bit KV cache against the bf16 one (bf16 plans, weights as they are), over long generations.
    print()
    print(f"| fixture | KV cache (bf16 plan, {args.kv_new_tokens} new tokens a prompt) | top-1 agreement, "
          "teacher-forced rows | worst logit difference | greedy tokens before the first difference |")
    print("|---|---|---|---|---|")
    for fixture in FIXTURES:
        for kv in ("fp8", "int8"):
            rows, agree, worst, same, total = compare(args.build, fixture, None, args.kv_new_tokens, None, kv)
            print(f"| {fixture} | {kv} | {agree}/{rows} | {worst:.4f} | {same}/{total} |")


if __name__ == "__main__":
    main()
