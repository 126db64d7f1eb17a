#!/usr/bin/env bash
# Eviction x KV quantization, for docs/RESULTS.md's section of that name (`make results` runs it; `make kvquant`
# alone): perplexity and greedy agreement with the full f16 cache, per KV type (f16, q8_0, q4_0, q4_1) and budget
# (the full cache, 100 %, then h2o, h2o with decay 0.98 and window at 40 / 20 / 10 %). q8_0, q4_0 and q4_1 need
# head_dim a multiple of 32: the 5M evaluation model has 64, the bundled model 8, so the bundled model runs f32
# and f16, and the types h2okv refuses there are recorded with its message (kvquant_refused_<model>.jsonl) for the
# table to say so.
# Usage: scripts/run_kvquant.sh [OUT_DIR]   (default: results/). Needs ../shared. Writes kvquant_*.jsonl
# (removed first); about ten minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
shared=../shared
eval5m=$shared/models/h2o-eval-5M/h2o-eval-llama-5M.gguf
stories=models/stories260K.gguf
mkdir -p "$out"
rm -f "$out"/kvquant_*.jsonl
policies=(full h2o h2o:decay=0.98 window)
budgets=(0.4 0.2 0.1)

run() {  # MODEL NAME TEXT N TYPES...
    local m=$1 name=$2 text=$3 n=$4
    shift 4
    for t in "$@"; do
        echo "== kvquant: $name $t" >&2
        # A type the model cannot store (head_dim not a multiple of the block) is refused at once: record why.
        if ! err=$($B perplexity -m "$m" -f "$text" --max-tokens 8 --kv-type "$t" 2>&1 >/dev/null); then
            if [[ $err != *"KV type $t stores blocks"* ]]; then
                echo "$err" >&2
                exit 1
            fi
            /usr/bin/python3 -c 'import json, sys; print(json.dumps({"kv_type": sys.argv[1], "refused": sys.argv[2]}))' \
                "$t" "${err#h2okv: error: }" >>"$out/kvquant_refused_$name.jsonl"
            continue
        fi
        $B perplexity -m "$m" -f "$text" --max-tokens "$n" --kv-type "$t" --sweep-policies "${policies[@]}" \
            --sweep-budgets "${budgets[@]}" --jsonl "$out/kvquant_ppl_$name.jsonl" >/dev/null 2>&1
        $B agreement -m "$m" -f scripts/data/agreement_prompts.txt -n 64 --kv-type "$t" --reference-kv-type f16 \
            --sweep-policies "${policies[@]}" --sweep-budgets "${budgets[@]}" \
            --jsonl "$out/kvquant_agreement_$name.jsonl" >/dev/null 2>&1
    done
}

run "$eval5m" eval5M "$shared/data/moby-dick/moby_dick.txt" 1024 f16 q8_0 q4_0 q4_1
run "$stories" stories260K "$shared/data/tinystories/tinystories_val_head.txt" 512 f32 f16 q8_0 q4_0 q4_1
