# python_processes.py: a Python program that shards GPU work over processes, as multi-GPU
# inference or a preprocessing job does with multiprocessing: three processes started together
# (fork, or --spawn: a fresh interpreter each), each reaching the GPU after a random delay (so
# their order differs from run to run), runs GEMMs of its own shard's size through ctypes and
# cuBLAS, and sends a digest of its result to the parent, which prints "checksum <16 hex>".
# Processes carry no RANK: ndtrace pairs them between runs by what they did, not by the order
# they started in. --plant allows atomics on shard 1's cuBLAS handle (cublasSgemm_v2 then races
# on the stand-in). Needs libcudart.so.13 and libcublas.so.13 on the library path.
import ctypes, hashlib, multiprocessing as mp, random, sys, time


def shard(i, queue):
    time.sleep(random.random() / 20)
    rt = ctypes.CDLL("libcudart.so.13"); blas = ctypes.CDLL("libcublas.so.13")
    def ok(r, what):
        if r != 0: raise SystemExit(f"shard {i}: {what} failed: {r}")
    n = 32 * (i + 1); nbytes = n * n * 4
    h = ctypes.c_void_p(); ok(blas.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
    if "--plant" in sys.argv and i == 1: ok(blas.cublasSetAtomicsMode(h, 1), "atomics")
    a = ctypes.c_void_p(); c = ctypes.c_void_p()
    ok(rt.cudaMalloc(ctypes.byref(a), nbytes), "cudaMalloc"); ok(rt.cudaMalloc(ctypes.byref(c), nbytes), "cudaMalloc")
    rng = random.Random(i)
    data = (ctypes.c_float * (n * n))(*[rng.uniform(-1, 1) for _ in range(n * n)])
    ok(rt.cudaMemcpy(a, data, nbytes, 1), "h2d")
    one = ctypes.c_float(1.0); zero = ctypes.c_float(0.0)
    for _ in range(3):
        ok(blas.cublasSgemm_v2(h, 0, 0, n, n, n, ctypes.byref(one), a, n, a, n, ctypes.byref(zero), c, n), "gemm")
        ok(rt.cudaMemcpy(a, c, nbytes, 3), "d2d")
    out = (ctypes.c_float * (n * n))()
    ok(rt.cudaMemcpy(out, c, nbytes, 2), "d2h")
    queue.put((i, hashlib.sha256(bytes(out)).hexdigest()[:16]))


if __name__ == "__main__":
    context = mp.get_context("spawn" if "--spawn" in sys.argv else "fork")
    queue = context.Queue()
    processes = [context.Process(target=shard, args=(i, queue)) for i in range(3)]
    [p.start() for p in processes]
    results = dict(queue.get() for _ in processes)
    [p.join() for p in processes]
    if any(p.exitcode != 0 for p in processes): raise SystemExit("a shard failed")
    print("checksum", hashlib.sha256("".join(results[i] for i in range(3)).encode()).hexdigest()[:16])
