#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan, -DH2OKV_FUZZ=ON) and runs each for a
# bounded time, starting from its seed corpus. Fails on the first crash, sanitizer report, timeout (a single
# input over 10 s) or out-of-memory, and prints the reproducer's path.
#
#   scripts/fuzz.sh                 # every target, 30 s each
#   scripts/fuzz.sh 10 gguf policy_rows
#   FUZZ_BUILD=build/fuzz JOBS=2 scripts/fuzz.sh
# Reproduce a finding: build/fuzz/tests/fuzz/fuzz_<target> <reproducer file>
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(gguf tokenizer policy_spec policy_rows)
fi
build=${FUZZ_BUILD:-build/fuzz}
jobs=${JOBS:-$(nproc)}

# Line tables only (-g1), quicker to compile than -g; -O2: at -O1 the GGUF target ran 30x fewer inputs a second.
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH2OKV_FUZZ=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" -DH2OKV_BUILD_TESTS=OFF -DH2OKV_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"

status=0
for t in "${targets[@]}"; do
  seeds=tests/fuzz/corpus/$t
  work=$build/fuzz-corpus/$t          # grows across runs; the seeds stay as committed
  artifacts=$build/fuzz-artifacts/$t/
  log=$build/fuzz-$t.log
  mkdir -p "$work" "$artifacts"
  echo "fuzz: $t for ${seconds} s"
  if "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts" "$work" "$seeds" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    corpus=$(ls "$work" | wc -l)
    echo "fuzz: $t ok: ${runs:-?} executions, corpus $corpus inputs"
  else
    status=1
    echo "fuzz: $t FAILED; the last lines of $log:"
    tail -n 40 "$log"
    echo "fuzz: reproducers: $(ls "$artifacts" | sed "s|^|$artifacts|" | tr '\n' ' ')"
  fi
done
exit $status
