#!/bin/sh
# Runs a test program and checks what it printed. Used by the `standin` tests (with the stand-in
# libraries first on LD_LIBRARY_PATH) and by the `gpu` tests (without them).
#
# usage: check_program.sh [--gpu-probe PROBE] MODE PROGRAM ARGS...
#   expect PROGRAM RUNS CHECKSUM   RUNS runs; each exits 0 and prints "checksum CHECKSUM"
#   same PROGRAM RUNS              RUNS runs; each exits 0; all print the same checksum
#   distinct PROGRAM RUNS MIN      RUNS runs; each exits 0; at least MIN different checksums
#   route PROGRAM LINE...          one run with NDT_STANDIN_LOG set; the stand-in driver's call
#                                  log must contain each LINE (a whole line), in this order
# With --gpu-probe, PROBE runs first and its exit status is returned if it is not 0 (77: no
# GPU, which CTest reports as skipped).
set -u

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

if [ "${1:-}" = "--gpu-probe" ]; then
  "$2"
  status=$?
  [ "$status" -eq 0 ] || exit "$status"
  shift 2
fi

mode=$1
program=$2
shift 2

# Runs the program once; sets $checksum. Fails on a non-zero exit or a missing checksum line.
run_once() {
  output=$("$program") || fail "$program exited with status $?"
  checksum=$(printf '%s\n' "$output" | sed -n 's/^checksum \([0-9a-f]\{16\}\)$/\1/p')
  [ -n "$checksum" ] || fail "$program printed no checksum line: $output"
  echo "run: checksum $checksum"
}

case "$mode" in
  expect)
    runs=$1
    expected=$2
    i=0
    while [ "$i" -lt "$runs" ]; do
      run_once
      [ "$checksum" = "$expected" ] || fail "checksum $checksum, expected $expected"
      i=$((i + 1))
    done
    ;;
  same)
    runs=$1
    first=
    i=0
    while [ "$i" -lt "$runs" ]; do
      run_once
      [ -z "$first" ] && first=$checksum
      [ "$checksum" = "$first" ] || fail "run $i gave $checksum, run 0 gave $first"
      i=$((i + 1))
    done
    ;;
  distinct)
    runs=$1
    min=$2
    seen=
    i=0
    while [ "$i" -lt "$runs" ]; do
      run_once
      seen="$seen$checksum
"
      i=$((i + 1))
    done
    count=$(printf '%s' "$seen" | sort -u | grep -c .)
    echo "$count distinct checksums in $runs runs"
    [ "$count" -ge "$min" ] || fail "$count distinct checksums in $runs runs, wanted at least $min"
    ;;
  route)
    log=$(mktemp "${TMPDIR:-/tmp}/ndt_standin_log.XXXXXX") || fail "mktemp"
    trap 'rm -f "$log"' EXIT
    NDT_STANDIN_LOG=$log
    export NDT_STANDIN_LOG
    run_once
    [ -s "$log" ] || fail "the stand-in driver logged nothing to $log: is it on LD_LIBRARY_PATH?"
    after=0
    for line in "$@"; do
      at=$(grep -n -x -F -- "$line" "$log" | cut -d: -f1 |
           awk -v after="$after" '$1 > after { print; exit }')
      [ -n "$at" ] || fail "no line '$line' after line $after of the driver log"
      echo "log line $at: $line"
      after=$at
    done
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac
echo "PASS"
