// pipeline_p2p: pipeline parallelism as GPipe-style schedules (torch.distributed.pipelining,
// Megatron's pipeline stages) drive NCCL: two stages, one per GPU, here as two threads of one
// process each with its own communicator rank (ncclCommInitRank on a unique id the main thread
// made). Per micro-batch: stage 0 computes its activations (CorpusMatVec on its batch), sends
// them to stage 1 (ncclSend on its NCCL stream after an event from the compute stream); stage 1
// receives them (ncclRecv, posted before stage 0 has sent), scales them through its own weight
// and sends the gradient of the loss back; stage 0 receives it and accumulates its weight
// gradient (CorpusColumnDot), then both stages take an SGD step after every micro-batch. The
// micro-batches' losses are read back by stage 1. NCCL_ALGO=Ring.
//
// Needs two devices (on the stand-in: NDT_STANDIN_DEVICES=2).
// --plant: stage 0's weight gradient accumulates with float atomicAdd in racing order
// (CorpusColumnDotAtomic): its weights, then the activations it sends, differ from run to run;
// stage 1 receives different data though nothing it computed differed: the op to name is stage
// 0's kernel, not stage 1's ncclRecv.

#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"
#include "corpus_nccl.h"

namespace {

constexpr int kRows = 64;  // samples per micro-batch
constexpr int kCols = 96;  // stage 0's parameters
constexpr int kMicroBatches = 6;
constexpr float kLearningRate = 1e-5f;

struct Stage {
  ncclComm_t comm = nullptr;
  cudaStream_t compute = nullptr;
  cudaStream_t nccl = nullptr;
  cudaEvent_t ready = nullptr;
  cudaEvent_t arrived = nullptr;
};

Stage Open(int rank, ncclUniqueId id) {
  Stage s;
  CORPUS_CHECK(cudaSetDevice(rank));
  NCCL_CHECK(ncclCommInitRank(&s.comm, 2, id, rank));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&s.nccl, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
  CORPUS_CHECK(cudaEventCreateWithFlags(&s.arrived, cudaEventDisableTiming));
  return s;
}

// What was computed on the compute stream, sent from the NCCL stream after it.
void Send(Stage& s, const float* data, int count, int peer) {
  CORPUS_CHECK(cudaEventRecord(s.ready, s.compute));
  CORPUS_CHECK(cudaStreamWaitEvent(s.nccl, s.ready, 0));
  NCCL_CHECK(ncclSend(data, count, ncclFloat, peer, s.comm, s.nccl));
}

// Received on the NCCL stream, the compute stream waiting for it.
void Receive(Stage& s, float* data, int count, int peer) {
  NCCL_CHECK(ncclRecv(data, count, ncclFloat, peer, s.comm, s.nccl));
  CORPUS_CHECK(cudaEventRecord(s.arrived, s.nccl));
  CORPUS_CHECK(cudaStreamWaitEvent(s.compute, s.arrived, 0));
}

void StageZero(ncclUniqueId id, bool plant, std::vector<float>* weights_out) {
  Stage s = Open(0, id);
  const std::vector<float> data =
      corpus::SmallMixedValues(size_t{kMicroBatches} * kRows * kCols, 3);
  const std::vector<float> init = corpus::SmallMixedValues(kCols, 91);
  float *x, *w, *activations, *grad_in, *grad_w;
  CORPUS_CHECK(cudaMalloc(&x, data.size() * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&w, kCols * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&activations, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&grad_in, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&grad_w, kCols * sizeof(float)));
  CORPUS_CHECK(cudaMemcpyAsync(x, data.data(), data.size() * sizeof(float), cudaMemcpyHostToDevice,
                               s.compute));
  CORPUS_CHECK(
      cudaMemcpyAsync(w, init.data(), kCols * sizeof(float), cudaMemcpyHostToDevice, s.compute));
  for (int m = 0; m < kMicroBatches; ++m) {
    const float* batch = x + size_t{static_cast<size_t>(m)} * kRows * kCols;
    CorpusMatVec<<<corpus::Blocks(kRows), corpus::kThreads, 0, s.compute>>>(batch, w, activations,
                                                                            kRows, kCols);
    CORPUS_CHECK(cudaGetLastError());
    Send(s, activations, kRows, 1);
    Receive(s, grad_in, kRows, 1);
    if (plant) {
      CORPUS_CHECK(cudaMemsetAsync(grad_w, 0, kCols * sizeof(float), s.compute));
      CorpusColumnDotAtomic<<<corpus::Blocks(kRows * kCols), corpus::kThreads, 0, s.compute>>>(
          batch, grad_in, grad_w, kRows, kCols);
    } else {
      CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, s.compute>>>(
          batch, grad_in, grad_w, kRows, kCols);
    }
    CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, s.compute>>>(-kLearningRate, grad_w,
                                                                           1.0f, w, kCols);
    CORPUS_CHECK(cudaGetLastError());
  }
  weights_out->resize(kCols);
  CORPUS_CHECK(cudaMemcpyAsync(weights_out->data(), w, kCols * sizeof(float),
                               cudaMemcpyDeviceToHost, s.compute));
  CORPUS_CHECK(cudaStreamSynchronize(s.compute));
  NCCL_CHECK(ncclCommDestroy(s.comm));
}

void StageOne(ncclUniqueId id, std::vector<float>* losses_out) {
  Stage s = Open(1, id);
  float *activations, *scale, *out, *grad, *loss_host;
  CORPUS_CHECK(cudaMalloc(&activations, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&scale, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&out, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&grad, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMallocHost(&loss_host, kRows * sizeof(float)));
  const std::vector<float> init(kRows, 0.5f);
  CORPUS_CHECK(cudaMemcpyAsync(scale, init.data(), kRows * sizeof(float), cudaMemcpyHostToDevice,
                               s.compute));
  for (int m = 0; m < kMicroBatches; ++m) {
    Receive(s, activations, kRows, 0);
    // out = activations + scale; the gradient sent back is out itself (d(out^2 / 2)).
    CORPUS_CHECK(
        cudaMemcpyAsync(out, scale, kRows * sizeof(float), cudaMemcpyDeviceToDevice, s.compute));
    CorpusAxpby<<<corpus::Blocks(kRows), corpus::kThreads, 0, s.compute>>>(1.0f, activations, 1.0f,
                                                                           out, kRows);
    CORPUS_CHECK(
        cudaMemcpyAsync(grad, out, kRows * sizeof(float), cudaMemcpyDeviceToDevice, s.compute));
    Send(s, grad, kRows, 0);
    CorpusAxpby<<<corpus::Blocks(kRows), corpus::kThreads, 0, s.compute>>>(-kLearningRate, grad,
                                                                           1.0f, scale, kRows);
    CORPUS_CHECK(
        cudaMemcpyAsync(loss_host, out, kRows * sizeof(float), cudaMemcpyDeviceToHost, s.compute));
    CORPUS_CHECK(cudaStreamSynchronize(s.compute));
    losses_out->insert(losses_out->end(), loss_host, loss_host + kRows);
  }
  NCCL_CHECK(ncclCommDestroy(s.comm));
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  corpus::RequireDevices(2, "pipeline_p2p");
  setenv("NCCL_ALGO", "Ring", 1);
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<float> weights, losses;
  std::thread one(StageOne, id, &losses);
  std::thread zero(StageZero, id, plant, &weights);
  zero.join();
  one.join();
  weights.insert(weights.end(), losses.begin(), losses.end());
  ndt::programs::PrintChecksum(weights.data(), weights.size() * sizeof(float));
  return 0;
}
