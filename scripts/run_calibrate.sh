#!/usr/bin/env bash
# Calibrated KV configurations against the defaults, for docs/RESULTS.md's section "Calibrated
# configurations" (`make calibrate`): `h2okv calibrate` chooses a configuration (window, streaming, or h2o
# with per-layer recent shares, decay, sinks and per-head budget shares) on one text; perplexity then
# compares it, on a different held-out text, with window, streaming, h2o and h2o with decay 0.98 at the same
# budgets (40 / 20 / 10 %). Both sides are many runs of the model's context, pooled (`--segments`): one run's
# perplexity moves by more than the configurations differ.
#   stories260K: calibrated on every 512-token run of the first half of the TinyStories head, evaluated on
#                every 512-token run of its second half (each half cut at a blank line).
#   5M model:    calibrated on 16 runs of 1024 tokens of WikiText-2 test, evaluated on 16 runs of 1024
#                tokens of Moby Dick (both held out from its training, MODEL.md; ../shared's State of the
#                Union addresses were trained on, so none is used).
# Usage: scripts/run_calibrate.sh [OUT_DIR]   (default: results/). Needs ../shared. Writes
# calibrate_ppl.jsonl (removed first), the two TinyStories halves and the configurations as
# calibrate_<model>_<budget>.json. About 40 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
shared=../shared
eval5m=$shared/models/h2o-eval-5M/h2o-eval-llama-5M.gguf
stories=models/stories260K.gguf
mkdir -p "$out"
rm -f "$out"/calibrate_ppl.jsonl "$out"/calibrate_*.json
tiny=$shared/data/tinystories/tinystories_val_head.txt
# The halves of the TinyStories head: the first up to the last blank line before the middle byte, the second
# from the first blank line after it.
cal_tiny=$out/calibrate_tinystories_first_half.txt
held_tiny=$out/calibrate_tinystories_second_half.txt
half=$(($(wc -c <"$tiny") / 2))
head -c "$half" "$tiny" | awk '/^$/ {last = NR} {line[NR] = $0} END {for (i = 1; i < last; ++i) print line[i]}' \
    >"$cal_tiny"
tail -c +"$half" "$tiny" | awk 'f || /^$/ {f = 1} f' | sed '1{/^$/d}' >"$held_tiny"
baselines=(window streaming h2o h2o:decay=0.98)
budgets=(0.4 0.2 0.1)

run() {  # MODEL NAME N SEGMENTS CALIBRATION_TEXT HELD_OUT_TEXT...   (SEGMENTS 0: every run a text holds)
    local m=$1 name=$2 n=$3 segments=$4 cal=$5
    shift 5
    for b in "${budgets[@]}"; do
        local cfg=$out/calibrate_${name}_$b.json
        echo "== calibrate: $name budget $b on $cal" >&2
        $B calibrate -m "$m" -f "$cal" --max-tokens "$n" --segments "$segments" --kv-budget "$b" -o "$cfg" >/dev/null 2>&1
        for text in "$@"; do
            $B perplexity -m "$m" -f "$text" --max-tokens "$n" --segments "$segments" --kv-config "$cfg" \
                --jsonl "$out/calibrate_ppl.jsonl" >/dev/null 2>&1
        done
    done
    for text in "$@"; do
        echo "== baselines: $name on $text" >&2
        $B perplexity -m "$m" -f "$text" --max-tokens "$n" --segments "$segments" --sweep-policies full \
            "${baselines[@]}" --sweep-budgets "${budgets[@]}" --jsonl "$out/calibrate_ppl.jsonl" >/dev/null 2>&1
    done
}

run "$stories" stories260K 512 0 "$cal_tiny" "$held_tiny"
run "$eval5m" eval5M 1024 16 "$shared/data/wikitext-2/test.txt" "$shared/data/moby-dick/moby_dick.txt"
