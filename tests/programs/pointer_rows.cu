// Deterministic, with device pointers held in device memory: `rows` is a device array of
// pointers into another allocation, `data` (in reverse row order), and the kernel reads each
// row through it: out[i] = 2 * rows[i / kRowLength][i % kRowLength]. Replaying the launch alone
// (`ndtrace replay --op`) works only if `data` is re-created at its recorded address.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "program_checksum.h"

__global__ void GatherRows(const float* const* rows, float* out, int row_length, int row_count) {
  const int n = row_length * row_count;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = 2.0f * rows[i / row_length][i % row_length];
  }
}

namespace {

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "pointer_rows: %s: %s (%s)\n", what, cudaGetErrorString(error),
               cudaGetErrorName(error));
  std::exit(1);
}

}  // namespace

int main() {
  constexpr int kRowLength = 1024;
  constexpr int kRows = 8;
  constexpr int kN = kRowLength * kRows;
  std::vector<float> data(kN);
  for (int i = 0; i < kN; ++i) data[i] = static_cast<float>(i) * 0.5f;

  float *d_data, *d_out;
  const float** d_rows;
  Check(cudaMalloc(&d_data, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&d_out, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&d_rows, kRows * sizeof(float*)), "cudaMalloc");
  std::vector<const float*> rows(kRows);
  for (int r = 0; r < kRows; ++r) rows[r] = d_data + (kRows - 1 - r) * kRowLength;
  Check(cudaMemcpy(d_data, data.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  Check(cudaMemcpy(d_rows, rows.data(), kRows * sizeof(float*), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  GatherRows<<<32, 256>>>(d_rows, d_out, kRowLength, kRows);
  Check(cudaGetLastError(), "GatherRows launch");
  std::vector<float> out(kN);
  Check(cudaMemcpy(out.data(), d_out, kN * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  Check(cudaFree(d_data), "cudaFree");
  Check(cudaFree(d_out), "cudaFree");
  Check(cudaFree(d_rows), "cudaFree");

  ndt::programs::PrintChecksum(out.data(), out.size() * sizeof(float));
  return 0;
}
