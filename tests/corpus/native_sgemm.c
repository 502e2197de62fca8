// native_sgemm.c: a native extension's own thread launching GPU work, as PyTorch's autograd
// threads do: ndt_sgemm_on_native_thread runs C = A * A (n x n, column-major) with cuBLAS on a
// pthread it starts and joins, a thread with no Python state. Loaded by python_stack.py
// through ctypes; cublasSgemm_v2 is resolved at run time (the stand-in's libcublas.so.13).
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

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
