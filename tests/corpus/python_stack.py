# python_stack.py: a small "model" driving the runtime and cuBLAS through ctypes, whose forward
# pass runs one GEMM with atomics allowed (nondeterministic on the stand-in) from a known line,
# so that `ndtrace check` must name that line. Deterministic work comes before and after it.
#   --thread   forward runs on a Python thread (threading.Thread), not the main thread
#   --pydll    cuBLAS is loaded with ctypes.PyDLL: calls keep the GIL (as a pybind11 extension
#              does by default) instead of releasing it (ctypes.CDLL)
#   --native LIB  the planted GEMM runs on a native thread that LIB (native_sgemm.c) starts:
#              no Python frame issued it
#   --gil-busy LIB  with --thread: the planted GEMM is issued (through LIB, the GIL released)
#              while the main thread holds the GIL for 3 s (LIB through ctypes.PyDLL)
# Prints "checksum <16 hex>". Needs libcudart.so.13 and libcublas.so.13 on the library path.
import ctypes, hashlib, sys, threading

N = 64
NBYTES = N * N * 4
rt = ctypes.CDLL("libcudart.so.13")
blas = (ctypes.PyDLL if "--pydll" in sys.argv else ctypes.CDLL)("libcublas.so.13")
native = ctypes.CDLL(sys.argv[sys.argv.index("--native") + 1]) if "--native" in sys.argv else None
busy = sys.argv[sys.argv.index("--gil-busy") + 1] if "--gil-busy" in sys.argv else None
busy_call, busy_hold = (ctypes.CDLL(busy), ctypes.PyDLL(busy)) if busy else (None, None)


def ok(status, what):
    if status != 0:
        raise SystemExit(f"{what} failed: {status}")


class Model:
    def __init__(self):
        self.stream = ctypes.c_void_p()
        ok(rt.cudaStreamCreate(ctypes.byref(self.stream)), "stream")
        self.handle = ctypes.c_void_p()
        ok(blas.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        ok(blas.cublasSetStream_v2(self.handle, self.stream), "cublasSetStream")
        self.a, self.c = ctypes.c_void_p(), ctypes.c_void_p()
        ok(rt.cudaMalloc(ctypes.byref(self.a), NBYTES), "malloc")
        ok(rt.cudaMalloc(ctypes.byref(self.c), NBYTES), "malloc")
        values = (ctypes.c_float * (N * N))(*[((i * 7919) % 1000) / 997.0 - 0.5 for i in range(N * N)])
        ok(rt.cudaMemcpy(self.a, values, NBYTES, 1), "h2d")
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def gemm(self, out):
        ok(blas.cublasSgemm_v2(self.handle, 0, 0, N, N, N, ctypes.byref(self.one), self.a, N, self.a, N,
                               ctypes.byref(self.zero), out, N), "gemm")

    def forward(self):
        self.gemm(self.c)  # deterministic
        ok(rt.cudaMemcpyAsync(self.a, self.c, NBYTES, 3, self.stream), "d2d")
        ok(blas.cublasSetAtomicsMode(self.handle, 1), "atomics")
        if native is not None:
            ok(native.ndt_sgemm_on_native_thread(self.handle, N, self.a, self.c), "native gemm")
        elif busy_call is not None:
            ok(busy_call.ndt_sgemm_while_gil_held(self.handle, N, self.a, self.c), "gemm")  # PLANTED (GIL busy)
        else:
            ok(blas.cublasSgemm_v2(self.handle, 0, 0, N, N, N, ctypes.byref(self.one), self.a, N, self.a, N, ctypes.byref(self.zero), self.c, N), "gemm")  # PLANTED: ndtrace names this line
        ok(blas.cublasSetAtomicsMode(self.handle, 0), "atomics off")
        self.gemm(self.a)

    def result(self):
        host = (ctypes.c_char * NBYTES)()
        ok(rt.cudaMemcpyAsync(host, self.a, NBYTES, 2, self.stream), "d2h")
        ok(rt.cudaStreamSynchronize(self.stream), "sync")
        return bytes(host)


def main():
    ok(rt.cudaFree(None), "cudaFree")
    model = Model()
    if "--thread" in sys.argv:
        failed = []

        def step():  # a thread of its own makes the device current first, as frameworks do
            try:
                ok(rt.cudaSetDevice(0), "cudaSetDevice")
                model.forward()
            except BaseException as error:
                failed.append(error)

        worker = threading.Thread(target=step, name="forward")
        worker.start()
        if busy_hold is not None:
            busy_call.ndt_wait_for_gemm_caller()
            busy_hold.ndt_hold_gil(3000)
        worker.join()
        if failed:
            raise SystemExit(f"forward thread: {failed[0]}")
    else:
        model.forward()
    print("checksum", hashlib.sha256(model.result()).hexdigest()[:16])


if __name__ == "__main__":
    main()
