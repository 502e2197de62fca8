// model_parallel: a model split over two GPUs in one process, as a naive pipeline (the PyTorch
// model-parallel tutorial, Hugging Face's device_map="auto") trains it: stage 0 (a 1024x32
// layer) on device 0, stage 1 (a 1024x1024 layer) on device 1, each stage on a non-blocking
// stream of its device. Every step: the pinned batch is copied to device 0, stage 0's output is
// copied to device 1 on device 0's stream (PyTorch copies between devices on the source's
// stream) and device 1's stream waits for it, the loss is read back from device 1, the gradient
// goes back the same way, and each stage updates its own parameters on its own stream (stage 1
// with weight decay over its whole matrix). The program ends right after its last step, as
// training scripts do: stage 1's last update may still be running on device 1 when it exits.
//
// Needs two devices (on the stand-in: NDT_STANDIN_DEVICES=2).
// --plant: stage 1's backward accumulates with float atomicAdd (CorpusColumnDotAtomic).
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

constexpr int kBatch = 32;     // stage 0's inputs
constexpr int kHidden = 1024;  // stage 0's outputs, stage 1's inputs and outputs
constexpr int kSteps = 5;
constexpr float kLearningRate = 1e-3f;
constexpr float kWeightDecay = 1e-2f;

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  corpus::RequireDevices(2, "model_parallel");
  // Stage 0 on device 0: its inputs, parameters and activations.
  CORPUS_CHECK(cudaSetDevice(0));
  cudaStream_t s0;
  cudaEvent_t forward0;
  float *x0, *p0, *h0, *g0_in, *g0, *batch_host;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaEventCreateWithFlags(&forward0, cudaEventDisableTiming));
  CORPUS_CHECK(cudaMalloc(&x0, kHidden * kBatch * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&p0, kBatch * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&h0, kHidden * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&g0_in, kHidden * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&g0, kBatch * sizeof(float)));
  CORPUS_CHECK(cudaMallocHost(&batch_host, kHidden * kBatch * sizeof(float)));
  std::vector<float> init0 = corpus::MixedValues(kBatch, 21);
  for (float& v : init0) v /= 65536.0f;
  CORPUS_CHECK(cudaMemcpyAsync(p0, init0.data(), kBatch * sizeof(float), cudaMemcpyHostToDevice, s0));

  // Stage 1 on device 1.
  CORPUS_CHECK(cudaSetDevice(1));
  cudaStream_t s1;
  cudaEvent_t forward1, backward1;
  float *w1, *h1, *y1, *g1, *y_host;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaEventCreateWithFlags(&forward1, cudaEventDisableTiming));
  CORPUS_CHECK(cudaEventCreateWithFlags(&backward1, cudaEventDisableTiming));
  CORPUS_CHECK(cudaMalloc(&w1, kHidden * kHidden * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&h1, kHidden * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&y1, kHidden * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&g1, kHidden * sizeof(float)));
  CORPUS_CHECK(cudaMallocHost(&y_host, kHidden * sizeof(float)));
  std::vector<float> init1 = corpus::MixedValues(kHidden * kHidden, 22);
  for (float& v : init1) v /= 65536.0f * kHidden;
  CORPUS_CHECK(cudaMemcpyAsync(w1, init1.data(), init1.size() * sizeof(float),
                               cudaMemcpyHostToDevice, s1));

  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> batch = corpus::MixedValues(kHidden * kBatch, 200 + step);
    for (size_t i = 0; i < batch.size(); ++i) batch_host[i] = batch[i] / 4096.0f;
    // Stage 0 forward; its output copied to device 1 from device 0's stream, once stage 1's
    // last step no longer reads it.
    CORPUS_CHECK(cudaSetDevice(0));
    CORPUS_CHECK(cudaMemcpyAsync(x0, batch_host, batch.size() * sizeof(float),
                                 cudaMemcpyHostToDevice, s0));
    CorpusMatVec<<<corpus::Blocks(kHidden), corpus::kThreads, 0, s0>>>(x0, p0, h0, kHidden,
                                                                      kBatch);
    CORPUS_CHECK(cudaGetLastError());
    if (step > 0) CORPUS_CHECK(cudaStreamWaitEvent(s0, backward1, 0));
    CORPUS_CHECK(cudaMemcpyPeerAsync(h1, 1, h0, 0, kHidden * sizeof(float), s0));
    CORPUS_CHECK(cudaEventRecord(forward0, s0));
    // Stage 1 forward and the loss, read back on the host.
    CORPUS_CHECK(cudaSetDevice(1));
    CORPUS_CHECK(cudaStreamWaitEvent(s1, forward0, 0));
    CorpusMatVec<<<corpus::Blocks(kHidden), corpus::kThreads, 0, s1>>>(w1, h1, y1, kHidden,
                                                                      kHidden);
    CORPUS_CHECK(cudaGetLastError());
    CORPUS_CHECK(cudaMemcpyAsync(y_host, y1, kHidden * sizeof(float), cudaMemcpyDeviceToHost, s1));
    CORPUS_CHECK(cudaStreamSynchronize(s1));
    double loss = 0;
    for (int i = 0; i < kHidden; ++i) loss += 0.5 * y_host[i] * y_host[i];
    losses.push_back(static_cast<float>(loss));
    std::printf("step %d loss %.9g\n", step, loss);
    // Stage 1 backward: the gradient for stage 0's output, copied to device 0 from device 1's
    // stream; then stage 1's own update, weight decay over its whole matrix.
    if (plant) {
      CORPUS_CHECK(cudaMemsetAsync(g1, 0, kHidden * sizeof(float), s1));
      CorpusColumnDotAtomic<<<corpus::Blocks(kHidden * kHidden), corpus::kThreads, 0, s1>>>(
          w1, y1, g1, kHidden, kHidden);
    } else {
      CorpusColumnDot<<<corpus::Blocks(kHidden), corpus::kThreads, 0, s1>>>(w1, y1, g1, kHidden,
                                                                           kHidden);
    }
    CORPUS_CHECK(cudaGetLastError());
    CORPUS_CHECK(cudaMemcpyPeerAsync(g0_in, 0, g1, 1, kHidden * sizeof(float), s1));
    CORPUS_CHECK(cudaEventRecord(backward1, s1));
    CorpusAxpby<<<corpus::Blocks(kHidden * kHidden), corpus::kThreads, 0, s1>>>(
        -kLearningRate * kWeightDecay, w1, 1.0f, w1, kHidden * kHidden);
    CORPUS_CHECK(cudaGetLastError());
    // Stage 0 backward and update.
    CORPUS_CHECK(cudaSetDevice(0));
    CORPUS_CHECK(cudaStreamWaitEvent(s0, backward1, 0));
    CorpusColumnDot<<<corpus::Blocks(kBatch), corpus::kThreads, 0, s0>>>(x0, g0_in, g0, kHidden,
                                                                        kBatch);
    CorpusAxpby<<<corpus::Blocks(kBatch), corpus::kThreads, 0, s0>>>(-kLearningRate, g0, 1.0f, p0,
                                                                    kBatch);
    CORPUS_CHECK(cudaGetLastError());
  }
  // Stage 0's parameters saved (device 0 only); the program ends here, stage 1's last update
  // possibly still running (nothing is freed: a caching allocator keeps its memory until the
  // process ends).
  std::vector<float> result(kBatch);
  CORPUS_CHECK(cudaSetDevice(0));
  CORPUS_CHECK(cudaMemcpyAsync(result.data(), p0, kBatch * sizeof(float), cudaMemcpyDeviceToHost,
                               s0));
  CORPUS_CHECK(cudaStreamSynchronize(s0));
  result.insert(result.end(), losses.begin(), losses.end());
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  return 0;
}
