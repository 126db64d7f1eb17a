#!/usr/bin/env bash
# Many sequences at once, side by side with llama.cpp's llama-batched-bench on one GGUF model: for each batch
# size B, B prompts of P tokens processed (prefill tokens/s summed over the sequences), then G tokens decoded
# per sequence, one token of every sequence per step (decode tokens/s summed); `h2okv bench --sequences B
# -p P -n G` measures the same two phases. Both engines keep every token (full cache, KV f16).
#
# h2okv does not ship, fetch or build llama.cpp: point LLAMA_CPP_DIR at your own build (a folder with
# build/bin/llama-batched-bench, or bin/). On CPUs whose AMX tiles trap under virtualisation, use a build
# with GGML_NATIVE=OFF, the AVX-512 flags on and AMX off (docs/PERFORMANCE.md).
#
#   LLAMA_CPP_DIR=~/src/llama.cpp scripts/llamacpp/batched.sh /tmp/cmp/smollm-q8_0.gguf --results results
#
# Options: --threads N (2), --npp P (128), --ntg G (64), --npl "1 2 4 8 16", --repeats R (1; engines take
# turns, one run each), --results DIR (every pair as a row of DIR/batched_<model>.jsonl, which
# scripts/gen_results.py renders into docs/RESULTS.md; a row replaces the file's earlier one of the same batch
# size, prompt and generation lengths, so a run with another --npp adds its rows to the same file).
# Environment: H2OKV (the h2okv binary; default build/release of this checkout), LLAMA_CPP_COMMIT (recorded;
# default: git rev-parse in LLAMA_CPP_DIR).
set -euo pipefail

die() {
    echo "batched.sh: error: $*" >&2
    exit 1
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
model="" threads=2 npp=128 ntg=64 npl="1 2 4 8 16" repeats=1 results=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
        --npp) npp="${2:?--npp needs a value}"; shift 2 ;;
        --ntg) ntg="${2:?--ntg needs a value}"; shift 2 ;;
        --npl) npl="${2:?--npl needs a value}"; shift 2 ;;
        --repeats) repeats="${2:?--repeats needs a value}"; shift 2 ;;
        --results) results="${2:?--results needs a value}"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option '$1' (see --help)" ;;
        *) [[ -z "$model" ]] || die "one model only (got '$model' and '$1')"; model="$1"; shift ;;
    esac
done
[[ -n "$model" ]] || die "no model given; usage: LLAMA_CPP_DIR=... batched.sh MODEL.gguf (see --help)"
[[ -f "$model" ]] || die "model '$model' does not exist"
[[ -n "${LLAMA_CPP_DIR:-}" ]] ||
    die "LLAMA_CPP_DIR is not set; point it at an existing llama.cpp build (this script never downloads or builds llama.cpp)"
llama=""
for b in "$LLAMA_CPP_DIR/build/bin/llama-batched-bench" "$LLAMA_CPP_DIR/bin/llama-batched-bench"; do
    [[ -x "$b" ]] && { llama="$b"; break; }
done
[[ -n "$llama" ]] || die "no llama-batched-bench under LLAMA_CPP_DIR='$LLAMA_CPP_DIR' (build/bin or bin)"
h2okv="${H2OKV:-$repo/build/release/tools/h2okv/h2okv}"
[[ -x "$h2okv" ]] || die "no h2okv binary at '$h2okv' (make release, or set H2OKV)"
commit=${LLAMA_CPP_COMMIT:-$(git -C "$LLAMA_CPP_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)}

work=$(mktemp -d "${TMPDIR:-/tmp}/h2okv-batched.XXXXXX")
echo "batched.sh: model $model, $llama (commit $commit), h2okv $h2okv, files in $work" >&2
for r in $(seq "$repeats"); do
    for b in $npl; do
        echo "== batch $b: P $npp, G $ntg, repeat $r/$repeats" >&2
        # One context holding every sequence (its KV cache keeps every token), the prompts in 512-token ubatches.
        "$llama" -m "$model" -c $((b * (npp + ntg) + 16)) -b 2048 -ub 512 -npp "$npp" -ntg "$ntg" -npl "$b" \
            -t "$threads" --output-format jsonl 2>/dev/null | grep '^{' >>"$work/llama.jsonl"
        "$h2okv" bench -m "$model" --sequences "$b" -p "$npp" -n "$ntg" -t "$threads" -r 1 --seed "$r" --json \
            >>"$work/h2okv.jsonl"
    done
done

/usr/bin/python3 - "$work" "$model" "$threads" "$commit" "${results:-}" <<'PY'
import json, os, statistics, sys
work, model, threads, commit, results = sys.argv[1:]
llama = [json.loads(l) for l in open(os.path.join(work, "llama.jsonl"))]
ours = [json.loads(l) for l in open(os.path.join(work, "h2okv.jsonl"))]
rows = []
print(f"| B | P | G | llama.cpp pp t/s | h2okv pp t/s | ratio | llama.cpp tg t/s | h2okv tg t/s | ratio |")
print("|---|---|---|---|---|---|---|---|---|")
for b in sorted({r["pl"] for r in llama}):
    l = [r for r in llama if r["pl"] == b]
    h = [r for r in ours if r["sequences"] == b]
    row = {"model": model, "threads": int(threads), "llama_cpp_commit": commit, "sequences": b,
           "n_prompt": l[0]["pp"], "n_gen": l[0]["tg"], "repeats": len(l),
           "llama_cpp_prefill_tps": statistics.median(r["speed_pp"] for r in l),
           "llama_cpp_decode_tps": statistics.median(r["speed_tg"] for r in l),
           "h2okv_prefill_tps": statistics.median(r["prefill_tps"] for r in h),
           "h2okv_decode_tps": statistics.median(r["decode_tps"] for r in h),
           "h2okv_isa": h[0]["isa"], "cpu": h[0]["cpu"], "kv_type": h[0]["kv_type"]}
    rows.append(row)
    print(f"| {b} | {row['n_prompt']} | {row['n_gen']} | {row['llama_cpp_prefill_tps']:.1f} | "
          f"{row['h2okv_prefill_tps']:.1f} | {row['h2okv_prefill_tps'] / row['llama_cpp_prefill_tps']:.2f}x | "
          f"{row['llama_cpp_decode_tps']:.1f} | {row['h2okv_decode_tps']:.1f} | "
          f"{row['h2okv_decode_tps'] / row['llama_cpp_decode_tps']:.2f}x |")
if results:
    os.makedirs(results, exist_ok=True)
    out = os.path.join(results, "batched_" + os.path.basename(model)[:-len(".gguf")] + ".jsonl")
    # This run's rows replace earlier ones of the same batch size, prompt and generation lengths; rows of
    # other sizes (another --npp) stay.
    key = lambda r: (r["sequences"], r["n_prompt"], r["n_gen"])
    new = {key(r) for r in rows}
    kept = []
    if os.path.exists(out):
        with open(out) as f:
            kept = [line for line in f if line.strip() and key(json.loads(line)) not in new]
    with open(out, "w") as f:
        f.writelines(kept)
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"batched.sh: wrote {out} ({len(rows)} rows of this run, {len(kept)} of other sizes kept)", file=sys.stderr)
PY
