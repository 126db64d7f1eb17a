#!/usr/bin/env bash
# Produces the JSONL files of docs/RESULTS.md's "Rolling positions" section (`make results` runs it after
# run_results.sh; `make rolling` alone): streaming perplexity against position far past the trained context
# in both position modes, the 4096-token comparison with the window, a 1M-token stream's memory and speed,
# decode speed at depth in both modes, and the accuracy of the two ways of rotating stored keys.
# Usage: scripts/run_rolling.sh [--only PART] [OUT_DIR]   (default: results/). Needs ../shared (models and
# data). Writes only rolling_*.jsonl (each part removes its own files first); about 30 minutes on 2 cores, the
# instruction counts under valgrind (when installed) about 19 of them. --only runs one part:
#   curves   perplexity per window of positions (rolling_ppl_MODEL.jsonl)
#   compare  4096 tokens at a budget of 128, every evicting policy against the window (rolling_ppl4096.jsonl)
#   stream   the 1M-token stream (rolling_stream.jsonl)
#   speed    decode speed at depth and instructions per token (rolling_speed.jsonl, rolling_instructions.jsonl)
#   drift    turning keys when attended against re-rotating them in place (rolling_drift.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
parts="curves compare stream speed drift"
if [ "${1:-}" = --only ]; then
    case " $parts " in
        *" ${2:-} "*) parts=$2 ;;
        *) echo "run_rolling: --only takes one of: $parts (got '${2:-}')" >&2; exit 2 ;;
    esac
    shift 2
fi
out=${1:-results}
B=${H2OKV_BIN:-./build/release/tools/h2okv/h2okv}
shared=../shared
mkdir -p "$out"

stories=models/stories260K.gguf
eval5m=$shared/models/h2o-eval-5M/h2o-eval-llama-5M.gguf
tiny_text=$shared/data/tinystories/tinystories_val_head.txt
held_out=$shared/data/moby-dick/moby_dick.txt
# tova twice: as its paper scores, a layer's heads averaged so they keep one set (its default granularity,
# layer; kvpress's TOVAPress, reviewed by a TOVA author, does the same), and per KV head (granularity head).
policies=(window streaming:sinks=4 h2o h2o:decay=0.98 tova tova:granularity=head)
# The comparison also runs the rest of the policy family (the registry's other evicting policies).
family=(scissorhands keyformer snapkv l2norm keydiff)

curves() {  # MODEL TEXT N WINDOW NAME full|no-full BUDGETS...
    local m=$1 f=$2 n=$3 w=$4 name=$5 full=$6
    shift 6
    [ "$full" = full ] || full=  # the full cache runs once (it ignores positions)
    for pos in original rolling; do
        echo "== rolling: $name, $pos positions ($n tokens)" >&2
        $B perplexity -m "$m" -f "$f" --max-tokens "$n" -c "$n" --kv-positions $pos --nll-window "$w" \
            --sweep-policies $full "${policies[@]}" --sweep-budgets "$@" --jsonl "$out/rolling_ppl_$name.jsonl" \
            2>/dev/null
        full=
    done
}

part_curves() {
    rm -f "$out"/rolling_ppl_*.jsonl
    # Perplexity per window of positions: the bundled model (trained on 512-token sequences) over 8192 tokens
    # of TinyStories, the 5M model (1024-token context) over 16384 tokens of held-out Moby Dick. The 5M
    # model's full cache is left out: 16384 positions of full attention took over 15 minutes on 2 cores.
    curves $stories "$tiny_text" 8192 256 stories260K full 64 128 256
    curves "$eval5m" "$held_out" 16384 512 eval5M no-full 128 256
}

part_compare() {
    rm -f "$out"/rolling_ppl4096.jsonl
    # The issue's comparison: 4096 TinyStories tokens at a budget of 128, every evicting policy in both modes.
    for pos in original rolling; do
        $B perplexity -f "$tiny_text" --max-tokens 4096 --kv-positions $pos \
            --sweep-policies "${policies[@]}" "${family[@]}" --sweep-budgets 128 \
            --jsonl "$out/rolling_ppl4096.jsonl" 2>/dev/null
    done
}

part_stream() {
    rm -f "$out"/rolling_stream.jsonl
    # A 1M-token stream in fixed memory: resident memory and tokens/s against tokens processed.
    echo "== rolling: 1M-token stream" >&2
    $B generate -p "Once upon a time" -n 1000000 --ignore-eos --kv-policy h2o --kv-budget 128 \
        --kv-positions rolling --stream-stats "$out/rolling_stream.jsonl" --stream-every 20000 >/dev/null 2>&1
}

part_speed() {
    rm -f "$out"/rolling_speed.jsonl "$out"/rolling_instructions.jsonl
    # Decode speed at depth in both modes (one thread, runs interleaved so machine noise hits both alike).
    for rep in 1 2 3; do
        for pos in original rolling; do
            for m in "$eval5m" "$stories"; do
                $B bench -m "$m" -t 1 -p 16 -n 128 --depth 2048 --kv-policy h2o --kv-budget 256 \
                    --kv-positions $pos --json 2>/dev/null >>"$out/rolling_speed.jsonl"
            done
        done
    done
    # The same comparison as instructions executed per decoded token (valgrind's cachegrind: a count that the
    # machine's noise does not move; valgrind reports no AVX-512, so the AVX2 kernels run): a run decoding
    # n + 1 tokens minus one decoding 1, over n.
    if ! command -v valgrind >/dev/null; then
        echo "run_rolling: valgrind is not installed (Debian: valgrind); the instruction counts are left out" >&2
        return
    fi
    instructions() {  # MODEL POSITIONS N_DECODE
        valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null $B bench -m "$1" -t 1 -p 16 \
            -n "$3" --depth 512 --repeats 1 --kv-policy h2o --kv-budget 256 --kv-positions "$2" 2>&1 >/dev/null |
            sed -n 's/.*I *refs: *//p' | tr -d ,
    }
    for m in "$stories" "$eval5m"; do
        n=$([ "$m" = "$stories" ] && echo 512 || echo 128)
        for pos in original rolling; do
            one=$(instructions "$m" $pos 1)
            many=$(instructions "$m" $pos $((n + 1)))
            echo "{\"model\": \"$m\", \"positions\": \"$pos\", \"depth\": 512, \"decoded\": $n," \
                "\"instructions_per_token\": $(((many - one) / n))}" >>"$out/rolling_instructions.jsonl"
        done
    done
}

part_drift() {
    rm -f "$out"/rolling_drift.jsonl
    /usr/bin/python3 scripts/rolling_drift.py "$out/rolling_drift.jsonl" >/dev/null
}

for p in $parts; do "part_$p"; done
