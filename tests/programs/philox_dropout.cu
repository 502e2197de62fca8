// PyTorch's way of passing RNG state to a kernel: dropout-like masking whose random bits come
// from (seed, offset, element index), passed as an at::PhiloxCudaState argument by value, the
// way ATen's random kernels receive it. The struct has PyTorch's layout and name, so ndtrace
// finds the state in the launch arguments as it does for PyTorch's kernels.
//
//   philox_dropout [--graph] [--unseeded]
//
// The seed is 1234 unless --unseeded (then a fresh random one: a forgotten torch.manual_seed).
// Two steps of dropout, each consuming kN counter values per launch.
//
// Eager (default): each step launches DropoutLike with the state by value (seed, offset).
// --graph: what torch.cuda.graphs does. The seed and offset live in device memory (int64 each);
// two DropoutLike launches are captured into a CUDA graph with captured_ = true, the two
// pointers and offset_intragraph_ 0 and kN; before each replay Fill writes the step's seed and
// offset into those words (PyTorch's seed_extragraph_.fill_ / offset_extragraph_.fill_), then
// the graph is launched on the same stream. The kernel uses (*seed, *offset + intragraph).
//
// Every output is checked against the host's computation of the same bits; prints
// "checksum <hex>" of the outputs.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "program_checksum.h"

namespace at {
// ATen/cuda/detail/PhiloxCudaStateRaw.cuh: 24 bytes.
struct PhiloxCudaState {
  union Payload {
    uint64_t val;
    int64_t* ptr;
  };
  Payload seed_;
  Payload offset_;
  uint32_t offset_intragraph_ = 0;
  bool captured_ = false;
};
}  // namespace at

// A counter-based hash of (seed, offset + i): the same bits on every device.
__host__ __device__ inline uint32_t Bits(uint64_t seed, uint64_t counter) {
  uint64_t x = seed ^ (counter * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// As at::cuda::philox::unpack: captured in a graph, the state is read through the pointers
// (the offset plus this launch's place in the graph); otherwise it is the values.
__global__ void DropoutLike(at::PhiloxCudaState state, const float* in, float* out, int n) {
  const uint64_t seed = state.captured_ ? static_cast<uint64_t>(*state.seed_.ptr) : state.seed_.val;
  const uint64_t offset = state.captured_
                              ? static_cast<uint64_t>(*state.offset_.ptr) + state.offset_intragraph_
                              : state.offset_.val;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool keep = (Bits(seed, offset + i) & 1u) != 0;
    out[i] = keep ? in[i] * 2.0f : 0.0f;
  }
}

// PyTorch's tensor.fill_(value) on an int64 tensor: the value is a kernel argument.
__global__ void Fill(int64_t* data, int64_t value, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = value;
  }
}

namespace {

constexpr int kN = 4096;

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "philox_dropout: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

// Exits unless `out` is DropoutLike's output for `in` at (seed, offset).
void Expect(const std::vector<float>& in, const float* out, uint64_t seed, uint64_t offset) {
  for (int i = 0; i < kN; ++i) {
    const float expected = (Bits(seed, offset + i) & 1u) != 0 ? in[i] * 2.0f : 0.0f;
    if (out[i] != expected) {
      std::fprintf(stderr, "philox_dropout: element %d is %g, expected %g\n", i, out[i], expected);
      std::exit(1);
    }
  }
}

// Eager: two launches with the state by value; returns both outputs.
std::vector<float> RunEager(const std::vector<float>& host, const float* in, float* out,
                            uint64_t seed) {
  std::vector<float> result(2 * kN);
  at::PhiloxCudaState state{};
  state.seed_.val = seed;
  for (int step = 0; step < 2; ++step) {
    state.offset_.val = static_cast<uint64_t>(step) * kN;  // as the generator advances
    DropoutLike<<<4, 128>>>(state, in, out, kN);
    Check(cudaGetLastError(), "launch");
    Check(cudaMemcpy(result.data() + step * kN, out, kN * sizeof(float), cudaMemcpyDeviceToHost),
          "DtoH");
    Expect(host, result.data() + step * kN, seed, state.offset_.val);
  }
  return result;
}

// Graph: in -> mid -> out captured once (offsets intragraph 0 and kN), replayed for two steps
// of 2 * kN counter values each; returns mid and out of both replays.
std::vector<float> RunGraph(const std::vector<float>& host, const float* in, float* out,
                            uint64_t seed) {
  int64_t* seed_word = nullptr;
  int64_t* offset_word = nullptr;
  float* mid = nullptr;
  Check(cudaMalloc(&seed_word, sizeof(int64_t)), "cudaMalloc");
  Check(cudaMalloc(&offset_word, sizeof(int64_t)), "cudaMalloc");
  Check(cudaMalloc(&mid, kN * sizeof(float)), "cudaMalloc");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  at::PhiloxCudaState state{};
  state.seed_.ptr = seed_word;
  state.offset_.ptr = offset_word;
  state.captured_ = true;
  cudaGraph_t graph;
  Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  state.offset_intragraph_ = 0;
  DropoutLike<<<4, 128, 0, stream>>>(state, in, mid, kN);
  Check(cudaGetLastError(), "capture: launch");
  state.offset_intragraph_ = kN;
  DropoutLike<<<4, 128, 0, stream>>>(state, mid, out, kN);
  Check(cudaGetLastError(), "capture: launch");
  Check(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

  std::vector<float> result(4 * kN);
  for (int step = 0; step < 2; ++step) {
    const uint64_t offset = static_cast<uint64_t>(step) * 2 * kN;  // the graph uses 2 * kN
    Fill<<<1, 1, 0, stream>>>(seed_word, static_cast<int64_t>(seed), 1);
    Check(cudaGetLastError(), "fill seed");
    Fill<<<1, 1, 0, stream>>>(offset_word, static_cast<int64_t>(offset), 1);
    Check(cudaGetLastError(), "fill offset");
    Check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    float* step_result = result.data() + step * 2 * kN;
    Check(cudaMemcpyAsync(step_result, mid, kN * sizeof(float), cudaMemcpyDeviceToHost, stream),
          "copy mid out");
    Check(
        cudaMemcpyAsync(step_result + kN, out, kN * sizeof(float), cudaMemcpyDeviceToHost, stream),
        "copy out out");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    Expect(host, step_result, seed, offset);
    const std::vector<float> mid_host(step_result, step_result + kN);
    Expect(mid_host, step_result + kN, seed, offset + kN);
  }
  Check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  Check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  bool graph = false;
  bool unseeded = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--graph") == 0) {
      graph = true;
    } else if (std::strcmp(argv[i], "--unseeded") == 0) {
      unseeded = true;
    } else {
      std::fprintf(stderr, "usage: philox_dropout [--graph] [--unseeded]\n");
      return 2;
    }
  }
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i % 13);
  float *in = nullptr, *out = nullptr;
  Check(cudaMalloc(&in, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&out, kN * sizeof(float)), "cudaMalloc");
  Check(cudaMemcpy(in, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice), "HtoD");
  // A fresh 64-bit seed per run, as torch.seed() draws one; unlike the time, it differs between
  // two runs started within one clock tick.
  const uint64_t seed =
      unseeded ? (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}()
               : 1234;
  const std::vector<float> result =
      graph ? RunGraph(host, in, out, seed) : RunEager(host, in, out, seed);
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  return 0;
}
