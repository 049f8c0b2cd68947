#!/usr/bin/env python3
"""autoglm-serve end to end on the CPU with the tiny GLM-4 fixture: the real
server on a free loopback port, driven by the official openai client and by
raw HTTP. Greedy answers equal autoglm-run's; 64 concurrent clients each get
their solo answer; a KV cache too small for the load preempts without
changing answers; a shared prefix hits the prefix cache; thousands of bad
requests get 4xx and leave the server correct; a client that leaves
mid-stream frees its sequence; keys, unknown models, a full queue and SIGTERM
behave as documented.

Environment: AUTOGLM_SERVE, AUTOGLM_RUN (binaries), AUTOGLM_TEST_DATA."""
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

try:
    import openai
except ImportError:
    print("SKIP: the openai client is not installed (tools/bootstrap puts it in .venv/)")
    sys.exit(77)

SERVE = os.environ.get("AUTOGLM_SERVE", "build/tools/autoglm-serve")
RUN = os.environ.get("AUTOGLM_RUN", "build/tools/autoglm-run")
MODEL = os.path.join(os.environ.get("AUTOGLM_TEST_DATA", "tests/data"), "tiny-glm4")
NAME = "tiny-glm4"
# Special ids of the fixture's tokenizer (tests/data/make_tiny_tokenizer.py): GLM-4's specials from 300.
SPECIAL_FROM, ENDOFTEXT, USER, OBSERVATION = 300, 300, 307, 309
EOS = 1  # the fixture's eos_token_id


def ensure_tokenizer():
    """The tiny model's tokenizer is generated, not committed (tests/data/make_tiny_tokenizer.py)."""
    if not os.path.exists(os.path.join(MODEL, "tokenizer.model")):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "make_tiny_tokenizer.py")
        subprocess.run([sys.executable, script], check=True)


class Server:
    def __init__(self, *flags, preexec_fn=None, model=MODEL, env=None):
        ensure_tokenizer()
        self.proc = subprocess.Popen([SERVE, "--model", model, "--device", "cpu", "--host", "127.0.0.1", "--port", "0",
                                      *flags], stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn, env=env)
        self.log = []
        self.port = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                if "autoglm-serve: ready" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(120) or self.port is None or self.proc.poll() is not None:
            raise RuntimeError("the server did not start:\n" + "".join(self.log))

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def post(self, path, body, **kw):
        status, headers, data = self.request("POST", path, body, **kw)
        return status, json.loads(data) if data else None

    def metrics(self):
        _, _, data = self.request("GET", "/metrics")
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def client(self, key="unused"):
        return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key=key, max_retries=0)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            # A server that does not exit is a failure; it must not outlive the test (it holds the
            # test's output pipe, and meson would wait for it forever).
            self.proc.kill()
            self.proc.wait(10)
            raise


def read_until_done(sock, timeout=60):
    """Reads a raw streamed response until its data: [DONE] (or the connection closes)."""
    sock.settimeout(timeout)
    data = b""
    while b"data: [DONE]" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def run_tool(*args):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "o.json")
        subprocess.run([RUN, "--model", MODEL, *args, "--output-json", path], check=True, capture_output=True)
        with open(path) as f:
            return json.load(f)["new_tokens"]


def completion(server, prompt, max_tokens=16, stream=False, **extra):
    body = {"model": NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": stream, **extra}
    if not stream:
        status, r = server.post("/v1/completions", body)
        assert status == 200, r
        return r["choices"][0]["text"]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body))
    r = conn.getresponse()
    assert r.status == 200
    text = ""
    for line in r:
        line = line.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            text += json.loads(line[6:])["choices"][0]["text"]
    conn.close()
    return text


class Main(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server()

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        assert code == 0, "exit status %d; log:\n%s" % (code, "".join(cls.s.log))

    def test_openai_client_agrees_with_autoglm_run(self):
        c = self.s.client()
        r = c.completions.create(model=NAME, prompt="the thing", max_tokens=12, temperature=0,
                                 extra_body={"ignore_eos": True, "return_token_ids": True})
        want = run_tool("--prompt", "the thing", "--max-new-tokens", "12", "--ignore-eos")
        self.assertEqual(r.choices[0].model_extra["token_ids"], want)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 12)
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(
            model=NAME, prompt="the thing", max_tokens=12, temperature=0, stream=True,
            extra_body={"ignore_eos": True}) if ch.choices)
        self.assertEqual(streamed, r.choices[0].text)

        chat = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hello"}], max_tokens=8,
                                         temperature=0)
        tokens = run_tool("--prompt", "hello", "--chat", "--max-new-tokens", "8")
        shown = []
        for t in tokens:
            if t in (EOS, ENDOFTEXT, USER, OBSERVATION):
                break
            if t < SPECIAL_FROM:
                shown.append(t)
        status, text = self.s.post("/detokenize", {"tokens": shown})
        self.assertEqual(status, 200)
        self.assertEqual(chat.choices[0].message.content, text["prompt"])
        chunks = list(c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hello"}],
                                                max_tokens=8, temperature=0, stream=True,
                                                stream_options={"include_usage": True}))
        self.assertEqual("".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices),
                         chat.choices[0].message.content)
        self.assertEqual(chunks[-1].usage.total_tokens, chat.usage.total_tokens)
        self.assertEqual([ch.choices[0].finish_reason for ch in chunks if ch.choices][-1],
                         chat.choices[0].finish_reason)

    def test_choices_logprobs_stop_and_seeds(self):
        c = self.s.client()
        r = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=6, n=3,
                                      temperature=1.0, seed=5, logprobs=True, top_logprobs=2)
        self.assertEqual(len(r.choices), 3)
        for ch in r.choices:
            for entry in ch.logprobs.content:
                self.assertLessEqual(entry.logprob, 0.0)
                self.assertEqual(len(entry.top_logprobs), 2)
                self.assertGreaterEqual(entry.top_logprobs[0].logprob, entry.top_logprobs[1].logprob)
        again = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=6, n=3,
                                          temperature=1.0, seed=5)
        self.assertEqual([x.message.content for x in again.choices], [x.message.content for x in r.choices])
        # A stop string cuts the text before it and finishes with "stop".
        full = completion(self.s, "the thing", 24)
        if len(full) > 4:
            stop = full[3:5]
            cut = completion(self.s, "the thing", 24, stop=[stop])
            self.assertEqual(cut, full[:full.index(stop)])
        echo = c.completions.create(model=NAME, prompt="hello", max_tokens=2, temperature=0, echo=True, logprobs=1)
        self.assertTrue(echo.choices[0].text.startswith("hello"))
        self.assertEqual(len(echo.choices[0].logprobs.tokens), 2)

    def test_logit_bias_bans_forces_and_is_checked(self):
        c = self.s.client()
        ids = lambda **kw: c.completions.create(model=NAME, prompt="the thing", max_tokens=6, temperature=0,
                                                extra_body={"ignore_eos": True, "return_token_ids": True},
                                                **kw).choices[0].model_extra["token_ids"]
        plain = ids()
        banned = ids(logit_bias={str(t): -100 for t in set(plain)})
        self.assertTrue(set(banned).isdisjoint(plain), (plain, banned))
        self.assertEqual(ids(logit_bias={"123": 100}), [123] * 6)
        self.assertEqual(ids(logit_bias={}), plain)
        sampled = c.completions.create(model=NAME, prompt="the thing", max_tokens=6, temperature=1.0, seed=3,
                                       logit_bias={"77": 100}, extra_body={"ignore_eos": True, "return_token_ids": True})
        self.assertEqual(sampled.choices[0].model_extra["token_ids"], [77] * 6)
        chat = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                         temperature=0, logit_bias={"65": 100}, stream=True)
        self.assertEqual("".join(ch.choices[0].delta.content or "" for ch in chat if ch.choices),
                         self.s.post("/detokenize", {"tokens": [65] * 3})[1]["prompt"])
        for bad in ({"400": 1}, {"300000": -1}, {"5": 101}, {"a": 1}):
            status, r = self.s.post("/v1/completions", {"model": NAME, "prompt": "x", "logit_bias": bad})
            self.assertEqual((status, r["error"]["param"]), (400, "logit_bias"), (bad, r))

    def test_json_mode(self):
        """response_format json_object: every answer that stops is one JSON object (the random model
        is biased towards its end-of-sequence id, allowed only once the object closed), streamed or
        not, n choices, on both endpoints; json_schema and JSON mode with ignore_eos are 400s."""
        c = self.s.client()
        # tiny-glm4's end-of-sequence id, and a push towards closing strings and the object (the random
        # model would otherwise write past any max_tokens).
        bias = {"1": 100, str(ord('"')): 4, str(ord("}")): 2, str(ord(":")): 3}
        fmt = {"type": "json_object"}
        chat = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "an object, please"}],
                                         max_tokens=150, seed=4, n=3, response_format=fmt, logit_bias=bias)
        texts = [ch.message.content for ch in chat.choices]
        for ch in chat.choices:
            self.assertEqual(ch.finish_reason, "stop", ch.message.content)
            self.assertIsInstance(json.loads(ch.message.content), dict)
            self.assertTrue(ch.message.content.startswith("{") and ch.message.content.endswith("}"))
        stream = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "an object, please"}],
                                           max_tokens=150, seed=4, response_format=fmt, logit_bias=bias, stream=True)
        streamed = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
        self.assertEqual(streamed, texts[0])  # choice 0 of n samples with the request's seed
        done = c.completions.create(model=NAME, prompt="x", max_tokens=150, temperature=0, logit_bias=bias,
                                    extra_body={"response_format": fmt})
        self.assertEqual(done.choices[0].finish_reason, "stop")
        self.assertIsInstance(json.loads(done.choices[0].text), dict)
        # Without JSON mode the same request writes no JSON (the mask is what made it one).
        free = c.completions.create(model=NAME, prompt="x", max_tokens=20, temperature=0, logit_bias=bias)
        with self.assertRaises(ValueError):
            json.loads(free.choices[0].text)
        status, r = self.s.post("/v1/completions", {"model": NAME, "prompt": "x", "response_format": fmt, "ignore_eos": True})
        self.assertEqual((status, r["error"]["param"]), (400, "ignore_eos"), r)

    def test_json_schema(self):
        """response_format json_schema through the openai client's own structured-output path: it
        sends the strict schema of a pydantic model (nested models as $defs, a union as anyOf,
        Literal as const, Field bounds) and pydantic validates every answer it parses back. The
        properties come in the model's order; streamed and n choices alike; a schema the compiler
        cannot enforce is a 400 naming it."""
        from typing import Literal, Set, Tuple, Union
        from pydantic import BaseModel, Field

        class Tap(BaseModel):  # the phone agent's screen: integer bounds
            type: Literal["tap"]
            x: int = Field(ge=0, le=1080)
            y: int = Field(ge=0, lt=2400)

        class Finish(BaseModel):
            type: Literal["finish"]
            message: str = Field(max_length=6)

        class Step(BaseModel):
            thought: str = Field(max_length=12)
            action: Union[Tap, Finish]
            confidence: float = Field(ge=0, le=1)  # bounds on a number

        c = self.s.client()
        # eos as soon as the document may end; strings, numbers and objects pushed to close.
        bias = {"1": 100, str(ord('"')): 3, str(ord("}")): 3, str(ord(",")): 3}
        messages = [{"role": "user", "content": "the next step"}]
        parsed = c.beta.chat.completions.parse(model=NAME, messages=messages, response_format=Step, max_tokens=200,
                                               seed=5, n=4, logit_bias=bias)
        kinds = set()
        for ch in parsed.choices:
            self.assertEqual(ch.finish_reason, "stop", ch.message.content)
            self.assertIsInstance(ch.message.parsed, Step)  # pydantic's verdict
            self.assertEqual(list(json.loads(ch.message.content)), ["thought", "action", "confidence"])
            kinds.add(ch.message.parsed.action.type)
        self.assertGreater(len(kinds), 0)
        from openai.lib._pydantic import to_strict_json_schema
        fmt = {"type": "json_schema", "json_schema": {"name": "Step", "strict": True, "schema": to_strict_json_schema(Step)}}
        stream = c.chat.completions.create(model=NAME, messages=messages, max_tokens=200, seed=5, logit_bias=bias,
                                           response_format=fmt, stream=True)
        self.assertEqual("".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices),
                         parsed.choices[0].message.content)
        # Greedy, this model would write whitespace for ever where JSON allows it: the schema's
        # grammar takes a space, or a newline and 20 more, between tokens.
        done = c.completions.create(model=NAME, prompt="x", max_tokens=400, temperature=0, logit_bias=bias,
                                    extra_body={"response_format": fmt})
        self.assertEqual(done.choices[0].finish_reason, "stop", done.choices[0].text)
        Step.model_validate_json(done.choices[0].text)
        # A document that is not an object: a bounded list of small integers.
        ints = {"type": "json_schema", "json_schema": {"name": "ints", "schema": {
            "type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 3}}}
        r = c.completions.create(model=NAME, prompt="x", max_tokens=50, seed=1, temperature=1, logit_bias={"1": 100},
                                 extra_body={"response_format": ints})
        value = json.loads(r.choices[0].text)
        self.assertTrue(2 <= len(value) <= 3 and set(value) <= {1, 2, 3}, value)
        # Patterns (a search unless anchored), one with a length bound folded in.
        coded = {"type": "json_schema", "json_schema": {"name": "code", "strict": True, "schema": {
            "type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,4}$"},
                                             "note": {"type": "string", "pattern": "ok|fine", "maxLength": 8}},
            "required": ["code", "note"], "additionalProperties": False}}}
        r = c.completions.create(model=NAME, prompt="x", max_tokens=200, seed=3, temperature=1, n=4, logit_bias=bias,
                                 extra_body={"response_format": coded})
        for ch in r.choices:
            self.assertEqual(ch.finish_reason, "stop", ch.text)
            value = json.loads(ch.text)
            self.assertRegex(value["code"], r"^[A-Z]{2}-\d{2,4}$")
            self.assertTrue(re.search("ok|fine", value["note"]) and len(value["note"]) <= 8, value)
        # Formats pydantic writes for its types (date-time, date, uuid, ipv4), enforced as OpenAI's
        # strict mode does, a float's bounds with decimals, a tuple, multiples, a set: pydantic parses every
        # answer back (a set's items may not repeat: it would take them, so the raw JSON is checked).
        import datetime, ipaddress, uuid

        class Event(BaseModel):
            when: datetime.datetime
            day: datetime.date
            id: uuid.UUID
            host: ipaddress.IPv4Address
            ratio: float = Field(gt=0.05, le=0.95)  # bounds with decimals
            point: Tuple[int, int]  # prefixItems

        class Tagged(BaseModel):  # (the tiny model's context holds one of these documents at a time)
            step: int = Field(multiple_of=5, ge=0)  # multipleOf
            zoom: float = Field(multiple_of=0.25)
            tags: Set[Literal["a", "b", "c"]]  # uniqueItems

        for model in (Event, Tagged):
            answers = c.beta.chat.completions.parse(model=NAME, messages=messages, response_format=model, max_tokens=200,
                                                    seed=7, n=4, temperature=1, logit_bias=bias)
            for ch in answers.choices:
                self.assertEqual(ch.finish_reason, "stop", ch.message.content)
                self.assertIsInstance(ch.message.parsed, model, ch.message.content)
                if model is Tagged:
                    tags = json.loads(ch.message.content)["tags"]
                    self.assertEqual(len(tags), len(set(tags)), ch.message.content)
        # vLLM's extensions: guided_choice and guided_json (the schema's text too), structured_outputs.
        for extra in ({"guided_choice": ["yes", "no", "maybe not"]}, {"structured_outputs": {"choice": ["yes", "no", "maybe not"]}}):
            answers = {c.completions.create(model=NAME, prompt="x", max_tokens=20, temperature=1.0, seed=seed,
                                            logit_bias={"1": 100}, extra_body=extra).choices[0].text for seed in range(4)}
            self.assertTrue(answers <= {"yes", "no", "maybe not"}, answers)
            for first, answer in (("y", "yes"), ("n", "no")):  # a push on the first letter picks the choice
                r = c.completions.create(model=NAME, prompt="x", max_tokens=20, temperature=1.0, seed=1,
                                         logit_bias={"1": 100, str(ord(first)): 50}, extra_body=extra)
                self.assertEqual((r.choices[0].text, r.choices[0].finish_reason), (answer, "stop"))
        for schema in (to_strict_json_schema(Step), json.dumps(to_strict_json_schema(Step))):
            g = c.chat.completions.create(model=NAME, messages=messages, max_tokens=200, seed=5, logit_bias=bias,
                                          extra_body={"guided_json": schema})
            self.assertEqual(g.choices[0].message.content, parsed.choices[0].message.content)
        for body, param, says in (
                ({"json_schema": {"name": "a", "schema": {"type": "string", "pattern": "(?=a)a+"}}},
                 "response_format.json_schema.schema", "'pattern': lookaround is not supported"),
                ({"json_schema": {"name": "a", "schema": {"type": "object", "properties": {"n": {"type": "number",
                                                                                                 "minimum": 1e-10}}}}},
                 "response_format.json_schema.schema", "'#/properties/n': 'minimum' on a number may have at most 9 decimals"),
                ({"json_schema": {"schema": {}}}, "response_format.json_schema", "name"),
                ({}, "response_format", "json_schema")):
            status, r = self.s.post("/v1/completions", {"model": NAME, "prompt": "x",
                                                        "response_format": {"type": "json_schema", **body}})
            self.assertEqual((status, r["error"]["param"]), (400, param), r)
            self.assertIn(says, r["error"]["message"])
        status, r = self.s.post("/v1/completions", {"model": NAME, "prompt": "x", "guided_json": {"not": {}}})
        self.assertEqual((status, r["error"]["param"]), (400, "guided_json"), r)
        self.assertIn("'not' is not supported", r["error"]["message"])
        # vLLM's guided_regex: the whole answer matches, then it ends.
        for extra in ({"guided_regex": "[a-c]{2,4}-\\d{1,3}"}, {"structured_outputs": {"regex": "[a-c]{2,4}-\\d{1,3}"}}):
            r = c.completions.create(model=NAME, prompt="x", max_tokens=20, temperature=1.0, seed=2, n=3,
                                     logit_bias={"1": 100}, extra_body=extra)
            for ch in r.choices:
                self.assertEqual(ch.finish_reason, "stop", ch.text)
                self.assertRegex(ch.text, r"^[a-c]{2,4}-\d{1,3}\Z")
        status, r = self.s.post("/v1/completions", {"model": NAME, "prompt": "x", "guided_regex": "(?=a)b"})
        self.assertEqual((status, r["error"]["param"]), (400, "guided_regex"), r)
        self.assertIn("lookaround is not supported", r["error"]["message"])

    def test_vllm_stop_extensions(self):
        body = {"model": NAME, "prompt": "the thing", "max_tokens": 12, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True}

        def run(**extra):
            status, r = self.s.post("/v1/completions", {**body, **extra})
            self.assertEqual(status, 200, r)
            return r["choices"][0]

        def text_of(ids):
            return self.s.post("/detokenize", {"tokens": ids})[1]["prompt"]

        full = run()
        ids = full["token_ids"]
        # min_p 1 keeps only the likeliest token: sampling at temperature 1 gives the greedy answer.
        self.assertEqual(run(temperature=1.0, seed=3, min_p=1.0)["token_ids"], ids)
        stop = ids[3]
        at = ids.index(stop)
        # A stop id ends the choice as "stop"; its text is shown only with include_stop_str_in_output.
        cut = run(stop_token_ids=[stop])
        self.assertEqual((cut["finish_reason"], cut["token_ids"]), ("stop", ids[:at + 1]))
        # (an incomplete UTF-8 sequence before the stop id is held back, as vLLM's detokenizer holds it)
        self.assertEqual(cut["text"], text_of(ids[:at]).rstrip("\ufffd"))
        self.assertEqual(run(stop_token_ids=[stop], include_stop_str_in_output=True)["text"], text_of(ids[:at + 1]))
        # min_tokens holds it off: greedy takes the next best until then.
        held = run(stop_token_ids=[stop], min_tokens=at + 2)
        self.assertGreaterEqual(len(held["token_ids"]), at + 2)
        self.assertNotIn(stop, held["token_ids"][:at + 2])
        # A stop string kept at the end of the text.
        if len(full["text"]) > 4:
            s = full["text"][3:5]
            kept = run(stop=[s], include_stop_str_in_output=True)
            self.assertEqual(kept["text"], full["text"][:full["text"].index(s) + len(s)])
        # Special tokens show their text only with skip_special_tokens false (<eop>, id 305).
        self.assertEqual(run(max_tokens=2, logit_bias={"305": 100})["text"], "")
        self.assertEqual(run(max_tokens=2, logit_bias={"305": 100}, skip_special_tokens=False)["text"], "<eop><eop>")
        # The end-of-sequence id (1) forced by a bias, held off by min_tokens: it ends the fourth token.
        status, r = self.s.post("/v1/completions", {"model": NAME, "prompt": "the thing", "max_tokens": 12,
                                                    "temperature": 0, "logit_bias": {str(EOS): 100}, "min_tokens": 3,
                                                    "return_token_ids": True})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["choices"][0]["finish_reason"], "stop")
        self.assertEqual(len(r["choices"][0]["token_ids"]), 4)
        self.assertEqual(r["choices"][0]["token_ids"][3], EOS)
        for bad in ({"stop_token_ids": [400]}, {"min_tokens": 300, "max_tokens": 400}, {"stop_token_ids": "1"}):
            status, r = self.s.post("/v1/completions", {"model": NAME, "prompt": "x", **bad})
            self.assertEqual(status, 400, r)
            self.assertIn(r["error"]["param"], bad, r)

    def test_concurrent_clients_get_their_solo_answers(self):
        prompts = ["the thing", "hello", "what is it", [5, 17, 42], "and the", "you said", [9] * 20, "x y z"]
        solo = {i: completion(self.s, p) for i, p in enumerate(prompts)}
        before = self.s.metrics()
        jobs = [(k % len(prompts), k % 3 == 0) for k in range(64 * 3)]
        with ThreadPoolExecutor(64) as pool:
            got = list(pool.map(lambda j: completion(self.s, prompts[j[0]], stream=j[1]), jobs))
        for (i, _), text in zip(jobs, got):
            self.assertEqual(text, solo[i])
        after = self.s.metrics()
        key = 'autoglm:request_success_total{finished_reason="length"}'
        self.assertEqual(after[key] - before[key], len(jobs))
        self.assertEqual(after["autoglm:generation_tokens_total"] - before["autoglm:generation_tokens_total"],
                         16 * len(jobs))
        self.assertEqual(after["autoglm:num_requests_running"], 0)
        self.assertEqual(after["autoglm:e2e_request_latency_seconds_count"] -
                         before["autoglm:e2e_request_latency_seconds_count"], len(jobs))
        self.assertEqual(self.s.request("GET", "/health")[0], 200)

    def test_prefix_cache_serves_the_second_request(self):
        rng = random.Random(3)
        prompt = [rng.randrange(10, 290) for _ in range(100)]
        first = completion(self.s, prompt, 4)
        before = self.s.metrics()["autoglm:prefix_cache_hits_total"]
        second = completion(self.s, prompt + [7], 4)
        hits = self.s.metrics()["autoglm:prefix_cache_hits_total"] - before
        self.assertGreaterEqual(hits, 96)  # six full 16-token blocks of the shared 100 tokens
        third = completion(self.s, prompt, 4)
        self.assertEqual(third, first)
        self.assertIsInstance(second, str)

    def test_metrics_pass_promtool(self):
        import shutil
        promtool = shutil.which("promtool")
        if promtool is None:
            self.skipTest("no promtool (Debian package prometheus; tools/bootstrap installs it)")
        completion(self.s, "the thing", 4)
        _, _, text = self.s.request("GET", "/metrics")
        raw = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
        # promtool's only complaint may be the issue's own names: it lints colons, which Prometheus
        # allows but reserves by convention for recording rules (README, metrics).
        problems = [l for l in (raw.stdout + raw.stderr).decode().splitlines() if l.strip()]
        self.assertTrue(all("should not contain ':'" in l for l in problems), problems)
        renamed = subprocess.run([promtool, "check", "metrics"], input=text.replace(b"autoglm:", b"autoglm_"),
                                 capture_output=True)
        self.assertEqual(renamed.returncode, 0, renamed.stdout + renamed.stderr)

    def test_load_generator_reports_every_request(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "serve_load.py")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "load.json")
            subprocess.run([sys.executable, script, "--url", "http://127.0.0.1:%d" % self.s.port, "--requests", "24",
                            "--concurrency", "6", "--json", out], check=True, capture_output=True)
            with open(out) as f:
                report = json.load(f)
        self.assertEqual(report["succeeded"], 24)
        self.assertEqual(report["failed"], 0)
        self.assertGreater(report["output_tokens_per_s"], 0)
        self.assertLessEqual(report["ttft_ms_p50"], report["e2e_ms_p50"])

    def test_client_gone_mid_stream_frees_its_sequence(self):
        before = self.s.metrics()['autoglm:request_success_total{finished_reason="abort"}']
        sock = socket.create_connection(("127.0.0.1", self.s.port))
        body = json.dumps({"model": NAME, "prompt": "the", "max_tokens": 200, "stream": True, "ignore_eos": True})
        sock.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
        sock.recv(4096)  # headers and the first events
        sock.close()
        deadline = time.time() + 20
        while time.time() < deadline:
            m = self.s.metrics()
            if m['autoglm:request_success_total{finished_reason="abort"}'] > before and \
                    m["autoglm:num_requests_running"] == 0:
                break
            time.sleep(0.05)
        m = self.s.metrics()
        self.assertEqual(m['autoglm:request_success_total{finished_reason="abort"}'], before + 1)
        self.assertEqual(m["autoglm:num_requests_running"], 0)

    def test_bad_requests_get_4xx_and_leave_the_server_correct(self):
        solo = completion(self.s, "the thing")
        good_chat = {"model": NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        good = {"model": NAME, "prompt": "hi", "max_tokens": 2}
        bad_values = [None, -1, 0, 2 ** 64, -2 ** 63, 1e300, "x", "", [], {}, [1, "a"], True, "\ud800", [[1]], 0.5,
                      {"a": 1}, "a" * 5000, -0.0]
        bodies = []
        for base, path in ((good_chat, "/v1/chat/completions"), (good, "/v1/completions")):
            text = json.dumps(base)
            for cut in range(1, len(text)):
                bodies.append((path, text[:cut]))  # truncated JSON
            for field in ["model", "messages", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "stop",
                          "seed", "logprobs", "top_logprobs", "stream", "echo", "stream_options", "ignore_eos",
                          "max_completion_tokens", "presence_penalty", "logit_bias", "stop_token_ids", "min_tokens", "min_p",
                          "skip_special_tokens", "include_stop_str_in_output", "tools", "tool_choice",
                          "parallel_tool_calls", "response_format", "bogus"]:
                for v in bad_values:
                    b = dict(base)
                    b[field] = v
                    bodies.append((path, json.dumps(b)))
            for role in ["tool", "", "USER", "function", 7]:
                b = dict(good_chat)
                b["messages"] = [{"role": role, "content": "hi"}]
                bodies.append((path, json.dumps(b)))
        rng = random.Random(9)
        for _ in range(1200):  # valid bodies with one byte changed: mostly broken JSON, some odd values
            path, base = rng.choice([("/v1/chat/completions", good_chat), ("/v1/completions", good)])
            text = bytearray(json.dumps(base).encode())
            text[rng.randrange(len(text))] = rng.randrange(256)
            bodies.append((path, bytes(text)))
        for _ in range(300):
            bodies.append(("/v1/completions", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))))
        bodies.append(("/v1/chat/completions", b'{"model": "tiny-glm4", "messages": [{"role": "user", "content": "\xff\xfe"}]}'))
        bodies.append(("/v1/completions", json.dumps({"model": NAME, "prompt": [400], "max_tokens": 1})))
        bodies.append(("/v1/completions", json.dumps({"model": NAME, "prompt": [1] * 300, "max_tokens": 1})))
        bodies.append(("/v1/completions", json.dumps({"model": "other", "prompt": "hi"})))
        function = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        for tools, choice in (([function] * 2, "auto"), ([function] * 129, "auto"), ([{"type": "function", "function": {
                "name": "f\u00e9"}}], "auto"), ([{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#"}, "strict": True}}],
                                                 "required"), ([function], {"type": "function", "function": {"name": "g"}}),
                              ([function], {"type": "function"}), ([function], "required")):
            bodies.append(("/v1/chat/completions", json.dumps(dict(good_chat, tools=tools, tool_choice=choice))))
        bodies.append(("/v1/chat/completions", json.dumps(dict(good_chat, messages=[
            {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]))))
        bodies.append(("/tokenize", "[1, 2"))
        bodies.append(("/detokenize", json.dumps({"tokens": [1, -5]})))
        bodies.append(("/detokenize", json.dumps({"tokens": [2 ** 40]})))

        def send(item):
            path, body = item
            status, _, data = self.s.request("POST", path, body)
            return item, status, data

        statuses = {}
        with ThreadPoolExecutor(16) as pool:
            for (path, body), status, data in pool.map(send, bodies):
                if status == 200:  # a value that happens to be valid (e.g. n = True is refused, top_k = 0 is fine)
                    continue
                self.assertTrue(400 <= status < 500, (path, body, status, data))
                error = json.loads(data)["error"]
                self.assertTrue(error["message"], data)
                statuses[status] = statuses.get(status, 0) + 1
        self.assertGreater(sum(statuses.values()), 2000)
        long_prompt = {"model": NAME, "prompt": list(range(1, 300)), "max_tokens": 2}  # over the 256-token context
        status, r = self.s.post("/v1/completions", long_prompt)
        self.assertEqual((status, r["error"]["param"]), (400, "prompt"), r)
        self.assertIn("maximum context length is 256 tokens", r["error"]["message"])
        self.assertIn(404, statuses)  # the unknown model

        # 100 MB: refused from its Content-Length.
        sock = socket.create_connection(("127.0.0.1", self.s.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
        try:
            for _ in range(100):
                sock.sendall(b"x" * (1 << 20))
        except OSError:
            pass
        self.assertIn(b" 413 ", sock.recv(4096))
        sock.close()
        # Headers that never end, garbage that is not HTTP.
        for raw, code in ((b"GET /health HTTP/1.1\r\nX: " + b"a" * 100000 + b"\r\n\r\n", b" 431 "),
                          (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", b" 400 ")):
            sock = socket.create_connection(("127.0.0.1", self.s.port))
            try:
                sock.sendall(raw)
            except OSError:
                pass
            self.assertIn(code, sock.recv(4096))
            sock.close()
        self.assertEqual(self.s.request("GET", "/health")[0], 200)
        self.assertEqual(completion(self.s, "the thing"), solo)


class Tools(unittest.TestCase):
    """Function calling, on a copy of the tiny model whose context holds GLM-4's tool prompt (its
    Chinese preamble alone is ~250 of the byte-level fixture's tokens)."""

    @classmethod
    def setUpClass(cls):
        ensure_tokenizer()
        cls.dir = tempfile.TemporaryDirectory()
        for name in os.listdir(MODEL):
            if name != "config.json":
                os.symlink(os.path.abspath(os.path.join(MODEL, name)), os.path.join(cls.dir.name, name))
        with open(os.path.join(MODEL, "config.json")) as f:
            config = json.load(f)
        config["max_position_embeddings"] = 4096
        with open(os.path.join(cls.dir.name, "config.json"), "w") as f:
            json.dump(config, f)
        cls.s = Server("--served-model-name", NAME, model=cls.dir.name)

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        cls.dir.cleanup()
        assert code == 0, "exit status %d; log:\n%s" % (code, "".join(cls.s.log))

    def test_tools(self):
        """Function calling in GLM-4's form through the openai client: a forced call (tool_choice
        "required" or named) is a call to one of the functions with arguments its parameters schema
        validates (pydantic's verdict), given as tool_calls with finish_reason "tool_calls",
        streamed alike; the functions are in the prompt unless tool_choice is "none"; a call and its
        result in the history are taken; a strict function's schema the grammar cannot enforce is a 400
        naming it, another's arguments are any JSON object."""
        from pydantic import BaseModel, Field

        class Weather(BaseModel):
            city: str = Field(max_length=8)

        class Tap(BaseModel):
            x: int = Field(ge=0, le=1080)
            y: int = Field(ge=0, lt=2400)

        def function(name, model):
            return {"type": "function", "function": {"name": name, "description": f"the {name} function",
                                                     "parameters": model.model_json_schema()}}

        tools = [function("get_weather", Weather), function("tap", Tap)]
        models = {"get_weather": Weather, "tap": Tap}
        c = self.s.client()
        messages = [{"role": "user", "content": "tap the weather"}]
        bias = {"1": 100, str(ord('"')): 3, str(ord("}")): 3}
        seen = set()
        for seed in range(6):
            r = c.chat.completions.create(model=NAME, messages=messages, tools=tools, tool_choice="required",
                                          max_tokens=120, seed=seed, logit_bias=bias)
            ch = r.choices[0]
            self.assertEqual(ch.finish_reason, "tool_calls", ch.message)
            self.assertIsNone(ch.message.content)
            self.assertEqual(len(ch.message.tool_calls), 1)
            call = ch.message.tool_calls[0]
            self.assertTrue(call.id.startswith("call_"))
            models[call.function.name].model_validate_json(call.function.arguments)  # pydantic's verdict
            seen.add(call.function.name)
            if seed == 0:  # the stream gives the same call: its name and id first, then the arguments in pieces
                stream = list(c.chat.completions.create(model=NAME, messages=messages, tools=tools, tool_choice="required",
                                                        max_tokens=120, seed=seed, logit_bias=bias, stream=True))
                deltas = [d.choices[0].delta for d in stream if d.choices]
                calls = [t for d in deltas for t in (d.tool_calls or [])]
                self.assertGreater(len(calls), 2)
                self.assertEqual((calls[0].function.name, calls[0].function.arguments, calls[0].type), (call.function.name, "", "function"))
                self.assertTrue(calls[0].id.startswith("call_"))
                self.assertTrue(all(t.index == 0 and t.function.name is None and t.id is None for t in calls[1:]))
                self.assertEqual("".join(t.function.arguments for t in calls), call.function.arguments)
                self.assertEqual("".join(d.content or "" for d in deltas), "")
                self.assertEqual(stream[-1].choices[0].finish_reason, "tool_calls")
        self.assertGreater(len(seen), 0)
        named = c.chat.completions.create(model=NAME, messages=messages, tools=tools, max_tokens=120, seed=1,
                                          logit_bias=bias, n=3,
                                          tool_choice={"type": "function", "function": {"name": "tap"}})
        for ch in named.choices:
            self.assertEqual((ch.finish_reason, ch.message.tool_calls[0].function.name), ("tool_calls", "tap"))
            Tap.model_validate_json(ch.message.tool_calls[0].function.arguments)
        # The functions are in the prompt (auto, the default), not with "none"; the history's call and result too.
        plain = c.chat.completions.create(model=NAME, messages=messages, max_tokens=1).usage.prompt_tokens
        auto = c.chat.completions.create(model=NAME, messages=messages, tools=tools, max_tokens=1).usage.prompt_tokens
        none = c.chat.completions.create(model=NAME, messages=messages, tools=tools, tool_choice="none",
                                         max_tokens=1).usage.prompt_tokens
        self.assertGreater(auto, plain + 200)
        self.assertEqual(none, plain)
        status, tokenized = self.s.post("/tokenize", {"model": NAME, "messages": messages, "tools": tools})
        self.assertEqual((status, tokenized["count"]), (200, auto), tokenized)
        history = messages + [{"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function", "function": {"name": "tap", "arguments": '{"x": 1, "y": 2}'}}]},
                              {"role": "tool", "tool_call_id": "call_1", "content": "tapped"}]
        r = c.chat.completions.create(model=NAME, messages=history, tools=tools, max_tokens=8, seed=2)
        self.assertGreater(r.usage.prompt_tokens, auto + len('tap\n{"x": 1, "y": 2}tapped'))
        self.assertIn(r.choices[0].finish_reason, ("stop", "length", "tool_calls"))
        # Greedy with auto: a reply (this model's) streams as content, the same as the whole answer.
        whole = c.chat.completions.create(model=NAME, messages=messages, tools=tools, max_tokens=20, temperature=0)
        streamed = c.chat.completions.create(model=NAME, messages=messages, tools=tools, max_tokens=20, temperature=0,
                                             stream=True)
        text = "".join(d.choices[0].delta.content or "" for d in streamed if d.choices)
        if whole.choices[0].message.tool_calls is None:
            self.assertEqual(text, whole.choices[0].message.content)
        # A schema that cannot be enforced: a strict function's is refused by name, forced or auto; any
        # other function's arguments are held to a JSON object.
        odd = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
            "s": {"type": "string", "pattern": "(?=a)a+"}}}}}]
        for choice in ("required", "auto"):
            odd[0]["function"]["strict"] = True
            status, body = self.s.post("/v1/chat/completions", {"model": NAME, "messages": messages, "tools": odd,
                                                                "tool_choice": choice, "max_tokens": 1})
            self.assertEqual((status, body["error"]["param"]), (400, "tools[0].function.parameters"), body)
            self.assertIn("'pattern': lookaround is not supported", body["error"]["message"])
            odd[0]["function"]["strict"] = False
            status, body = self.s.post("/v1/chat/completions", {"model": NAME, "messages": messages, "tools": odd,
                                                                "tool_choice": choice, "max_tokens": 60, "seed": 1,
                                                                "logit_bias": bias})
            self.assertEqual(status, 200, body)
            if choice == "required":
                self.assertIsInstance(json.loads(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]), dict)

    def test_auto_calls_are_enforced(self):
        """tool_choice "auto": a reply that starts as a call (its first line a function's name) is
        held to one -- arguments its schema validates, pydantic's verdict -- and any other reply is
        free text; streamed, the same answers, a call as it is written. Biased towards the name "t"
        and a newline, this random model starts about a quarter of its replies as calls."""
        from pydantic import BaseModel, Field

        class Tap(BaseModel):
            x: int = Field(ge=0, le=1080)
            y: int = Field(ge=0, lt=2400)

        tools = [{"type": "function", "function": {"name": "t", "parameters": Tap.model_json_schema(), "strict": True}}]
        c = self.s.client()
        messages = [{"role": "user", "content": "tap"}]
        bias = {str(ord("t")): 10, str(ord("\n")): 10}
        calls = replies = 0
        for seed in range(0, 24, 6):  # choice i draws with seed + i: 24 seeds
            r = c.chat.completions.create(model=NAME, messages=messages, tools=tools, max_tokens=80, seed=seed,
                                          logit_bias=bias, n=6, temperature=1.0)
            for ch in r.choices:
                if ch.finish_reason == "tool_calls":
                    calls += 1
                    self.assertIsNone(ch.message.content)
                    self.assertEqual(ch.message.tool_calls[0].function.name, "t")
                    Tap.model_validate_json(ch.message.tool_calls[0].function.arguments)
                else:
                    replies += 1
                    self.assertIsNone(ch.message.tool_calls)
                    first = ch.message.content.split("\n")[0].strip()
                    self.assertTrue(first != "t" or ch.finish_reason == "length", ch)
            if seed == 0:
                stream = list(c.chat.completions.create(model=NAME, messages=messages, tools=tools, max_tokens=80,
                                                        seed=seed, logit_bias=bias, n=6, temperature=1.0, stream=True))
                for i, ch in enumerate(r.choices):
                    deltas = [d.choices[0].delta for d in stream if d.choices and d.choices[0].index == i]
                    calls_streamed = [t for d in deltas for t in (d.tool_calls or [])]
                    if ch.finish_reason == "tool_calls":  # as written: its name first, then the arguments
                        self.assertEqual((calls_streamed[0].function.name, calls_streamed[0].function.arguments), ("t", ""))
                        self.assertEqual("".join(t.function.arguments for t in calls_streamed),
                                         ch.message.tool_calls[0].function.arguments)
                    else:
                        self.assertEqual("".join(d.content or "" for d in deltas), ch.message.content)
        self.assertGreater(calls, 2)
        self.assertGreater(replies, 2)


class TensorParallel(unittest.TestCase):
    """--tp 2 on the CPU (two ranks as threads): the same greedy tokens as autoglm-run at tp 1,
    batched requests included; a degree the heads refuse is a one-line error at start-up."""

    def test_two_ranks_answer_like_one(self):
        s = Server("--tp", "2")
        try:
            want = run_tool("--prompt", "the thing", "--max-new-tokens", "12", "--ignore-eos")
            status, r = s.post("/v1/completions", {"model": NAME, "prompt": "the thing", "max_tokens": 12,
                                                   "temperature": 0, "ignore_eos": True, "return_token_ids": True})
            self.assertEqual(status, 200, r)
            self.assertEqual(r["choices"][0]["token_ids"], want)
            prompts = ["one", "the other thing", "a"]
            solo = [completion(s, p, max_tokens=10) for p in prompts]
            with ThreadPoolExecutor(len(prompts)) as pool:
                together = list(pool.map(lambda p: completion(s, p, max_tokens=10), prompts))
            self.assertEqual(together, solo)
        finally:
            self.assertEqual(s.stop(), 0, "".join(s.log[-40:]))

    def test_a_degree_the_heads_refuse_ends_the_server(self):
        ensure_tokenizer()
        r = subprocess.run([SERVE, "--model", MODEL, "--device", "cpu", "--host", "127.0.0.1", "--port", "0",
                            "--tp", "4"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--tp 4 does not divide the 6 attention heads", r.stderr)


class Speculative(unittest.TestCase):
    """--speculative-config (vLLM's ngram method): every answer is the plain server's, token for token
    and logprob for logprob, greedy or seeded, streamed or not, n choices and structured output
    included; the drafts show in /metrics; a bad config is a one-line error at start-up."""

    def test_drafts_change_no_answer(self):
        plain = Server()
        spec = Server("--speculative-config",
                      '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}')
        try:
            bodies = []
            for prompt in ["the thing the thing the thing", "one", "a b a b a b a"]:
                base = {"model": NAME, "prompt": prompt, "max_tokens": 40, "ignore_eos": True, "return_token_ids": True}
                bodies.append({**base, "temperature": 0})
                bodies.append({**base, "temperature": 0, "top_p": 0.85, "frequency_penalty": 0.2, "logprobs": 2})
                bodies.append({**base, "temperature": 0.8, "seed": 5, "n": 2, "presence_penalty": 0.5})
            # Constrained answers take drafts too: JSON mode and a schema, sampled.
            json_base = {"model": NAME, "prompt": '{"a": [1, 2], "a": [1, 2]}', "max_tokens": 60, "return_token_ids": True,
                         "temperature": 0.9, "seed": 3, "logit_bias": {"1": 100, str(ord('"')): 3, str(ord("}")): 2}}
            bodies.append({**json_base, "response_format": {"type": "json_object"}, "n": 2})
            bodies.append({**json_base, "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {
                "type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
                                                 "b": {"type": "string", "maxLength": 6}}, "required": ["a"]}}}})
            for body in bodies:
                a_status, a = plain.post("/v1/completions", body)
                b_status, b = spec.post("/v1/completions", body)
                self.assertEqual((a_status, b_status), (200, 200), (a, b))
                for ca, cb in zip(a["choices"], b["choices"]):
                    self.assertEqual(cb["token_ids"], ca["token_ids"], body)
                    self.assertEqual(cb["text"], ca["text"], body)
                    self.assertEqual(cb["finish_reason"], ca["finish_reason"], body)
                    if ca.get("logprobs"):
                        self.assertEqual(cb["logprobs"]["tokens"], ca["logprobs"]["tokens"])
                        for x, y in zip(ca["logprobs"]["token_logprobs"], cb["logprobs"]["token_logprobs"]):
                            self.assertAlmostEqual(x, y, places=4)
                self.assertEqual(b["usage"], a["usage"])
            # Streamed through the official client: the same text, delta by delta.
            for s in (plain, spec):
                s.text = "".join(c.choices[0].text for c in s.client().completions.create(
                    model=NAME, prompt="a b a b a b a", max_tokens=40, temperature=0, stream=True,
                    extra_body={"ignore_eos": True}))
            self.assertEqual(spec.text, plain.text)
            m = spec.metrics()
            self.assertGreater(m["autoglm:spec_decode_num_accepted_tokens_total"], 0)
            self.assertGreater(m["autoglm:spec_decode_num_draft_tokens_total"],
                               m["autoglm:spec_decode_num_accepted_tokens_total"])
            self.assertGreater(m["autoglm:spec_decode_num_drafts_total"], 0)
            self.assertEqual(plain.metrics()["autoglm:spec_decode_num_drafts_total"], 0)
        finally:
            self.assertEqual(plain.stop(), 0, "".join(plain.log[-40:]))
            self.assertEqual(spec.stop(), 0, "".join(spec.log[-40:]))

    def test_a_bad_config_ends_the_server(self):
        ensure_tokenizer()
        r = subprocess.run([SERVE, "--model", MODEL, "--device", "cpu", "--host", "127.0.0.1", "--port", "0",
                            "--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}'],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--speculative-config: 'method'", r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)


class Deployment(unittest.TestCase):
    """The Dockerfile and deploy/ cannot be built or applied here; at least their flags and
    environment variables must be ones autoglm-serve knows."""

    def test_flags_and_environment_exist(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        helptext = subprocess.run([SERVE, "--helpfull"], capture_output=True, text=True).stdout + \
            subprocess.run([SERVE, "--helpfull"], capture_output=True, text=True).stderr
        known = set(re.findall(r"--([a-z_]+)", helptext))
        used = set()
        for name in ("Dockerfile", "deploy/autoglm.yaml", "deploy/autoglm-phone.yaml"):
            with open(os.path.join(root, name)) as f:
                text = f.read()
            used |= set(f.replace("-", "_") for f in re.findall(r'"--([a-z][a-z-]+)"', text))
            for env in re.findall(r"\b(MODEL_DIR|MODEL_NAME|PORT|API_KEY|MAX_MEMORY_GB|LOG_LEVEL|[A-Z_]{4,})\b", text):
                if env.startswith(("MODEL", "PORT", "API", "MAX_M", "LOG")):
                    self.assertIn(env, ("MODEL_DIR", "MODEL_NAME", "PORT", "API_KEY", "MAX_MEMORY_GB", "LOG_LEVEL"))
        self.assertTrue(used)
        self.assertEqual(used - known, set())


class Limits(unittest.TestCase):
    """Keys, the queue bound, slow clients, KV pressure and SIGTERM: servers of their own."""

    def test_key_queue_and_slow_clients(self):
        s = Server("--api-key", "k3y", "--max-queue", "1", "--request-timeout-seconds", "2")
        try:
            self.assertEqual(s.request("GET", "/v1/models")[0], 401)
            self.assertEqual(s.request("GET", "/v1/models", headers={"Authorization": "Bearer nope"})[0], 401)
            status, _, data = s.request("GET", "/v1/models", headers={"Authorization": "Bearer k3y"})
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(data)["data"][0]["id"], NAME)
            with self.assertRaises(openai.AuthenticationError):
                s.client("wrong").models.list()
            self.assertEqual(s.client("k3y").models.list().data[0].id, NAME)
            self.assertEqual(s.request("GET", "/nowhere")[0], 404)
            self.assertEqual(s.request("GET", "/health")[0], 200)  # no key needed
            # One long stream fills the queue of one: the next request gets 429 with Retry-After. The
            # tiny model may finish its 250 tokens before the next request arrives on a loaded machine
            # (then that one is rightly served): try again, up to ten times.
            refused = None
            for _ in range(10):
                sock = socket.create_connection(("127.0.0.1", s.port))
                body = json.dumps({"model": NAME, "prompt": "the", "max_tokens": 250, "stream": True,
                                   "ignore_eos": True})
                sock.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3y\r\n"
                              "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
                sock.recv(4096)
                status, headers, _ = s.request("POST", "/v1/completions", {"model": NAME, "prompt": "a",
                                                                           "max_tokens": 1},
                                               headers={"Authorization": "Bearer k3y"})
                read_until_done(sock)  # the stream ends either way, and the queue is empty again
                sock.close()
                if status == 429:
                    refused = headers
                    break
                self.assertEqual(status, 200)
            self.assertIsNotNone(refused, "a full queue never refused")
            self.assertIn("Retry-After", refused)
            # A client that sends half a request and waits: 408 after the timeout.
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            sock.settimeout(10)
            self.assertIn(b" 408 ", sock.recv(4096))
            sock.close()
        finally:
            self.assertEqual(s.stop(), 0, "".join(s.log[-40:]))

    def test_512_concurrent_streams_on_a_few_threads(self):
        import selectors
        s = Server("--max-queue", "1024", "--http-threads", "4")
        try:
            body = json.dumps({"model": NAME, "prompt": "the thing", "max_tokens": 4, "stream": True,
                               "temperature": 0, "ignore_eos": True})
            request = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body), body)).encode()
            want = completion(s, "the thing", 4)
            sel = selectors.DefaultSelector()
            received = {}
            for _ in range(512):
                sock = socket.create_connection(("127.0.0.1", s.port))
                sock.sendall(request)
                sock.setblocking(False)
                received[sock] = b""
                sel.register(sock, selectors.EVENT_READ)
            threads = 0
            deadline = time.time() + 120
            open_streams = len(received)
            while open_streams and time.time() < deadline:
                for key, _ in sel.select(timeout=1):
                    chunk = key.fileobj.recv(65536)
                    received[key.fileobj] += chunk
                    if not chunk or b"data: [DONE]" in received[key.fileobj]:
                        sel.unregister(key.fileobj)
                        open_streams -= 1
                with open("/proc/%d/status" % s.proc.pid) as f:
                    threads = max(threads, int(re.search(r"Threads:\s+(\d+)", f.read()).group(1)))
            self.assertEqual(open_streams, 0)
            for sock, data in received.items():
                text = ""
                for line in data.split(b"\n"):
                    line = line.strip()
                    if line.startswith(b"data: {"):
                        text += json.loads(line[6:])["choices"][0]["text"]
                self.assertEqual(text, want)
                sock.close()
            self.assertLessEqual(threads, 12)  # 4 I/O threads, 4 workers, the engine, the loader and main, not 512
            self.assertEqual(s.request("GET", "/health")[0], 200)
        finally:
            self.assertEqual(s.stop(), 0, "".join(s.log[-40:]))

    def test_kv_pressure_preempts_without_changing_answers(self):
        # 768 bytes a token (3 layers x K, V x 2 heads x 16 x f32): about 90 tokens of cache for 12 x 48.
        s = Server("--max-context", "64", "--kv-cache-gb", "0.00007")
        try:
            prompts = ["the thing %d" % i for i in range(12)]
            solo = [completion(s, p, 40) for p in prompts]
            with ThreadPoolExecutor(12) as pool:
                got = list(pool.map(lambda p: completion(s, p, 40), prompts))
            self.assertEqual(got, solo)
            self.assertGreater(s.metrics()["autoglm:num_preemptions_total"], 0)
        finally:
            self.assertEqual(s.stop(), 0, "".join(s.log[-40:]))

    def test_sigterm_finishes_in_flight_requests(self):
        s = Server()
        result = {}

        def slow():
            result["r"] = s.post("/v1/completions", {"model": NAME, "prompt": "the", "max_tokens": 200,
                                                     "ignore_eos": True})

        t = threading.Thread(target=slow)
        t.start()
        deadline = time.time() + 10
        while s.metrics()["autoglm:num_requests_running"] < 1 and time.time() < deadline:
            time.sleep(0.005)
        self.assertEqual(s.stop(), 0, "".join(s.log))
        t.join()
        status, body = result["r"]
        self.assertEqual(status, 200)
        self.assertEqual(body["usage"]["completion_tokens"], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
