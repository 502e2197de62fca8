# torch_modules.py: a small PyTorch model on the CPU (Debian's CPU-only PyTorch) whose blocks
# also run work on the CUDA device through ctypes, as an extension op would: `ndt::device_mm`
# is a custom operator (torch.library, implemented in Python for the CPU key) that stages its
# inputs through the runtime and multiplies them with cuBLAS (cublasSgemm_v2) on a stream.
# The model knows nothing of ndtrace. Deterministic; --plant allows cuBLAS atomics on the
# second block's handle (cublasSgemm_v2 then races on the stand-in). Prints "checksum <hex>".
# Needs libcudart.so.13 and libcublas.so.13 on the library path.
import ctypes
import hashlib
import struct
import sys

import torch

rt = ctypes.CDLL("libcudart.so.13")
blas = ctypes.CDLL("libcublas.so.13")
PLANT = "--plant" in sys.argv


def ok(result, what):
    if result != 0:
        raise SystemExit("%s failed: %d" % (what, result))


ok(rt.cudaFree(None), "cudaFree")


class Device:
    """One stream and cuBLAS handle per block, as a framework keeps per-device state."""

    def __init__(self, atomics):
        self.stream = ctypes.c_void_p()
        ok(rt.cudaStreamCreate(ctypes.byref(self.stream)), "cudaStreamCreate")
        self.handle = ctypes.c_void_p()
        ok(blas.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        ok(blas.cublasSetStream_v2(self.handle, self.stream), "cublasSetStream")
        if atomics:
            ok(blas.cublasSetAtomicsMode(self.handle, 1), "cublasSetAtomicsMode")

    def matmul(self, x, w):
        # x (m, k) @ w (k, n), row-major, computed as the column-major w^T-product cuBLAS sees.
        m, k = x.shape
        n = w.shape[1]
        a, b, c = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        for pointer, count in ((a, m * k), (b, k * n), (c, m * n)):
            ok(rt.cudaMalloc(ctypes.byref(pointer), count * 4), "cudaMalloc")
        xs = x.contiguous().numpy().tobytes()
        ws = w.contiguous().numpy().tobytes()
        ok(rt.cudaMemcpyAsync(a, xs, m * k * 4, 1, self.stream), "h2d x")
        ok(rt.cudaMemcpyAsync(b, ws, k * n * 4, 1, self.stream), "h2d w")
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        ok(blas.cublasSgemm_v2(self.handle, 0, 0, n, m, k, ctypes.byref(one), b, n, a, k,
                               ctypes.byref(zero), c, n), "cublasSgemm_v2")
        out = ctypes.create_string_buffer(m * n * 4)
        ok(rt.cudaMemcpyAsync(out, c, m * n * 4, 2, self.stream), "d2h")
        ok(rt.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")
        for pointer in (a, b, c):
            rt.cudaFree(pointer)
        values = struct.unpack("%df" % (m * n), out.raw)
        return torch.tensor(values, dtype=torch.float32).reshape(m, n)


LIBRARY = torch.library.Library("ndt", "DEF")
LIBRARY.define("device_mm(Tensor x, Tensor w, int device) -> Tensor")
DEVICES = []


def device_mm(x, w, device):
    return DEVICES[device].matmul(x, w)


LIBRARY.impl("device_mm", device_mm, "CPU")


class Projection(torch.nn.Module):
    def __init__(self, features, device):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(features, features) / features)
        self.device = device

    def forward(self, x):
        return torch.ops.ndt.device_mm(x, self.weight, self.device)


class Block(torch.nn.Module):
    def __init__(self, features, device):
        super().__init__()
        self.norm = torch.nn.LayerNorm(features)
        self.proj = Projection(features, device)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return x + self.act(self.proj(self.norm(x)))


class Net(torch.nn.Module):
    def __init__(self, features=64, blocks=2):
        super().__init__()
        self.embed = torch.nn.Linear(16, features)
        self.blocks = torch.nn.Sequential(*[Block(features, i) for i in range(blocks)])
        self.head = torch.nn.Linear(features, 4)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


def main():
    torch.manual_seed(0)
    DEVICES.extend([Device(False), Device(PLANT)])
    model = Net()
    with torch.no_grad():
        out = model(torch.randn(32, 16))
    print("checksum", hashlib.sha256(out.numpy().tobytes()).hexdigest()[:16])


if __name__ == "__main__":
    main()
