#!/usr/bin/env python3
"""`h2okv serve` as a deployment would meet it: the real binary on a free loopback port, talked to with
Python's http.client, raw sockets and curl.

Usage: serve_test.py H2OKV_BINARY [unittest arguments]
       serve_test.py H2OKV_BINARY --table [DOC]   (rewrites the hostile-request table of docs/SERVER.md)

What it checks: greedy completions equal `h2okv generate` for the same prompt and KV settings (per-request
`kv_cache` and server flags alike); SSE chunks concatenate to the same text (http.client and curl); 16
concurrent clients with different policies each get their solo text; a client that disconnects mid-stream
has its sequence freed (seen in /metrics); a table of hostile requests each gets a 4xx JSON error while the
server stays healthy; a full queue answers 503 with Retry-After; a deadline 504; chat completions render
the model's template (from --chat-template or the GGUF); SIGTERM lets a running stream finish and exits 0.
"""
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "stories260K.gguf"
H2OKV = None  # set from argv
PROMPTS = ["Once upon a time", "The little dog", "Tom and Sue went", "One day, a girl", "The sun was"]
TIMEOUT = 120  # seconds any one exchange may take (sanitizer builds are slow)


class Server:
    """A running `h2okv serve --port 0`; its log is collected from stderr."""

    def __init__(self, *args, model=MODEL):
        cmd = [H2OKV, "serve", "-m", str(model), "--port", "0", "-t", "1", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     errors="replace")
        self.log = []
        self.port = None
        listening = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    listening.set()
            listening.set()

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        if not listening.wait(TIMEOUT) or self.port is None:
            self.proc.kill()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.log))

    def conn(self, timeout=TIMEOUT):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None):
        c = self.conn()
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def post(self, path, obj):
        status, headers, body = self.request("POST", path, obj)
        return status, headers, json.loads(body) if headers.get("Content-Type") == "application/json" else body

    def stream(self, path, obj):
        """The events of a streamed response: parsed JSON objects, then the string '[DONE]'."""
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(obj).encode(), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise AssertionError(f"{r.status}: {r.read()!r}")
            return parse_sse(r.read().decode())
        finally:
            c.close()

    def metrics(self):
        status, _, body = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_metric(self, name, pred, seconds=60):
        deadline = time.time() + seconds
        while time.time() < deadline:
            v = self.metrics().get(name)
            if v is not None and pred(v):
                return v
            time.sleep(0.05)
        raise AssertionError(f"{name} never satisfied the condition; last {self.metrics().get(name)}")

    def stop(self, sig=signal.SIGTERM, timeout=TIMEOUT):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self.reader.join(10)
        self.proc.stderr.close()
        return rc


def parse_sse(text):
    events = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream_text(events, chat=False):
    out = ""
    for e in events:
        if e == "[DONE]" or not e.get("choices"):
            continue
        c = e["choices"][0]
        out += c.get("delta", {}).get("content", "") if chat else c.get("text", "")
    return out


def kv_flags(kv):
    """The CLI flags of a kv_cache object."""
    flags = []
    for key, flag in (("policy", "--kv-policy"), ("budget", "--kv-budget"), ("recent", "--kv-recent"),
                      ("sinks", "--kv-sinks"), ("decay", "--kv-decay"), ("granularity", "--kv-granularity")):
        if key in kv:
            flags += [flag, str(kv[key])]
    return flags


def generate(prompt, n, flags=(), extra=()):
    """What `h2okv generate` writes after the prompt (greedy)."""
    out = subprocess.run([H2OKV, "generate", "-m", str(MODEL), "-t", "1", "-p", prompt, "-n", str(n), *flags, *extra],
                         capture_output=True, check=True).stdout.decode("utf-8", errors="replace")
    assert out.startswith(prompt) and out.endswith("\n"), out
    return out[len(prompt):-1]


KV_CASES = [
    {"policy": "full"},
    {"policy": "h2o", "budget": 16, "recent": 4},
    {"policy": "h2o", "budget": 0.25, "decay": 0.98, "granularity": "layer"},
    {"policy": "window", "budget": 24},
    {"policy": "streaming", "budget": 20, "sinks": 4},
    {"policy": "tova", "budget": 0.3},
    {"policy": "h2o", "budget": 12, "granularity": "model"},
    {"policy": "h2o", "budget": 20, "recent": 10, "sinks": 2},
]


class Completions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--parallel", "16", "--kv-memory", "64MiB", "--chat-template", "chatml")

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        assert rc == 0, f"exit status {rc}\n" + "\n".join(cls.srv.log[-20:])

    def complete(self, prompt, n, kv=None, **extra):
        body = {"prompt": prompt, "max_tokens": n, "temperature": 0, **extra}
        if kv is not None:
            body["kv_cache"] = kv
        status, _, j = self.srv.post("/v1/completions", body)
        self.assertEqual(status, 200, j)
        return j

    def test_greedy_equals_generate(self):
        for i, kv in enumerate(KV_CASES):
            prompt, n = PROMPTS[i % len(PROMPTS)], 40 + 7 * i
            with self.subTest(kv=kv):
                j = self.complete(prompt, n, kv)
                self.assertEqual(j["choices"][0]["text"], generate(prompt, n, kv_flags(kv)))
                self.assertEqual(j["usage"]["completion_tokens"] + j["usage"]["prompt_tokens"],
                                 j["usage"]["total_tokens"])
                if kv["policy"] != "full":
                    self.assertGreater(j["kv_cache"]["evictions"], 0, j["kv_cache"])

    def test_sse_chunks_concatenate_to_the_same_text(self):
        kv = {"policy": "h2o", "budget": 16, "recent": 4}
        whole = self.complete("Once upon a time", 80, kv)
        events = self.srv.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0,
                                                     "kv_cache": kv, "stream": True,
                                                     "stream_options": {"include_usage": True}})
        self.assertEqual(events[-1], "[DONE]")
        self.assertGreater(len(events), 3)
        self.assertEqual(stream_text(events), whole["choices"][0]["text"])
        final = events[-3]
        self.assertEqual(final["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"])
        self.assertEqual(final["usage"], whole["usage"])
        self.assertEqual(final["kv_cache"]["evictions"], whole["kv_cache"]["evictions"])
        self.assertEqual(events[-2]["choices"], [])  # include_usage's chunk
        self.assertEqual(events[-2]["usage"], whole["usage"])

    def test_curl_stream_and_completion(self):
        curl = shutil.which("curl")
        if curl is None:
            self.skipTest("curl is not installed (scripts/install-deps.sh installs it)")
        url = f"http://127.0.0.1:{self.srv.port}/v1/completions"
        body = json.dumps({"prompt": "The little dog", "max_tokens": 50, "temperature": 0})
        whole = json.loads(subprocess.run([curl, "-sS", url, "-d", body], capture_output=True, check=True,
                                          timeout=TIMEOUT).stdout)
        streamed = subprocess.run([curl, "-sSN", url, "-H", "Content-Type: application/json", "-d",
                                   body[:-1] + ', "stream": true}'], capture_output=True, check=True,
                                  timeout=TIMEOUT).stdout.decode()
        self.assertEqual(stream_text(parse_sse(streamed)), whole["choices"][0]["text"])
        self.assertEqual(whole["choices"][0]["text"], generate("The little dog", 50))

    def test_stop_string(self):
        full = generate("Once upon a time", 60)
        cut = full.index(".")
        j = self.complete("Once upon a time", 60, stop=["."])
        self.assertEqual(j["choices"][0]["text"], full[:cut])
        self.assertEqual(j["choices"][0]["finish_reason"], "stop")
        events = self.srv.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0,
                                                     "stop": ["."], "stream": True})
        self.assertEqual(stream_text(events), full[:cut])

    def test_sampling_is_seeded(self):
        body = {"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0.9, "top_k": 40, "top_p": 0.95,
                "seed": 123}
        a = self.srv.post("/v1/completions", body)[2]
        b = self.srv.post("/v1/completions", body)[2]
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])
        self.assertEqual(a["seed"], 123)
        self.assertEqual(a["choices"][0]["text"],
                         generate("Once upon a time", 30, extra=["--temp", "0.9", "--top-k", "40", "--top-p", "0.95",
                                                                 "--seed", "123"]))

    def test_sixteen_concurrent_clients_get_their_solo_text(self):
        jobs = []
        for i in range(16):
            kv = dict(KV_CASES[i % len(KV_CASES)])
            jobs.append({"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 300 + 10 * i, "temperature": 0,
                         "kv_cache": kv, "stream": i % 2 == 1, "ignore_eos": True})
        solo = [self.complete(j["prompt"], j["max_tokens"], j["kv_cache"], ignore_eos=True)["choices"][0]["text"]
                for j in jobs]
        for j, text in list(zip(jobs, solo))[:4]:
            self.assertEqual(text, generate(j["prompt"], j["max_tokens"], kv_flags(j["kv_cache"]), ["--ignore-eos"]))
        got = [None] * len(jobs)
        start = threading.Barrier(len(jobs))

        def client(i):
            start.wait()
            if jobs[i]["stream"]:
                got[i] = stream_text(self.srv.stream("/v1/completions", jobs[i]))
            else:
                got[i] = self.srv.post("/v1/completions", jobs[i])[2]["choices"][0]["text"]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        for i in range(len(jobs)):
            self.assertEqual(got[i], solo[i], f"client {i}: {jobs[i]}")
        self.assertGreaterEqual(self.srv.metrics()["h2okv_sequences_active_max"], 8, "the clients shared steps")
        self.srv.wait_metric("h2okv_kv_pool_used_bytes", lambda v: v == 0)  # published after the freeing step

    def test_disconnect_mid_stream_frees_the_sequence(self):
        before = self.srv.metrics()['h2okv_requests_cancelled_total{cause="disconnect"}']
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000000, "ignore_eos": True, "stream": True,
                           "kv_cache": {"policy": "window", "budget": 32}}).encode()
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=TIMEOUT)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        seen = b""
        while seen.count(b"data: ") < 3:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "the stream ended early")
            seen += chunk
        self.assertGreaterEqual(self.srv.metrics()["h2okv_sequences_active"], 1)
        s.close()
        self.srv.wait_metric('h2okv_requests_cancelled_total{cause="disconnect"}', lambda v: v == before + 1)
        self.srv.wait_metric("h2okv_sequences_active", lambda v: v == 0)
        self.srv.wait_metric("h2okv_kv_pool_used_bytes", lambda v: v == 0)
        self.assertEqual(self.srv.request("GET", "/health")[0], 200)

    def test_chat_renders_the_template(self):
        messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "A cat"}]
        rendered = "<|im_start|>system\nYou tell stories.<|im_end|>\n<|im_start|>user\nA cat<|im_end|>\n" \
                   "<|im_start|>assistant\n"
        status, _, j = self.srv.post("/v1/chat/completions", {"messages": messages, "max_tokens": 40,
                                                              "temperature": 0})
        self.assertEqual(status, 200, j)
        self.assertEqual(j["object"], "chat.completion")
        self.assertEqual(j["choices"][0]["message"]["role"], "assistant")
        self.assertEqual(j["choices"][0]["message"]["content"], generate(rendered, 40, extra=["--special"]))
        events = self.srv.stream("/v1/chat/completions", {"messages": messages, "max_tokens": 40, "temperature": 0,
                                                          "stream": True})
        self.assertEqual(events[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})
        self.assertEqual(stream_text(events, chat=True), j["choices"][0]["message"]["content"])

    def test_models_and_health(self):
        status, _, j = self.srv.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        j = json.loads(j)
        self.assertEqual(j["data"][0]["id"], "stories260K")
        self.assertEqual(j["data"][0]["meta"]["chat_template"], "chatml")
        status, _, body = self.srv.request("GET", "/health")
        self.assertEqual((status, json.loads(body)["status"]), (200, "ok"))

    def test_one_log_line_per_request(self):
        self.complete("The sun was", 5, {"policy": "h2o", "budget": 4, "recent": 2})
        deadline = time.time() + 10
        while time.time() < deadline and not any("completion_tokens=5 policy=h2o:budget=4" in l
                                                  for l in self.srv.log):
            time.sleep(0.05)
        line = [l for l in self.srv.log if "policy=h2o:budget=4" in l][-1]
        for field in ("request id=", "endpoint=completions", "status=200", "prompt_tokens=", "completion_tokens=5",
                      "kv_bytes=", "evictions=", "queued_ms=", "prefill_ms=", "decode_ms=", "total_ms="):
            self.assertIn(field, line)


class ServerFlags(unittest.TestCase):
    """Requests without kv_cache take the server's KV flags."""

    def test_server_kv_flags_are_the_default(self):
        kv = {"policy": "h2o", "budget": 0.2, "recent": 3}
        srv = Server("--kv-memory", "16MiB", *kv_flags(kv))
        try:
            status, _, j = srv.post("/v1/completions", {"prompt": "Tom and Sue went", "max_tokens": 70,
                                                        "temperature": 0})
            self.assertEqual(status, 200, j)
            self.assertEqual(j["choices"][0]["text"], generate("Tom and Sue went", 70, kv_flags(kv)))
            self.assertTrue(j["kv_cache"]["policy"].startswith("h2o:budget=15,recent=3"), j["kv_cache"])
            # kv_cache fields override the flags one by one.
            status, _, j = srv.post("/v1/completions", {"prompt": "Tom and Sue went", "max_tokens": 70,
                                                        "temperature": 0, "kv_cache": {"budget": 30}})
            self.assertEqual(j["choices"][0]["text"],
                             generate("Tom and Sue went", 70, ["--kv-policy", "h2o", "--kv-budget", "30",
                                                               "--kv-recent", "3"]))
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_bad_flags_are_refused_at_startup(self):
        r = subprocess.run([H2OKV, "serve", "--port", "0", "--kv-policy", "h2o"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("budget", r.stderr)
        r = subprocess.run([H2OKV, "serve", "--port", "0", "--kv-memory", "0"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--kv-memory 0", r.stderr)
        self.assertIn("bounded KV memory pool", r.stderr)
        r = subprocess.run([H2OKV, "serve", "--port", "0", "--chat-template", "alpaca"], capture_output=True,
                           text=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown chat template 'alpaca'", r.stderr)

    def test_api_key(self):
        srv = Server("--api-key", "s3cret")
        try:
            self.assertEqual(srv.request("GET", "/v1/models")[0], 401)
            self.assertEqual(srv.request("GET", "/v1/models", headers={"Authorization": "Bearer nope"})[0], 401)
            self.assertEqual(srv.request("GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})[0], 200)
            self.assertEqual(srv.request("GET", "/health")[0], 200)
        finally:
            self.assertEqual(srv.stop(), 0)


def gguf_with_chat_template(src, dst, template):
    """Copies a GGUF file with tokenizer.chat_template added (metadata re-laid, tensor data unchanged)."""
    buf = pathlib.Path(src).read_bytes()
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    pos = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    alignment = 32

    def skip_value(pos, vtype):
        if vtype in sizes:
            return pos + sizes[vtype]
        if vtype == 8:
            (n,) = struct.unpack_from("<Q", buf, pos)
            return pos + 8 + n
        etype, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        for _ in range(n):
            pos = skip_value(pos, etype)
        return pos

    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8:pos + 8 + n].decode()
        pos += 8 + n
        (vtype,) = struct.unpack_from("<I", buf, pos)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, pos + 4)
        pos = skip_value(pos + 4, vtype)
    kv_end = pos
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + n
        (n_dims,) = struct.unpack_from("<I", buf, pos)
        pos += 4 + 8 * n_dims + 4 + 8
    infos_end = pos
    data_start = (infos_end + alignment - 1) // alignment * alignment

    def string(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv + 1) + buf[24:kv_end]
    head += string("tokenizer.chat_template") + struct.pack("<I", 8) + string(template) + buf[kv_end:infos_end]
    head += b"\0" * ((-len(head)) % alignment)
    pathlib.Path(dst).write_bytes(head + buf[data_start:])


class ChatTemplates(unittest.TestCase):
    def test_template_from_the_model_file(self):
        template = ("{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
                    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}")
        with tempfile.TemporaryDirectory() as d:
            path = pathlib.Path(d) / "stories-llama3.gguf"
            gguf_with_chat_template(MODEL, path, template)
            srv = Server(model=path)
            try:
                status, _, j = srv.request("GET", "/v1/models")
                self.assertEqual(json.loads(j)["data"][0]["meta"]["chat_template"], "llama3")
                status, _, j = srv.post("/v1/chat/completions", {
                    "messages": [{"role": "user", "content": "  Hi  "}], "max_tokens": 30, "temperature": 0})
                self.assertEqual(status, 200, j)
                rendered = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" \
                           "<|start_header_id|>assistant<|end_header_id|>\n\n"
                self.assertEqual(j["choices"][0]["message"]["content"], generate(rendered, 30, extra=["--special"]))
            finally:
                self.assertEqual(srv.stop(), 0)

    def test_no_template_is_a_clear_400(self):
        srv = Server()
        try:
            status, _, j = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
            self.assertEqual(status, 400)
            self.assertEqual(j["error"]["code"], "chat_template_missing")
            self.assertIn("--chat-template NAME", j["error"]["message"])
        finally:
            self.assertEqual(srv.stop(signal.SIGINT), 0)
        self.assertTrue(any("SIGINT" in l for l in srv.log))


def raw_exchange(port, data, half_close=False, pause_after=None, timeout=TIMEOUT):
    """Sends raw bytes (optionally pausing, then going silent) and returns (status, body) of the answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if pause_after is not None:
            time.sleep(pause_after)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        resp = b""
        while b"\r\n\r\n" not in resp:
            chunk = s.recv(65536)
            if not chunk:
                break
            resp += chunk
        head, _, body = resp.partition(b"\r\n\r\n")
        m = re.match(rb"HTTP/1\.1 (\d+)", head)
        length = re.search(rb"(?i)content-length: (\d+)", head)
        if length:
            while len(body) < int(length.group(1)):
                chunk = s.recv(65536)
                if not chunk:
                    break
                body += chunk
            body = body[:int(length.group(1))]
        return (int(m.group(1)) if m else None), body
    finally:
        s.close()


def post_raw(body, path="/v1/completions", extra_headers=b""):
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra_headers +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def hostile_cases():
    """(name, raw request bytes, options) for the table; every one must get a 4xx JSON error."""
    C, CHAT = "/v1/completions", "/v1/chat/completions"
    long_prompt = json.dumps({"prompt": [1] + [300] * 300, "max_tokens": 10}).encode()
    cases = [
        ("empty body", post_raw(b"")),
        ("truncated JSON", post_raw(b'{"prompt": "Once')),
        ("not an object", post_raw(b"[1, 2, 3]")),
        ("JSON null", post_raw(b"null")),
        ("trailing garbage", post_raw(b'{"prompt": "a"} {"x": 1}')),
        ("NaN literal", post_raw(b'{"prompt": "a", "temperature": NaN}')),
        ("invalid UTF-8 in the prompt", post_raw(b'{"prompt": "caf\xc3\x28 \xff\xfe"}')),
        ("lone surrogate escape", post_raw(b'{"prompt": "\\ud800"}')),
        ("1000 nested arrays", post_raw(b"[" * 1000 + b"]" * 1000)),
        ("no prompt", post_raw(b'{"max_tokens": 5}')),
        ("prompt is a number", post_raw(b'{"prompt": 5}')),
        ("prompt is an object", post_raw(b'{"prompt": {"text": "a"}}')),
        ("token id out of the vocabulary", post_raw(b'{"prompt": [1, 99999]}')),
        ("negative token id", post_raw(b'{"prompt": [1, -1]}')),
        ("several prompts", post_raw(b'{"prompt": ["a", "b"]}')),
        ("max_tokens is a string", post_raw(b'{"prompt": "a", "max_tokens": "10"}')),
        ("max_tokens negative", post_raw(b'{"prompt": "a", "max_tokens": -5}')),
        ("max_tokens 1e300", post_raw(b'{"prompt": "a", "max_tokens": 1e300}')),
        ("max_tokens 2^64", post_raw(b'{"prompt": "a", "max_tokens": 18446744073709551616}')),
        ("temperature is a string", post_raw(b'{"prompt": "a", "temperature": "hot"}')),
        ("temperature 1e309", post_raw(b'{"prompt": "a", "temperature": 1e309}')),
        ("temperature negative", post_raw(b'{"prompt": "a", "temperature": -1}')),
        ("top_p 0", post_raw(b'{"prompt": "a", "top_p": 0}')),
        ("top_k 1.5", post_raw(b'{"prompt": "a", "top_k": 1.5}')),
        ("seed negative", post_raw(b'{"prompt": "a", "seed": -1}')),
        ("stop is a number", post_raw(b'{"prompt": "a", "stop": 5}')),
        ("five stop strings", post_raw(b'{"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}')),
        ("stream is a string", post_raw(b'{"prompt": "a", "stream": "yes"}')),
        ("n = 3", post_raw(b'{"prompt": "a", "n": 3}')),
        ("logprobs", post_raw(b'{"prompt": "a", "logprobs": 5}')),
        ("kv_cache is a string", post_raw(b'{"prompt": "a", "kv_cache": "h2o"}')),
        ("unknown policy", post_raw(b'{"prompt": "a", "kv_cache": {"policy": "lru"}}')),
        ("budget 0", post_raw(b'{"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 0}}')),
        ("budget fraction 1.5", post_raw(b'{"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 1.5}}')),
        ("nothing evictable (sinks + recent = budget)",
         post_raw(b'{"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 4, "recent": 3, "sinks": 1}}')),
        ("h2o without a budget", post_raw(b'{"prompt": "a", "kv_cache": {"policy": "h2o"}}')),
        ("decay 2", post_raw(b'{"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 8, "decay": 2}}')),
        ("unknown kv_cache field", post_raw(b'{"prompt": "a", "kv_cache": {"budgets": 8}}')),
        ("prompt longer than the context under full", post_raw(long_prompt)),
        ("cache larger than the pool",
         post_raw(b'{"prompt": "a", "max_tokens": 2000000, "kv_cache": {"policy": "h2o", "budget": 0.5}}')),
        ("messages missing", post_raw(b'{"max_tokens": 5}', CHAT)),
        ("messages empty", post_raw(b'{"messages": []}', CHAT)),
        ("unknown role", post_raw(b'{"messages": [{"role": "wizard", "content": "x"}]}', CHAT)),
        ("content is a number", post_raw(b'{"messages": [{"role": "user", "content": 5}]}', CHAT)),
        ("image content", post_raw(b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', CHAT)),
        ("unknown endpoint", b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
        ("wrong method", b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("body over --max-body", post_raw(json.dumps({"prompt": "a" * 70000}).encode())),
        ("chunked body over --max-body",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
         b"".join(b"%x\r\n%s\r\n" % (4096, b" " * 4096) for _ in range(20)) + b"0\r\n\r\n"),
        ("no Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("malformed chunked encoding",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"),
        ("URI over 8 KiB", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("garbage request line", b"HELLO\r\n\r\n"),
        ("body shorter than Content-Length, then silence",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":", {"slow": True}),
        ("slow client: half the headers, then silence",
         b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le", {"slow": True}),
    ]
    return [(c[0], c[1], c[2] if len(c) > 2 else {}) for c in cases]


class Hostile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("--parallel", "4", "--kv-memory", "32MiB", "-c", "256", "--max-body", "64KiB",
                         "--read-timeout", "1", "--chat-template", "chatml")

    @classmethod
    def tearDownClass(cls):
        assert cls.srv.stop() == 0

    def test_hostile_requests_get_4xx_json_and_the_server_stays_healthy(self):
        cases = hostile_cases()
        self.assertGreaterEqual(len(cases), 30)
        for name, data, opts in cases:
            with self.subTest(name):
                status, body = raw_exchange(self.srv.port, data, pause_after=2.5 if opts.get("slow") else None)
                self.assertIsNotNone(status, f"no answer to {name}")
                self.assertTrue(400 <= status < 500, f"{name}: {status} {body[:200]!r}")
                err = json.loads(body)["error"]
                self.assertIsInstance(err["message"], str)
                self.assertTrue(err["message"])
                self.assertIn(err["type"], ("invalid_request_error", "authentication_error"))
                self.assertEqual(self.srv.request("GET", "/health")[0], 200, f"unhealthy after {name}")
        self.assertIsNone(self.srv.proc.poll())
        # Still serving real work after all of it.
        status, _, j = self.srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 20,
                                                         "temperature": 0})
        self.assertEqual(j["choices"][0]["text"], generate("Once upon a time", 20))


class Limits(unittest.TestCase):
    def test_full_queue_answers_503_with_retry_after(self):
        srv = Server("--parallel", "1", "--queue", "1", "--kv-memory", "16MiB")
        try:
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000000, "ignore_eos": True,
                               "stream": True, "kv_cache": {"policy": "window", "budget": 16}}).encode()
            socks = []
            for _ in range(2):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT)
                s.sendall(post_raw(body))
                socks.append(s)
            srv.wait_metric("h2okv_requests_in_flight", lambda v: v == 2)
            status, headers, raw = srv.request("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3})
            self.assertEqual(status, 503)
            self.assertEqual(headers.get("Retry-After"), "1")
            self.assertEqual(json.loads(raw)["error"]["code"], "queue_full")
            for s in socks:
                s.close()
            srv.wait_metric("h2okv_requests_in_flight", lambda v: v == 0)
            status, _, j = srv.post("/v1/completions", {"prompt": "Hi", "max_tokens": 3})
            self.assertEqual(status, 200)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_deadline_answers_504(self):
        srv = Server("--timeout", "1", "--kv-memory", "16MiB")
        try:
            status, _, j = srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 100000000,
                                                        "ignore_eos": True,
                                                        "kv_cache": {"policy": "window", "budget": 16}})
            self.assertEqual(status, 504, j)
            self.assertEqual(j["error"]["code"], "deadline_exceeded")
            srv.wait_metric("h2okv_kv_pool_used_bytes", lambda v: v == 0)
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_sigterm_finishes_the_running_stream_and_exits_0(self):
        srv = Server("--kv-memory", "16MiB", "--shutdown-grace", "600")
        n = 20000  # long enough to be running when the signal lands
        body = {"prompt": "Once upon a time", "max_tokens": n, "ignore_eos": True, "temperature": 0,
                "stream": True, "kv_cache": {"policy": "window", "budget": 16}}
        expected = generate("Once upon a time", n, kv_flags(body["kv_cache"]), ["--ignore-eos"])
        c = srv.conn()
        c.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first = r.readline()  # the stream is running
        self.assertTrue(first.startswith(b"data: "))
        srv.proc.send_signal(signal.SIGTERM)
        events = parse_sse((first + r.read()).decode())
        c.close()
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(stream_text(events), expected)
        self.assertEqual(events[-2]["choices"][0]["finish_reason"], "length")
        self.assertEqual(srv.stop(), 0)
        self.assertTrue(any("SIGTERM" in l for l in srv.log))
        self.assertTrue(any("shutting down: 1 requests in flight" in l for l in srv.log), srv.log[-5:])
        self.assertTrue(any(l.endswith("stopped") for l in srv.log))


def write_table(doc_path):
    """Replaces the hostile-request table of doc_path (between its serve-table markers) with what the server
    answers now."""
    srv = Server("--parallel", "4", "--kv-memory", "32MiB", "-c", "256", "--max-body", "64KiB", "--read-timeout",
                 "1", "--chat-template", "chatml")
    rows = ["| request | status | error message |", "|---|---|---|"]
    try:
        for name, data, opts in hostile_cases():
            status, body = raw_exchange(srv.port, data, pause_after=2.5 if opts.get("slow") else None)
            msg = json.loads(body)["error"]["message"].replace("|", "\\|").replace("\n", " ")
            rows.append(f"| {name} | {status} | {msg} |")
    finally:
        srv.stop()
    doc = pathlib.Path(doc_path).read_text()
    begin, end = "<!-- serve-table:begin -->\n", "<!-- serve-table:end -->"
    i, j = doc.index(begin) + len(begin), doc.index(end)
    pathlib.Path(doc_path).write_text(doc[:i] + "\n".join(rows) + "\n" + doc[j:])
    print(f"{doc_path}: {len(rows) - 2} rows")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    H2OKV = sys.argv.pop(1)
    if sys.argv[1:2] == ["--table"]:
        write_table(sys.argv[2] if len(sys.argv) > 2 else ROOT / "docs" / "SERVER.md")
    else:
        unittest.main(verbosity=2)
