#!/usr/bin/env python3
"""Load generator for autoglm-serve (or any OpenAI-compatible server).

A synthetic ShareGPT-like mix -- prompt and output lengths drawn from
log-normal distributions (medians of about 160 and 180 tokens, long tails,
seeded), scaled down to fit the server's context -- sent as streaming
/v1/completions requests, either at a fixed request rate (Poisson arrivals)
or at a fixed concurrency. Reports requests/s, output tokens/s, time to
first token, time per output token and end-to-end latency (p50/p90/p99),
and failures; --json writes the same numbers.

  bench/serve_load.py --url http://127.0.0.1:8080 --requests 200 --concurrency 16
  bench/serve_load.py --url http://127.0.0.1:8080 --requests 200 --rate 20

--agent-steps N replays the Open-AutoGLM phone agent instead: --concurrency agents, each N
steps of streamed chat requests as the agent sends them (its system prompt, the text history,
a fresh screenshot as a PNG data URL in the last user turn, temperature 0, top_p 0.85,
frequency_penalty 0.2), reporting per-step time to first token, step latency and throughput.

  bench/serve_load.py --url http://127.0.0.1:8000 --agent-steps 5 --concurrency 4

Only the Python standard library: it runs wherever the server's tests run."""
import argparse
import base64
import http.client
import json
import math
import random
import sys
import threading
import time
import urllib.parse
import zlib
import struct

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write "
         "go see number no way could people my than first water been call who oil its now find long down day did "
         "get come made may part").split()


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def count_tokens(url, key, text):
    """Tokens of `text` by the server's POST /tokenize, or None when it has none."""
    parts = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
    headers = {"Authorization": "Bearer " + key} if key else {}
    conn.request("POST", "/tokenize", body=json.dumps({"prompt": text}), headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    return json.loads(data)["count"] if resp.status == 200 else None


def workload(n, seed, context, url, key):
    """(prompt text, output tokens) pairs: log-normal lengths, scaled so prompt + output fits the context;
    prompts are cut to their drawn length with the server's tokenizer when it offers /tokenize."""
    rng = random.Random(seed)
    scale = min(1.0, context / 2048.0)  # ShareGPT lengths are for ~2K-token contexts
    out = []
    for _ in range(n):
        prompt_tokens = max(4, int(rng.lognormvariate(math.log(160), 0.9) * scale))
        output_tokens = max(1, int(rng.lognormvariate(math.log(180), 0.8) * scale))
        prompt_tokens = min(prompt_tokens, context // 2)
        output_tokens = min(output_tokens, context - prompt_tokens - 8)
        words = [rng.choice(WORDS) for _ in range(max(1, int(prompt_tokens / 1.3)))]  # ~1.3 tokens a word
        for _ in range(6):
            count = count_tokens(url, key, " ".join(words))
            if count is None or count <= prompt_tokens or len(words) == 1:
                break
            words = words[:max(1, int(len(words) * prompt_tokens / count))]
        out.append((" ".join(words), max(1, output_tokens)))
    return out


class Result:
    def __init__(self):
        self.ok = False
        self.error = ""
        self.ttft = None
        self.e2e = None
        self.output_tokens = 0
        self.prompt_tokens = 0


def screenshot_png(width, height, seed):
    """A screenshot-like RGBA PNG (a status bar, bands of colour), different for each seed."""
    rows = []
    for y in range(height):
        band = (y // 37 + seed) % 7
        pixel = bytes([20, 20, 20, 255]) if y < 60 else bytes([(band * 37 + seed) % 256, (y // 3) % 256, band * 30, 255])
        rows.append(b"\0" + pixel * width)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"".join(rows), 6)) + chunk(b"IEND", b""))


AGENT_SYSTEM = ("The current date: 2026-12-02\n# Setup\nYou are a professional Android operation agent assistant. "
                "Given a screenshot at each step, think, then answer with one action in Python-style pseudo-code.\n" +
                "".join("- Rule %d: do(action=\"Tap\", element=[%d,%d]) when item %d shows.\n" % (i, 9 * i, 7 * i, i)
                        for i in range(40)))[:2442]


def agent_step(url, model, key, messages, max_tokens, timeout):
    """One streamed agent request; its Result, and the answer's text."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.0, "top_p": 0.85,
            "frequency_penalty": 0.2, "ignore_eos": True}
    text = []

    def on_event(event, r, elapsed):
        for choice in event.get("choices") or []:
            delta = choice.get("delta", {}).get("content")
            if delta and r.ttft is None:
                r.ttft = elapsed  # the agent's TTFT: the first content
            text.append(delta or "")
    r = stream_request(url, key, "/v1/chat/completions", body, timeout, on_event)
    return r, "".join(text)


def run_agents(a, model):
    """--agent-steps: each agent's steps in order, the agents side by side; every step's Result."""
    width, height = (int(v) for v in a.screen.split("x"))
    results = []
    lock = threading.Lock()

    def agent(k):
        history = [{"role": "system", "content": AGENT_SYSTEM}]
        for step in range(a.agent_steps):
            shot = base64.b64encode(screenshot_png(width, height, 1000 * k + step)).decode()
            text = ("Task %d: open the settings.\n\n" % k if step == 0 else "") + "** Screen Info **\n\n" + \
                json.dumps({"current_app": "Settings" if step else "System Home"})
            history.append({"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + shot}},
                {"type": "text", "text": text}]})
            r, answer = agent_step(a.url, model, a.api_key, history, a.agent_tokens, a.timeout)
            with lock:
                results.append(r)
            if not r.ok:
                return
            history[-1] = {"role": "user", "content": [p for p in history[-1]["content"] if p["type"] == "text"]}
            history.append({"role": "assistant", "content": "<think>%s</think><answer>do(action=\"Back\")</answer>"
                            % answer})

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def stream_request(url, key, path, body, timeout, on_event):
    """POSTs a streamed request and reads its server-sent events to data: [DONE], calling
    on_event(event, result, seconds since the start) for each; the usage chunk fills the counts."""
    r = Result()
    parts = urllib.parse.urlparse(url)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    start = time.perf_counter()
    try:
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            r.error = "HTTP %d: %s" % (resp.status, resp.read()[:200].decode(errors="replace"))
            return r
        for raw in resp:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                r.ok = True
                break
            event = json.loads(line[6:])
            if "error" in event:
                r.error = event["error"].get("message", "error")
                break
            on_event(event, r, time.perf_counter() - start)
            if event.get("usage"):
                r.output_tokens = event["usage"]["completion_tokens"]
                r.prompt_tokens = event["usage"]["prompt_tokens"]
        conn.close()
    except Exception as e:  # a failure to report, not to crash the run
        r.error = "%s: %s" % (type(e).__name__, e)
    r.e2e = time.perf_counter() - start
    return r


def one_request(url, model, key, prompt, max_tokens, timeout):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": 0}

    def on_event(event, r, elapsed):
        if event.get("choices") and r.ttft is None:
            r.ttft = elapsed
    r = stream_request(url, key, "/v1/completions", body, timeout, on_event)
    if r.ok and r.output_tokens == 0:
        r.ok, r.error = False, "no usage in the stream"
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default="", help="the served model name (default: the server's first)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rate", type=float, default=0, help="requests per second (Poisson); 0: use --concurrency")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default="", help="write the results here too")
    ap.add_argument("--agent-steps", type=int, default=0, help="replay phone-agent traffic: steps per agent")
    ap.add_argument("--agent-tokens", type=int, default=64, help="with --agent-steps: tokens each step generates")
    ap.add_argument("--screen", default="1080x2400", help="with --agent-steps: the screenshots' WIDTHxHEIGHT")
    a = ap.parse_args()
    if a.requests < 1 or a.concurrency < 1 or a.rate < 0:
        sys.exit("serve_load: --requests and --concurrency must be >= 1, --rate >= 0")

    parts = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
    conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + a.api_key} if a.api_key else {})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit("serve_load: GET /v1/models: HTTP %d" % resp.status)
    info = json.loads(resp.read())["data"][0]
    model = a.model or info["id"]
    context = int(info.get("max_model_len", 2048))
    start = time.perf_counter()
    if a.agent_steps > 0:
        results = run_agents(a, model)
        jobs = results
    else:
        jobs = workload(a.requests, a.seed, context, a.url, a.api_key)
        results = [None] * len(jobs)
    if a.agent_steps > 0:
        pass
    elif a.rate > 0:
        rng = random.Random(a.seed + 1)
        threads = []
        t = 0.0
        for i, (prompt, out) in enumerate(jobs):
            t += rng.expovariate(a.rate)
            delay = start + t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

            def run(i=i, prompt=prompt, out=out):
                results[i] = one_request(a.url, model, a.api_key, prompt, out, a.timeout)

            th = threading.Thread(target=run)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
    else:
        next_job = [0]
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    i = next_job[0]
                    next_job[0] += 1
                if i >= len(jobs):
                    return
                results[i] = one_request(a.url, model, a.api_key, jobs[i][0], jobs[i][1], a.timeout)

        workers = [threading.Thread(target=worker) for _ in range(a.concurrency)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    duration = time.perf_counter() - start

    good = [r for r in results if r.ok]
    failures = [r.error for r in results if not r.ok]
    out_tokens = sum(r.output_tokens for r in good)
    ttft = [r.ttft for r in good if r.ttft is not None]
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in good if r.ttft is not None and r.output_tokens > 1]
    e2e = [r.e2e for r in good]
    report = {
        "model": model, "requests": len(jobs), "succeeded": len(good), "failed": len(failures),
        "mode": ("%d agents x %d steps" % (a.concurrency, a.agent_steps) if a.agent_steps > 0 else
                 "rate %.2f req/s" % a.rate if a.rate > 0 else "concurrency %d" % a.concurrency),
        "duration_s": duration, "requests_per_s": len(good) / duration, "output_tokens_per_s": out_tokens / duration,
        "prompt_tokens": sum(r.prompt_tokens for r in good), "output_tokens": out_tokens,
    }
    for name, values in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e)):
        for p in (50, 90, 99):
            report["%s_p%d" % (name, p)] = percentile(values, p) * 1e3
    print("%s, %s: %d requests in %.2f s, %d failed" % (model, report["mode"], len(jobs), duration, len(failures)))
    print("  %.2f requests/s, %.1f output tokens/s (%d prompt, %d output tokens)" % (
        report["requests_per_s"], report["output_tokens_per_s"], report["prompt_tokens"], out_tokens))
    for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
        print("  %-8s p50 %9.2f   p90 %9.2f   p99 %9.2f" % (
            name, report[name + "_p50"], report[name + "_p90"], report[name + "_p99"]))
    for error in sorted(set(failures))[:5]:
        print("  failure:", error)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
