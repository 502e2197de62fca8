#!/usr/bin/env bash
# Fuzz smoke run: writes the seed corpora with the real writer, then fuzzes each target for
# SECONDS (default 20). Any crash, leak, sanitizer report, input slower than 2 s or single
# allocation above 128 MiB fails the run; the reproducer is left in BUILD/fuzz-artifacts/.
# Usage: tests/fuzz/smoke.sh BUILD_DIR [SECONDS]
set -euo pipefail
build="${1:?usage: smoke.sh BUILD_DIR [SECONDS]}"
seconds="${2:-20}"
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
rm -rf "$corpus"
mkdir -p "$artifacts"
"$build/tests/fuzz/make_fuzz_seeds" "$corpus"
# One fuzzer per core at a time: each still fuzzes for SECONDS of its own core.
jobs=$(nproc 2>/dev/null || echo 1)
targets=(trace_file trace_index record_decode pin_table live_verify)
fuzz() {
  "$build/tests/fuzz/fuzz_$1" "$corpus/$1" -max_total_time="$seconds" -timeout=2 \
    -malloc_limit_mb=128 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$1-" 2>"$build/fuzz-$1.log"
}
failed=0
for ((first = 0; first < ${#targets[@]}; first += jobs)); do
  batch=("${targets[@]:first:jobs}")
  pids=()
  for target in "${batch[@]}"; do
    echo "fuzz: $target for ${seconds}s"
    fuzz "$target" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    target=${batch[$i]}
    if wait "${pids[$i]}"; then
      echo "fuzz: $target: $(grep -E "stat::number_of_executed_units|stat::peak_rss_mb" \
        "$build/fuzz-$target.log" | tr '\n' ' ')"
    else
      tail -40 "$build/fuzz-$target.log"
      echo "fuzz: $target FAILED"
      failed=1
    fi
  done
done
exit "$failed"
