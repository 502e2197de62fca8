# python_threads.py: a Python program driving CUDA through ctypes, as a framework's Python layer
# would: a data worker forked before CUDA (multiprocessing) sends batches through a queue; then
# three Python threads, started in jittered order, each with its own stream and cuBLAS handle,
# stage their batch through pinned memory, run GEMMs chained by device-to-device copies, and
# read the result back with cudaMemcpyAsync + cudaStreamSynchronize. Deterministic; --plant
# allows atomics on thread 1's handle (cublasSgemm_v2 then races on the stand-in).
# Prints "checksum <16 hex>". Needs libcudart.so.13 and libcublas.so.13 on the library path.
import ctypes, hashlib, multiprocessing as mp, random, struct, sys, threading, time
def worker(q):
    rng = random.Random(7)
    for _ in range(3): q.put([rng.uniform(-1, 1) for _ in range(64 * 64)])
if __name__ == "__main__":
    mp.set_start_method("fork")
    q = mp.Queue(); p = mp.Process(target=worker, args=(q,)); p.start()
    batches = [q.get() for _ in range(3)]; p.join()
    rt = ctypes.CDLL("libcudart.so.13"); blas = ctypes.CDLL("libcublas.so.13")
    plant = "--plant" in sys.argv
    def ok(r, what):
        if r != 0: raise SystemExit(f"{what} failed: {r}")
    ok(rt.cudaFree(None), "cudaFree")
    n = 64; nbytes = n * n * 4; results = [None] * 3
    def run(i):
        time.sleep(random.random() / 50)
        s = ctypes.c_void_p(); ok(rt.cudaStreamCreate(ctypes.byref(s)), "stream")
        h = ctypes.c_void_p(); ok(blas.cublasCreate_v2(ctypes.byref(h)), "create")
        ok(blas.cublasSetStream_v2(h, s), "setstream")
        if plant and i == 1: ok(blas.cublasSetAtomicsMode(h, 1), "atomics")
        a = ctypes.c_void_p(); c = ctypes.c_void_p()
        ok(rt.cudaMalloc(ctypes.byref(a), nbytes), "malloc"); ok(rt.cudaMalloc(ctypes.byref(c), nbytes), "malloc")
        host = ctypes.c_void_p(); ok(rt.cudaMallocHost(ctypes.byref(host), nbytes), "pinned")
        data = (ctypes.c_float * (n * n))(*batches[i]); ctypes.memmove(host, data, nbytes)
        ok(rt.cudaMemcpyAsync(a, host, nbytes, 1, s), "h2d")
        one = ctypes.c_float(1.0); zero = ctypes.c_float(0.0)
        for _ in range(4):
            ok(blas.cublasSgemm_v2(h, 0, 0, n, n, n, ctypes.byref(one), a, n, a, n, ctypes.byref(zero), c, n), "gemm")
            ok(rt.cudaMemcpyAsync(a, c, nbytes, 3, s), "d2d")
        ok(rt.cudaMemcpyAsync(host, c, nbytes, 2, s), "d2h"); ok(rt.cudaStreamSynchronize(s), "sync")
        results[i] = ctypes.string_at(host, nbytes)
        rt.cudaFreeHost(host); rt.cudaFree(a); rt.cudaFree(c); blas.cublasDestroy_v2(h); rt.cudaStreamDestroy(s)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print("checksum", hashlib.sha256(b"".join(results)).hexdigest()[:16])
