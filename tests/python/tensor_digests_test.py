# Exact tensor digests (--tensor-digests; on by default on a PyTorch without CUDA) against a
# real CPython and a real PyTorch (Debian's CPU-only python3-torch):
# torch_segment.py, whose tensors are blocks of one device allocation and whose loader thread
# writes the next batch into the same allocation while a step runs, on the stand-in device.
# Each PyTorch op must be recorded with digests of exactly its tensors' storage; the racing
# loader must not make check call the program nondeterministic; the planted op must be named,
# with its Python line.
#
#   tensor_digests_test.py NDTRACE PYTHON
#
# PYTHON is an interpreter that can import torch (Debian's /usr/bin/python3); exits 77 (skip)
# when it cannot. The stand-in libraries must be first on LD_LIBRARY_PATH.
import json
import os
import subprocess
import tempfile

from shim_checks import NDTRACE, PYTHON, check, finish, skip_without_torch

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "torch_segment.py")
SEGMENT_BYTES = 1 << 20
skip_without_torch()


def ops_of(trace):
    export = subprocess.run([NDTRACE, "export", "--format", "json", trace], capture_output=True,
                            text=True)
    check(export.returncode == 0, "export %s exits 0" % trace)
    records = json.loads(export.stdout)["records"] if export.returncode == 0 else []
    return [r for r in records if r["type"] == "op"]


def line_of(text):
    with open(PROGRAM) as source:
        for number, line in enumerate(source, 1):
            if text in line:
                return number
    raise SystemExit("%s not in %s" % (text, PROGRAM))


with tempfile.TemporaryDirectory() as directory:
    # 1. The program prints the same traced; every PyTorch op that touched device memory is an op
    #    whose digests cover its tensors' storage, never the whole segment.
    plain = subprocess.run([PYTHON, PROGRAM], capture_output=True, text=True)
    check(plain.returncode == 0 and plain.stdout.startswith("checksum "), "runs untraced")
    trace = os.path.join(directory, "t.ndt")
    run = subprocess.run([NDTRACE, "record", "--tensor-digests", "-o", trace, "--", PYTHON,
                          PROGRAM], capture_output=True, text=True)
    check(run.returncode == 0, "record --tensor-digests exits 0 (%s)" % run.stderr[-2000:])
    check(run.stdout == plain.stdout, "the program prints the same under --tensor-digests")
    ops = ops_of(trace)
    framework = [op for op in ops if op["kind"] == "framework_op"]
    names = {op["name"] for op in framework}
    for name in ("aten::mm", "aten::relu_", "ndt::row_sums", "aten::clone"):
        check(name in names, "%s is recorded as a framework op (%s)" % (name, sorted(names)))
    check("aten::mv" not in names, "the probe that raised left no record")
    # Storage sizes of torch_segment.py's tensors: batch 8x16, hidden 8x64, output 8x32, row sums
    # 8, and the weights (host) 16x64 and 64x32.
    expected = {"aten::mm": {512, 2048, 1024, 4096, 8192}, "aten::relu_": {2048},
                "ndt::row_sums": {1024, 32}, "aten::clone": {32}}
    for op in framework:
        digests = op["inputs"] + op["outputs"]
        check(digests, "op %d (%s) has digests" % (op["sequence"], op["name"]))
        for digest in digests:
            if digest["pointer"]["allocation_id"] != 0:
                check(digest["bytes"] < SEGMENT_BYTES and
                      digest["pointer"]["offset"] + digest["bytes"] <= SEGMENT_BYTES,
                      "op %d (%s) digests one tensor of the segment, not all of it: %r" %
                      (op["sequence"], op["name"], digest))
            if op["name"] in expected:
                check(digest["bytes"] in expected[op["name"]],
                      "op %d (%s): `%s` covers exactly its tensor's storage (%d B)" %
                      (op["sequence"], op["name"], digest["role"], digest["bytes"]))
        check(all(arg["name"] != "tensorsLeftOut" for arg in op["args"]),
              "op %d (%s) left no tensor out" % (op["sequence"], op["name"]))
    mm = [op for op in framework if op["name"] == "aten::mm"]
    check(len(mm) == 6, "two matmuls per step, three steps (%d)" % len(mm))
    # `out=` is written, not read: an output only.
    check(all({d["role"] for d in op["inputs"]} == {"self", "mat2"} and
              [d["role"] for d in op["outputs"]] == ["out"] for op in mm),
          "aten::mm's tensors carry their schema's names")
    loader = [op for op in framework if op["name"] == "aten::mul_" and op["thread_id"] != 0]
    check(len(loader) == 2, "the loader thread's op is recorded on its own thread (%r)" %
          [(op["name"], op["thread_id"]) for op in framework if op["name"] == "aten::mul_"])
    relu = [op for op in framework if op["name"] == "aten::relu_"]
    check(relu and all(op["inputs"][0]["digest"] != op["outputs"][0]["digest"] for op in relu),
          "an in-place op's input is digested before it ran, its output after")

    # On a PyTorch without CUDA (Debian's) the shim's dispatch mode runs anyway: on by default,
    # off with NDTRACE_TENSOR_DIGESTS=0.
    default_trace = os.path.join(directory, "default.ndt")
    subprocess.run([NDTRACE, "record", "-o", default_trace, "--", PYTHON, PROGRAM],
                   capture_output=True, text=True)
    check(len([op for op in ops_of(default_trace) if op["kind"] == "framework_op"]) ==
          len(framework), "without --tensor-digests, the same framework ops (CPU-only PyTorch)")
    off_trace = os.path.join(directory, "off.ndt")
    subprocess.run([NDTRACE, "record", "-o", off_trace, "--", PYTHON, PROGRAM],
                   capture_output=True, text=True, env=dict(os.environ, NDTRACE_TENSOR_DIGESTS="0"))
    check(not [op for op in ops_of(off_trace) if op["kind"] == "framework_op"],
          "NDTRACE_TENSOR_DIGESTS=0: no framework op is recorded")

    # 2. The loader thread writing the segment at varying moments is not a divergence.
    deterministic = subprocess.run([NDTRACE, "check", "-n", "4", "-o",
                                    os.path.join(directory, "det"), "--", PYTHON, PROGRAM],
                                   capture_output=True, text=True)
    check(deterministic.returncode == 0,
          "check calls torch_segment.py deterministic (exit %d)\n%s" %
          (deterministic.returncode, deterministic.stdout[-3000:]))

    # 3. The planted op is named, with its PyTorch name, module and Python line.
    planted = subprocess.run([NDTRACE, "check", "-o", os.path.join(directory, "plant"), "--",
                              PYTHON, PROGRAM, "--plant"], capture_output=True, text=True)
    check(planted.returncode == 1, "check --plant exits 1 (%d)" % planted.returncode)
    verdict = [line for line in planted.stdout.splitlines() if line.startswith("ndtrace check:")]
    where = "torch_segment.py:%d in forward" % line_of("torch.ops.ndt.row_sums(")
    check(verdict and "(nondeterministic_op; ndt::row_sums;" in verdict[-1] and
          where in verdict[-1], "the verdict names ndt::row_sums at %s: %r" % (where, verdict))
    check("   = pytorch: ndt::row_sums in module Net\n" in planted.stdout,
          "the report names the op and module")
    check("sitecustomize.py" not in planted.stdout, "the shim's own frames are not in the stack")
    check("--tensor-digests" in subprocess.run([NDTRACE, "check", "--help"], capture_output=True,
                                               text=True).stdout, "check --help lists it")

finish()
