#!/usr/bin/env python3
"""Prints llama-bench's and `h2okv bench`'s throughputs side by side with their ratio.

llama-bench runs pp<P> and tg<N> as separate tests from an empty cache; compare.sh therefore runs h2okv bench
twice to match (-p P -n 0, then -p 0 -n N), one repeat of each engine in turn. Both figures are medians over
all repeats (llama-bench's samples_ts; h2okv's prefill_tps / decode_tps, one JSON line per run).

With --depth FULL.jsonl H2O.jsonl (compare.sh --depth D), llama-bench's tg<N> @ d<D> test (decode after D
cached tokens) is set against h2okv's full cache and its H2O-managed cache at the same depth; the h2o row's
ratio is what eviction buys over the full cache a llama.cpp user runs.

Usage: /usr/bin/python3 bench_table.py H2OKV_PP.jsonl H2OKV_TG.jsonl LLAMA_BENCH.json...
           [--depth H2OKV_FULL.jsonl H2OKV_H2O.jsonl] [--json OUT.json]
"""
import json
import statistics
import sys


def main() -> int:
    args = sys.argv[1:]
    out_json = depth = None
    if len(args) >= 2 and args[-2] == "--json":
        out_json = args[-1]
        args = args[:-2]
    if "--depth" in args:
        i = args.index("--depth")
        depth = args[i + 1:i + 3]
        args = args[:i] + args[i + 3:]
        if len(depth) != 2:
            sys.exit(__doc__)
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
                if t.get("n_depth", 0) > 0:
                    name += f" @ d{t['n_depth']}"
                llama.setdefault(name, (t, []))[1].extend(t.get("samples_ts") or [t["avg_ts"]])
    ours = {"pp": statistics.median(r["prefill_tps"] for r in h_pp),
            "tg": statistics.median(r["decode_tps"] for r in h_tg)}
    h2o = None  # (median decode t/s, policy) of the H2O-managed cache at depth
    if depth:
        h_full, h_h2o = lines(depth[0]), lines(depth[1])
        ours["depth"] = statistics.median(r["decode_tps"] for r in h_full)
        h2o = (statistics.median(r["decode_tps"] for r in h_h2o), h_h2o[0]["kv_policy"])
    h_pp = h_pp[0]

    rows = []
    for test, (t, samples) in llama.items():
        theirs = statistics.median(samples)
        fa = {-1: "auto", 0: "off", 1: "on", False: "off", True: "on"}.get(t.get("flash_attn"), "?")
        key = "depth" if " @ d" in test else test[:2]
        if key not in ours:
            continue
        rows.append((test, theirs, ours[key], t.get("type_k", "?"), fa, t.get("build_commit"),
                     h2o if key == "depth" else None))
    if not rows:
        sys.exit("bench_table: llama-bench's JSON has no pp or tg test")

    n_threads = next(iter(llama.values()))[0].get("n_threads", "?")
    print(f"threads: llama-bench {n_threads}, h2okv {h_pp['threads']}; "
          f"KV: llama.cpp {rows[0][3]} (flash_attn {rows[0][4]}), h2okv {h_pp.get('kv_type', 'f32')}")
    print(f"{'test':<16} {'llama.cpp t/s':>14} {'h2okv t/s':>12} {'h2okv / llama.cpp':>18}")
    for test, theirs, mine, *_, evict in rows:
        print(f"{test:<16} {theirs:>14.2f} {mine:>12.2f} {mine / theirs:>18.3f}")
        if evict:
            print(f"{'  ' + evict[1]:<16} {theirs:>14.2f} {evict[0]:>12.2f} {evict[0] / theirs:>18.3f}")
    if out_json:
        recs = []
        for t, a, b, k, fa, c, evict in rows:
            rec = {"test": t, "llama_cpp_tps": a, "h2okv_tps": b, "llama_cpp_type_k": k, "flash_attn": fa,
                   "llama_cpp_commit": c, "h2okv_kv_type": h_pp.get("kv_type", "f32"),
                   "h2okv_isa": h_pp.get("isa"), "repeats": n_repeats}
            if evict:
                rec.update({"h2okv_evict_tps": evict[0], "h2okv_evict_policy": evict[1]})
            recs.append(rec)
        with open(out_json, "w") as f:
            json.dump(recs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
