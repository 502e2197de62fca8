# The cost of --tensor-digests per PyTorch op (a script, not built): times N small aten ops on
# tensors carved from one device allocation (as tests/python/torch_segment.py does) untraced,
# under `ndtrace record` with the shim naming ops only (NDTRACE_TENSOR_DIGESTS=0), and under
# `ndtrace record --tensor-digests` (the default on a PyTorch without CUDA), and prints
# microseconds per op and each as a ratio to untraced. Needs a Python that can import torch
# (Debian's CPU-only python3-torch: on the stand-in device the ops compute on the CPU, so the
# figures say what the shim and the tracer add around a CPU op, never what they add on a GPU).
#
#   python3 bench/bench_tensor_digests.py [--build DIR] [--ops N] [--size S] [--repeat R]
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

WORKLOAD = r"""
import ctypes, sys, time, torch
rt = ctypes.CDLL("libcudart.so.13")
ops, size = int(sys.argv[1]), int(sys.argv[2])
base = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(base), 3 * size * size * 4 + 4096) == 0
def tensor(index):
    memory = (ctypes.c_float * (size * size)).from_address(base.value + index * size * size * 4)
    return torch.frombuffer(memory, dtype=torch.float32).view(size, size)
a, b, c = tensor(0), tensor(1), tensor(2)
a.copy_(torch.rand(size, size)); b.copy_(torch.rand(size, size))
start = time.perf_counter()
for _ in range(ops):
    torch.mm(a, b, out=c)
print("us_per_op %.3f" % ((time.perf_counter() - start) * 1e6 / ops))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build/dev")
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--python", default="/usr/bin/python3")
    args = parser.parse_args()
    ndtrace = os.path.join(args.build, "tools", "ndtrace")
    if not os.access(ndtrace, os.X_OK):
        sys.exit("error: %s not found: build it first" % ndtrace)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(args.build, "tests", "standin", "lib") + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    trace = "/tmp/bench_tensor_digests.ndt"
    record = [ndtrace, "record", "--quiet", "-o", trace, "--"]
    modes = {  # name: (command prefix, NDTRACE_TENSOR_DIGESTS)
        "untraced": ([], None),
        "record, names only": (record, "0"),
        "record --tensor-digests": (record[:2] + ["--tensor-digests"] + record[2:], None),
    }
    figures = {mode: [] for mode in modes}
    for _ in range(args.repeat):
        for mode, (prefix, tensor_digests) in modes.items():
            mode_env = dict(env)
            if tensor_digests is not None:
                mode_env["NDTRACE_TENSOR_DIGESTS"] = tensor_digests
            run = subprocess.run(prefix + [args.python, "-c", WORKLOAD, str(args.ops),
                                           str(args.size)], capture_output=True, text=True,
                                 env=mode_env)
            if run.returncode != 0:
                sys.exit("error: %s failed: %s" % (mode, run.stderr[-2000:]))
            figures[mode].append(float(run.stdout.split()[-1]))
    print("torch.mm(%dx%d, out=) on segment tensors, %d ops, median of %d runs (stand-in device)"
          % (args.size, args.size, args.ops, args.repeat))
    base = statistics.median(figures["untraced"])
    for mode, values in figures.items():
        median = statistics.median(values)
        print("  %-26s %8.2f us/op  %5.2fx untraced  (+%.2f us)" %
              (mode, median, median / base, median - base))


if __name__ == "__main__":
    main()
