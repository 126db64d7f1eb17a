#!/usr/bin/env bash
# Produces every JSONL file docs/RESULTS.md is generated from (`make results` runs this, then gen_results.py).
# Usage: scripts/run_results.sh [OUT_DIR]   (default: results/). Needs ../shared (models and data).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
shared=../shared
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/*.trace.jsonl

stories=models/stories260K.gguf
eval5m=$shared/models/h2o-eval-5M/h2o-eval-llama-5M.gguf
tiny_text=$shared/data/tinystories/tinystories_val_head.txt

ppl_sweep() {  # MODEL TEXT N NAME
    echo "== perplexity sweep: $4 ($3 tokens)" >&2
    $B perplexity -m "$1" -f "$2" --max-tokens "$3" --sweep --jsonl "$out/ppl_$4.jsonl"
}

# Ablation of h2o at a 20 % budget: decay, sinks and the recent/heavy split.
ppl_ablation() {  # MODEL TEXT N NAME
    local budget=$(( $3 / 5 ))
    echo "== h2o ablation: $4 (budget $budget of $3)" >&2
    local specs=("h2o" "h2o:decay=0.99" "h2o:decay=0.98" "h2o:decay=0.95" "h2o:decay=0.9"
                 "h2o:sinks=4" "h2o:sinks=4,decay=0.98"
                 "h2o:recent=$(( budget / 4 ))" "h2o:recent=$(( budget * 3 / 4 ))" "h2o:recent=$(( budget - 1 ))"
                 "h2o:recent=$(( budget / 4 )),decay=0.98" "h2o:recent=$(( budget * 3 / 4 )),decay=0.98"
                 "h2o:granularity=layer" "h2o:granularity=model")
    for s in "${specs[@]}"; do
        $B perplexity -m "$1" -f "$2" --max-tokens "$3" --sweep --sweep-policies "$s" --sweep-budgets 0.2 \
            --jsonl "$out/ablation_$4.jsonl"
    done
}

ppl_sweep "$stories" "$tiny_text" 512 stories260K_tinystories
ppl_ablation "$stories" "$tiny_text" 512 stories260K_tinystories
if [ -f "$eval5m" ]; then
    ppl_sweep "$eval5m" "$shared/data/moby-dick/moby_dick.txt" 1024 eval5M_mobydick
    ppl_sweep "$eval5m" "$shared/data/wikitext-2/test.txt" 1024 eval5M_wikitext2
    ppl_ablation "$eval5m" "$shared/data/moby-dick/moby_dick.txt" 1024 eval5M_mobydick
else
    echo "run_results: $eval5m is absent; skipping the 5M model" >&2
fi

# A kept-position map: which positions one head keeps over a generation.
$B generate -m "$stories" -p "Once upon a time" -n 300 --kv-policy h2o --kv-budget 64 \
    --kv-trace "$out/stories260K_h2o64.trace.jsonl" > "$out/stories260K_h2o64.txt" 2>/dev/null
