#!/usr/bin/env bash
# Produces the JSONL files of RESULTS.md's long-context (RULER-style) section: `h2okv ruler` on every model in
# ../shared/models (and the bundled one), full cache then window, streaming, h2o, h2o+decay, tova, scissorhands,
# keyformer, l2norm, keydiff and snapkv at 10 / 20 / 40 % of the run, both protocols (query-agnostic and
# query-aware), needle depths 0, 0.5, 1.
# Usage: scripts/run_ruler.sh [OUT_DIR] [TASKS] [LENGTHS] [TRIALS]
#   defaults: results/, niah_single,niah_multikey,niah_multivalue,vt,cwe,fwe, 512 and the context (1024 for the
#   5M model; 512 for stories260K, whose 512-token vocabulary makes the multi-needle prompts long), 2 trials.
# About 30 minutes on 2 cores for the 5M model (31 policy runs x 96 trials, each trial prefilled twice: greedy
# answer and teacher-forced answer NLL), a few minutes for stories260K.
# H2OKV_BIN picks the binary (default ./build/release/tools/h2okv/h2okv). One file per model:
# OUT_DIR/ruler_<model>.jsonl, replaced on each run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
tasks=${2:-niah_single,niah_multikey,niah_multivalue,vt,cwe,fwe}
trials=${4:-2}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
shared=../shared
haystack=$shared/data/moby-dick/moby_dick.txt
mkdir -p "$out"

ruler() {  # MODEL NAME LENGTHS
    local m=$1 name=$2 lengths=$3
    echo "== ruler: $name ($tasks at $lengths tokens, $trials trials)" >&2
    rm -f "$out/ruler_$name.jsonl"
    $B ruler -m "$m" --haystack "$haystack" --task "$tasks" --lengths "$lengths" --depths 0,0.5,1 \
        --trials "$trials" --protocol both \
        --sweep-policies full window streaming:sinks=4 h2o h2o:decay=0.98 tova scissorhands keyformer l2norm keydiff \
        snapkv --sweep-budgets 0.1 0.2 0.4 \
        --jsonl "$out/ruler_$name.jsonl"
}

ruler models/stories260K.gguf stories260K "${3:-512}"
for m in "$shared"/models/*/*.gguf; do
    name=$(basename "$(dirname "$m")")
    [ "$name" = stories260K ] && continue  # the bundled copy ran above
    ruler "$m" "$name" "${3:-512,1024}"
done
