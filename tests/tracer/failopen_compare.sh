#!/usr/bin/env bash
# The fail-open comparison: every case runs untraced and traced (libndtrace.so preloaded, as
# `ndtrace record` does) on the stand-in device, and the traced run must be the same program:
# the same stdout, the same stderr once ndtrace's own `ndtrace: ` lines are removed, and the
# same exit status or signal. Cases: every program of tests/programs run as its tests run it,
# and shell-level cases (tests/programs/lifecycle.cc: raise and kill of SIGTERM/INT/HUP/PIPE,
# code after raise, blocked and ignored signals, the program's own handlers before and after
# ours, exit from a thread, fork, vfork, exec, abort, a crash, `ulimit -f`), and hostile
# NDTRACE_* settings (a FIFO, a device or a directory as the --pin reference, bad numbers).
#
# Usage: failopen_compare.sh TRACER_LIB STANDIN_DIR LIFECYCLE PROGRAM...
# Cases run REPEAT times each (FAILOPEN_REPEAT, default 3; a race shows in some runs only).
# Prints one line per difference and a summary; exits 1 if any case differs.
set -uo pipefail
tracer="${1:?usage: failopen_compare.sh TRACER_LIB STANDIN_DIR LIFECYCLE PROGRAM...}"
standin="${2:?}"
lifecycle="${3:?}"
shift 3
repeat="${FAILOPEN_REPEAT:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
ulimit -c 0  # abort and crashes: no core files
export LD_LIBRARY_PATH="$standin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

cases=()
names=()
said=()
add() {  # add NAME COMMAND [SAID]: a bash command line (the program is exec'd last); SAID, an
  names+=("$1")  # extended regex ndtrace's stderr must match exactly once in the traced run
  cases+=("$2")
  said+=("${3:-}")
}
for program in "$@"; do
  name="$(basename "$program")"
  case "$name" in
    gpu_probe) add "$name" "exec '$program'" ;;
    many_ops) add "$name" "exec '$program' 2000" ;;
    workers)
      add "$name" "exec '$program'"
      add "$name --cuda-child" "exec '$program' --cuda-child"
      add "$name --crash" "exec '$program' --crash"
      add "$name --then-exec" "exec '$program' --then-exec /bin/true" ;;
    lifecycle) ;;  # below
    *) add "$name" "exec '$program'" ;;
  esac
done
for signal in TERM INT HUP PIPE; do
  add "raise $signal, code after it" "exec '$lifecycle' raise $signal"
  add "kill $signal from another thread" "exec '$lifecycle' kill $signal"
  add "$signal blocked" "exec '$lifecycle' block $signal"
  add "$signal ignored before CUDA" "exec '$lifecycle' ignore $signal"
  add "$signal ignored after CUDA" "exec '$lifecycle' ignore-after $signal"
  add "own $signal handler after ours" "exec '$lifecycle' handler $signal"
  add "own $signal handler before ours" "exec '$lifecycle' handler-before $signal"
  add "$signal disposition as the program sees it" "exec '$lifecycle' query $signal"
done
for signal in SEGV ABRT; do
  add "raise $signal, code after it" "exec '$lifecycle' raise $signal"
done
add "exit from a thread" "exec '$lifecycle' thread-exit"
add "fork" "exec '$lifecycle' fork"
add "vfork" "exec '$lifecycle' vfork"
add "exec" "exec '$lifecycle' exec"
add "abort" "exec '$lifecycle' abort"
add "null write" "exec '$lifecycle' segv"
add "write to a closed pipe" "exec '$lifecycle' pipe"
too_large='^ndtrace: .*: write failed: File too large; recording stopped, calls pass through$'
add "ulimit -f 8 (8 KiB)" "ulimit -f 8; exec '$lifecycle' ops 20000" "$too_large"
add "ulimit -f 64 (64 KiB)" "ulimit -f 64; exec '$lifecycle' ops 200000" "$too_large"

# Hostile environment: what the tracer reads from it (NDTRACE_*) never changes the program.
mkfifo "$work/fifo"
for setting in "NDTRACE_PIN=$work/fifo" NDTRACE_PIN=/dev/zero NDTRACE_PIN=/dev/urandom \
    NDTRACE_PIN=/ NDTRACE_PIN=/nonexistent NDTRACE_POLICY=bogus NDTRACE_DIGEST_EVERY=-1 \
    NDTRACE_DIGEST_EVERY=99999999999999999999999 NDTRACE_DIGEST_WINDOW=9:1 \
    NDTRACE_DIGEST_RING=0 NDTRACE_DIGEST_DEVICE=bogus NDTRACE_CAPTURE=%%%,, \
    NDTRACE_OUTPUT=/dev/full NDTRACE_OUTPUT=/proc/nonexistent/t.ndt NDTRACE_OUTPUT=/; do
  add "environment $setting" "export $setting; exec '$lifecycle' ops 100"
done

# run DIR COMMAND [ENV...]: stdout, stderr and status into DIR (a hang is killed after 60 s:
# status 124).
run() {
  local dir="$1" command="$2"
  shift 2
  mkdir -p "$dir"
  (cd "$dir" && timeout 60 env "$@" bash -c "$command" >"$dir/out" 2>"$dir/err" </dev/null) \
    2>/dev/null
  echo $? >"$dir/status"
  # Timings are never the same twice: vector_add's "stream 0 took 0.057 ms".
  grep -v '^ndtrace: ' "$dir/err" | sed -E 's/took [0-9.]+ ms/took T ms/' >"$dir/err.program"
}

same() {  # same A B: the two runs' stdout, program stderr and status agree
  cmp -s "$1/out" "$2/out" && cmp -s "$1/err.program" "$2/err.program" &&
    cmp -s "$1/status" "$2/status"
}

mask() {  # a nondeterministic program (two untraced runs differ): its numbers are masked
  sed -E -i 's/[0-9a-f]{16}/X/g; s/(0x)?[0-9][0-9a-fA-F.xp+-]*/N/g' "$1/out" "$1/err.program"
}

differences=0
compared=0
for index in "${!cases[@]}"; do
  name="${names[$index]}"
  command="${cases[$index]}"
  for attempt in $(seq 1 "$repeat"); do
    base="$work/$index.$attempt"
    run "$base/plain" "$command"
    run "$base/traced" "$command" NDTRACE_OUTPUT="$base/traced/t.ndt" LD_PRELOAD="$tracer"
    compared=$((compared + 1))
    if ! same "$base/plain" "$base/traced"; then
      run "$base/plain2" "$command"
      if ! same "$base/plain" "$base/plain2"; then
        mask "$base/plain"
        mask "$base/plain2"
        mask "$base/traced"
      fi
      if ! same "$base/plain" "$base/traced"; then
        differences=$((differences + 1))
        echo "DIFFERS: $name (run $attempt): $command"
        echo "  untraced: status $(cat "$base/plain/status"), stdout: $(head -c 300 "$base/plain/out" | tr '\n' '|') stderr: $(head -c 300 "$base/plain/err.program" | tr '\n' '|')"
        echo "  traced:   status $(cat "$base/traced/status"), stdout: $(head -c 300 "$base/traced/out" | tr '\n' '|') stderr: $(head -c 300 "$base/traced/err.program" | tr '\n' '|')"
        echo "  ndtrace said: $(grep '^ndtrace: ' "$base/traced/err" | head -3 | tr '\n' '|')"
      fi
    fi
    if [ -n "${said[$index]}" ] && [ "$(grep -c -E "${said[$index]}" "$base/traced/err")" != 1 ]; then
      differences=$((differences + 1))
      echo "NOT SAID ONCE: $name (run $attempt): ndtrace said: $(grep '^ndtrace: ' "$base/traced/err" | head -3 | tr '\n' '|')"
    fi
  done
done
echo "fail-open comparison: ${#cases[@]} cases, $compared traced runs, $differences differ"
[ "$differences" -eq 0 ]
