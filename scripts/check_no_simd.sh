#!/usr/bin/env bash
# Builds the kernels and the policy layer without any x86 SIMD code (-DH2OKV_KERNELS_NO_SIMD: what a non-x86
# target compiles, src/kernels/dispatch.h) and runs their tests there: the reference kernels and the scalar
# score pass must build on their own, warnings as errors, and pass. `H2OKV_ISA=scalar` (the second test pass
# of .ci/run) runs the same code inside the SIMD build; this is the build that has no SIMD code at all.
# Usage: scripts/check_no_simd.sh [BUILD_DIR]   (default build/nosimd). A few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/nosimd}
jobs=$(nproc)
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH2OKV_WERROR=ON -DH2OKV_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS=-DH2OKV_KERNELS_NO_SIMD -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" >/dev/null
cmake --build "$dir" --target test_unit_core test_kernels test_policy -j "$jobs"
# Without SIMD code the ISA in use is the scalar one, whatever the CPU offers.
"$dir/tests/test_unit_core" --gtest_brief=1
"$dir/tests/test_kernels" --gtest_brief=1
"$dir/tests/test_policy" --gtest_brief=1
echo "check_no_simd: the kernels and the policy layer build and pass without x86 SIMD code"
