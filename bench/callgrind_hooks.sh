#!/usr/bin/env bash
# Instructions per hooked call under callgrind, the stable figure on a noisy machine: for each
# case, the measured loop of bench_hooks (memset, launch, the launch on a stream of the thread's
# own, the launch of many kernels on many segments' tensors: model) or bench_library_hooks (a GEMM, a setter PyTorch calls before every GEMM, a small cuRAND
# generate) is run plain and with
# libndtrace.so preloaded and recording, each with N1 and N2 calls;
# (instructions(N2) - instructions(N1)) / (N2 - N1) is the cost of one call, set-up and exit
# cancelling out. Printed per case: plain, traced and traced minus plain, counted on the calling
# thread alone (callgrind --separate-threads; the thread that makes the calls is the first) and
# over all threads (the tracer's background threads included: what the machine pays).
#
# The calling-thread column counts only inside main (callgrind --toggle-collect=main): the
# records the tracer still holds when main returns are encoded by the exit handler on that
# thread, which is not the hook's cost. Valgrind runs one thread at a time and the encoder thread
# gets few turns, so a calling thread often finds its ring full and encodes records itself
# (RecordRings::DrainLocked): that encoding is subtracted from the column too, leaving what the
# hook does when the encoder keeps up, with the ring's slots reused as in a long run (a ring
# larger than the calls, --ring-slots, would show the first pass instead: fresh slots without
# capacity). The all-threads column comes from other runs, every thread counted from start to
# exit.
#
# Usage: bench/callgrind_hooks.sh [--build DIR] [--tracer LIB] [--calls N1,N2]
#          [--ring-slots N] [--case memset|launch|stream|model|library|all]
#        (default build/dev, its tracer/libndtrace.so, 2000,6000, the tracer's, all). Needs valgrind and
#        the dev build with the stand-in. --tracer measures another libndtrace.so (an older
#        build's) against the same benchmark programs and stand-in.
set -euo pipefail

build=build/dev
n1=2000
n2=6000
which=all
tracer=
ring_slots=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --calls) n1=${2%,*}; n2=${2#*,}; shift 2 ;;
    --case) which=$2; shift 2 ;;
    --tracer) tracer=$2; shift 2 ;;
    --ring-slots) ring_slots=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--tracer LIB] [--calls N1,N2] [--ring-slots N] [--case memset|launch|stream|model|library|all]" >&2; exit 2 ;;
  esac
done
if ! command -v valgrind > /dev/null; then echo "error: valgrind not found" >&2; exit 3; fi
if (( n2 <= n1 || n1 < 1 )); then echo "error: --calls N1,N2: need 1 <= N1 < N2" >&2; exit 2; fi
build=$(cd "$build" && pwd)
tracer=${tracer:-$build/tracer/libndtrace.so}
standin=$build/tests/standin/lib
for file in "$tracer" "$build/bench/bench_hooks" "$standin/libcuda.so.1"; do
  [[ -e $file ]] || { echo "error: $file missing: build the dev preset's bench_hooks" >&2; exit 3; }
done
work=$(mktemp -d /tmp/ndt_callgrind.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Instructions of one run: "<calling thread, in the measured loop> <all threads>". $1 traced
# (0/1), $2 calls, rest the command, in which the argument @N@ stands for the call count.
count() {
  local traced=$1 calls=$2
  shift 2
  local -a command=("${@/#@N@/$calls}")
  local -a env=(LD_LIBRARY_PATH="$standin")
  if [[ $traced == 1 ]]; then
    env+=(LD_PRELOAD="$tracer" NDTRACE_OUTPUT="$work/trace.ndt" NDTRACE_QUIET=1
          NDTRACE_DIGEST_EXIT=0 NDTRACE_LIBRARY_DIGESTS=0)
  fi
  local first all drained
  # The calling thread inside main (the set-up is the same for N1 and N2), less the records it
  # encoded itself.
  local -a thread_env=("${env[@]}")
  [[ -n $ring_slots ]] && thread_env+=(NDTRACE_RING_SLOTS="$ring_slots")
  rm -f "$work"/cg.out*
  env "${thread_env[@]}" valgrind --tool=callgrind --separate-threads=yes \
    --toggle-collect=main --callgrind-out-file="$work/cg.out" "${command[@]}" \
    > /dev/null 2> "$work/valgrind.log" ||
    { echo "error: callgrind run failed: $*" >&2; tail -5 "$work/valgrind.log" >&2; exit 3; }
  # Each thread's file has "totals: <Ir>" (or "summary:"); thread 1 is the calling thread.
  first=$(awk '/^(totals|summary):/ {print $2; exit}' "$work"/cg.out-01)
  drained=$(callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$work"/cg.out-01 2>/dev/null |
    awk '$1 ~ /^[0-9,]+$/ && /RecordRings::DrainLocked\(/ && !found {gsub(",", "", $1); print $1; found = 1}' || true)
  first=$(( first - ${drained:-0} ))
  # Every thread, start to exit.
  [[ -n $ring_slots ]] && env+=(NDTRACE_RING_SLOTS="$ring_slots")
  rm -f "$work"/cg.out*
  env "${env[@]}" valgrind --tool=callgrind --separate-threads=yes \
    --callgrind-out-file="$work/cg.out" "${command[@]}" > /dev/null 2> "$work/valgrind.log" ||
    { echo "error: callgrind run failed: $*" >&2; tail -5 "$work/valgrind.log" >&2; exit 3; }
  all=$(cat "$work"/cg.out-* | awk '/^totals:/ {s += $2} END {print s}')
  echo "$first $all"
}

# Per call: $1 = label, rest = the command (@N@: the call count).
measure() {
  local label=$1
  shift
  local p1f p1a p2f p2a t1f t1a t2f t2a
  read -r p1f p1a < <(count 0 "$n1" "$@")
  read -r p2f p2a < <(count 0 "$n2" "$@")
  read -r t1f t1a < <(count 1 "$n1" "$@")
  read -r t2f t2a < <(count 1 "$n2" "$@")
  local d=$(( n2 - n1 ))
  local pf=$(( (p2f - p1f) / d )) pa=$(( (p2a - p1a) / d ))
  local tf=$(( (t2f - t1f) / d )) ta=$(( (t2a - t1a) / d ))
  printf '%-30s %12d %12d %12d %12d %12d\n' "$label" "$pf" "$tf" "$(( tf - pf ))" "$ta" "$(( ta - pa ))"
}

echo "instructions per call (callgrind), calls $n1 and $n2, tracer $tracer, ring slots ${ring_slots:-default}"
printf '%-30s %12s %12s %12s %12s %12s\n' case plain traced "hook(thread)" "traced(all)" "hook(all)"
if [[ $which == all || $which == memset ]]; then
  measure "cuMemsetD8_v2" "$build/bench/bench_hooks" --child memset 1 @N@ --no-clock
fi
if [[ $which == all || $which == launch ]]; then
  measure "cuLaunchKernel (3 pointers)" "$build/bench/bench_hooks" --child launch 1 @N@ --no-clock
fi
if [[ $which == all || $which == stream ]]; then
  measure "cuLaunchKernel, own stream" "$build/bench/bench_hooks" --child stream 1 @N@ --no-clock
fi
if [[ $which == all || $which == model ]]; then
  measure "cuLaunchKernel, model's step" "$build/bench/bench_hooks" --child model 1 @N@ --no-clock
fi
if [[ $which == all || $which == library ]]; then
  [[ -e $build/bench/bench_library_hooks ]] ||
    { echo "error: build bench_library_hooks for the library case" >&2; exit 3; }
  for call in "cublasSgemm_v2(4x4x4)" "cublasLtMatmul(4x4x4)" cublasSetMathMode \
      "curandGenerateUniform(4)"; do
    measure "$call" "$build/bench/bench_library_hooks" --child @N@ --only "$call" --no-clock
  done
fi
echo "(hook = traced - plain: the hook's instructions per call; thread = the calling thread in main,"
echo " less the records it encoded itself for a full ring; all = every thread of the process from"
echo " start to exit, the tracer's background threads and the final encoding included)"
