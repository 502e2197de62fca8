# Data-parallel training on gloo (ddp_gloo.py: two spawned processes, DistributedDataParallel)
# under ndtrace, on Debian's CPU-only PyTorch:
#   1. --teardown (48 process groups made, trained with and destroyed in each process) runs to
#      the end, printing what it prints untraced. The shim's dispatch mode gives the tensors it
#      sees a Python object; when gloo's thread let go of the last reference to one while the
#      main thread held the GIL and joined it, the program hung (5 of 8 runs before the shim
#      held the last collectives' tensors itself; 0 of 10 after; untraced, never). Three runs:
#      a shim that hangs it again fails this test in about 95 % of CI runs, not in all.
#   2. check of the seeded program (3 runs): deterministic (a collective's outputs are not its
#      results when it returns; compared as they were, the runs "differed" at c10d::allreduce_).
#   3. check of --unseeded: the rank's random batch named, rng_state, with its line.
#
#   ddp_test.py NDTRACE PYTHON
import os
import signal
import subprocess
import tempfile

from shim_checks import NDTRACE, PYTHON, check, finish, skip_without_torch

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "ddp_gloo.py")
skip_without_torch()


def run(command, timeout):
    """(exit status or None when it had to be killed, stdout, stderr) of `command`."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
        return process.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return None, out, err


with tempfile.TemporaryDirectory() as directory:
    status, plain, err = run([PYTHON, PROGRAM, "--teardown"], 120)
    check(status == 0, "--teardown runs untraced (%s: %s)" % (status, err[-500:]))

    # 1. The teardown, three times.
    for attempt in range(3):
        trace = os.path.join(directory, "teardown%d.ndt" % attempt)
        status, out, err = run([NDTRACE, "record", "--quiet", "-o", trace, "--", PYTHON, PROGRAM,
                                "--teardown"], 120)
        check(status == 0, "--teardown recorded, run %d: exit 0, not %s (killed after 120 s if "
              "None): %s" % (attempt, status, err[-500:]))
        check(out == plain, "--teardown recorded, run %d: prints what it prints untraced" % attempt)

    # 2 and 3. The verdicts.
    for args, expected, verdict in (
            ((), 0, "deterministic: 3 runs gave bitwise-identical results"),
            (("--unseeded",), 1, "(rng_state; aten::randn; in aten::randn at ddp_gloo.py:")):
        name = "check of ddp_gloo.py %s" % " ".join(args)
        status, out, err = run([NDTRACE, "check", "-n", "3", "-o", os.path.join(
            directory, "check" + "".join(args)), "--", PYTHON, PROGRAM, *args], 300)
        check(status == expected, "%s exits %d (%s: %s)" % (name, expected, status, err[-500:]))
        lines = [line for line in out.splitlines() if line.startswith("ndtrace check: ")]
        last = lines[-1] if lines else ""
        check(verdict in last, "%s: %r in its verdict: %s" % (name, verdict, last))

finish()
