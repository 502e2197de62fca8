#!/bin/sh
# The GPU bundle end to end on the stand-in device: tools/bundle.sh makes a bundle of this build
# in a temporary directory, and the bundle's gpu_suite.sh runs with --standin and a short
# budget. Checks the bundle's contents and size, and that the results file says it is not a GPU
# result, has every step's heading, and has racy_sum reported not deterministic by
# `ndtrace check` and vector_add deterministic, with its expected checksum, the library records
# made with and without digests alike, and the window replay step naming a varying op and its
# fix. Also byte-compiles the PyTorch scripts. The
# budget (120 s) leaves the last steps room on a loaded machine.
#
# usage: bundle_suite_test.sh SOURCE_DIR BUILD_DIR STANDIN_DIR [BUDGET_SECONDS]
set -u

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[ $# -ge 3 ] || fail "usage: $0 SOURCE_DIR BUILD_DIR STANDIN_DIR [BUDGET_SECONDS]"
source_dir=$1
build_dir=$2
standin_dir=$3
budget=${4:-120}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ndt_bundle_test.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT

if command -v python3 >/dev/null; then
  PYTHONPYCACHEPREFIX=$tmp/pycache python3 -m py_compile "$source_dir"/tests/gpu/pytorch/*.py ||
    fail "the PyTorch scripts do not compile"
  echo "py_compile: ok"
fi

"$source_dir/tools/bundle.sh" --build "$build_dir" "$tmp/bundle" || fail "bundle.sh failed"
bundle=$tmp/bundle
for file in bin/ndtrace bin/libndtrace.so programs/vector_add programs/vector_add_static \
  programs/racy_sum programs/gpu_probe checks/digest_kernel_check pytorch/index_add.py \
  pytorch/train_step.py gpu_suite.sh BUNDLE.md lib/cudart/libcudart.so.13 bench/train_e2e \
  bench/bench_e2e.sh; do
  [ -e "$bundle/$file" ] || fail "the bundle has no $file"
done
size=$(du -sb "$bundle" | cut -f1)
[ "$size" -lt $((48 * 1024 * 1024)) ] || fail "the bundle is $size bytes, not well under 64 MiB"
echo "bundle: $size bytes"
# Stripped: no symbol table left in ndtrace.
if readelf -S "$bundle/bin/ndtrace" | grep -q '\.symtab'; then
  fail "bin/ndtrace is not stripped"
fi

"$bundle/gpu_suite.sh" --bogus "$tmp/results" 2>"$tmp/bad.err"
[ $? -eq 2 ] || fail "an unknown option is not exit 2"
grep -q '^error: gpu_suite: unknown option --bogus' "$tmp/bad.err" ||
  fail "no error line: $(cat "$tmp/bad.err")"

# Without --standin and without a GPU: the GPU facts, then a clear stop.
"$bundle/gpu_suite.sh" --steps facts "$tmp/no-gpu" 2>/dev/null || fail "gpu_suite.sh without a GPU"
grep -q '^\*\*No usable GPU (gpu_probe exit 77): nothing else was run' "$tmp"/no-gpu/results-*.md ||
  fail "without a GPU the results do not say so: $(cat "$tmp"/no-gpu/results-*.md)"

"$bundle/gpu_suite.sh" --standin "$standin_dir" --budget "$budget" "$tmp/results" ||
  fail "gpu_suite.sh exited with status $?"
set -- "$tmp"/results/results-*.md
if [ $# -ne 1 ] || [ ! -f "$1" ]; then fail "expected one results file, found: $*"; fi
results=$1
head -n 1 "$results" | grep -q 'stand-in device, not a GPU' ||
  fail "the results do not say on top that they are not a GPU's: $(head -n 1 "$results")"
grep -q '^run --deterministic .*all 0, same' "$results" ||
  fail "the end-to-end benchmark did not run train_e2e under the policy with its checksum"
for heading in "## GPU facts" "## Sample programs" "## Digest kernels" "## Benchmarks" \
  "## Op replay" "## Window replay" "## Bisect" "## PyTorch" "## Policies on a convolutional network (cudnn.benchmark=True)"; do
  grep -q -x -F "$heading" "$results" || fail "no heading '$heading' in $results"
done
section() {
  sed -n "/^### $1\$/,/^###* /p" "$results"
}
section racy_sum | grep -q '^ndtrace check: NOT deterministic' ||
  fail "racy_sum is not reported NOT deterministic: $(section racy_sum)"
section vector_add | grep -q '^ndtrace check: deterministic' ||
  fail "vector_add is not reported deterministic: $(section vector_add)"
grep -q '^| vector_add  *| exit 0, checksum 664dc617a67a437d (as expected) | exit 0 |' "$results" ||
  fail "the summary has no row for vector_add with its expected checksum"
# Library records built off the calling thread: recorded with and without library digests, the
# three programs' traces have the same ops and arguments.
raw=$(section "Library records built off the calling thread")
[ "$(printf '%s\n' "$raw" | grep -c ' 0 structural differences')" -eq 3 ] ||
  fail "library records made with and without digests differ: $raw"
# The policies: pinned and deterministic runs of conv_legacy --benchmark are each identical.
for configuration in pin deterministic; do
  grep -q "^| $configuration | identical |" "$results" ||
    fail "conv_legacy --benchmark under $configuration is not identical twice: $(grep '^| ' "$results")"
done
# Window replay: the planted backward filter named, the fix identical (unless the budget ran
# out before, on a loaded machine).
window=$(sed -n '/^## Window replay$/,/^## Bisect$/p' "$results")
if ! printf '%s\n' "$window" | grep -q 'not run: time budget spent'; then
  printf '%s\n' "$window" | grep -q 'VARIES at op [0-9]*;* ' ||
    fail "window replay did not name a varying op: $window"
  printf '%s\n' "$window" | grep -q 'identical in 5 repeats with the fix' ||
    fail "window replay with --try-deterministic is not identical with the fix: $window"
fi
ls "$tmp"/results/logs-*/*.log >/dev/null 2>&1 || fail "no logs beside the results"
echo "results: $results"
cat "$results"
echo "PASS"
