#!/usr/bin/env bash
# The test command: installs what is needed, builds with warnings as errors, runs a short
# fuzz smoke run of every reader entry point, then every CTest test. Exit status is CTest's.
# FUZZ_SECONDS (default 20) sets the fuzzing time per target; 0 skips fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh

cmake --preset dev
cmake --build --preset dev

fuzz_seconds="${FUZZ_SECONDS:-20}"
if [ "$fuzz_seconds" != 0 ]; then
  cmake --preset fuzz
  cmake --build --preset fuzz --target make_fuzz_seeds fuzz_trace_file fuzz_trace_index \
    fuzz_record_decode
  tests/fuzz/smoke.sh build/fuzz "$fuzz_seconds"
fi

ctest --preset dev
