// The kernel bench_hooks launches: the same VectorAdd as tests/programs (the stand-in runs its
// host implementation by this mangled name), built into a fat binary (bench/CMakeLists.txt) so
// that the launch case loads on a GPU too.
__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    c[i] = a[i] + b[i];
  }
}
