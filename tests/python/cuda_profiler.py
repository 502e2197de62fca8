# cuda_profiler.py: a program whose PyTorch profiler takes CUDA activities, as torch.profiler
# asks for them (profile._prepare_trace calls torch.autograd.profiler._prepare_profiler with
# ProfilerActivity.CUDA among the activities). Debian's CPU-only PyTorch drops CUDA from
# torch.profiler's activities, so the program makes that call itself. With --early it does so
# before its first CUDA call (a profiler around a whole run), else after one; then it copies
# once more and prints "done". The program knows nothing of ndtrace. Needs libcudart.so.13 on the
# library path.
import ctypes
import sys

import torch.autograd.profiler as profiler
from torch.autograd import ProfilerActivity

rt = ctypes.CDLL("libcudart.so.13")


def copy(floats):
    data = bytes(4 * floats)
    device = ctypes.c_void_p()
    for result, what in ((rt.cudaMalloc(ctypes.byref(device), len(data)), "cudaMalloc"),
                         (rt.cudaMemcpy(device, data, len(data), 1), "cudaMemcpy"),
                         (rt.cudaFree(device), "cudaFree")):
        if result != 0:
            raise SystemExit("%s failed: %d" % (what, result))


if "--early" not in sys.argv:
    copy(4)
profiler._prepare_profiler(profiler.profile(use_kineto=True).config(), {ProfilerActivity.CUDA})
copy(8)
print("done")
