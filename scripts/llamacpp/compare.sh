#!/usr/bin/env bash
# Compares h2okv with an existing llama.cpp build on one GGUF model: the logits of both engines on the same
# random token ids (max |diff|, mean and max KL divergence, top-1 agreement), and optionally llama-bench
# next to `h2okv bench`.
#
# h2okv does not ship, fetch or build llama.cpp: point LLAMA_CPP_DIR at your own build (the folder holding
# include/llama.h, ggml/include/ggml.h and build/bin/libllama.so, or an install prefix with include/ and
# lib/). This script only compiles scripts/llamacpp/llama_logits.cpp (ours) against that library.
#
#   LLAMA_CPP_DIR=~/src/llama.cpp scripts/llamacpp/compare.sh /tmp/cmp/smollm-q8_0.gguf --bench
#
# Options: --threads N (2), --tokens N (256), --seed S (1), --kv-type f16|f32 (llama.cpp's KV cache; its
# default f16), --bench (also run llama-bench and h2okv bench: -p 512 -n 128, same threads, one repeat of each in turn), --repeats R (3),
# --depth D (with --bench: also decode 64 tokens after D cached tokens, llama.cpp's full cache against h2okv's
# full cache and h2okv's H2O cache at a 20 % budget; off by default, as filling the depth takes minutes),
# --decode-bench PATH (with --bench: the llama-bench that runs the decode tests, tg and depth, e.g. a
# GGML_NATIVE=ON build on a CPU whose AMX tiles trap on batches, while LLAMA_CPP_DIR's build runs pp),
# --work DIR (where ids, .npy files and JSON go; default a new folder under ${TMPDIR:-/tmp}), --results DIR
# (also write every figure as DIR/llamacpp_<model>.jsonl, which scripts/gen_results.py renders into
# docs/RESULTS.md). Both engines use the same KV type.
# Environment: H2OKV (the h2okv binary; default build/release, then build/dev of this checkout), PYTHON
# (a python3 with numpy; default /usr/bin/python3), CXX (default c++).
set -euo pipefail

die() {
    echo "compare.sh: error: $*" >&2
    exit 1
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

model="" threads=2 n_tokens=256 seed=1 kv_type=f16 bench=0 repeats=3 depth=0 work="" results="" decode_bench=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
        --tokens) n_tokens="${2:?--tokens needs a value}"; shift 2 ;;
        --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
        --kv-type) kv_type="${2:?--kv-type needs a value}"; shift 2 ;;
        --repeats) repeats="${2:?--repeats needs a value}"; shift 2 ;;
        --depth) depth="${2:?--depth needs a value}"; shift 2 ;;
        --work) work="${2:?--work needs a value}"; shift 2 ;;
        --results) results="${2:?--results needs a value}"; shift 2 ;;
        --decode-bench) decode_bench="${2:?--decode-bench needs a value}"; shift 2 ;;
        --bench) bench=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) [[ -z "$model" ]] || die "one model only (got '$model' and '$1')"; model="$1"; shift ;;
    esac
done
[[ -n "$model" ]] || die "no model given; usage: LLAMA_CPP_DIR=... compare.sh MODEL.gguf [--bench] (see --help)"
[[ -f "$model" ]] || die "model '$model' does not exist"
[[ "$kv_type" == f16 || "$kv_type" == f32 ]] || die "--kv-type '$kv_type': expected f16 or f32"
[[ "$depth" =~ ^[0-9]+$ ]] || die "--depth '$depth': expected a number of tokens (0: off)"
[[ "$depth" == 0 || "$bench" == 1 ]] || die "--depth needs --bench"

# The llama.cpp build: headers and libllama, never fetched or built here.
[[ -n "${LLAMA_CPP_DIR:-}" ]] ||
    die "LLAMA_CPP_DIR is not set; point it at an existing llama.cpp build (this script never downloads or builds llama.cpp)"
[[ -d "$LLAMA_CPP_DIR" ]] || die "LLAMA_CPP_DIR='$LLAMA_CPP_DIR' is not a directory"
lib_dir=""
for d in build/bin build/lib build/src lib lib64 bin; do
    if [[ -e "$LLAMA_CPP_DIR/$d/libllama.so" || -e "$LLAMA_CPP_DIR/$d/libllama.dylib" ]]; then
        lib_dir="$LLAMA_CPP_DIR/$d"
        break
    fi
done
[[ -n "$lib_dir" ]] ||
    die "no libllama.so under LLAMA_CPP_DIR='$LLAMA_CPP_DIR' (looked in build/bin, build/lib, build/src, lib, lib64, bin); point LLAMA_CPP_DIR at a llama.cpp build with shared libraries"
inc=()
for d in include ggml/include; do [[ -d "$LLAMA_CPP_DIR/$d" ]] && inc+=("-I$LLAMA_CPP_DIR/$d"); done
[[ -f "$LLAMA_CPP_DIR/include/llama.h" ]] || die "no include/llama.h under LLAMA_CPP_DIR='$LLAMA_CPP_DIR'"

h2okv="${H2OKV:-}"
if [[ -z "$h2okv" ]]; then
    for b in "$repo/build/release/tools/h2okv/h2okv" "$repo/build/dev/tools/h2okv/h2okv"; do
        [[ -x "$b" ]] && { h2okv="$b"; break; }
    done
fi
[[ -n "$h2okv" && -x "$h2okv" ]] || die "no h2okv binary (build it, or set H2OKV=/path/to/h2okv)"
python="${PYTHON:-/usr/bin/python3}"
"$python" -c "import numpy" 2>/dev/null || die "'$python' cannot import numpy (set PYTHON)"

work="${work:-$(mktemp -d "${TMPDIR:-/tmp}/h2okv-compare.XXXXXX")}"
mkdir -p "$work"
echo "compare.sh: model $model, llama.cpp libraries in $lib_dir, h2okv $h2okv, files in $work" >&2

# (b') our dumper, compiled against the user's libllama (rpath, so no LD_LIBRARY_PATH is needed).
"${CXX:-c++}" -O2 -std=c++17 "${inc[@]}" "$here/llama_logits.cpp" -L"$lib_dir" -Wl,-rpath,"$lib_dir" -lllama \
    -o "$work/llama_logits" || die "compiling llama_logits.cpp against $lib_dir failed"

# (a) the token ids: BOS, then uniform random ids (fixed seed).
"$h2okv" info -m "$model" --json | "$python" "$here/random_tokens.py" "$n_tokens" "$seed" "$work/ids.txt"

# (b) both engines' logits over the same ids.
"$work/llama_logits" -m "$model" --tokens-file "$work/ids.txt" -t "$threads" --kv-type "$kv_type" \
    -o "$work/llama.npy"
"$h2okv" logits -m "$model" --tokens-file "$work/ids.txt" -t "$threads" --kv-type "$kv_type" \
    -o "$work/h2okv.npy"

# llama.cpp against itself with flash attention off: how far two numerically sound llama.cpp paths already
# drift apart on this model. Random-weight models are chaotic (tiny margins, near one-hot attention), so this
# floor is what the h2okv figures are to be read against.
"$work/llama_logits" -m "$model" --tokens-file "$work/ids.txt" -t "$threads" --kv-type "$kv_type" \
    --flash-attn off -o "$work/llama_nofa.npy"

# (c) the comparison.
echo
echo "== logits: $(basename "$model"), $n_tokens positions, KV $kv_type in both =="
"$python" "$repo/scripts/compare_logits.py" "$work/llama.npy" "$work/h2okv.npy" --json "$work/compare.json"
echo
echo "== noise floor: llama.cpp (flash attention auto) vs llama.cpp (flash attention off) =="
"$python" "$repo/scripts/compare_logits.py" "$work/llama.npy" "$work/llama_nofa.npy" \
    --cand-name "llama.cpp, flash attention off" --json "$work/compare_floor.json"

# (d) speed, side by side: the same model, threads, prompt and generation lengths.
if [[ "$bench" == 1 ]]; then
    llama_bench=""
    for b in "$lib_dir/llama-bench" "$LLAMA_CPP_DIR/build/bin/llama-bench" "$LLAMA_CPP_DIR/bin/llama-bench"; do
        [[ -x "$b" ]] && { llama_bench="$b"; break; }
    done
    [[ -n "$llama_bench" ]] || die "--bench: no llama-bench next to libllama or under LLAMA_CPP_DIR"
    decode_bench="${decode_bench:-$llama_bench}"
    [[ -x "$decode_bench" ]] || die "--decode-bench '$decode_bench' is not an executable"
    echo
    echo "== speed: -p 512 -n 128, $threads threads, $repeats repeats (interleaved) =="
    echo "   prefill: $llama_bench; decode: $decode_bench" >&2
    # One repeat of each engine in turn, so both see the same machine load; the table takes the medians.
    rm -f "$work"/llama_bench_*.json "$work"/llama_decode_*.json "$work/h2okv_pp.json" "$work/h2okv_tg.json"
    for r in $(seq "$repeats"); do
        "$llama_bench" -m "$model" -p 512 -n 0 -t "$threads" -r 1 -o json >"$work/llama_bench_$r.json"
        "$decode_bench" -m "$model" -p 0 -n 128 -t "$threads" -r 1 -o json >"$work/llama_decode_$r.json"
        "$h2okv" bench -m "$model" -p 512 -n 0 -t "$threads" -r 1 --seed "$r" --kv-type "$kv_type" --json \
            >>"$work/h2okv_pp.json"
        "$h2okv" bench -m "$model" -p 0 -n 128 -t "$threads" -r 1 --seed "$r" --kv-type "$kv_type" --json \
            >>"$work/h2okv_tg.json"
    done
    bench_files=("$work"/llama_bench_*.json "$work"/llama_decode_*.json)
    if [[ "$depth" != 0 ]]; then
        echo "== speed at depth $depth: -n 64 after $depth cached tokens, $repeats repeats (interleaved) =="
        rm -f "$work"/llama_depth_*.json "$work/h2okv_depth_full.json" "$work/h2okv_depth_h2o.json"
        for r in $(seq "$repeats"); do
            "$decode_bench" -m "$model" -d "$depth" -p 0 -n 64 -t "$threads" -r 1 -o json >"$work/llama_depth_$r.json"
            "$h2okv" bench -m "$model" --depth "$depth" -p 0 -n 64 -t "$threads" -r 1 --seed "$r" \
                --kv-type "$kv_type" --json >>"$work/h2okv_depth_full.json"
            # The settings of scripts/run_speed.sh's depth test: 64-token prefill chunks need 64 slots beyond
            # the budget.
            "$h2okv" bench -m "$model" --depth "$depth" -p 0 -n 64 -t "$threads" -r 1 --seed "$r" \
                --kv-type "$kv_type" --kv-policy h2o --kv-budget 0.2 --kv-prefill-chunk 64 --json \
                >>"$work/h2okv_depth_h2o.json"
        done
        bench_files+=("$work"/llama_depth_*.json --depth "$work/h2okv_depth_full.json" "$work/h2okv_depth_h2o.json")
    fi
    "$python" "$here/bench_table.py" "$work/h2okv_pp.json" "$work/h2okv_tg.json" "${bench_files[@]}" \
        --json "$work/bench.json"
fi

# (e) one record of everything, for docs/RESULTS.md.
if [[ -n "$results" ]]; then
    mkdir -p "$results"
    out="$results/llamacpp_$(basename "$model" .gguf).jsonl"
    "$python" - "$work" "$model" "$threads" "$kv_type" "$n_tokens" "${llama_bench:-}" "${decode_bench:-}" \
        "$("$h2okv" bench -m "$model" -p 1 -n 0 -r 1 --json 2>/dev/null | "$python" -c 'import json,sys; print(json.load(sys.stdin)["cpu"])' || echo unknown)" \
        >"$out" <<'PY'
import json, os, sys
work, model, threads, kv_type, n_tokens, prefill_bench, decode_bench, cpu = sys.argv[1:]
def read(name):
    path = os.path.join(work, name)
    return json.load(open(path)) if os.path.exists(path) else None
print(json.dumps({"model": model, "threads": int(threads), "kv_type": kv_type, "n_tokens": int(n_tokens),
                  "cpu": cpu, "llama_cpp_prefill_bench": prefill_bench, "llama_cpp_decode_bench": decode_bench,
                  "logits": read("compare.json"), "floor": read("compare_floor.json"), "bench": read("bench.json")}))
PY
    echo "compare.sh: wrote $out" >&2
fi
