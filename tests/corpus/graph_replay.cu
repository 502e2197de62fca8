// graph_replay: a training step captured into a CUDA graph and replayed, as torch.cuda.graphs
// (make_graphed_callables, CUDAGraph.replay) does: static input and parameter tensors from the
// caching allocator, the capture on a side stream that first waits for the main stream, a
// global-mode capture of forward (CorpusMatVec), loss gradient (CorpusAxpby), weight gradient
// (cudaMemsetAsync + CorpusColumnDot), SGD step (CorpusAxpby) and loss (CorpusRowSum); then per
// replay a new batch copied from pinned host memory into the static input on the main stream,
// cudaGraphLaunch, and the loss read back with cudaMemcpyAsync + cudaStreamSynchronize.
// --plant: the weight gradient inside the graph is CorpusColumnDotAtomic (atomicAdd in racing
// order). The final weights are checked against the same float arithmetic on the host.
#include <cmath>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

constexpr int kRows = 128, kCols = 64, kReplays = 5;
constexpr float kRate = 1e-4f;

// The host's version of one step, in the kernels' order of float operations.
void HostStep(const std::vector<float>& x, const std::vector<float>& target,
              std::vector<float>& w) {
  std::vector<float> v(kRows), grad(kCols);
  for (int r = 0; r < kRows; ++r) {
    float sum = 0.0f;
    for (int c = 0; c < kCols; ++c) sum += x[r * kCols + c] * w[c];
    v[r] = -1.0f * target[r] + 1.0f * sum;
  }
  for (int c = 0; c < kCols; ++c) {
    float sum = 0.0f;
    for (int r = 0; r < kRows; ++r) sum += x[r * kCols + c] * v[r];
    grad[c] = sum;
  }
  for (int c = 0; c < kCols; ++c) w[c] = -kRate * grad[c] + 1.0f * w[c];
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  corpus::CachingAllocator allocator;
  cudaStream_t main_stream, side;  // main: a blocking stream, as torch's current stream
  CORPUS_CHECK(cudaStreamCreate(&main_stream));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  // The graph's memory pool: static tensors allocated before the capture, used by every replay.
  auto tensor = [&](size_t count) {
    return static_cast<float*>(allocator.Allocate(count * sizeof(float), side));
  };
  float *x = tensor(size_t{kRows} * kCols), *target = tensor(kRows), *w = tensor(kCols),
        *v = tensor(kRows), *grad = tensor(kCols), *loss = tensor(1);
  const std::vector<float> target_host = corpus::MixedValues(kRows, 5);
  std::vector<float> w_host = corpus::MixedValues(kCols, 6);
  CORPUS_CHECK(cudaMemcpyAsync(target, target_host.data(), kRows * 4, cudaMemcpyHostToDevice,
                               main_stream));
  CORPUS_CHECK(cudaMemcpyAsync(w, w_host.data(), kCols * 4, cudaMemcpyHostToDevice, main_stream));
  float* batch_pinned = nullptr;
  CORPUS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&batch_pinned), size_t{kRows} * kCols * 4,
                             cudaHostAllocDefault));

  // Capture: the side stream waits for the main stream's work so far, then records the step.
  cudaEvent_t before_capture;
  CORPUS_CHECK(cudaEventCreateWithFlags(&before_capture, cudaEventDisableTiming));
  CORPUS_CHECK(cudaEventRecord(before_capture, main_stream));
  CORPUS_CHECK(cudaStreamWaitEvent(side, before_capture, 0));
  CORPUS_CHECK(cudaStreamSynchronize(side));
  cudaGraph_t graph;
  CORPUS_CHECK(cudaStreamBeginCapture(side, cudaStreamCaptureModeGlobal));
  // As PyTorch's caching allocator does on every allocation during a capture: the capture's id
  // (its private pool), under a relaxed capture mode (CUDAStreamCaptureModeGuard).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CORPUS_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  CORPUS_CHECK(cudaStreamGetCaptureInfo(side, &status, &capture_id));
  CORPUS_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  if (status != cudaStreamCaptureStatusActive || capture_id == 0) {
    std::fprintf(stderr, "the side stream's capture is not reported active\n");
    return 1;
  }
  CorpusMatVec<<<corpus::Blocks(kRows), corpus::kThreads, 0, side>>>(x, w, v, kRows, kCols);
  CorpusAxpby<<<corpus::Blocks(kRows), corpus::kThreads, 0, side>>>(-1.0f, target, 1.0f, v, kRows);
  CORPUS_CHECK(cudaMemsetAsync(grad, 0, kCols * 4, side));
  if (plant) {
    CorpusColumnDotAtomic<<<corpus::Blocks(kRows * kCols), corpus::kThreads, 0, side>>>(
        x, v, grad, kRows, kCols);
  } else {
    CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, side>>>(x, v, grad, kRows, kCols);
  }
  CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, side>>>(-kRate, grad, 1.0f, w, kCols);
  CorpusRowSum<<<1, corpus::kThreads, 0, side>>>(v, loss, 1, kRows);
  CORPUS_CHECK(cudaStreamEndCapture(side, &graph));
  cudaGraphExec_t exec;
  CORPUS_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<float> losses;
  for (int replay = 0; replay < kReplays; ++replay) {
    const std::vector<float> batch = corpus::MixedValues(size_t{kRows} * kCols, 50 + replay);
    std::copy(batch.begin(), batch.end(), batch_pinned);
    CORPUS_CHECK(cudaMemcpyAsync(x, batch_pinned, batch.size() * 4, cudaMemcpyHostToDevice,
                                 main_stream));
    CORPUS_CHECK(cudaGraphLaunch(exec, main_stream));
    float step_loss = 0;
    CORPUS_CHECK(cudaMemcpyAsync(&step_loss, loss, 4, cudaMemcpyDeviceToHost, main_stream));
    CORPUS_CHECK(cudaStreamSynchronize(main_stream));  // also: the pinned batch is free again
    losses.push_back(step_loss);
    HostStep(batch, target_host, w_host);
  }
  std::vector<float> w_final(kCols);
  CORPUS_CHECK(cudaMemcpy(w_final.data(), w, kCols * 4, cudaMemcpyDeviceToHost));
  for (int c = 0; c < kCols; ++c) {
    // Within float tolerance: a GPU contracts a * x + b * y into fused multiply-adds.
    if (std::fabs(w_final[c] - w_host[c]) > 1e-3f * (1 + std::fabs(w_host[c]))) {
      std::fprintf(stderr, "w[%d] = %.9g, the host computed %.9g\n", c, w_final[c], w_host[c]);
      return 1;
    }
  }
  std::vector<float> result = losses;
  result.insert(result.end(), w_final.begin(), w_final.end());
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  CORPUS_CHECK(cudaGraphExecDestroy(exec));
  CORPUS_CHECK(cudaGraphDestroy(graph));
  CORPUS_CHECK(cudaFreeHost(batch_pinned));
  return 0;
}
