# What the tests of this folder share: their command line (NDTRACE PYTHON), the skip when PYTHON
# cannot import torch (exit 77), and checks that are counted rather than raised.
import subprocess
import sys

NDTRACE, PYTHON = sys.argv[1], sys.argv[2]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAILED:", what)


def skip_without_torch():
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        print("skipped: %s cannot import torch" % PYTHON)
        sys.exit(77)


def finish():
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)
