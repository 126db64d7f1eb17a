#!/usr/bin/env bash
# Installs the Debian 12 packages h2okv needs to build, test and plot. Idempotent: does nothing (and needs no
# network) when everything is present. Run as root, or with sudo available.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libcli11-dev nlohmann-json3-dev libpcre2-dev
  libcpp-httplib-dev curl  # h2okv serve (cpp-httplib); its tests talk to it with curl too
  clang-format
  clang libclang-rt-14-dev libomp-dev  # scripts/fuzz.sh: clang, libFuzzer, clang's OpenMP
  python3 python3-numpy python3-matplotlib
  python3-dev pybind11-dev python3-pybind11  # the Python module (python/, docs/PYTHON.md)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
