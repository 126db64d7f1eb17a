#!/usr/bin/env bash
# Calibrated KV configurations against the defaults, for docs/RESULTS.md's section "Calibrated
# configurations" (`make calibrate`): `h2okv calibrate` chooses a configuration (window, streaming, or h2o
# with per-layer recent shares, decay, sinks and per-head budget shares) on one text; perplexity then
# compares it, on a different held-out text, with window, streaming, h2o and h2o with decay 0.98 at the same
# budgets (40 / 20 / 10 %). Both sides are many runs of the model's context, pooled (`--segments`): one run's
# perplexity moves by more than the configurations differ.
#   stories260K: calibrated on every 512-token run of one half of the TinyStories head, evaluated on every
#                512-token run of the other half. The halves alternate blocks of 40 paragraphs (about 8 KB,
#                four runs), so both hold the same mix of the file's stretches: the head's doubly encoded
#                UTF-8 (`â€™`) lies in its second half, and a calibration on the first half alone never saw it.
#   5M model:    calibrated on 64 runs of 1024 tokens of the first half of WikiText-2 test, evaluated on
#                16 runs of 1024 tokens of its second half (the same kind of text) and of Moby Dick's second
#                half (another kind); and calibrated on 64 runs of Moby Dick's first half, evaluated on its
#                second half. WikiText-2 test and Moby Dick are held out from the model's training (MODEL.md;
#                ../shared's State of the Union addresses were trained on, so none is used).
# Usage: scripts/run_calibrate.sh [OUT_DIR]   (default: results/). Needs ../shared. Writes calibrate_ppl.jsonl
# (removed first), the halves of the texts and the configurations as calibrate_<name>_<budget>.json.
# PARTS (default "stories260K eval5M") runs only the models it names. About 65 minutes on 2 cores.
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
# The halves of the TinyStories head: paragraphs (blank-line separated) in blocks of 40, the blocks
# alternating between the calibration half and the held-out half.
cal_tiny=$out/calibrate_tinystories_calibration_half.txt
held_tiny=$out/calibrate_tinystories_held_out_half.txt
awk -v cal="$cal_tiny" -v held="$held_tiny" 'BEGIN {RS = ""; ORS = "\n\n"}
    {print > (int((NR - 1) / 40) % 2 == 0 ? cal : held)}' "$tiny"
# The halves of WikiText-2 test and Moby Dick: the first half up to the line that holds the middle byte, the
# second half from the line after it.
halves() {  # TEXT NAME: writes calibrate_NAME_first_half.txt and calibrate_NAME_second_half.txt
    local half=$(($(wc -c <"$1") / 2))
    head -c "$half" "$1" | head -n -1 >"$out/calibrate_$2_first_half.txt"
    tail -c +"$half" "$1" | tail -n +2 >"$out/calibrate_$2_second_half.txt"
}
baselines=(window streaming h2o h2o:decay=0.98)
budgets=(0.4 0.2 0.1)

calibrate() {  # MODEL NAME N SEGMENTS CALIBRATION_TEXT EVAL_SEGMENTS HELD_OUT_TEXT...   (SEGMENTS 0: every run)
    local m=$1 name=$2 n=$3 segments=$4 cal=$5 eval_segments=$6
    shift 6
    for b in "${budgets[@]}"; do
        local cfg=$out/calibrate_${name}_$b.json
        echo "== calibrate: $name budget $b on $cal" >&2
        $B calibrate -m "$m" -f "$cal" --max-tokens "$n" --segments "$segments" --kv-budget "$b" -o "$cfg" >/dev/null 2>&1
        for text in "$@"; do
            $B perplexity -m "$m" -f "$text" --max-tokens "$n" --segments "$eval_segments" --kv-config "$cfg" \
                --jsonl "$out/calibrate_ppl.jsonl" >/dev/null 2>&1
        done
    done
}

baselines() {  # MODEL N SEGMENTS HELD_OUT_TEXT...
    local m=$1 n=$2 segments=$3
    shift 3
    for text in "$@"; do
        echo "== baselines: $m on $text" >&2
        $B perplexity -m "$m" -f "$text" --max-tokens "$n" --segments "$segments" --sweep-policies full \
            "${baselines[@]}" --sweep-budgets "${budgets[@]}" --jsonl "$out/calibrate_ppl.jsonl" >/dev/null 2>&1
    done
}

for part in ${PARTS:-stories260K eval5M}; do
    case $part in
        stories260K)
            calibrate "$stories" stories260K 512 0 "$cal_tiny" 0 "$held_tiny"
            baselines "$stories" 512 0 "$held_tiny"
            ;;
        eval5M)
            halves "$shared/data/wikitext-2/test.txt" wikitext2_test
            halves "$shared/data/moby-dick/moby_dick.txt" moby_dick
            wiki=$out/calibrate_wikitext2_test
            moby=$out/calibrate_moby_dick
            calibrate "$eval5m" eval5M_wikitext2 1024 64 "${wiki}_first_half.txt" 16 "${wiki}_second_half.txt" \
                "${moby}_second_half.txt"
            calibrate "$eval5m" eval5M_moby_dick 1024 64 "${moby}_first_half.txt" 16 "${moby}_second_half.txt"
            baselines "$eval5m" 1024 16 "${wiki}_second_half.txt" "${moby}_second_half.txt"
            ;;
        *) echo "run_calibrate.sh: unknown part '$part' in PARTS (expected stories260K, eval5M)" >&2; exit 2 ;;
    esac
done
