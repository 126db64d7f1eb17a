#!/usr/bin/env bash
# Installs a built tree into a temporary prefix and uses it as an outsider would (issue #19):
#   1. builds tests/install/consumer (examples/simple.c, examples/policy_only.c) with find_package(h2okv CONFIG)
#      and with pkg-config, and runs both: simple's stdout must equal the in-tree `h2okv generate`'s, and
#      policy_only's the in-tree example's;
#   2. checks that the shared libraries export only the C API's h2okv_* symbols, and that h2okv-policy's flags
#      hide the engine's declarations;
#   3. moves the prefix and runs the installed CLI with no -m from another folder: it finds its bundled model
#      relative to itself (share/h2okv/models/), and so does pkg-config (the .pc files locate the prefix).
# Usage: scripts/check_install.sh [BUILD_DIR]   (default build/ci, already built: make test)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build/ci}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
log="$tmp/log"
step() { echo "check_install: $*"; }
quiet() { "$@" >>"$log" 2>&1 || { tail -n 40 "$log"; echo "check_install: failed: $*"; exit 1; }; }

cmake --build "$build" --target h2okv h2okv_c h2okv_c_policy simple policy_only -j "$(nproc)" >>"$log" 2>&1 ||
    { tail -n 40 "$log"; exit 1; }
prefix="$tmp/prefix"
step "cmake --install $build --prefix <tmp>/prefix"
quiet cmake --install "$build" --prefix "$prefix"
pcdir="$(dirname "$(find "$prefix" -name h2okv.pc)")"
libdir="$(dirname "$pcdir")"

step "exported symbols"
for lib in "$libdir"/libh2okv.so "$libdir"/libh2okv_policy.so; do
    extra="$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^h2okv_' || true)"
    [ -z "$extra" ] || { echo "$lib exports more than h2okv_*: $extra"; exit 1; }
done

step "consumer with find_package(h2okv CONFIG)"
quiet cmake -S "$root/tests/install/consumer" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
quiet cmake --build "$tmp/cmake"
step "consumer with pkg-config"
quiet env PKG_CONFIG_PATH="$pcdir" make -C "$root/tests/install/consumer" OUT="$tmp/pc"

# The policy library's flags hide the engine's declarations: a program calling them does not compile.
if PKG_CONFIG_PATH="$pcdir" cc -std=c99 -Werror $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags h2okv-policy) \
    -c "$root/examples/simple.c" -o "$tmp/simple.o" 2>>"$log"; then
    echo "check_install: simple.c compiled with h2okv-policy's flags (H2OKV_POLICY_ONLY hid nothing)"; exit 1
fi

model="$root/models/stories260K.gguf"
prompt="Once upon a time"
expected="$("$build/tools/h2okv/h2okv" generate -m "$model" -p "$prompt" -n 64 --kv-policy h2o --kv-budget 0.2 \
    --kv-decay 0.98 2>/dev/null)"
expected_policy="$("$build/examples/policy_only")"
for dir in "$tmp/cmake" "$tmp/pc"; do
    got="$("$dir/simple" -m "$model" -p "$prompt" -n 64 --kv "h2o:budget=0.2,decay=0.98" 2>/dev/null)"
    [ "$got" = "$expected" ] || { printf 'simple (%s): %q\nexpected:      %q\n' "$dir" "$got" "$expected"; exit 1; }
    [ "$("$dir/policy_only")" = "$expected_policy" ] || { echo "policy_only ($dir) differs from the in-tree one"; exit 1; }
done
step "simple and policy_only from both builds print what the in-tree h2okv generate and policy_only print"

step "the installed CLI, moved, with no -m, from /"
mv "$prefix" "$tmp/moved"
got="$(cd / && env -u H2OKV_MODEL "$tmp/moved/bin/h2okv" generate -p "$prompt" -n 64 --kv-policy h2o --kv-budget 0.2 \
    --kv-decay 0.98 2>/dev/null)"
[ "$got" = "$expected" ] || { printf 'installed h2okv: %q\nexpected:        %q\n' "$got" "$expected"; exit 1; }
# Without its bundled model it says where it looked.
mv "$tmp/moved/share/h2okv/models" "$tmp/models-away"
if err="$(cd / && env -u H2OKV_MODEL "$tmp/moved/bin/h2okv" generate -p "$prompt" -n 4 2>&1)"; then
    echo "the installed CLI ran without a model"; exit 1
fi
grep -q "share/h2okv/models/stories260K.gguf" <<<"$err" || { echo "no searched paths in: $err"; exit 1; }
got="$(H2OKV_MODEL="$model" "$tmp/moved/bin/h2okv" generate -p "$prompt" -n 64 --kv-policy h2o --kv-budget 0.2 \
    --kv-decay 0.98 2>/dev/null)"
[ "$got" = "$expected" ] || { echo "H2OKV_MODEL was not used"; exit 1; }
moved_libdir="$(PKG_CONFIG_PATH="${pcdir/$prefix/$tmp/moved}" pkg-config --variable=libdir h2okv)"
[ -e "$moved_libdir/libh2okv.so" ] || { echo "pkg-config's libdir after the move, $moved_libdir, has no libh2okv.so"; exit 1; }
step "ok: the moved prefix's CLI finds its model relative to itself, H2OKV_MODEL overrides, a missing one names the paths; pkg-config follows the move"
