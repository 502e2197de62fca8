// The kernels the corpus programs launch, as the kind of elementwise, reduction and scatter
// kernels a framework launches. Every one is a grid-stride loop (the result does not depend on
// the launch geometry); the stand-in device runs host twins of them (tests/standin/
// standin_kernels.cc, "Corpus*"). Only CorpusColumnDotAtomic and CorpusScatterAdd are
// nondeterministic: float atomicAdd in whatever order the threads reach the cells.
#pragma once

#include <cuda_runtime.h>

// y = a x + b y.
__global__ void CorpusAxpby(float a, const float* x, float b, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = a * x[i] + b * y[i];
  }
}

// out[r] = sum over c of m[r][c] v[c] (row-major m, each sum in column order).
__global__ void CorpusMatVec(const float* m, const float* v, float* out, int rows, int cols) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += m[r * cols + c] * v[c];
    out[r] = sum;
  }
}

// out[r] = sum over c of m[r][c] (each sum in column order).
__global__ void CorpusRowSum(const float* m, float* out, int rows, int cols) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += m[r * cols + c];
    out[r] = sum;
  }
}

// out[c] = sum over r of m[r][c] v[r], each sum in row order: a weight gradient.
__global__ void CorpusColumnDot(const float* m, const float* v, float* out, int rows, int cols) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < rows; ++r) sum += m[r * cols + c] * v[r];
    out[c] = sum;
  }
}

// out[c] += m[r][c] v[r] for every (r, c), with atomicAdd: the same gradient accumulated in
// racing order (out must be zeroed first).
__global__ void CorpusColumnDotAtomic(const float* m, const float* v, float* out, int rows,
                                      int cols) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
       i += gridDim.x * blockDim.x) {
    atomicAdd(&out[i % cols], m[i] * v[i / cols]);
  }
}

// out[index[i]] += values[i] with atomicAdd (index_add_ / scatter_add_).
__global__ void CorpusScatterAdd(const float* values, const int* index, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&out[index[i]], values[i]);
  }
}

// out[b] = sum of values[i] with index[i] == b, in order of i: the deterministic scatter.
__global__ void CorpusSegmentSum(const float* values, const int* index, float* out, int n,
                                 int bins) {
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < bins; b += gridDim.x * blockDim.x) {
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
      if (index[i] == b) sum += values[i];
    }
    out[b] = sum;
  }
}

// y = u < p ? 0 : x / (1 - p): dropout with uniform numbers u from cuRAND.
__global__ void CorpusDropout(const float* x, const float* u, float p, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = u[i] < p ? 0.0f : x[i] / (1.0f - p);
  }
}
