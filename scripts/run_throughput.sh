#!/usr/bin/env bash
# Throughput of many sequences at once, for docs/RESULTS.md's section "Throughput at equal KV memory"
# (`make results` and `make throughput` run this; scripts/gen_results.py renders results/throughput_*.jsonl).
# Usage: scripts/run_throughput.sh [OUT_DIR]   (default: results/). THREADS (default 2), REPEATS (default 1),
# MODELS (default "smollm-135m:q8_0 tinyllama-1.1b:q4_k"), DEPTH (default 2048), GEN (default 64),
# EQUAL_REPEATS (default 3: the equal-memory pair per repeat).
#
# Per model (synthetic, written by `h2okv gguf synth` into OUT_DIR/models when absent):
#   1. sequences: `h2okv bench --sequences S` for S = 1, 2, 4, 8, 16 with the full cache, at depth 0 (a
#      128-token prompt each, then GEN decoded) and with every sequence DEPTH tokens deep (then GEN decoded);
#   2. equal memory: a KV pool that holds 4 full caches DEPTH deep (the full cache's footprint, K/V and slot
#      tables, times 4), 16 sequences submitted under the full cache (4 at a time, in waves) and under h2o at a
#      20 % budget with 32-token prefill chunks (as many at once as fit), each run's decode steps split by
#      phase (`--phases`: products, attention, K/V writes, score commits, chunk closes, the rest).
# Configurations alternate repeat by repeat (the equal-memory pair within a repeat too); gen_results.py takes
# medians. About 25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
threads=${THREADS:-2}
repeats=${REPEATS:-1}
depth=${DEPTH:-2048}
gen=${GEN:-64}
equal_repeats=${EQUAL_REPEATS:-3}
models_list=${MODELS:-"smollm-135m:q8_0 tinyllama-1.1b:q4_k"}
mkdir -p "$out/models"
rm -f "$out"/throughput_*.jsonl

model() {  # SHAPE TYPE -> path of the synthetic model
    local f=$out/models/$1-$2.gguf
    [ -f "$f" ] || $B gguf synth --shape "$1" --type "$2" -o "$f" >&2
    echo "$f"
}

run() {  # FILE LABEL ARGS... : one bench run, appended as a JSON line with its label
    local file=$1 label=$2
    shift 2
    $B bench -t "$threads" -r 1 --json "$@" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
j["label"] = sys.argv[1]
print(json.dumps(j))' "$label" >> "$out/$file"
}

for spec in $models_list; do
    shape=${spec%%:*}
    type=${spec##*:}
    m=$(model "$shape" "$type")
    name=$shape-$type
    for r in $(seq "$repeats"); do
        echo "== throughput: $name, repeat $r/$repeats" >&2
        for s in 1 2 4 8 16; do
            run "throughput_$name.jsonl" "depth0" -m "$m" -p 128 -n "$gen" --sequences "$s" --seed "$r"
            run "throughput_$name.jsonl" "deep" -m "$m" --depth "$depth" -p 0 -n "$gen" --sequences "$s" \
                --kv-prefill-chunk 512 --seed "$r"
        done
        # The pool of the equal-memory runs: 4 full caches of the deep run (its footprint: K/V + slot tables).
        pool=$(/usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(4 * next(r["kv_footprint"] for r in rows if r["label"] == "deep" and r["sequences"] == 1))' \
            "$out/throughput_$name.jsonl")
        # The ratio is the section's claim and one run of each moves by 10-30 % on a shared machine: the pair
        # runs EQUAL_REPEATS times, the order alternating.
        for e in $(seq "$equal_repeats"); do
            equal_full() {
                run "throughput_$name.jsonl" "equal_full" -m "$m" --depth "$depth" -p 0 -n "$gen" \
                    --sequences 16 --kv-memory "$pool" --kv-prefill-chunk 512 --seed "$r" --phases
            }
            equal_h2o() {
                run "throughput_$name.jsonl" "equal_h2o" -m "$m" --depth "$depth" -p 0 -n "$gen" \
                    --sequences 16 --kv-memory "$pool" --kv-policy h2o --kv-budget 0.2 --kv-prefill-chunk 32 \
                    --seed "$r" --phases
            }
            if ((e % 2)); then equal_full; equal_h2o; else equal_h2o; equal_full; fi
        done
    done
done
echo "run_throughput: wrote $out/throughput_*.jsonl" >&2
