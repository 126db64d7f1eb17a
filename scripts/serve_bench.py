#!/usr/bin/env python3
"""Serving benchmark at equal KV memory: h2okv serve with full caches, h2okv serve with H2O at 20 %, and
llama-server with its slots sized to the same KV memory, each under N concurrent streaming clients.

Usage:
  LLAMA_CPP_DIR=/path/to/llama.cpp/build scripts/serve_bench.py --model /tmp/m/smollm-q8_0.gguf \\
      [--clients 32] [--prompt-tokens 128] [--max-tokens 896] [--contexts 4] [--threads N] \\
      [--h2okv build/release/tools/h2okv/h2okv] [--out results/serve_MODEL.jsonl] [--render docs/RESULTS.md]
  scripts/serve_bench.py --from results/serve_MODEL.jsonl --render docs/RESULTS.md   (re-render only)

Every client sends one streaming /v1/completions request at the same moment: a prompt of P random token ids
(BOS first; a different prompt per client, the same prompts for every server), max_tokens G, ignore_eos, so
each request generates exactly G tokens. The KV memory is what `--contexts` full contexts of P + G tokens
take: h2okv's pool (--kv-memory) is that many times the footprint h2okv reports for one full-cache request
(K/V in f16 plus its slot tables), llama-server gets `-np CONTEXTS -c CONTEXTS*(P+G)` (one slot per context,
K/V in f16; its K/V bytes equal h2okv's, without the tables). Measured per system: completion tokens per
second over the whole run (first request sent to last token received), time to first token and the gaps
between streamed chunks (inter-token latency) at p50 and p99 over all requests, and the most sequences
generating at once (from the clients' timestamps; h2okv also reports the most its steps carried).

llama-server is skipped, with a note, when LLAMA_CPP_DIR is unset or holds no bin/llama-server (or
build/bin/llama-server); h2okv neither ships nor builds llama.cpp. One JSON line per system goes to --out;
--render rewrites the "Serving at equal KV memory" section of RESULTS.md with scripts/gen_results.py's
renderer (`make results` renders the same section from results/serve_*.jsonl).
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def cpu_model():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
            flags = pathlib.Path("/proc/cpuinfo").read_text()
            isa = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "no AVX2"
            return f"{name}, {os.cpu_count()} cores, {isa}"
    return "unknown CPU"


def percentile(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Process:
    """A server process; `ready` is a regex whose match in the log means it listens."""

    def __init__(self, cmd, ready, port=None):
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     errors="replace")
        self.log, self.port = [], port
        ok = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(ready, line)
                if m:
                    if m.groups():
                        self.port = int(m.group(1))
                    ok.set()
            ok.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ok.wait(600) or self.proc.poll() is not None:
            self.proc.kill()
            raise RuntimeError(f"{cmd[0]} did not start:\n" + "\n".join(self.log[-30:]))

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def stream_request(port, path, body, out):
    """One streaming completion; fills out with its timestamps, chunk times and token count."""
    out["sent"] = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    try:
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            out["error"] = f"{r.status}: {r.read()[:200]!r}"
            return
        chunks, tokens = [], None
        while True:
            line = r.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            data = line[len(b"data: "):].strip()
            if data == b"[DONE]":
                break
            j = json.loads(data)
            if "error" in j:
                # llama-server may end a complete stream with an error event (its output parser refusing a
                # random-weight model's text); the tokens streamed before it count, the error is recorded.
                out["end_error"] = str(j["error"])
                break
            # OpenAI's chunks, or llama-server's own (/completion: "content", "tokens_predicted").
            text = "".join(ch.get("text", "") for ch in j.get("choices", [])) + j.get("content", "")
            if text:
                chunks.append(time.perf_counter())
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            if j.get("stop") and "tokens_predicted" in j:
                tokens = j["tokens_predicted"]
        out["end"] = time.perf_counter()
        out["chunks"] = chunks
        out["tokens"] = tokens if tokens is not None else len(chunks)  # one token per event when not told
    finally:
        c.close()


# llama-server's output parser fails a stream whose text starts inside a UTF-8 character (a random-weight
# model's byte tokens), so it is not offered the byte tokens 0x80-0xFF (ids 131-258 of `gguf synth`'s
# vocabulary: <unk>, <s>, </s>, then the 256 bytes); its sampler then skips those 128 ids.
LLAMA_BANNED = [[i, False] for i in range(3 + 0x80, 3 + 0x100)]


def run_clients(port, prompts, max_tokens, native_llama=False):
    """Every prompt at once, one client each. llama-server is asked through its own /completion: its
    OpenAI layer refuses some outputs of a random-weight model ("does not match the expected Content-only
    format"), which its own endpoint streams as they are."""
    results = [dict() for _ in prompts]
    barrier = threading.Barrier(len(prompts))

    def client(i):
        body = {"prompt": prompts[i], "temperature": 0, "ignore_eos": True, "stream": True}
        if native_llama:
            body.update(n_predict=max_tokens, cache_prompt=False, logit_bias=LLAMA_BANNED)
            path = "/completion"
        else:
            body["max_tokens"] = max_tokens
            path = "/v1/completions"
        barrier.wait()
        stream_request(port, path, body, results[i])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def summarise(results, max_tokens):
    failed = [r for r in results if "error" in r or not r.get("chunks") or r["tokens"] < max_tokens]
    ok = [r for r in results if r not in failed]
    start = min(r["sent"] for r in results)
    end = max(r["end"] for r in ok) if ok else start
    tokens = sum(r["tokens"] for r in ok)
    ttft = [r["chunks"][0] - r["sent"] for r in ok]
    itl = [b - a for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])]
    # The most requests between their first and last token at one moment.
    events = sorted([(r["chunks"][0], 1) for r in ok] + [(r["chunks"][-1], -1) for r in ok])
    running = concurrent = 0
    for _, d in events:
        running += d
        concurrent = max(concurrent, running)
    return dict(requests=len(results), failed=len(failed),
                errors=[r.get("error") or f"{r.get('tokens')} tokens" for r in failed][:3],
                end_errors=sum(1 for r in results if "end_error" in r),
                completion_tokens=tokens, wall_seconds=end - start, tokens_per_second=tokens / (end - start),
                ttft_p50_ms=percentile(ttft, 50) * 1e3, ttft_p99_ms=percentile(ttft, 99) * 1e3,
                itl_p50_ms=percentile(itl, 50) * 1e3, itl_p99_ms=percentile(itl, 99) * 1e3,
                concurrent=concurrent)


def h2okv_metric(proc, name):
    _, body = proc.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def llama_server_binary():
    d = os.environ.get("LLAMA_CPP_DIR")
    if not d:
        return None, "LLAMA_CPP_DIR is not set"
    for b in (pathlib.Path(d) / "build" / "bin" / "llama-server", pathlib.Path(d) / "bin" / "llama-server"):
        if b.is_file():
            return b, None
    return None, f"no llama-server under {d} (bin/ or build/bin/)"


def llama_version(binary):
    """LLAMA_CPP_COMMIT when set (as scripts/llamacpp/batched.sh reads it), else what --version says."""
    env = os.environ.get("LLAMA_CPP_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
        m = re.search(r"version: (.*)", out.stdout + out.stderr)
        return m.group(1).strip() if m else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--h2okv", default=str(ROOT / "build" / "release" / "tools" / "h2okv" / "h2okv"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=896)
    ap.add_argument("--contexts", type=int, default=4, help="full contexts of P + G tokens the KV memory holds")
    ap.add_argument("--budget", default="0.2", help="the H2O budget (a fraction of P + G)")
    ap.add_argument("--prefill-chunk", type=int, default=16,
                    help="h2okv H2O's prefill chunk: its cache holds budget + chunk slots")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--systems", default="full,h2o,llama-server")
    ap.add_argument("--out", default=None, help="default: results/serve_<model file name>.jsonl")
    ap.add_argument("--render", default=None, help="RESULTS.md to rewrite the serving section of")
    ap.add_argument("--from", dest="from_file", default=None,
                    help="measure nothing: render --render from this JSONL of an earlier run")
    a = ap.parse_args()
    if a.from_file:
        render(pathlib.Path(a.from_file), [json.loads(l) for l in open(a.from_file)], a.render)
        return 0
    systems = a.systems.split(",")
    P, G, N = a.prompt_tokens, a.max_tokens, a.clients
    cpu = cpu_model()
    common = dict(model=os.path.basename(a.model), clients=N, prompt_tokens=P, max_tokens=G, contexts=a.contexts,
                  threads=a.threads, cpu=cpu)
    print(f"serve_bench: {cpu}; {N} clients, P={P}, G={G}, KV memory of {a.contexts} full contexts", flush=True)

    h2okv_base = [a.h2okv, "serve", "-m", a.model, "--port", "0", "-t", str(a.threads), "--queue", str(N)]
    ready = r"listening on http://127\.0\.0\.1:(\d+)"

    # One full-cache request alone: its footprint sizes the pool, and it warms the page cache.
    probe = Process(h2okv_base + ["--kv-memory", "16GiB", "--parallel", "1"], ready)
    _, body = probe.get("/v1/models")
    n_vocab = json.loads(body)["data"][0]["meta"]["n_vocab"]
    rng = random.Random(a.seed)
    prompts = [[1] + [rng.randrange(3, n_vocab) for _ in range(P - 1)] for _ in range(N)]
    c = http.client.HTTPConnection("127.0.0.1", probe.port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": prompts[0], "max_tokens": G, "temperature": 0,
                                                           "ignore_eos": True}).encode(),
              headers={"Content-Type": "application/json"})
    solo = json.loads(c.getresponse().read())
    probe.stop()
    full_footprint = solo["kv_cache"]["footprint"]
    kv_memory = a.contexts * full_footprint
    solo_tps = solo["timings"]["decode_tokens_per_second"]
    print(f"serve_bench: one full request: {full_footprint} bytes of KV, {solo_tps:.1f} tokens/s alone; "
          f"KV memory {kv_memory} bytes", flush=True)

    rows = []
    for system in systems:
        if system in ("full", "h2o"):
            flags = ["--kv-memory", str(kv_memory), "--parallel", str(N)]
            if system == "h2o":
                flags += ["--kv-policy", "h2o", "--kv-budget", a.budget, "--kv-prefill-chunk", str(a.prefill_chunk)]
            proc = Process(h2okv_base + flags, ready)
            label = "h2okv full" if system == "full" else f"h2okv h2o {a.budget}"
            extra = {}
        else:
            binary, why = llama_server_binary()
            if binary is None:
                print(f"serve_bench: llama-server skipped: {why}", flush=True)
                continue
            port = 18000 + rng.randrange(20000)
            proc = Process([str(binary), "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-t",
                            str(a.threads), "-np", str(a.contexts), "-c", str(a.contexts * (P + G)),
                            "--no-webui", "--cache-ram", "0"], r"listening on http://127\.0\.0\.1:(\d+)",
                           port=port)
            label = "llama-server"
            extra = {"llama_cpp_version": llama_version(binary),
                     "llama_server_flags": f"-np {a.contexts} -c {a.contexts * (P + G)}"}
        # A short warm-up request, then every client at once.
        native = system == "llama-server"
        run_clients(proc.port, prompts[:1], 8, native)
        results = run_clients(proc.port, prompts, G, native)
        row = dict(common, system=system, label=label, kv_memory=kv_memory, full_footprint=full_footprint,
                   **summarise(results, G), **extra)
        if system != "llama-server":
            row["server_max_active"] = h2okv_metric(proc, "h2okv_sequences_active_max")
            row["pool_peak"] = h2okv_metric(proc, "h2okv_kv_pool_peak_bytes")
        rc = proc.stop()
        row["exit_status"] = rc
        rows.append(row)
        print(f"serve_bench: {label}: {row['tokens_per_second']:.1f} tokens/s, {row['concurrent']} at once, "
              f"TTFT p50 {row['ttft_p50_ms']:.0f} ms p99 {row['ttft_p99_ms']:.0f} ms, ITL p50 "
              f"{row['itl_p50_ms']:.1f} ms p99 {row['itl_p99_ms']:.1f} ms, {row['failed']} failed, "
              f"{row['end_errors']} ended by an error event", flush=True)

    out = pathlib.Path(a.out or ROOT / "results" / f"serve_{pathlib.Path(a.model).stem}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"serve_bench: wrote {out}")
    if a.render:
        render(out, rows, a.render)
    return 1 if any(r["failed"] for r in rows) else 0


def render(path, rows, doc):
    """The serving section of `doc`, rewritten in place with gen_results.py's renderer."""
    import gen_results
    lines = []
    gen_results.serve_section(path.stem[len("serve_"):] if path.stem.startswith("serve_") else path.stem, rows,
                              lines)
    gen_results.replace_section(doc, gen_results.SERVE_HEADING, gen_results.SERVE_INTRO + lines,
                                before="## Side by side with llama.cpp")
    print(f"serve_bench: rewrote the serving section of {doc}")


if __name__ == "__main__":
    sys.exit(main())
