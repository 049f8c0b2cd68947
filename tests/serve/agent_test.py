#!/usr/bin/env python3
"""autoglm-serve as the Open-AutoGLM phone agent drives it (issue 17), on the CPU with the tiny
GLM-4.1V fixture: the server started with vLLM's command line from the agent's README, the
official openai client sending what the agent sends (a ~2,400-character system prompt, each step a
user turn [screenshot as a base64 PNG data URL, text], stream=True, max_tokens, temperature 0,
top_p 0.85, frequency_penalty 0.2, the old screenshot stripped from the history after each step).
Checks: every step's answer equals autoglm-run's for the same prompt; later steps find everything
before their last user turn in the prefix cache; usage counts the expanded image tokens; the same
screenshot twice is encoded once; every bad image is a 400 naming its part, and the server is
healthy and correct afterwards.

Environment: as server_test.py (AUTOGLM_SERVE, AUTOGLM_RUN, AUTOGLM_TEST_DATA); AUTOGLM_TOKENIZE."""
import base64
import http.server
import json
import os
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib

from server_test import RUN, Server, ensure_tokenizer

TOKENIZE = os.environ.get("AUTOGLM_TOKENIZE", "build/tools/autoglm-tokenize")
FIXTURE = os.path.join(os.environ.get("AUTOGLM_TEST_DATA", "tests/data"), "tiny-glm4v")
NAME = "autoglm-phone-9b"
STEP_TOKENS = 12
SYSTEM = ("The current date: 2026-12-02\n# Setup\nYou are a professional Android operation agent assistant that can "
          "fulfill the user's high-level instructions. Given a screenshot of the Android interface at each step, you "
          "first analyze the situation, then plan the best course of action using Python-style pseudo-code.\n" +
          "".join("- Rule %d: when the screen shows item %d, tap it with do(action=\"Tap\", element=[%d,%d]).\n" %
                  (i, i, 10 * i, 20 * i) for i in range(30)))[:2442]


def png(width, height, seed, rgba=True):
    """A screenshot-like PNG (gradients, a status bar, text-like stripes), different for each seed."""
    channels = 4 if rgba else 3
    rows = []
    for y in range(height):
        if y < 60:
            line = bytes([20, 20, 20 + seed % 200, 255][:channels]) * width
        else:
            band = (y // 37 + seed) % 5
            base = bytes([(band * 50 + seed) % 256, (y // 3) % 256, (band * 30) % 256, 255][:channels])
            line = base * width
        rows.append(b"\0" + line)
    raw = zlib.compress(b"".join(rows), 6)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    color = 6 if rgba else 2
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color, 0, 0, 0)) +
            chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def data_url(data):
    return "data:image/png;base64," + base64.b64encode(data).decode()


def link_fixture(directory, but):
    """The tiny GLM-4.1V fixture's files in `directory` as symbolic links, all but those named."""
    for name in os.listdir(FIXTURE):
        if name not in but and os.path.isfile(os.path.join(FIXTURE, name)):
            os.symlink(os.path.abspath(os.path.join(FIXTURE, name)), os.path.join(directory, name))


def user_turn(text, image_url=None):
    content = [{"type": "text", "text": text}]
    if image_url is not None:
        content.insert(0, {"type": "image_url", "image_url": {"url": image_url}})
    return {"role": "user", "content": content}


def strip_images(message):
    """The agent's MessageBuilder.remove_images_from_message."""
    return {"role": message["role"], "content": [p for p in message["content"] if p["type"] == "text"]}


class Agent(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        # The fixture with a longer context (its weights do not depend on it): the agent's prompts are long.
        cls.model = os.path.join(cls.dir, "model")
        os.mkdir(cls.model)
        ensure_tokenizer()
        link_fixture(cls.model, ("config.json", "preprocessor_config.json"))
        with open(os.path.join(FIXTURE, "config.json")) as f:
            config = json.load(f)
        config["text_config"]["max_position_embeddings"] = 8192
        with open(os.path.join(cls.model, "config.json"), "w") as f:
            json.dump(config, f)
        # A larger pixel budget than the fixture's, the same the server's --mm_processor_kwargs gives: the
        # CLI (which reads the file) and the server then resize alike.
        with open(os.path.join(FIXTURE, "preprocessor_config.json")) as f:
            processor = json.load(f)
        processor["size"]["longest_edge"] = 120000
        with open(os.path.join(cls.model, "preprocessor_config.json"), "w") as f:
            json.dump(processor, f)
        with open(os.path.join(FIXTURE, "tokenizer.json")) as f:
            added = json.load(f)["added_tokens"]
        cls.ids = {t["content"]: t["id"] for t in added}
        cls.hidden = {t["id"] for t in added if t["special"]}  # skip_special_tokens drops these from the text
        with open(os.path.join(FIXTURE, "generation_config.json")) as f:
            eos = json.load(f)["eos_token_id"]
        cls.eos = set(eos if isinstance(eos, list) else [eos])
        cls.media = os.path.join(cls.dir, "media")
        os.mkdir(cls.media)
        # The Open-AutoGLM README's vLLM command, but for the allowed folder (a test folder, so "outside" exists),
        # and with prompt-lookup drafts on: every answer must still be the plain CLI's (test_five_agent_steps).
        cls.s = Server("--served-model-name", NAME, "--allowed-local-media-path", cls.media, "--mm-encoder-tp-mode",
                       "data", "--mm_processor_cache_type", "shm", "--mm_processor_kwargs", '{"max_pixels": 120000}',
                       "--max-model-len", "8192", "--chat-template-content-format", "string",
                       "--limit-mm-per-prompt", '{"image":10}', "--max-batch-tokens", "512", "--speculative-config",
                       '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}',
                       model=cls.model)

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0, "exit status %d; log:\n%s" % (code, "".join(cls.s.log))

    def template_ids(self, messages):
        """The prompt as the CLI renders it (one image token per image)."""
        out = subprocess.run([TOKENIZE, "--tokenizer", self.model, "--chat", "--chat-template-content-format", "string"],
                             input=json.dumps(messages), capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    def run_cli(self, ids, images):
        """autoglm-run's greedy answer with the agent's penalty, to the chat's first stop."""
        stops = [self.ids[t] for t in ("<|user|>", "<|observation|>", "<|endoftext|>")]
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o.json")
            args = [RUN, "--model", self.model, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens",
                    str(STEP_TOKENS), "--frequency-penalty", "0.2", "--top-p", "0.85", "--stop-on-eos",
                    "--stop-ids", ",".join(map(str, stops)), "--max-batch-tokens", "512", "--output-json", out]
            for i, image in enumerate(images):
                path = os.path.join(d, "%d.png" % i)
                with open(path, "wb") as f:
                    f.write(image)
                args += ["--image", path]
            subprocess.run(args, check=True, capture_output=True)
            with open(out) as f:
                tokens = json.load(f)["new_tokens"]
        if tokens and (tokens[-1] in self.eos or tokens[-1] in stops):
            tokens = tokens[:-1]  # the stop token is not text
        return tokens

    def detokenize(self, tokens):
        status, r = self.s.post("/detokenize", {"tokens": [t for t in tokens if t not in self.hidden]})
        self.assertEqual(status, 200, r)
        return r["prompt"]

    def step(self, messages):
        client = self.s.client()
        chunks = list(client.chat.completions.create(
            model=NAME, messages=messages, max_tokens=STEP_TOKENS, temperature=0.0, top_p=0.85, frequency_penalty=0.2,
            stream=True, stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        return text, chunks[-1].usage

    def test_five_agent_steps(self):
        history = [{"role": "system", "content": SYSTEM}]
        previous_ids = None
        # The sanitizer job takes three (tools/sanitize): each step costs more than the one before, and the third
        # already meets a history with a cached image turn stripped, which is all the later ones add.
        for step in range(int(os.environ.get("AUTOGLM_AGENT_STEPS", "5"))):
            shot = png(1080, 2400, seed=step)
            text = ("Open the chrome browser.\n\n" if step == 0 else "") + "** Screen Info **\n\n" + json.dumps(
                {"current_app": "System Home" if step == 0 else "Chrome"})
            history.append(user_turn(text, data_url(shot)))
            before = self.s.metrics()
            hits_before = before.get("autoglm:prefix_cache_hits_total", 0)
            answer, usage = self.step(history)
            if step > 0:  # the history's turns were encoded before: their runs are looked up
                kept = self.s.metrics()["autoglm:tokenizer_kept_run_hits_total"]
                self.assertGreaterEqual(kept - before.get("autoglm:tokenizer_kept_run_hits_total", 0), 1,
                                        "step %d: the system prompt's tokens remembered" % step)

            ids = self.template_ids(history)
            want = self.detokenize(self.run_cli(ids, [shot]))
            self.assertEqual(answer, want, "step %d" % step)
            status, tokenized = self.s.post("/tokenize", {"model": NAME, "messages": history})
            self.assertEqual(status, 200, tokenized)
            self.assertEqual(usage.prompt_tokens, tokenized["count"], "usage counts the expanded image tokens")
            self.assertGreater(tokenized["count"], len(ids), "the image is more than one token")
            if previous_ids is not None:
                shared = 0
                while shared < min(len(ids), len(previous_ids)) and ids[shared] == previous_ids[shared]:
                    shared += 1
                hits = self.s.metrics()["autoglm:prefix_cache_hits_total"] - hits_before
                self.assertGreaterEqual(hits, shared // 16 * 16, "step %d reuses its history" % step)
                self.assertGreater(shared, len(SYSTEM) // 4)
            previous_ids = ids
            history[-1] = strip_images(history[-1])
            history.append({"role": "assistant", "content": "<think>%s</think><answer>%s</answer>" % (answer, "Tap")})
        # The answers above were the plain CLI's with drafts run (and some kept) along the way.
        m = self.s.metrics()
        self.assertGreater(m["autoglm:spec_decode_num_draft_tokens_total"], 0)
        print("agent steps: %d drafts run, %d kept" % (m["autoglm:spec_decode_num_draft_tokens_total"],
                                                      m["autoglm:spec_decode_num_accepted_tokens_total"]))

    def test_the_same_screenshot_is_encoded_once(self):
        shot = data_url(png(640, 480, seed=41, rgba=False))
        messages = [{"role": "system", "content": "s"}, user_turn("look", shot)]
        before = self.s.metrics()
        first, _ = self.step(messages)
        messages[0]["content"] = "another system prompt, so the prefix cache cannot answer"
        second, _ = self.step(messages)
        after = self.s.metrics()
        self.assertEqual(after["autoglm:mm_images_total"] - before.get("autoglm:mm_images_total", 0), 2)
        self.assertEqual(after["autoglm:encoder_cache_hits_total"] - before.get("autoglm:encoder_cache_hits_total", 0), 1)

    def test_load_generator_replays_agents(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "serve_load.py")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "load.json")
            subprocess.run([sys.executable, script, "--url", "http://127.0.0.1:%d" % self.s.port, "--agent-steps", "3",
                            "--concurrency", "2", "--agent-tokens", "8", "--screen", "360x800", "--json", out],
                           check=True, capture_output=True)
            with open(out) as f:
                report = json.load(f)
        self.assertEqual((report["succeeded"], report["failed"]), (6, 0))
        self.assertEqual(report["mode"], "2 agents x 3 steps")
        self.assertGreater(report["prompt_tokens"], 6 * len(SYSTEM) // 8)

    def test_bad_images_are_400s_naming_the_part(self):
        good = png(300, 200, seed=3)
        truncated = good[:len(good) // 2]
        huge = png(1, 1, 0)[:16] + struct.pack(">II", 100000, 100000) + png(1, 1, 0)[24:]  # the header says 100,000 x 100,000
        huge = huge[:29] + struct.pack(">I", zlib.crc32(huge[12:29]) & 0xffffffff) + huge[33:]
        outside = os.path.join(self.dir, "outside.png")
        with open(outside, "wb") as f:
            f.write(good)
        inside = os.path.join(self.media, "inside.png")
        with open(inside, "wb") as f:
            f.write(good)
        cases = [("data:image/png;base64,%%%not-base64", "base64"),
                 (data_url(truncated), ""),
                 (data_url(huge), "100000"),
                 ("file://" + outside, "outside the allowed"),
                 ("http://127.0.0.1:9/x.png", "--allow-remote-media")]
        healthy_before, _ = self.step([user_turn("ok", "file://" + inside)])
        for url, words in cases:
            body = {"model": NAME, "max_tokens": 2,
                    "messages": [{"role": "system", "content": "s"}, user_turn("look", url)]}
            status, r = self.s.post("/v1/chat/completions", body)
            self.assertEqual(status, 400, (url[:60], r))
            self.assertEqual(r["error"]["param"], "messages[1].content[0]", r)
            self.assertIn(words, r["error"]["message"])
        eleven = {"model": NAME, "max_tokens": 2, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(good)}}] * 11}]}
        status, r = self.s.post("/v1/chat/completions", eleven)
        self.assertEqual(status, 400, r)
        self.assertEqual(r["error"]["param"], "messages[0].content[10]", r)
        self.assertEqual(self.s.request("GET", "/health")[0], 200)
        healthy_after, _ = self.step([user_turn("ok", "file://" + inside)])
        self.assertEqual(healthy_after, healthy_before)


def scripted_model(directory, chain):
    """The tiny GLM-4.1V fixture rewritten to answer by rote: every layer's o_proj and down_proj are
    zero, so the last hidden state is the last token's embedding; chain[i]'s embedding is the i-th unit
    vector and lm_head's row for chain[i + 1] that vector, so greedy decoding walks the chain. Pure
    Python (bf16 is a float32's upper half), so the test needs no numpy."""
    link_fixture(directory, ("model.safetensors",))
    with open(os.path.join(FIXTURE, "model.safetensors"), "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    data = bytearray(raw[8 + size:])

    def tensor(name):
        info = header[name]
        assert info["dtype"] == "BF16", name
        return info["data_offsets"][0], info["shape"]

    def put(offset, values):
        data[offset:offset + 2 * len(values)] = b"".join(struct.pack("<f", v)[2:] for v in values)

    prefix = "model.language_model."
    for name in header:
        if name.startswith(prefix + "layers.") and name.endswith(("o_proj.weight", "down_proj.weight")):
            begin, end = header[name]["data_offsets"]
            data[begin:end] = bytes(end - begin)
    begin, (hidden,) = tensor(prefix + "norm.weight")
    put(begin, [1.0] * hidden)
    embed, _ = tensor(prefix + "embed_tokens.weight")
    head, (vocab, _) = tensor("lm_head.weight")
    data[head:head + 2 * vocab * hidden] = bytes(2 * vocab * hidden)
    for i, token in enumerate(chain[:-1]):
        unit = [0.0] * hidden
        unit[i] = 1.0
        put(embed + 2 * hidden * token, unit)
        put(head + 2 * hidden * chain[i + 1], [2.0 * u for u in unit])
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(raw[:8 + size] + bytes(data))


class Thinking(unittest.TestCase):
    """A model that answers "<think>hm</think><answer>ok</answer>" by rote (scripted_model), so the
    thinking output is checked end to end: by default all of it stays in content, up to the stop id
    </answer> (in the fixture's eos list, its text not sent); --reasoning-parser glm45 moves the thinking
    into reasoning_content, streamed and not."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        ensure_tokenizer()
        with open(os.path.join(FIXTURE, "tokenizer.json")) as f:
            ids = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
        cls.messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]
        prompt = subprocess.run([TOKENIZE, "--tokenizer", FIXTURE, "--chat"], input=json.dumps(cls.messages),
                                capture_output=True, text=True, check=True)
        last = json.loads(prompt.stdout)[-1]
        chain = [last, ids["<think>"], ord("h"), ord("m"), ids["</think>"], ids["<answer>"], ord("o"), ord("k"),
                 ids["</answer>"]]
        assert len(set(chain)) == len(chain), chain  # each token has one successor
        scripted_model(cls.dir, chain)
        cls.chain = chain
        cls.plain = Server("--served-model-name", NAME, model=cls.dir)
        cls.parsed = Server("--served-model-name", NAME, "--reasoning-parser", "glm45", model=cls.dir)

    @classmethod
    def tearDownClass(cls):
        codes = [cls.plain.stop(), cls.parsed.stop()]
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert codes == [0, 0], "exit statuses %s; logs:\n%s" % (codes, "".join(cls.plain.log + cls.parsed.log))

    def ask(self, server, stream):
        client = server.client()
        if not stream:
            r = client.chat.completions.create(model=NAME, messages=self.messages, max_tokens=20, temperature=0)
            message = r.choices[0].message
            return getattr(message, "reasoning_content", None), message.content, r.choices[0].finish_reason
        reasoning, content, order, finish = "", "", "", None
        for chunk in client.chat.completions.create(model=NAME, messages=self.messages, max_tokens=20, temperature=0,
                                                    stream=True):
            delta = chunk.choices[0].delta
            if getattr(delta, "reasoning_content", None):
                reasoning += delta.reasoning_content
                order += "r"
            if delta.content:
                content += delta.content
                order += "c"
            finish = chunk.choices[0].finish_reason or finish
        self.assertNotIn("cr", order, "all thinking comes before the content")
        return reasoning or None, content, finish

    def test_thinking_stays_in_content_by_default(self):
        for stream in (False, True):
            self.assertEqual(self.ask(self.plain, stream), (None, "<think>hm</think><answer>ok", "stop"), stream)

    def test_the_glm45_parser_moves_thinking_to_reasoning_content(self):
        for stream in (False, True):
            self.assertEqual(self.ask(self.parsed, stream), ("hm", "<answer>ok", "stop"), stream)

    def test_completions_are_not_parsed(self):
        status, r = self.parsed.post("/v1/completions", {"model": NAME, "prompt": [self.chain[0]], "max_tokens": 20,
                                                         "temperature": 0})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["choices"][0]["text"], "<think>hm</think><answer>ok")
        self.assertNotIn("reasoning_content", r["choices"][0])


class RemoteMedia(unittest.TestCase):
    """--allow-remote-media: the screenshot from a loopback http server and from an https one (the
    test's certificate, tests/data/tls, trusted through SSL_CERT_FILE) gives the answer its data URL
    gives; a stalled URL is a 400 within the fetch timeout, a missing one a 400 naming the status."""

    @classmethod
    def setUpClass(cls):
        cls.shot = png(300, 200, seed=7)
        shot = cls.shot

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/stall.png":
                    time.sleep(5)
                if self.path in ("/shot.png", "/stall.png"):
                    self.send_response(200)
                    self.send_header("Content-Type", "image/png")
                    self.send_header("Content-Length", str(len(shot)))
                    self.end_headers()
                    self.wfile.write(shot)
                else:
                    self.send_error(404)

            def log_message(self, *args):
                pass

        tls = os.path.join(os.environ.get("AUTOGLM_TEST_DATA", "tests/data"), "tls")
        cls.servers = []
        for secure in (False, True):
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            server.daemon_threads = True
            if secure:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(os.path.join(tls, "localhost.crt"), os.path.join(tls, "localhost.key"))
                server.socket = context.wrap_socket(server.socket, server_side=True)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            cls.servers.append(server)
        cls.http = "http://127.0.0.1:%d" % cls.servers[0].server_address[1]
        cls.https = "https://localhost:%d" % cls.servers[1].server_address[1]
        env = dict(os.environ, SSL_CERT_FILE=os.path.join(tls, "localhost.crt"))
        cls.s = Server("--served-model-name", NAME, "--allow-remote-media", "--media-fetch-timeout-seconds", "1",
                       model=FIXTURE, env=env)

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        for server in cls.servers:
            server.shutdown()
            server.server_close()
        assert code == 0, "exit status %d; log:\n%s" % (code, "".join(cls.s.log))

    def chat(self, url):
        body = {"model": NAME, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
                "messages": [{"role": "system", "content": "s"}, user_turn("look", url)]}
        return self.s.post("/v1/chat/completions", body)

    def test_http_and_https_give_the_data_url_answer(self):
        status, want = self.chat(data_url(self.shot))
        self.assertEqual(status, 200, want)
        for url in (self.http + "/shot.png", self.https + "/shot.png"):
            status, got = self.chat(url)
            self.assertEqual(status, 200, (url, got))
            self.assertEqual(got["choices"][0]["message"]["content"], want["choices"][0]["message"]["content"], url)
            self.assertEqual(got["usage"]["prompt_tokens"], want["usage"]["prompt_tokens"], url)

    def test_stalled_and_missing_urls_are_400s(self):
        for url, words in ((self.http + "/stall.png", "took more than 1 s"),
                           (self.https + "/stall.png", "took more than 1 s"),
                           (self.http + "/gone.png", "answered HTTP 404"),
                           (self.https.replace("localhost", "127.0.0.1").replace("https", "http") + "/shot.png",
                            "fetching the URL failed")):  # plain http to the TLS port
            start = time.time()
            status, r = self.chat(url)
            self.assertEqual(status, 400, (url, r))
            self.assertEqual(r["error"]["param"], "messages[1].content[0]", r)
            self.assertIn(words, r["error"]["message"], url)
            self.assertLess(time.time() - start, 4, url)
        self.assertEqual(self.s.request("GET", "/health")[0], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
