#!/usr/bin/env python3
"""Prints llama-bench's and `h2okv bench`'s throughputs side by side with their ratio.

llama-bench runs pp<P> and tg<N> as separate tests from an empty cache; compare.sh therefore runs h2okv bench
twice to match (-p P -n 0, then -p 0 -n N). Both figures are medians of the repeats (llama-bench's
samples_ts; h2okv's prefill_tps / decode_tps).

Usage: /usr/bin/python3 bench_table.py LLAMA_BENCH.json H2OKV_PP.json H2OKV_TG.json [--json OUT.json]
"""
import json
import statistics
import sys


def main() -> int:
    out_json = None
    if len(sys.argv) == 6 and sys.argv[4] == "--json":
        out_json = sys.argv[5]
    elif len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        llama = json.load(f)
    with open(sys.argv[2]) as f:
        h_pp = json.loads(f.read().strip().splitlines()[-1])
    with open(sys.argv[3]) as f:
        h_tg = json.loads(f.read().strip().splitlines()[-1])

    rows = []
    for t in llama:
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            test, ours = f"pp{t['n_prompt']}", h_pp["prefill_tps"]
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            test, ours = f"tg{t['n_gen']}", h_tg["decode_tps"]
        else:
            continue
        theirs = statistics.median(t["samples_ts"]) if t.get("samples_ts") else t["avg_ts"]
        fa = {-1: "auto", 0: "off", 1: "on", False: "off", True: "on"}.get(t.get("flash_attn"), "?")
        rows.append((test, theirs, ours, t.get("type_k", "?"), fa, t.get("build_commit")))
    if not rows:
        sys.exit("bench_table: llama-bench's JSON has no pp or tg test")

    print(f"threads: llama-bench {llama[0].get('n_threads', '?')}, h2okv {h_pp['threads']}; "
          f"KV: llama.cpp {rows[0][3]} (flash_attn {rows[0][4]}), h2okv {h_pp.get('kv_type', 'f32')}")
    print(f"{'test':<8} {'llama.cpp t/s':>14} {'h2okv t/s':>12} {'h2okv / llama.cpp':>18}")
    for test, theirs, ours, *_ in rows:
        print(f"{test:<8} {theirs:>14.2f} {ours:>12.2f} {ours / theirs:>18.3f}")
    if out_json:
        with open(out_json, "w") as f:
            json.dump([{"test": t, "llama_cpp_tps": a, "h2okv_tps": b, "llama_cpp_type_k": k, "flash_attn": fa,
                        "llama_cpp_commit": c, "h2okv_kv_type": h_pp.get("kv_type", "f32"),
                        "h2okv_isa": h_pp.get("isa")}
                       for t, a, b, k, fa, c in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
