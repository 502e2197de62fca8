#!/usr/bin/env bash
# The test command: installs what is needed, then
#   1. a short fuzz smoke run of every trace-reader entry point and of what the tracer reads in
#      the traced process (clang, libFuzzer, ASan+UBSan);
#   2. the whole suite under ASan+UBSan, and the concurrency tests of the writer, the reader's
#      read-ahead and the tracer's record rings under TSan;
#   3. the whole suite in the dev build (warnings are errors) — its summary closes the output.
# FUZZ_SECONDS (default 20) sets the fuzzing time per target; 0 skips fuzzing.
# SANITIZERS=0 skips step 2. The exit status is non-zero if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh

fuzz_seconds="${FUZZ_SECONDS:-20}"
if [ "$fuzz_seconds" != 0 ]; then
  cmake --preset fuzz
  cmake --build --preset fuzz --target make_fuzz_seeds fuzz_trace_file fuzz_trace_index \
    fuzz_record_decode fuzz_pin_table fuzz_live_verify
  tests/fuzz/smoke.sh build/fuzz "$fuzz_seconds"
fi

if [ "${SANITIZERS:-1}" != 0 ]; then
  cmake --preset asan
  cmake --build --preset asan
  if ! ctest --preset asan; then
    # LeakSanitizer's stop-the-world tracer itself crashes now and then when a test process
    # exits under load ("Tracer caught signal 11", "LeakSanitizer has encountered a fatal
    # error" after the test's own output): no finding of the test. Only when every failure is
    # that one are the failed tests run once more; anything else fails here.
    log=build/asan/Testing/Temporary/LastTest.log
    other=$(awk '/^[0-9]+\/[0-9]+ Testing: / {lsan = 0}
                 /LeakSanitizer has encountered a fatal error/ {lsan = 1}
                 /^Test Failed\./ && !lsan {n++}
                 END {print n + 0}' "$log")
    if [ "$other" != 0 ]; then exit 1; fi
    echo "tools/test.sh: only LeakSanitizer's own tracer failed; running those tests again"
    ctest --preset asan --rerun-failed
  fi
  cmake --preset tsan
  cmake --build --preset tsan --target trace_writer_test trace_reader_test record_ring_test
  ctest --preset tsan -R "trace_writer_test|trace_reader_test:read-ahead|record_ring_test"
fi

cmake --preset dev
cmake --build --preset dev
ctest --preset dev
