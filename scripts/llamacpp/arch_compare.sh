#!/usr/bin/env bash
# Compares h2okv with llama.cpp on one small synthetic GGUF per architecture and RoPE variant (the *-tiny
# shapes of `h2okv gguf synth`): the logits over the same 256 random token ids (scripts/llamacpp/compare.sh),
# next to llama.cpp's own flash-attention on/off difference as the noise floor. Writes one JSON line per
# shape and weight type to RESULTS/arch_<shape>.jsonl, which scripts/gen_results.py renders into
# docs/RESULTS.md.
#
#   LLAMA_CPP_DIR=~/src/llama.cpp H2OKV=build/release/tools/h2okv/h2okv scripts/llamacpp/arch_compare.sh
#
# Options: --results DIR (results), --work DIR (a new folder under ${TMPDIR:-/tmp}), --types "f32 q8_0"
# (weight types), --shapes "llama3-tiny ..." (default: every shape whose name ends in -tiny), --threads N (2).
# Environment: as compare.sh (LLAMA_CPP_DIR, H2OKV, PYTHON).
set -euo pipefail

die() {
    echo "arch_compare.sh: error: $*" >&2
    exit 1
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
results="$repo/results" work="" types="f32 q8_0" shapes="" threads=2
while [[ $# -gt 0 ]]; do
    case "$1" in
        --results) results="${2:?--results needs a value}"; shift 2 ;;
        --work) work="${2:?--work needs a value}"; shift 2 ;;
        --types) types="${2:?--types needs a value}"; shift 2 ;;
        --shapes) shapes="${2:?--shapes needs a value}"; shift 2 ;;
        --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
h2okv="${H2OKV:-$repo/build/release/tools/h2okv/h2okv}"
[[ -x "$h2okv" ]] || die "no h2okv binary at '$h2okv' (build it, or set H2OKV)"
python="${PYTHON:-/usr/bin/python3}"
if [[ -z "$shapes" ]]; then
    # The shape list of `gguf synth --help` ("Model shape: a, b, c").
    shapes="$("$h2okv" gguf synth --help | sed -n 's/.*Model shape: //p' | tr ',' '\n' | sed 's/ //g' |
        grep -- '-tiny$' | tr '\n' ' ')"
fi
[[ -n "$shapes" ]] || die "no shapes to compare"
work="${work:-$(mktemp -d "${TMPDIR:-/tmp}/h2okv-arch.XXXXXX")}"
mkdir -p "$work" "$results"

for shape in $shapes; do
    out="$results/arch_$shape.jsonl"
    : >"$out"
    for type in $types; do
        dir="$work/${shape}_$type"
        mkdir -p "$dir"
        model="$dir/$shape-$type.gguf"
        "$h2okv" gguf synth --shape "$shape" --type "$type" -o "$model" --seed 1
        H2OKV="$h2okv" "$here/compare.sh" "$model" --threads "$threads" --work "$dir" >"$dir/compare.log" 2>&1 ||
            die "compare.sh failed on $model; see $dir/compare.log"
        arch="$("$h2okv" info -m "$model" --json | "$python" -c '
import json, sys
print(next(m["value"] for m in json.load(sys.stdin)["metadata"] if m["key"] == "general.architecture"))')"
        "$python" - "$dir" "$shape" "$type" "$arch" "$threads" >>"$out" <<'PY'
import json, os, sys
d, shape, type_, arch, threads = sys.argv[1:]
read = lambda n: json.load(open(os.path.join(d, n)))
print(json.dumps({"shape": shape, "type": type_, "arch": arch, "threads": int(threads), "kv_type": "f16",
                  "logits": read("compare.json"), "floor": read("compare_floor.json")}))
PY
        echo "arch_compare.sh: $shape $type done" >&2
    done
    echo "arch_compare.sh: wrote $out" >&2
done
