// native_sgemm.c: native code launching GPU work the way extensions do, for python_stack.py
// (loaded through ctypes; cuBLAS and the runtime are resolved at run time, the stand-in's):
// - ndt_sgemm_on_native_thread runs C = A * A (n x n, column-major) with cuBLAS on a pthread
//   it starts and joins, a thread with no Python state, as PyTorch's autograd threads do;
// - ndt_sgemm_while_gil_held runs it on the calling thread (called through ctypes.CDLL: the GIL
//   released) once another thread holds the GIL in ndt_hold_gil (called through ctypes.PyDLL:
//   the GIL kept), which returns `ms` milliseconds later; that thread first waits, through
//   ctypes.CDLL, in ndt_wait_for_gemm_caller until the GEMM's caller is there.
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

typedef int (*SgemmFn)(void*, int, int, int, int, int, const float*, const float*, int,
                       const float*, int, const float*, float*, int);

struct Job {
  void* handle;
  int n;
  const float* a;
  float* c;
  int status;
};

// `name` from the already loaded library `soname` (python_stack.py loaded both with ctypes).
static void* Loaded(const char* soname, const char* name) {
  void* library = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
  return library != NULL ? dlsym(library, name) : NULL;
}

static void* RunGemm(void* argument) {
  struct Job* job = argument;
  // A new thread makes the device current first, as a framework's worker threads do.
  int (*set_device)(int) = (int (*)(int))Loaded("libcudart.so.13", "cudaSetDevice");
  SgemmFn sgemm = (SgemmFn)Loaded("libcublas.so.13", "cublasSgemm_v2");
  if (set_device == NULL || set_device(0) != 0) {
    job->status = -3;
    return NULL;
  }
  const float one = 1.0f, zero = 0.0f;
  job->status = sgemm == NULL ? -1
                              : sgemm(job->handle, 0, 0, job->n, job->n, job->n, &one, job->a,
                                      job->n, job->a, job->n, &zero, job->c, job->n);
  return NULL;
}

int ndt_sgemm_on_native_thread(void* handle, int n, const float* a, float* c) {
  struct Job job = {handle, n, a, c, 0};
  pthread_t thread;
  if (pthread_create(&thread, NULL, RunGemm, &job) != 0) return -2;
  pthread_join(thread, NULL);
  return job.status;
}

static atomic_int g_waiting;  // ndt_sgemm_while_gil_held is waiting for the GIL to be held
static atomic_int g_holding;  // ndt_hold_gil holds it

static void Pause(long ms) {
  struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
}

int ndt_sgemm_while_gil_held(void* handle, int n, const float* a, float* c) {
  atomic_store(&g_waiting, 1);
  while (!atomic_load(&g_holding)) Pause(1);
  SgemmFn sgemm = (SgemmFn)Loaded("libcublas.so.13", "cublasSgemm_v2");
  if (sgemm == NULL) return -1;
  const float one = 1.0f, zero = 0.0f;
  return sgemm(handle, 0, 0, n, n, n, &one, a, n, a, n, &zero, c, n);
}

void ndt_wait_for_gemm_caller(void) {
  while (!atomic_load(&g_waiting)) Pause(1);
}

void ndt_hold_gil(int ms) {
  atomic_store(&g_holding, 1);
  Pause(ms);
}
