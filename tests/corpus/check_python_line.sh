#!/bin/sh
# Runs `ndtrace check` on python_stack.py and checks that it names the Python line that issued
# the planted GEMM (the line marked `PLANTED:`, in `forward`), or, when a native thread issued it,
# says there is no Python stack instead of showing a wrong one. The stand-in libraries must come
# first on LD_LIBRARY_PATH (CTest sets it).
#
# usage: check_python_line.sh NDTRACE EXPECT PYTHON SCRIPT [ARGS...]
#   EXPECT line     the verdict names `python_stack.py:<PLANTED line> in forward`, the report
#                   lists that frame first, and `show` of the run that took it prints it
#   EXPECT native   the verdict says `no Python stack: issued by a native thread`
#   EXPECT bisect   `ndtrace bisect` instead: its `op N ... found` line names that line too
#   EXPECT replay   `ndtrace record`, then `ndtrace replay --stop` of that trace: its report's first
#                   frame is that line
#   EXPECT gil-busy the GIL stays held (python_stack.py --gil-busy) for longer than the tracer
#                   waits for it (NDTRACE_PYTHON_STACK_WAIT_MS=200): the verdict says `no Python
#                   stack: the GIL stayed busy`, and the run that asked for it ends normally
#   EXPECT autotune SCRIPT is python_autotune.py (its winners from a counter in the temporary
#                   directory): the verdict names the GEMM on the line marked `LAYER 2:` as an
#                   algorithm_selection, though the run that took its stack launched more kernels
#                   before it (another cublasGemmEx is at its place in the lane there)
set -u
ndtrace=$1
expect=$2
python=$3
script=$4
shift 4
dir=$(mktemp -d "${TMPDIR:-/tmp}/ndt-pyline.XXXXXX")
trap 'rm -rf "$dir"' EXIT
[ "$expect" = gil-busy ] && export NDTRACE_PYTHON_STACK_WAIT_MS=200
marker='PLANTED:'
if [ "$expect" = autotune ]; then
  marker='LAYER 2:'
  export NDT_AUTOTUNE_STATE="$dir/autotune-runs"
fi
line=$(grep -n "$marker" "$script" | head -n 1 | cut -d: -f1)
if [ "$expect" = bisect ]; then
  "$ndtrace" bisect -o "$dir/out" -- "$python" "$script" "$@" >"$dir/report" 2>"$dir/stderr"
  status=$?
  cat "$dir/report"
  if [ "$status" -eq 1 ] && grep "^ndtrace bisect: op " "$dir/report" |
    grep -qF "cublasSgemm_v2 at python_stack.py:$line in forward (nondeterministic_op) found"; then
    exit 0
  fi
  echo "FAIL: expected exit 1 and a last line naming python_stack.py:$line, got $status" >&2
  sed -n 1,30p "$dir/stderr" >&2
  exit 1
fi
if [ "$expect" = replay ]; then
  "$ndtrace" record -o "$dir/reference.ndt" -- "$python" "$script" "$@" >/dev/null 2>&1
  "$ndtrace" replay "$dir/reference.ndt" -o "$dir/replayed.ndt" --stop -- "$python" "$script" "$@" \
    >"$dir/report" 2>"$dir/stderr"
  status=$?
  cat "$dir/report"
  if [ "$status" -eq 1 ] && grep -A1 '^   = python: ' "$dir/report" | tail -n 1 |
    grep -qF "python_stack.py:$line in forward"; then
    exit 0
  fi
  echo "FAIL: expected exit 1 and a report whose first frame is python_stack.py:$line, got $status" >&2
  sed -n 1,30p "$dir/stderr" >&2
  exit 1
fi
"$ndtrace" check -n 6 -o "$dir/out" -- "$python" "$script" "$@" >"$dir/report" 2>"$dir/stderr"
status=$?
cat "$dir/report"
fail() {
  echo "FAIL: $1" >&2
  sed -n 1,30p "$dir/stderr" >&2
  exit 1
}
[ "$status" -eq 1 ] || fail "expected exit 1 (not deterministic), got $status"
verdict=$(grep '^ndtrace check: NOT deterministic' "$dir/report")
case "$expect" in
  line)
    echo "$verdict" | grep -qF "cublasSgemm_v2 at python_stack.py:$line in forward" ||
      fail "the verdict does not name python_stack.py:$line in forward"
    grep -A1 '^   = python: ' "$dir/report" | tail -n 1 | grep -qF "python_stack.py:$line in forward" ||
      fail "the report's first frame is not python_stack.py:$line in forward"
    "$ndtrace" show "$dir/out/python-stack.ndt" >"$dir/show" ||
      fail "ndtrace show of the run that took the stack failed"
    grep -E '^ *python op [0-9]+ ' "$dir/show" | grep -qF "python_stack.py:$line in forward" ||
      fail "show does not print the op's Python stack"
    ;;
  native)
    echo "$verdict" | grep -qF "cublasSgemm_v2; no Python stack: issued by a native thread" ||
      fail "the verdict does not say the op came from a native thread"
    if grep -q 'python_stack.py:[0-9]* in ' "$dir/report"; then
      fail "the report shows a Python frame for an op no Python frame issued"
    fi
    ;;
  autotune)
    echo "$verdict" | grep -qF "(algorithm_selection; cublasGemmEx at python_autotune.py:$line in main" ||
      fail "the verdict does not name python_autotune.py:$line in main as the algorithm chosen"
    grep -A1 '^   = python: ' "$dir/report" | tail -n 1 | grep -qF "python_autotune.py:$line in main" ||
      fail "the report's first frame is not python_autotune.py:$line in main"
    ;;
  gil-busy)
    echo "$verdict" | grep -qF "cublasSgemm_v2; no Python stack: the GIL stayed busy" ||
      fail "the verdict does not say the GIL stayed busy"
    grep -q '^checksum ' "$dir/out/python-stack.log" ||
      fail "the run that asked for the stack did not end normally"
    ;;
  *) fail "unknown expectation $expect" ;;
esac
exit 0
