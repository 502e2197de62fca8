#!/bin/sh
# Records data_parallel (two devices, no peer access: NDT_STANDIN_P2P=0) with every op's outputs
# digested (NDTRACE_DIGEST_WINDOW=0:), as check's narrowing runs and `record --digest-window`
# do, and checks that the tracer changed nothing and read every device's memory in that
# device's context: the program prints the checksum of its untraced run and exits 0, the
# stand-in driver saw no kernel reach another device's memory (its log has no "fault:" line),
# the trace names device 1 for the allocations made there, every peer copy's digest is of
# exactly the bytes it wrote, and the exit state digest covers every allocation of both devices.
#
# usage: check_devices.sh NDTRACE PROGRAM   (the stand-in libraries first on LD_LIBRARY_PATH)
set -u
ndtrace=$1
program=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/ndt-devices.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export NDT_STANDIN_DEVICES=2 NDT_STANDIN_P2P=0
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
expected=$("$program" | grep '^checksum') || fail "the untraced program failed"
NDT_STANDIN_LOG="$dir/driver.log" NDTRACE_DIGEST_WINDOW=0: \
  "$ndtrace" record --quiet -o "$dir/trace.ndt" -- "$program" >"$dir/out" 2>"$dir/err"
status=$?
cat "$dir/out" "$dir/err"
[ "$status" -eq 0 ] || fail "traced run exited $status"
grep -q "^$expected\$" "$dir/out" || fail "traced run did not print $expected"
if grep '^fault:' "$dir/driver.log"; then fail "a kernel read another device's memory"; fi
"$ndtrace" show "$dir/trace.ndt" >"$dir/show" || fail "ndtrace show failed"
on_1=$(grep -c 'alloc a[0-9]* .* device=1 ' "$dir/show")
[ "$on_1" -eq 4 ] || fail "expected 4 allocations on device 1, the trace names $on_1"
allocations=$(grep -c '^ *alloc a[0-9]* [0-9]* B' "$dir/show")
digested=$(sed -n '/state after op [0-9]*: [0-9]* allocations (exit)/,$p' "$dir/show" |
  grep -c '^ *a[0-9]*+0:')
[ "$digested" -eq "$allocations" ] ||
  fail "the exit state digest covers $digested of $allocations allocations"
grep -q 'could not be read' "$dir/show" && fail "some allocations could not be read"
# Each copy's digest is of exactly what it wrote (a gather writes one device's share of device
# 0's buffer while the other devices' streams write theirs).
copies=$(grep -c 'cuMemcpyPeerAsync *dst=' "$dir/show")
exact=$(grep -cE 'cuMemcpyPeerAsync *dst=(a[0-9]+\+[0-9]+)@[^ ]* .*bytes=([0-9]+) *out dst@\1:\2B:' \
  "$dir/show")
[ "$copies" -gt 0 ] && [ "$exact" -eq "$copies" ] ||
  fail "$exact of $copies peer copies have a digest of exactly the bytes they wrote"
echo "ok: $allocations allocations, $on_1 on device 1, all in the exit state digest"
