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
for target in trace_file trace_index record_decode pin_table live_verify; do
  echo "fuzz: $target for ${seconds}s"
  "$build/tests/fuzz/fuzz_$target" "$corpus/$target" -max_total_time="$seconds" -timeout=2 \
    -malloc_limit_mb=128 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$artifacts/${target}-" 2>"$build/fuzz-$target.log" ||
    { tail -40 "$build/fuzz-$target.log"; echo "fuzz: $target FAILED"; exit 1; }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build/fuzz-$target.log" |
    tr '\n' ' '
  echo
done
