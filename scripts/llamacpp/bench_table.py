#!/usr/bin/env python3
"""Prints llama-bench's and `h2okv bench`'s throughputs side by side with their ratio.

llama-bench runs pp<P> and tg<N> as separate tests from an empty cache; compare.sh therefore runs h2okv bench
twice to match (-p P -n 0, then -p 0 -n N), one repeat of each engine in turn. Both figures are medians over
all repeats (llama-bench's samples_ts; h2okv's prefill_tps / decode_tps, one JSON line per run).

Usage: /usr/bin/python3 bench_table.py H2OKV_PP.jsonl H2OKV_TG.jsonl LLAMA_BENCH.json... [--json OUT.json]
"""
import json
import statistics
import sys


def main() -> int:
    args = sys.argv[1:]
    out_json = None
    if len(args) >= 2 and args[-2] == "--json":
        out_json = args[-1]
        args = args[:-2]
    if len(args) < 3:
        sys.exit(__doc__)

    def lines(path):
        with open(path) as f:
            return [json.loads(line) for line in f.read().strip().splitlines()]

    h_pp, h_tg = lines(args[0]), lines(args[1])
    n_repeats = len(h_tg)
    llama = {}  # test name -> (first record, samples)
    for path in args[2:]:
        with open(path) as f:
            for t in json.load(f):
                if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
                    name = f"pp{t['n_prompt']}"
                elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
                    name = f"tg{t['n_gen']}"
                else:
                    continue
                llama.setdefault(name, (t, []))[1].extend(t.get("samples_ts") or [t["avg_ts"]])
    ours = {"pp": statistics.median(r["prefill_tps"] for r in h_pp),
            "tg": statistics.median(r["decode_tps"] for r in h_tg)}
    h_pp = h_pp[0]

    rows = []
    for test, (t, samples) in llama.items():
        theirs = statistics.median(samples)
        fa = {-1: "auto", 0: "off", 1: "on", False: "off", True: "on"}.get(t.get("flash_attn"), "?")
        rows.append((test, theirs, ours[test[:2]], t.get("type_k", "?"), fa, t.get("build_commit")))
    if not rows:
        sys.exit("bench_table: llama-bench's JSON has no pp or tg test")

    n_threads = next(iter(llama.values()))[0].get("n_threads", "?")
    print(f"threads: llama-bench {n_threads}, h2okv {h_pp['threads']}; "
          f"KV: llama.cpp {rows[0][3]} (flash_attn {rows[0][4]}), h2okv {h_pp.get('kv_type', 'f32')}")
    print(f"{'test':<8} {'llama.cpp t/s':>14} {'h2okv t/s':>12} {'h2okv / llama.cpp':>18}")
    for test, theirs, mine, *_ in rows:
        print(f"{test:<8} {theirs:>14.2f} {mine:>12.2f} {mine / theirs:>18.3f}")
    if out_json:
        with open(out_json, "w") as f:
            json.dump([{"test": t, "llama_cpp_tps": a, "h2okv_tps": b, "llama_cpp_type_k": k, "flash_attn": fa,
                        "llama_cpp_commit": c, "h2okv_kv_type": h_pp.get("kv_type", "f32"),
                        "h2okv_isa": h_pp.get("isa"), "repeats": n_repeats}
                       for t, a, b, k, fa, c in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
