#!/usr/bin/env bash
# Crash-safety campaign: traced programs (the stand-in device) killed with SIGKILL at random
# moments, then every trace read back in full with `ndtrace stats`. A trace must be readable
# (stats exits 0), report no damage (a SIGKILL leaves whole chunks and a cut tail, never a
# damaged chunk), and leave no temporary file behind. Programs alternate: workers (threads,
# a forked worker), many_ops (a long stream of launches), lifecycle ops (memsets), each also
# with NDT_STANDIN_ASYNC=1 (asynchronous streams).
#
# Usage: tests/sigkill_campaign.sh BUILD_DIR [KILLS [MAX_DELAY_MS [SEED]]]
# (defaults: 50 kills, delays uniform in 0..1500 ms, seed 16). Prints one line per kill and a
# summary; exits 1 if any trace is unreadable, damaged or leaves a temporary file.
set -uo pipefail
build="${1:?usage: sigkill_campaign.sh BUILD_DIR [KILLS [MAX_DELAY_MS [SEED]]]}"
kills="${2:-50}"
max_ms="${3:-1500}"
RANDOM="${4:-16}"
ndtrace="$build/tools/ndtrace"
tracer="$build/tracer/libndtrace.so"
programs="$build/tests/programs"
export LD_LIBRARY_PATH="$build/tests/standin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

commands=("$programs/workers --iterations 100000000"
          "$programs/many_ops 100000000"
          "$programs/lifecycle ops 100000000")
no_trace=0 readable=0 with_ops=0 unreadable=0 damaged=0 leftovers=0 ops_total=0
for i in $(seq 1 "$kills"); do
  command="${commands[$((i % ${#commands[@]}))]}"
  async=$(((i / ${#commands[@]}) % 2))
  delay_ms=$((RANDOM % (max_ms + 1)))
  dir="$work/$i"
  mkdir -p "$dir"
  trace="$dir/k.ndt"
  env LD_PRELOAD="$tracer" NDTRACE_OUTPUT="$trace" NDTRACE_QUIET=1 NDT_STANDIN_ASYNC="$async" \
    $command >/dev/null 2>&1 &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  leftover=$(find "$dir" -name '*.tmp-*' | wc -l)
  leftovers=$((leftovers + leftover))
  verdict=""
  if [ ! -e "$trace" ]; then
    no_trace=$((no_trace + 1))
    verdict="no trace (killed before the first CUDA call)"
  elif "$ndtrace" stats --json "$trace" >"$dir/stats.json" 2>"$dir/stats.err"; then
    ops=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ops"], d["damage"])' "$dir/stats.json")
    set -- $ops
    if [ "$2" != 0 ]; then
      damaged=$((damaged + 1))
      verdict="DAMAGED: $2 ranges"
    else
      readable=$((readable + 1))
      ops_total=$((ops_total + $1))
      [ "$1" -gt 0 ] && with_ops=$((with_ops + 1))
      verdict="readable, $1 ops"
    fi
  else
    unreadable=$((unreadable + 1))
    verdict="UNREADABLE: $(head -1 "$dir/stats.err")"
  fi
  [ "$leftover" -gt 0 ] && verdict="$verdict; LEFTOVER temporary file"
  echo "kill $i: $(basename "${command%% *}") async=$async after ${delay_ms} ms: $verdict"
done
traces=$((readable + damaged + unreadable))
percent="n/a"
[ "$traces" -gt 0 ] && percent="$(python3 -c "print(f'{100*$readable/$traces:.1f}')")"
echo "sigkill campaign: $kills kills, $traces traces, $readable readable ($percent %), $with_ops with ops ($ops_total ops), $damaged damaged, $unreadable unreadable, $no_trace killed before any trace, $leftovers temporary files left"
[ "$damaged" -eq 0 ] && [ "$unreadable" -eq 0 ] && [ "$leftovers" -eq 0 ]
