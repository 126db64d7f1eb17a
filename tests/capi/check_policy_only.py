#!/usr/bin/env python3
"""examples/policy_only's kept sets equal the eviction contract's, replayed from the rows it printed.

Usage: check_policy_only.py POLICY_ONLY [SPEC...]
Runs `policy_only --rows --kv SPEC` for each spec, then replays docs/EVICTION_CONTRACT.md clauses 3-4 over its
row increments (float64, decay then add, per query; after each chunk evict the evictable lowest score, ties
to the lower position) with the resolved budget / recent / sinks / decay it printed, and compares every
chunk's kept set. Replays the score-based policies (h2o, tova) and the position-based window.
"""
import subprocess
import sys


def parse_config(line):
    name, _, rest = line.removeprefix("policy: ").partition(":")
    kv = dict(item.split("=", 1) for item in rest.split(",") if item)
    return name, int(kv["budget"]), int(kv.get("recent", 0)), int(kv.get("sinks", 0)), float(kv.get("decay", 1.0))


def check(binary, spec):
    out = subprocess.run([binary, "--rows", "--kv", spec], capture_output=True, text=True)
    if out.returncode != 0:
        return f"{spec}: policy_only exited {out.returncode}: {out.stderr.strip()}"
    lines = out.stdout.splitlines()
    name, budget, recent, sinks, decay = parse_config(lines[0])
    if name == "tova":
        decay = 0.0  # forced: a score is the last row's increment
    score = {}  # held position -> float64 score
    chunk = []  # the open chunk's positions so far
    chunks = evictions = 0
    for line in lines[1:]:
        if line.startswith("row "):
            head, _, body = line.partition(":")
            t = int(head.split()[1])
            for p in score:
                score[p] *= decay  # kept positions and the chunk's before t (t is not held yet)
            score[t] = 0.0
            chunk.append(t)
            for item in body.split():
                p, inc = item.split("=")
                score[int(p)] += float(inc)
        elif line.startswith("kept "):
            head, _, body = line.partition(":")
            while len(score) > budget:
                held = sorted(score)
                protected = set(held[-recent:]) if recent else set()
                evictable = [p for p in held if p >= sinks and p not in protected]
                if name in ("window", "streaming"):
                    victim = evictable[0]
                else:
                    victim = min(evictable, key=lambda p: (score[p], p))
                del score[victim]
                evictions += 1
            expected = sorted(score)
            got = [int(p) for p in body.split()]
            if got != expected:
                return f"{spec}: after position {head.split()[1]} policy_only keeps {got}, the contract {expected}"
            chunk.clear()
            chunks += 1
    if chunks == 0 or evictions == 0:
        return f"{spec}: {chunks} chunks, {evictions} evictions: the run never reached eviction"
    print(f"{spec}: {chunks} chunks, {evictions} evictions, every kept set as the contract's")
    return None


def main() -> int:
    binary, *specs = sys.argv[1:]
    errors = [e for e in (check(binary, s) for s in specs) if e]
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
