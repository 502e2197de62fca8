// The kernel of driver_only.cc, compiled by nvcc --fatbin and embedded in that program as bytes.
// Integer arithmetic (wrapping), so the result is exact on every device.
__global__ void ScaleOffset(unsigned* data, unsigned mul, unsigned add, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = data[i] * mul + add;
  }
}
