# A program that uses PyTorch's own profiler, under ndtrace's Python shim, against a real CPython
# and a real PyTorch (Debian's CPU-only python3-torch): torch_profiler.py must print exactly
# what it prints untraced (what each profiler saw, its exceptions) and exit the same, and the
# trace must show the shim's op names stepping aside while the program's profiler is on and
# coming back as it stops. A profiler taking CUDA activities (cuda_profiler.py) makes ndtrace's
# GPU time step aside, or never start when it comes before the program's first CUDA call.
#
#   profiler_test.py NDTRACE PYTHON
#
# PYTHON is an interpreter that can import torch (Debian's /usr/bin/python3); exits 77 (skip)
# when it cannot. The stand-in libraries must be first on LD_LIBRARY_PATH.
import ast
import json
import os
import subprocess
import tempfile

from shim_checks import NDTRACE, PYTHON, check, finish, skip_without_torch

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "torch_profiler.py")
MARK = "ndtrace.python: program profiler on"
skip_without_torch()


def phases():
    """torch_profiler.py's PHASES, read without running it: copy bytes -> (phase, profiler on)."""
    with open(PROGRAM) as source:
        tree = ast.parse(source.read())
    table = next(ast.literal_eval(node.value) for node in tree.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PHASES")
    return {floats * 4: (phase, profiling) for phase, (floats, profiling) in table.items()}


with tempfile.TemporaryDirectory() as directory:
    plain = subprocess.run([PYTHON, PROGRAM], capture_output=True, text=True)
    check(plain.returncode == 0, "the program runs untraced (%s)" % plain.stderr[-2000:])
    check("torch.profiler.profile start()/stop() " in plain.stdout and
          "nested profilers raised RuntimeError" in plain.stdout, "the program profiles itself")

    # 1. Traced, the program prints the same and exits the same, and the shim says nothing.
    trace = os.path.join(directory, "t.ndt")
    run = subprocess.run([NDTRACE, "record", "-o", trace, "--", PYTHON, PROGRAM],
                         capture_output=True, text=True)
    check(run.returncode == plain.returncode, "the same exit status (%d, %s)" %
          (run.returncode, run.stderr[-2000:]))
    untraced_lines, traced_lines = plain.stdout.splitlines(), run.stdout.splitlines()
    for untraced, traced in zip(untraced_lines, traced_lines):
        check(untraced == traced, "the program prints the same under ndtrace:\n  untraced: %s\n"
              "  traced:   %s" % (untraced, traced))
    check(len(untraced_lines) == len(traced_lines), "as many lines (%d, %d)" %
          (len(untraced_lines), len(traced_lines)))
    check("python shim" not in run.stderr, "the shim says no failure: %s" % run.stderr[-2000:])

    # 2. Each phase's copy names ndt::stage where the program's profiler was off, and lies in
    #    the shim's "program profiler on" range where it was on (in the main thread and in the
    #    second one alike): the shim stepped aside, and came back after each profiler.
    export = subprocess.run([NDTRACE, "export", "--format", "json", trace], capture_output=True,
                            text=True)
    check(export.returncode == 0, "export exits 0")
    records = json.loads(export.stdout)["records"] if export.returncode == 0 else []
    expected = phases()
    seen = set()
    for op in records:
        if op["type"] != "op" or op["kind"] != "memcpy":
            continue
        size = [arg.get("unsigned") for arg in op["args"] if arg["name"] == "bytes"]
        phase, profiling = expected.get(size[0] if size else None, (None, None))
        check(phase is not None, "op %d copies the bytes of a phase (%r)" % (op["sequence"], size))
        if phase is None:
            continue
        seen.add(phase)
        if profiling:
            check("framework_op" not in op and op.get("nvtx_ranges") == [MARK],
                  "%s: the shim's op names stand aside (%r)" % (phase, op.get("nvtx_ranges")))
        else:
            check(op.get("framework_op") == "ndt::stage" and MARK not in op.get("nvtx_ranges", []),
                  "%s: the op is named ndt::stage (%r)" % (phase, op.get("nvtx_ranges")))
    check(seen == {phase for phase, _ in expected.values()},
          "every phase has its copy (missing: %s)" %
          sorted({phase for phase, _ in expected.values()} - seen))

    # 3. A profiler that takes CUDA activities: ndtrace's GPU time (CUPTI, one client per
    #    process) steps aside where the program has made CUDA calls already, and never starts
    #    where it has not; the program runs as untraced.
    cuda_program = os.path.join(HERE, "cuda_profiler.py")
    for early, note in ((False, "GPU time: off from here: the program's PyTorch profiler"),
                        (True, "GPU time: off (the program uses CUPTI's activity API itself")):
        args = [PYTHON, cuda_program] + (["--early"] if early else [])
        run = subprocess.run([NDTRACE, "record", "-o", trace, "--"] + args, capture_output=True,
                             text=True)
        check(run.returncode == 0 and run.stdout == "done\n",
              "cuda_profiler.py %s runs as untraced (%d, %r, %s)" %
              (args[2:], run.returncode, run.stdout, run.stderr[-2000:]))
        shown = subprocess.run([NDTRACE, "show", "--wide", trace], capture_output=True, text=True)
        check(note in shown.stdout, "cuda_profiler.py %s: the trace says %r:\n%s" %
              (args[2:], note, shown.stdout[-3000:]))

finish()
