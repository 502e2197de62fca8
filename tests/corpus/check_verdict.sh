#!/bin/sh
# Runs `ndtrace check` (or `ndtrace bisect`) on a corpus program and checks its verdict. The stand-in libraries must
# come first on LD_LIBRARY_PATH (CTest sets it) and NDT_STANDIN_ASYNC=1 makes streams race.
#
# usage: check_verdict.sh NDTRACE MODE PROGRAM [ARGS...]
#   deterministic PROGRAM ARGS...   `check -n 3` exits 0
#   planted NAME PROGRAM ARGS...    `check` exits 1 and its verdict line names NAME (the
#                                   planted kernel or API)
#   failing PROGRAM ARGS...         `check` exits 4 and says the program failed in every run
#   bisected NAME PROGRAM ARGS...   `bisect` exits 1 and its closing line names op NAME
#   bisected_in KEY NAME PROGRAM ARGS...
#                                   the same, bisect following process KEY (`--process`)
#
# NDT_VERDICT_REPEAT=N (default 1): the whole check N times, each of which must pass (for a
# verdict that a regression would get wrong in only some checks).
set -u
if [ "${NDT_VERDICT_REPEAT:-1}" -gt 1 ]; then
  repeat=$NDT_VERDICT_REPEAT
  export NDT_VERDICT_REPEAT=1
  for i in $(seq 1 "$repeat"); do
    "$0" "$@" || { echo "FAIL: check $i of $repeat" >&2; exit 1; }
  done
  exit 0
fi
ndtrace=$1
mode=$2
shift 2
name=
process=
if [ "$mode" = bisected_in ]; then
  process=$1
  mode=bisected
  shift
fi
if [ "$mode" = planted ] || [ "$mode" = bisected ]; then
  name=$1
  shift
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/ndt-corpus.XXXXXX")
trap 'rm -rf "$dir"' EXIT
case "$mode" in
  deterministic) runs=3 ;;
  *) runs=6 ;;
esac
if [ "$mode" = bisected ] && [ -n "$process" ]; then
  "$ndtrace" bisect --process "$process" -o "$dir/out" -- "$@" >"$dir/report" 2>"$dir/stderr"
elif [ "$mode" = bisected ]; then
  "$ndtrace" bisect -o "$dir/out" -- "$@" >"$dir/report" 2>"$dir/stderr"
else
  "$ndtrace" check -n "$runs" -o "$dir/out" -- "$@" >"$dir/report" 2>"$dir/stderr"
fi
status=$?
cat "$dir/report"
case "$mode" in
  deterministic)
    if [ "$status" -eq 0 ]; then
      # The op count the verdict gives is every run's: "N ops each" only when each recorded N,
      # else "FEWEST to MOST ops a run" (a pool of events grown as thread timing asks).
      counts=$(sed -n 's/^ndtrace check: run [0-9]*: .*, \([0-9]*\) ops recorded.*/\1/p' "$dir/stderr" |
        sort -n | uniq)
      fewest=$(echo "$counts" | head -n 1)
      most=$(echo "$counts" | tail -n 1)
      if [ "$fewest" = "$most" ]; then claim="($fewest ops each"; else claim="($fewest to $most ops a run"; fi
      grep '^ndtrace check: deterministic' "$dir/report" | grep -qF -- "$claim" && exit 0
      echo "FAIL: the verdict does not say \"$claim\" (the runs recorded $(echo $counts) ops)" >&2
    else
      echo "FAIL: expected exit 0 (deterministic), got $status" >&2
    fi ;;
  planted)
    if [ "$status" -eq 1 ] &&
      grep '^ndtrace check: NOT deterministic' "$dir/report" | grep -q -- "$name"; then
      exit 0
    fi
    echo "FAIL: expected exit 1 naming $name, got $status" >&2 ;;
  bisected)
    if [ "$status" -eq 1 ] &&
      grep '^ndtrace bisect: op [0-9]* ' "$dir/report" | grep -q -- "$name"; then
      exit 0
    fi
    echo "FAIL: expected exit 1 naming $name, got $status" >&2 ;;
  failing)
    if [ "$status" -eq 4 ] &&
      grep -q '^ndtrace check: the program failed in every run' "$dir/report"; then
      exit 0
    fi
    echo "FAIL: expected exit 4 (the program failed in every run), got $status" >&2 ;;
esac
sed -n 1,20p "$dir/stderr" >&2
exit 1
