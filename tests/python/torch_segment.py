# torch_segment.py: a PyTorch model (Debian's CPU-only PyTorch) whose tensors live in device
# memory carved out of one segment, as PyTorch's caching allocator carves its segments. On the
# stand-in device, device memory is host memory, so the CPU kernels of aten ops compute on it
# where a GPU's kernels would. While a step runs, a loader thread copies the next batch into
# another block of the same segment, at a moment that varies between runs. The model knows
# nothing of ndtrace. Deterministic; --plant makes one op,
# `ndt::row_sums` (a custom op), add each row in an order that varies between runs, as an
# atomicAdd kernel does. Prints "checksum <hex>".
# Needs libcudart.so.13 on the library path.
import ctypes
import hashlib
import os
import sys
import threading
import time

import torch

rt = ctypes.CDLL("libcudart.so.13")
PLANT = "--plant" in sys.argv


def ok(result, what):
    if result != 0:
        raise SystemExit("%s failed: %d" % (what, result))


class Segment:
    """One device allocation handed out in 512-byte aligned blocks, each a tensor's storage."""

    def __init__(self, nbytes):
        self.base = ctypes.c_void_p()
        ok(rt.cudaMalloc(ctypes.byref(self.base), nbytes), "cudaMalloc")
        self.nbytes = nbytes
        self.used = 0

    def block(self, nbytes):
        offset = self.used
        self.used += (nbytes + 511) // 512 * 512
        if self.used > self.nbytes:
            raise SystemExit("segment full")
        return self.base.value + offset

    def empty(self, *shape):
        count = 1
        for size in shape:
            count *= size
        memory = (ctypes.c_float * count).from_address(self.block(count * 4))
        return torch.frombuffer(memory, dtype=torch.float32).view(*shape)


SEGMENT = Segment(1 << 20)


def row_sums(x):
    out = SEGMENT.empty(x.shape[0])
    order = list(range(x.shape[1]))
    if PLANT:
        order.sort(key=lambda i: os.urandom(2))  # a different order in every run
    rows = x.tolist()
    for r, row in enumerate(rows):
        total = torch.zeros((), dtype=torch.float32)
        for i in order:
            total += row[i]
        out[r] = total
    return out


LIBRARY = torch.library.Library("ndt", "DEF")
LIBRARY.define("row_sums(Tensor x) -> Tensor")
LIBRARY.impl("row_sums", row_sums, "CPU")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(16, 64) / 4)
        self.w2 = torch.nn.Parameter(torch.randn(64, 32) / 8)

    def forward(self, x):
        h = SEGMENT.empty(x.shape[0], 64)
        torch.mm(x, self.w1, out=h)
        torch.relu_(h)
        y = SEGMENT.empty(x.shape[0], 32)
        torch.mm(h, self.w2, out=y)
        return torch.ops.ndt.row_sums(y)


def prefetch(batches, host, started, ready):
    # The loader's thread: batch k+1 is copied while step k runs, each after a pause that varies
    # between runs, so a digest of the whole segment taken during a step would vary too.
    for k in range(1, len(batches)):
        started[k - 1].wait()
        time.sleep(int.from_bytes(os.urandom(1), "little") / 100000.0)
        ok(rt.cudaMemcpy(ctypes.c_void_p(batches[k].data_ptr()), host[k], len(host[k]), 1),
           "prefetch")
        batches[k].mul_(0.5)  # the loader's transform, a PyTorch op on this thread
        ready[k].set()


def main():
    torch.manual_seed(0)
    model = Net()
    steps = 3
    host = [torch.randn(8, 16).numpy().tobytes() for _ in range(steps)]
    batches = [SEGMENT.empty(8, 16) for _ in range(steps)]
    started = [threading.Event() for _ in range(steps)]
    ready = [threading.Event() for _ in range(steps)]
    ok(rt.cudaMemcpy(ctypes.c_void_p(batches[0].data_ptr()), host[0], len(host[0]), 1), "batch 0")
    batches[0].mul_(0.5)
    ready[0].set()
    try:  # a probe that raises, as a program's fallback code does
        torch.mv(batches[0], batches[0])
    except RuntimeError:
        pass
    loader = threading.Thread(target=prefetch, args=(batches, host, started, ready))
    loader.start()
    digest = hashlib.sha256()
    with torch.no_grad():
        for k in range(steps):
            ready[k].wait()
            started[k].set()
            digest.update(model(batches[k]).clone().numpy().tobytes())
    loader.join()
    print("checksum", digest.hexdigest()[:16])


if __name__ == "__main__":
    main()
