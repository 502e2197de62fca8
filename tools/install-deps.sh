#!/usr/bin/env bash
# Installs the Debian packages ndtrace builds and tests with (apt-get update first), and
# nothing when they are all there already. The CUDA toolkit is not needed to build or test.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config python3
  capnproto libcapnp-dev libzstd-dev zstd libxxhash-dev
  catch2 libcli11-dev libfmt-dev nlohmann-json3-dev
  clang libclang-rt-14-dev  # libFuzzer and the sanitizers
  chromium                  # renders the HTML report in tests/report/
  python3-torch  # a real (CPU-only) PyTorch for /usr/bin/python3: tests/python/
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
