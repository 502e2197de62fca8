#!/usr/bin/env bash
# Window replay sizes and speeds (a script, not built): records tests/corpus/window_train (a
# conv + gemm training loop: cuDNN convolutions, cuBLAS GEMMs, memset, kernels, copies on two
# streams) once plainly and once with `record --window A:B`, then replays the window from the
# trace alone. Prints
#   - trace bytes per op of the window: (window trace - plain trace) / ops, and the whole
#     window's bytes against the 1 MiB target for a 50-op window (issue 14);
#   - replay time per op-run against the recorded run's time per op of the same window (from the
#     plain run's timestamps, so capture costs are not counted in the baseline): a ratio.
# On the stand-in device (the default: LD_LIBRARY_PATH is the build's stand-in directory) the
# ops run on the CPU, so the ratio says what the replay machinery costs around CPU work, never
# what it costs on a GPU. On a GPU machine pass --gpu (the loader's default libraries).
#
#   bench/bench_window.sh [--build DIR] [--window A:B] [--steps N] [--repeat K] [--gpu]
set -euo pipefail

build=build/dev
window=30:79
steps=6
repeat=5
gpu=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --gpu) gpu=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--window A:B] [--steps N] [--repeat K] [--gpu]" >&2; exit 2 ;;
  esac
done
ndtrace="$build/tools/ndtrace"
program="$build/tests/corpus/window_train"
for file in "$ndtrace" "$program"; do
  [[ -x "$file" ]] || { echo "error: $file not found: build it first" >&2; exit 2; }
done
if [[ $gpu == 0 ]]; then
  export LD_LIBRARY_PATH="$build/tests/standin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export NDT_STANDIN_ASYNC=1
  device="stand-in device (CPU)"
else
  device="GPU"
fi
first=${window%%:*}
last=${window##*:}
if ! [[ "$first" =~ ^[0-9]+$ && "$last" =~ ^[0-9]+$ ]] || ((last < first)); then
  echo "error: --window $window: expected A:B with B >= A" >&2
  exit 2
fi
ops=$((last - first + 1))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$ndtrace" record --quiet -o "$work/plain.ndt" -- "$program" --steps "$steps" >/dev/null
"$ndtrace" record --quiet --window "$window" -o "$work/window.ndt" -- "$program" --steps "$steps" \
  >/dev/null
plain=$(stat -c %s "$work/plain.ndt")
windowed=$(stat -c %s "$work/window.ndt")
kept=$((windowed - plain))

# The recorded time of ops first..last in the plain run: from the first op's start to the
# latest end (show prints "<start>s op N ... +<duration>").
recorded_us=$("$ndtrace" show "$work/plain.ndt" | awk -v first="$first" -v last="$last" '
  function us(text) {
    if (text ~ /ms$/) return substr(text, 1, length(text) - 2) * 1000;
    if (text ~ /us$/) return substr(text, 1, length(text) - 2);
    if (text ~ /ns$/) return substr(text, 1, length(text) - 2) / 1000;
    if (text ~ /s$/) return substr(text, 1, length(text) - 1) * 1e6;
    return 0;
  }
  $2 == "op" && $3 >= first && $3 <= last {
    start = substr($1, 1, length($1) - 1) * 1e6;
    end = start + us(substr($NF, 2));
    if (begin == "" || start < begin) begin = start;
    if (end > finish) finish = end;
  }
  END { printf "%.1f", finish - begin }')

set +e
replay=$("$ndtrace" replay "$work/window.ndt" --window "$window" --repeat "$repeat")
status=$?
set -e
replay_ms=$(sed -n 's/^  time: \([0-9.]*\) ms for .*/\1/p' <<<"$replay")
replayed=$(sed -n 's/^  replayed \([0-9]*\) ops: .*/\1/p' <<<"$replay")
if [[ -z "$replay_ms" || -z "$replayed" ]]; then
  echo "error: the replay printed no timing (exit $status):" >&2
  echo "$replay" >&2
  exit 2
fi

echo "window replay of window_train ops $window ($ops ops, $steps steps recorded) on the $device"
printf "trace bytes: plain %d, with the window kept %d: %d bytes for the window, %.0f bytes per op\n" \
  "$plain" "$windowed" "$kept" "$(bc -l <<<"$kept / $ops")"
printf "  against the target (a 50-op window under 1 MiB): %.3f of 1 MiB for %d ops\n" \
  "$(bc -l <<<"$kept / 1048576")" "$ops"
per_run=$(bc -l <<<"$replay_ms * 1000 / ($replayed * $repeat)")
recorded_per_op=$(bc -l <<<"$recorded_us / $ops")
printf "replay: %.1f ms for %d runs of %d ops: %.1f us per op-run (exit %d)\n" "$replay_ms" \
  "$repeat" "$replayed" "$per_run" "$status"
printf "recorded run (plain, no capture): %.1f us for the window: %.1f us per op\n" \
  "$recorded_us" "$recorded_per_op"
printf "ratio replay / recorded per op: %.2f\n" "$(bc -l <<<"$per_run / $recorded_per_op")"
