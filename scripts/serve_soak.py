#!/usr/bin/env python3
"""A bounded soak of `h2okv serve`: mixed load for a few minutes, then a graceful stop.

Usage: serve_soak.py H2OKV_BINARY [--seconds 180] [--clients 12] [--model models/stories260K.gguf]

The load: completions and chat, streamed and not, every policy, random lengths and sampling, clients that
leave mid-stream, requests that must be refused (400), all at once. It fails (exit 1) when
- any request ends otherwise than expected (a valid one not 200, a refused one not 400, a stream without
  [DONE]), or a greedy request's text differs from the first time the same request ran;
- the resident set grows after warm-up: the largest RSS of the last quarter of the run may exceed the largest
  of the second quarter by at most 5 % + 8 MiB;
- after the load the pool is not empty, or SIGTERM does not end the server with status 0.
One line of JSON with the figures goes to stdout. Under AddressSanitizer the RSS check does not apply (its
quarantine keeps freed memory resident); LeakSanitizer's verdict is the exit status.
"""
import argparse
import http.client
import json
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROMPTS = ["Once upon a time", "The little dog", "Tom and Sue went", "One day, a girl", "The sun was", "Lily had a"]
POLICIES = [None, {"policy": "full"}, {"policy": "h2o", "budget": 0.2}, {"policy": "h2o", "budget": 24, "recent": 8},
            {"policy": "window", "budget": 32}, {"policy": "streaming", "budget": 20, "sinks": 4},
            {"policy": "tova", "budget": 0.3}, {"policy": "h2o", "budget": 0.25, "decay": 0.98, "granularity": "layer"}]
BAD = [b'{"prompt": 5}', b'{"prompt": "a", "max_tokens": -1}', b'{"prompt": "a", "kv_cache": {"policy": "lru"}}',
       b'{"prompt": "a", "kv_cache": {"policy": "h2o", "budget": 4, "recent": 3, "sinks": 1}}', b'{"prompt": "\xff"}',
       b"{", b'{"messages": []}']


def rss_bytes(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Soak:
    def __init__(self, port, seconds, clients, seed):
        self.port, self.seconds, self.clients = port, seconds, clients
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts = {"ok": 0, "refused": 0, "disconnected": 0, "streamed": 0, "tokens": 0}
        self.failures = []
        self.greedy = {}  # request key -> first text

    def fail(self, what):
        with self.lock:
            self.failures.append(what)

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def post(self, path, body, timeout=300):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def one(self, rng):
        kind = rng.random()
        if kind < 0.07:
            body = rng.choice(BAD)
            status, raw = self.post(rng.choice(["/v1/completions", "/v1/chat/completions"]), body)
            if status != 400 or "error" not in json.loads(raw):
                self.fail(f"refusal {body!r}: {status} {raw[:200]!r}")
            self.count("refused")
            return
        chat = rng.random() < 0.3
        req = {"max_tokens": rng.randint(8, 200)}
        if chat:
            req["messages"] = [{"role": "user", "content": rng.choice(PROMPTS)}]
        else:
            req["prompt"] = rng.choice(PROMPTS)
        kv = rng.choice(POLICIES)
        if kv is not None:
            req["kv_cache"] = kv
        greedy = rng.random() < 0.5
        if greedy:
            req["temperature"] = 0
        else:
            req.update(temperature=rng.choice([0.5, 0.8, 1.0]), top_k=rng.choice([0, 20]), seed=rng.randint(0, 99))
        path = "/v1/chat/completions" if chat else "/v1/completions"
        if kind < 0.12:
            self.disconnect(path, req, rng)
            return
        stream = rng.random() < 0.5
        req["stream"] = stream
        status, raw = self.post(path, json.dumps(req).encode())
        if status != 200:
            self.fail(f"{path} {req}: {status} {raw[:200]!r}")
            return
        if stream:
            text, done, tokens = "", False, 0
            for block in raw.decode().split("\n\n"):
                if not block.startswith("data: "):
                    continue
                data = block[len("data: "):]
                if data == "[DONE]":
                    done = True
                    continue
                j = json.loads(data)
                if "error" in j:
                    self.fail(f"stream error {j}")
                    return
                for c in j.get("choices", []):
                    text += c.get("delta", {}).get("content", "") if chat else c.get("text", "")
                if "usage" in j:
                    tokens = j["usage"]["completion_tokens"]
            if not done:
                self.fail(f"stream without [DONE]: {req}")
            self.count("streamed")
        else:
            j = json.loads(raw)
            text = j["choices"][0]["message"]["content"] if chat else j["choices"][0]["text"]
            tokens = j["usage"]["completion_tokens"]
        self.count("ok")
        self.count("tokens", tokens)
        if greedy:
            key = json.dumps({k: v for k, v in req.items() if k != "stream"}, sort_keys=True)
            with self.lock:
                first = self.greedy.setdefault(key, text)
            if first != text:
                self.fail(f"greedy text changed under load: {key}")

    def disconnect(self, path, req, rng):
        req = dict(req, stream=True, max_tokens=100000, ignore_eos=True,
                   kv_cache={"policy": "window", "budget": 32})
        body = json.dumps(req).encode()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        try:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            seen, want = b"", rng.randint(1, 5)
            while seen.count(b"data: ") < want:
                chunk = s.recv(4096)
                if not chunk:
                    self.fail(f"a stream ended before the client left: {seen[:200]!r}")
                    return
                seen += chunk
        finally:
            s.close()
        self.count("disconnected")

    def client(self, i, deadline):
        rng = random.Random(self.rng.random())
        while time.time() < deadline:
            try:
                self.one(rng)
            except Exception as e:  # a failed exchange is a finding, not a crash of the soak
                self.fail(f"client {i}: {type(e).__name__}: {e}")


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    c.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("h2okv")
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--model", default=str(ROOT / "models" / "stories260K.gguf"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    proc = subprocess.Popen([a.h2okv, "serve", "-m", a.model, "--port", "0", "-t", "1", "--parallel", "8",
                             "--kv-memory", "48MiB", "--queue", "64", "--chat-template", "chatml"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    port, log = None, []
    for line in proc.stderr:
        log.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("serve_soak: the server did not start:\n" + "".join(log))
    drain = threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True)
    drain.start()

    soak = Soak(port, a.seconds, a.clients, a.seed)
    start = time.time()
    deadline = start + a.seconds
    threads = [threading.Thread(target=soak.client, args=(i, deadline)) for i in range(a.clients)]
    for t in threads:
        t.start()
    samples = []  # (seconds since start, rss)
    while any(t.is_alive() for t in threads):
        samples.append((time.time() - start, rss_bytes(proc.pid)))
        time.sleep(1.0)
    for t in threads:
        t.join()

    # Cancellations land at the engine's next step.
    settle = time.time() + 30
    while time.time() < settle and metrics(port).get("h2okv_requests_in_flight") != 0:
        time.sleep(0.1)
    m = metrics(port)
    problems = list(soak.failures)
    cancelled = m.get('h2okv_requests_cancelled_total{cause="disconnect"}')
    if cancelled != soak.counts["disconnected"]:
        problems.append(f"{soak.counts['disconnected']} clients left mid-stream but the server cancelled {cancelled}")
    for name in ("h2okv_kv_pool_used_bytes", "h2okv_sequences_active", "h2okv_requests_in_flight"):
        if m.get(name) != 0:
            problems.append(f"after the load {name} = {m.get(name)}")
    q = a.seconds / 4
    second = [r for t, r in samples if q <= t < 2 * q]
    last = [r for t, r in samples if t >= 3 * q]
    rss_warm, rss_end = max(second, default=0), max(last, default=0)
    if not second or not last:
        problems.append("too few RSS samples")
    elif rss_end > rss_warm * 1.05 + 8 * 2**20:
        problems.append(f"RSS grew after warm-up: {rss_warm / 2**20:.1f} MiB -> {rss_end / 2**20:.1f} MiB")
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(120)
    if rc != 0:
        problems.append(f"SIGTERM: exit status {rc}")

    summary = dict(seconds=round(time.time() - start, 1), clients=a.clients, **soak.counts,
                   failures=len(problems), rss_after_warmup_mib=round(rss_warm / 2**20, 1),
                   rss_end_mib=round(rss_end / 2**20, 1),
                   disconnects_cancelled=cancelled,
                   max_active=m.get("h2okv_sequences_active_max"), exit_status=rc)
    print(json.dumps(summary))
    for p in problems[:20]:
        print("serve_soak: FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
