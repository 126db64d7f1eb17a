#!/usr/bin/env bash
# Speed measurements for docs/RESULTS.md's speed section (`make results` and `make speed` run this; then
# scripts/gen_results.py renders results/speed_*.jsonl). Synthetic SmolLM-135M-shaped models (random weights,
# real shapes) are written to OUT_DIR/models by `h2okv gguf synth` when absent.
# Usage: scripts/run_speed.sh [OUT_DIR]   (default: results/). THREADS (default 2) and REPEATS (default 3).
# Configurations are interleaved repeat by repeat (one `h2okv bench -r 1` each), so every ratio compares runs
# made side by side on a machine whose load changes over minutes; gen_results.py takes the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
threads=${THREADS:-2}
repeats=${REPEATS:-3}
models=$out/models
mkdir -p "$models"
rm -f "$out"/speed_*.jsonl

model() {  # TYPE -> path of the synthetic smollm-135m model of that weight type
    local f=$models/smollm-135m-$1.gguf
    [ -f "$f" ] || $B gguf synth --shape smollm-135m --type "$1" -o "$f" >&2
    echo "$f"
}

bench() {  # FILE ARGS... : one repeat, appended as a JSON line
    local file=$1
    shift
    $B bench -t "$threads" -r 1 --json "$@" >> "$out/$file"
}

echo "== speed: depth 0, full cache, p 512, n 128 ($threads threads, $repeats repeats)" >&2
for r in $(seq "$repeats"); do
    for t in f16 q8_0 q4_k; do
        bench speed_depth0.jsonl -m "$(model $t)" -p 512 -n 128 --seed "$r"
    done
done

# The same cached tokens with and without H2O's bookkeeping: a budget holding the whole run evicts nothing,
# but scores every attention row (the fused path), so the decode difference is the bookkeeping's cost.
echo "== speed: h2o bookkeeping at depth 2048 (budget = the whole run)" >&2
for r in $(seq "$repeats"); do
    for p in full h2o; do
        args=(--kv-policy "$p")
        [ "$p" = h2o ] && args+=(--kv-budget 1.0)
        bench speed_bookkeeping.jsonl -m "$(model f16)" --depth 2048 -p 0 -n 128 --seed "$r" "${args[@]}"
    done
done

# Long context: full cache against h2o at a 20 % budget with 64-token prefill chunks (the chunk's new tokens
# need slots before its evictions, so the KV holds budget + 64 slots per unit).
echo "== speed: depth 8192, full vs h2o 0.2" >&2
for r in $(seq "$repeats"); do
    for t in f16 q4_k; do
        for p in full h2o; do
            args=(--kv-policy "$p")
            [ "$p" = h2o ] && args+=(--kv-budget 0.2 --kv-prefill-chunk 64)
            bench speed_depth8192.jsonl -m "$(model $t)" --depth 8192 -p 64 -n 64 --seed "$r" "${args[@]}"
        done
    done
done
# Kernel micro-benchmarks (1 thread, the best ISA): the matrix-vector product of a 16384 x 2048 matrix of each
# weight type (larger than the L3 cache, so it streams from memory) against the measured read bandwidth, and
# a 64-token product (prefill) in GFLOP/s. One JSON line per benchmark.
BK=${H2OKV_BENCH_KERNELS:-./build/release/bench/bench_kernels_bench}
isa=$($B bench -m "$(model q8_0)" -p 1 -n 1 -r 1 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["isa"])')
echo "== speed: kernel micro-benchmarks ($isa, 1 thread)" >&2
rm -f "$out"/kernels_*.jsonl
"$BK" --benchmark_filter="^peak/read_bandwidth/threads:1|^matmul/[^/]*/$isa/rows:(16384/cols:2048/n_tok:1|2048/cols:2048/n_tok:64)/threads:1/" \
    --benchmark_min_time=1 --benchmark_format=json 2>/dev/null |
    /usr/bin/python3 -c '
import json, sys
for b in json.load(sys.stdin)["benchmarks"]:
    print(json.dumps({k: b[k] for k in ("name", "real_time", "time_unit", "bytes_per_second", "GFLOP/s") if k in b}))
' > "$out/kernels_$isa.jsonl"
echo "run_speed: wrote $out/speed_*.jsonl and $out/kernels_$isa.jsonl" >&2
