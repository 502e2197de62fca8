#!/usr/bin/env bash
# End to end (a script, not built): bench/programs/train_e2e, a training-shaped program (forward
# on the main thread, backward on an autograd thread, cuBLAS GEMMs, cuDNN convolutions, thousands
# of small kernel launches per step, a caching allocator, a copy stream and events), run
#   untraced                  the baseline
#   record, metadata only     NDTRACE_LIBRARY_DIGESTS=0, --no-exit-digest: no digest at all
#   record                    the defaults: digests of library ops' inputs and outputs, exit digest
#   record, CPU digests       the same with NDTRACE_DIGEST_DEVICE=cpu (synchronise + copy + digest)
#   record --digest-sync      the defaults plus a state digest at every host synchronisation
#   run --deterministic       the policy, metadata only, no trace kept
# K times each (--repeat, default 3), the modes interleaved so that a noisy spell on a shared
# machine hits them all, and prints per mode the median wall time (the ndtrace command's whole
# run: start, the program, closing the trace), its ratio to untraced, the ops recorded and the
# trace bytes, and whether every run printed the untraced run's checksum (the tracer must not
# change the program's output). Also the untraced run's kernel launches per second.
#
# On the stand-in device (the default: LD_LIBRARY_PATH is the build's stand-in directory,
# NDT_STANDIN_ASYNC=1) kernels, GEMMs and convolutions run on the CPU and every library call
# synchronises its stream, so the figures say what the tracer costs around CPU work, never what
# it costs on a GPU. On a GPU machine pass --gpu (the loader's default libraries).
#
#   bench/bench_e2e.sh [--build DIR] [--repeat K] [--steps N] [--layers L] [--modes a,b,...]
#                      [--timeout S] [--gpu] [--keep DIR]
# --ndtrace FILE, --program FILE and --standin DIR name the ndtrace binary, train_e2e and the
# stand-in libraries outside a build tree (tools/bundle.sh's bundle; default: under --build).
# A run that takes longer than S seconds (default 120) is killed and reported with exit 124.
# Modes: untraced, metadata, record, record-cpu, digest-sync, deterministic (default: all; the
# untraced run is always measured, as the baseline).
set -euo pipefail

build=build/dev
repeat=3
steps=
layers=
modes=metadata,record,record-cpu,digest-sync,deterministic
gpu=0
keep=
limit=120
usage="usage: $0 [--build DIR | --ndtrace FILE --program FILE --standin DIR] [--repeat K] [--steps N] [--layers L] [--modes a,b,...] [--timeout S] [--gpu] [--keep DIR]"
ndtrace= program= standin=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --ndtrace) ndtrace="$2"; shift 2 ;;
    --program) program="$2"; shift 2 ;;
    --standin) standin="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --timeout) limit="$2"; shift 2 ;;
    --gpu) gpu=1; shift ;;
    --keep) keep="$2"; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
for value in "$repeat" "$limit"; do
  if ! [[ "$value" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: --repeat $repeat, --timeout $limit: expected whole numbers >= 1" >&2
    exit 2
  fi
done
ndtrace=${ndtrace:-$build/tools/ndtrace}
program=${program:-$build/bench/programs/train_e2e}
standin=${standin:-$build/tests/standin/lib}
for file in "$ndtrace" "$program"; do
  [[ -x "$file" ]] || { echo "error: $file not found: build it first (the whole dev build, or at least ndtrace ndt_tracer bench_train_e2e and the stand-in libraries)" >&2; exit 2; }
done
args=()
[[ -n "$steps" ]] && args+=(--steps "$steps")
[[ -n "$layers" ]] && args+=(--layers "$layers")
if [[ $gpu == 0 ]]; then
  export LD_LIBRARY_PATH="$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export NDT_STANDIN_ASYNC=1
  device="the stand-in device (kernels and libraries run on the CPU)"
else
  device="the GPU"
fi
IFS=, read -r -a chosen <<<"$modes"
measured=(untraced)
for mode in "${chosen[@]}"; do
  case "$mode" in
    untraced) ;;
    metadata|record|record-cpu|digest-sync|deterministic) measured+=("$mode") ;;
    *) echo "error: --modes: unknown mode '$mode'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
if [[ -n "$keep" ]]; then
  mkdir -p "$keep"
  work="$keep"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

# Runs mode $1, round $2; appends "<seconds> <exit> <checksum>" to $work/$1.times.
run_mode() {
  local mode="$1" round="$2" trace="$work/$1.$2.ndt" start end status=0
  local -a command
  local -a environment=()
  case "$mode" in
    untraced) command=("$program" "${args[@]}") ;;
    metadata)
      environment=(NDTRACE_LIBRARY_DIGESTS=0)
      command=("$ndtrace" record --quiet --no-exit-digest -o "$trace" -- "$program" "${args[@]}") ;;
    record) command=("$ndtrace" record --quiet -o "$trace" -- "$program" "${args[@]}") ;;
    record-cpu)
      environment=(NDTRACE_DIGEST_DEVICE=cpu)
      command=("$ndtrace" record --quiet -o "$trace" -- "$program" "${args[@]}") ;;
    digest-sync)
      command=("$ndtrace" record --quiet --digest-sync -o "$trace" -- "$program" "${args[@]}") ;;
    deterministic) command=("$ndtrace" run --deterministic -- "$program" "${args[@]}") ;;
  esac
  start=$(date +%s%N)
  # In a process group of its own, so that a run that timed out leaves nothing behind: the
  # traced program may outlive ndtrace's end (the tracer's signal handler closes the trace).
  setsid timeout --kill-after=10 "$limit" env "${environment[@]}" "${command[@]}" \
    >"$work/$mode.$round.out" 2>"$work/$mode.$round.err" &
  local group=$!
  wait "$group" || status=$?
  if ((status == 124 || status == 137)); then kill -KILL -- "-$group" 2>/dev/null || true; fi
  end=$(date +%s%N)
  local checksum
  checksum=$(sed -n 's/^checksum \([0-9a-f]*\)$/\1/p' "$work/$mode.$round.out")
  echo "$(( (end - start) / 1000 )) $status ${checksum:-none}" >>"$work/$mode.times"
  # Keep one trace per mode (the last round's) for its size and op count.
  if [[ -f "$trace" && "$round" != "$repeat" ]]; then rm -f "$trace"; fi
}

calc() {  # an arithmetic expression, in floating point (awk: no bc on the GPU machines)
  awk "BEGIN { printf \"%.6f\", $1 }"
}

median_us() {  # the median of the first column of $1
  sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

for mode in "${measured[@]}"; do rm -f "$work/$mode.times"; done
for ((round = 1; round <= repeat; ++round)); do
  for mode in "${measured[@]}"; do run_mode "$mode" "$round"; done
done

base_us=$(median_us "$work/untraced.times")
base_checksum=$(awk 'NR == 1 { print $3 }' "$work/untraced.times")
counts=$(grep -h '^train_e2e: ' "$work/untraced.1.err" || true)
launches=$(sed -n 's/^train_e2e: \([0-9]*\) kernel launches.*/\1/p' <<<"$counts")
shape=$(sed -n 's/^loss after \([0-9]*\) steps of \([0-9]*\) layers.*/\1 steps, \2 layers/p' \
  "$work/untraced.1.out")

echo "end to end: bench/programs/train_e2e ($shape) on $device, $repeat runs per mode, interleaved"
echo "program: ${counts#train_e2e: }"
if [[ "${NDTRACE_GPU_TIME:-}" == 0 ]]; then
  echo "NDTRACE_GPU_TIME=0 in the environment: traced runs record no GPU times"
elif [[ $gpu == 0 ]]; then
  if compgen -G "$build/tests/standin/lib/libcupti.so*" >/dev/null; then
    echo "the stand-in's CUPTI is built: traced runs record GPU times (GpuActivityRecord)"
  else
    echo "no stand-in CUPTI in $build/tests/standin/lib (target ndt_standin_cupti): traced runs record no GPU times, unlike a full build"
  fi
fi
if [[ -n "$launches" ]]; then
  printf "untraced: %.0f kernel launches per second (median run %.3f s; launches alone, library calls not counted)\n" \
    "$(calc "$launches / ($base_us / 1000000)")" "$(calc "$base_us / 1000000")"
fi
printf "%-22s %9s %7s %9s %12s %10s  %s\n" "mode" "median s" "ratio" "ops" "trace bytes" "bytes/op" \
  "exit, checksum"
failed=0
for mode in "${measured[@]}"; do
  med=$(median_us "$work/$mode.times")
  trace="$work/$mode.$repeat.ndt"
  ops=- bytes=- per_op=-
  if [[ -f "$trace" ]]; then
    bytes=$(stat -c %s "$trace")
    ops=$("$ndtrace" stats "$trace" | awk '$1 == "ops" && $2 ~ /^[0-9]+$/ { print $2; exit }')
    [[ -n "$ops" && "$ops" != 0 ]] && per_op=$(printf "%.1f" "$(calc "$bytes / $ops")")
  fi
  # A run under the deterministic policy may pick other algorithms (other roundings) than the
  # untraced run: its runs must agree with each other, not with the untraced one.
  verdict="all 0, same" expected=$base_checksum
  if [[ $mode == deterministic ]]; then
    verdict="all 0, same as each other" expected=$(awk 'NR == 1 { print $3 }' "$work/$mode.times")
  fi
  if awk -v c="$expected" '$2 != 0 || $3 != c { bad = 1 } END { exit !bad }' \
    "$work/$mode.times"; then
    verdict="DIFFERS: $(awk '{ printf "%s%s %s", (NR > 1 ? "; " : ""), $2, $3 }' "$work/$mode.times")"
    failed=1
  fi
  case "$mode" in
    untraced) label="untraced" ;;
    metadata) label="record, metadata only" ;;
    record) label="record (defaults)" ;;
    record-cpu) label="record, CPU digests" ;;
    digest-sync) label="record --digest-sync" ;;
    deterministic) label="run --deterministic" ;;
  esac
  printf "%-22s %9.3f %7.2f %9s %12s %10s  %s\n" "$label" "$(calc "$med / 1000000")" \
    "$(calc "$med / $base_us")" "$ops" "$bytes" "$per_op" "$verdict"
done
echo "(ratio = median wall time / untraced median; ops and bytes of the last run's trace)"
if [[ -n "$keep" ]]; then echo "every run's output, and times in microseconds: $keep/*.times"; fi
if [[ $failed != 0 ]]; then
  echo "error: a traced run exited non-zero or printed another checksum than the untraced run" >&2
  exit 1
fi
