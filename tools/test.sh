#!/usr/bin/env bash
# The test command: installs what is needed, then
#   1. a short fuzz smoke run of every trace-reader entry point and of what the tracer reads in
#      the traced process (clang, libFuzzer, ASan+UBSan);
#   2. the whole suite under ASan+UBSan, and the concurrency tests of the writer, the reader's
#      read-ahead and the tracer's record rings under TSan;
#   3. the whole suite in the dev build (warnings are errors) — its summary ends the output,
#      before the total time.
# FUZZ_SECONDS (default 20) sets the fuzzing time per target; 0 skips fuzzing.
# SANITIZERS=0 skips step 2. The exit status is non-zero if anything failed. Each step's start
# is said on a `test.sh:` line with the seconds since the command began (the budget: 25 min).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "test.sh: $1 (at ${SECONDS} s)"; }

step "installing dependencies"
tools/install-deps.sh

fuzz_seconds="${FUZZ_SECONDS:-20}"
if [ "$fuzz_seconds" != 0 ]; then
  step "fuzz smoke run"
  cmake --preset fuzz
  cmake --build --preset fuzz --target make_fuzz_seeds fuzz_trace_file fuzz_trace_index \
    fuzz_record_decode fuzz_pin_table fuzz_live_verify
  tests/fuzz/smoke.sh build/fuzz "$fuzz_seconds"
fi

if [ "${SANITIZERS:-1}" != 0 ]; then
  step "ASan+UBSan build and suite"
  cmake --preset asan
  cmake --build --preset asan
  ctest --preset asan
  step "TSan build and concurrency tests"
  cmake --preset tsan
  cmake --build --preset tsan --target trace_writer_test trace_reader_test record_ring_test
  ctest --preset tsan -R "trace_writer_test|trace_reader_test:read-ahead|record_ring_test"
fi

step "dev build"
cmake --preset dev
cmake --build --preset dev
step "dev suite"
ctest --preset dev
step "done"
