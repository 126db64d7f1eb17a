#!/usr/bin/env bash
# Decode speed by KV type at depth D (default 8192): for each KV type (f16, q8_0, q4_0, q4_1), llama.cpp's
# llama-bench with -ctk/-ctv of that type (flash attention on, which llama.cpp's quantised V cache needs; on for
# every type so the rows compare like with like) next to `h2okv bench` with the same --kv-type, under the full
# cache and under h2o at a 20 % budget: N tokens decoded after D cached ones, on a synthetic smollm-135m Q8_0
# (`h2okv gguf synth`; its trained context is 2048, and both engines run past it with a warning: random
# weights, so only the speed means anything). Runs are interleaved, one repeat of each engine and type in turn,
# so every figure sees the same machine load; the table takes medians.
#
# h2okv does not ship, fetch or build llama.cpp: point LLAMA_CPP_DIR at your own build (the folder holding
# build/bin/llama-bench, or an install prefix with bin/llama-bench).
#
#   LLAMA_CPP_DIR=/tmp/llama.cpp scripts/llamacpp/kvtype_speed.sh --results results
#
# Options: --depth D (8192), --n-gen N (64), --threads T (2), --repeats R (3), --types "f16 q8_0 q4_0 q4_1",
# --model PATH (default: the synthetic model, written into --work when absent), --work DIR (default a new
# folder under ${TMPDIR:-/tmp}), --results DIR (write DIR/kvtype_speed.jsonl: one line per engine, type and
# policy with its median decode speed, KV bytes and the CPU, which scripts/gen_results.py renders into
# docs/RESULTS.md's "Decode speed by KV type" section).
# Environment: H2OKV (the h2okv binary; default build/release, then build/dev of this checkout), PYTHON
# (default /usr/bin/python3).
set -euo pipefail

die() {
    echo "kvtype_speed.sh: error: $*" >&2
    exit 1
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

depth=8192 n_gen=64 threads=2 repeats=3 types="f16 q8_0 q4_0 q4_1" model="" work="" results=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --depth) depth="${2:?--depth needs a value}"; shift 2 ;;
        --n-gen) n_gen="${2:?--n-gen needs a value}"; shift 2 ;;
        --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
        --repeats) repeats="${2:?--repeats needs a value}"; shift 2 ;;
        --types) types="${2:?--types needs a value}"; shift 2 ;;
        --model) model="${2:?--model needs a value}"; shift 2 ;;
        --work) work="${2:?--work needs a value}"; shift 2 ;;
        --results) results="${2:?--results needs a value}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
for v in depth n_gen threads repeats; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "--${v/_/-} '${!v}': expected a positive integer"
done
for t in $types; do
    case "$t" in f16|q8_0|q4_0|q4_1) ;; *) die "--types: '$t' is not one of f16 q8_0 q4_0 q4_1" ;; esac
done

[[ -n "${LLAMA_CPP_DIR:-}" ]] ||
    die "LLAMA_CPP_DIR is not set; point it at an existing llama.cpp build (this script never downloads or builds llama.cpp)"
llama_bench=""
for b in "$LLAMA_CPP_DIR/build/bin/llama-bench" "$LLAMA_CPP_DIR/bin/llama-bench" "$LLAMA_CPP_DIR/llama-bench"; do
    [[ -x "$b" ]] && { llama_bench="$b"; break; }
done
[[ -n "$llama_bench" ]] || die "no llama-bench under LLAMA_CPP_DIR='$LLAMA_CPP_DIR' (looked in build/bin, bin and the folder itself)"

h2okv="${H2OKV:-}"
if [[ -z "$h2okv" ]]; then
    for b in "$repo/build/release/tools/h2okv/h2okv" "$repo/build/dev/tools/h2okv/h2okv"; do
        [[ -x "$b" ]] && { h2okv="$b"; break; }
    done
fi
[[ -n "$h2okv" && -x "$h2okv" ]] || die "no h2okv binary (build it, or set H2OKV=/path/to/h2okv)"
python="${PYTHON:-/usr/bin/python3}"

work="${work:-$(mktemp -d "${TMPDIR:-/tmp}/h2okv-kvtype-speed.XXXXXX")}"
mkdir -p "$work"
if [[ -z "$model" ]]; then
    model="$work/smollm-135m-q8_0.gguf"
    [[ -f "$model" ]] || "$h2okv" gguf synth --shape smollm-135m --type q8_0 -o "$model" --seed 1
fi
[[ -f "$model" ]] || die "model '$model' does not exist"
echo "kvtype_speed.sh: model $model, llama-bench $llama_bench, h2okv $h2okv, depth $depth, -n $n_gen," \
    "$threads threads, $repeats repeats, files in $work" >&2

rm -f "$work"/llama_*.json "$work"/h2okv_*.jsonl
for r in $(seq "$repeats"); do
    for t in $types; do
        echo "== repeat $r/$repeats, KV $t" >&2
        "$llama_bench" -m "$model" -d "$depth" -p 0 -n "$n_gen" -t "$threads" -r 1 -fa 1 -ctk "$t" -ctv "$t" \
            -o json >"$work/llama_${t}_$r.json"
        "$h2okv" bench -m "$model" --depth "$depth" -p 0 -n "$n_gen" -t "$threads" -r 1 --seed "$r" \
            --kv-type "$t" --json 2>/dev/null >>"$work/h2okv_${t}_full.jsonl"
        # scripts/run_speed.sh's depth settings: 64-token prefill chunks, 64 slots beyond the budget.
        "$h2okv" bench -m "$model" --depth "$depth" -p 0 -n "$n_gen" -t "$threads" -r 1 --seed "$r" \
            --kv-type "$t" --kv-policy h2o --kv-budget 0.2 --kv-prefill-chunk 64 --json 2>/dev/null \
            >>"$work/h2okv_${t}_h2o.jsonl"
    done
done

out="$work/kvtype_speed.jsonl"
"$python" - "$work" "$model" "$llama_bench" "$depth" "$n_gen" "$threads" "$types" >"$out" <<'PY'
import glob, json, os, statistics, sys
work, model, llama_bench, depth, n_gen, threads, types = sys.argv[1:]
for t in types.split():
    runs = []
    for path in sorted(glob.glob(os.path.join(work, f"llama_{t}_*.json"))):
        runs += [r for r in json.load(open(path)) if r.get("n_gen") == int(n_gen)]
    base = {"model": os.path.basename(model), "kv_type": t, "depth": int(depth), "n_gen": int(n_gen),
            "threads": int(threads)}
    if runs:
        speeds = [s for r in runs for s in r.get("samples_ts", [r["avg_ts"]])]
        print(json.dumps({**base, "engine": "llama.cpp", "policy": "full", "decode_tps": statistics.median(speeds),
                          "repeats": len(speeds), "cpu": runs[0].get("cpu_info", ""), "bench": llama_bench,
                          "flash_attn": runs[0].get("flash_attn"), "type_k": runs[0].get("type_k"),
                          "type_v": runs[0].get("type_v"), "build_commit": runs[0].get("build_commit", "")}))
    for policy in ("full", "h2o"):
        path = os.path.join(work, f"h2okv_{t}_{policy}.jsonl")
        rows = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
        if rows:
            print(json.dumps({**base, "engine": "h2okv", "policy": "full" if policy == "full" else "h2o 0.2",
                              "decode_tps": statistics.median(r["decode_tps"] for r in rows), "repeats": len(rows),
                              "cpu": rows[0]["cpu"], "kv_bytes": rows[0]["kv_bytes"],
                              "kv_bytes_full": rows[0]["kv_bytes_full"], "isa": rows[0]["isa"]}))
PY
echo "kvtype_speed.sh: wrote $out" >&2
# The table scripts/gen_results.py renders from it.
"$python" - "$repo/scripts" "$out" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from gen_results import kvtype_section, load
lines = []
kvtype_section("speed", load(sys.argv[2]), lines)
print("\n".join(lines))
PY
if [[ -n "$results" ]]; then
    mkdir -p "$results"
    cp "$out" "$results/kvtype_speed.jsonl"
    echo "kvtype_speed.sh: wrote $results/kvtype_speed.jsonl" >&2
fi
