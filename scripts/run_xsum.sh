#!/usr/bin/env bash
# XSUM summarisation under each KV policy, for docs/RESULTS.md's section "Summarisation (XSUM, ROUGE)" (the
# H2O paper's HELM task; scripts/xsum.py writes the prompts and computes ROUGE-1/2/L).
# Usage: scripts/run_xsum.sh [OUT_DIR]   (default results/; writes OUT_DIR/xsum_<model>.jsonl)
#   MODEL (default ../shared/models/h2o-eval-5M/h2o-eval-llama-5M.gguf), N prompts (default 50: the first N
#   of ../shared/data/h2o-xsum/xsum_0shot.jsonl whose tokens and 64 answer tokens fit the model's trained
#   context), THREADS (default 2), H2OKV_BIN. Greedy decoding, 64 tokens, cut at HELM's stop string "###".
# Configurations: the full cache, then h2o, h2o with decay 0.98, window, streaming and tova at 20 % of each
# prompt's run (BOS + prompt + 64), one `h2okv batch` run each over the same prompts.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
model=${MODEL:-../shared/models/h2o-eval-5M/h2o-eval-llama-5M.gguf}
data=../shared/data/h2o-xsum/xsum_0shot.jsonl
n=${N:-50}
threads=${THREADS:-2}
gen=64
for f in "$model" "$data"; do
    [ -f "$f" ] || { echo "run_xsum: $f is absent (../shared/models and ../shared/data); skipping"; exit 0; }
done
ctx=$($B info -m "$model" | awk '$1 ~ /\.context_length$/ {print $3; exit}')
[ -n "$ctx" ] || { echo "run_xsum: $model has no context_length" >&2; exit 1; }
name=$(basename "$model" .gguf)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
res="$out/xsum_$name.jsonl"
rm -f "$res"
echo "run_xsum: choosing $n prompts of at most $((ctx - gen)) tokens (context $ctx)"
/usr/bin/python3 scripts/xsum.py prompts "$data" "$n" "$tmp/prompts.txt" --fit "$B" "$model" $((ctx - gen))
configs=(
    "full::"
    "h2o 0.2::--kv-policy h2o --kv-budget 0.2"
    "h2o decay 0.98 0.2::--kv-policy h2o --kv-budget 0.2 --kv-decay 0.98"
    "window 0.2::--kv-policy window --kv-budget 0.2"
    "streaming 0.2::--kv-policy streaming --kv-budget 0.2"
    "tova 0.2::--kv-policy tova --kv-budget 0.2"
)
i=0
for c in "${configs[@]}"; do
    label=${c%%::*}
    read -r -a flags <<<"${c#*::}"
    i=$((i + 1))
    echo "run_xsum: [$i/${#configs[@]}] $label"
    $B batch -m "$model" -t "$threads" -f "$tmp/prompts.txt" --escape -n "$gen" --jsonl "$tmp/$i.jsonl" \
        ${flags[@]+"${flags[@]}"} >/dev/null
    /usr/bin/python3 scripts/xsum.py score "$data" "$tmp/$i.jsonl" --rows "$tmp/prompts.txt.rows" \
        --label "$label" --out "$res"
done
echo "run_xsum: wrote $res"
