// data_parallel: one process driving every GPU of the node, as torch.nn.DataParallel does. The
// parameters live on device 0; every step they are broadcast to the other devices, the batch,
// staged in pinned memory, is scattered (one chunk per device), the forward runs in one fresh
// thread per device (parallel_apply: cudaSetDevice, then the replica's kernels on its device's
// stream), the outputs are gathered to device 0 for the loss (read back to the host), and the
// backward runs on autograd's long-lived thread of each device, fed through a queue. The
// gradients are copied to device 0 and summed there in device order (reduce_add), then the SGD
// step. Every copy between devices is made as PyTorch's copy_ makes it: on the source device's
// stream (cudaMemcpyPeerAsync), the destination's stream waiting for an event after it; peer
// access is enabled where cudaDeviceCanAccessPeer allows it (on the stand-in, NDT_STANDIN_P2P=0
// is a machine without). The device memory is not freed at exit: a caching allocator keeps it.
//
// Needs at least two devices (on the stand-in: NDT_STANDIN_DEVICES=2); uses up to four.
// --plant: device 1's backward accumulates its gradient with float atomicAdd in racing order
// (CorpusColumnDotAtomic).
#include <algorithm>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

constexpr int kRows = 64;  // samples per device
constexpr int kCols = 32;  // parameters
constexpr int kSteps = 6;
constexpr float kLearningRate = 1e-5f;

struct Replica {
  int device = 0;
  cudaStream_t stream = nullptr;
  float* param = nullptr;  // the broadcast parameters (kCols)
  float* x = nullptr;      // this device's chunk of the batch (kRows x kCols)
  float* y = nullptr;      // forward output (kRows)
  float* grad = nullptr;   // gradient (kCols)
  cudaEvent_t forward_done = nullptr;
  cudaEvent_t backward_done = nullptr;
  cudaEvent_t copied = nullptr;      // after this device's last copy to device 0
  corpus::Queue<int> backward_work;  // a step to run backward for; -1 ends the thread
  std::thread autograd;
};

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  const int devices = std::min(corpus::RequireDevices(2, "data_parallel"), 4);
  std::vector<Replica> replicas(devices);
  corpus::Queue<int> backward_finished;

  // Device 0: the module's parameters, the gathered outputs and gradients, the loss's host copy.
  CORPUS_CHECK(cudaSetDevice(0));
  float *param0, *outputs0, *grads0, *batch_host, *outputs_host;
  cudaEvent_t params_ready;
  CORPUS_CHECK(cudaMalloc(&param0, kCols * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&outputs0, devices * kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&grads0, devices * kCols * sizeof(float)));
  CORPUS_CHECK(cudaMallocHost(&batch_host, devices * kRows * kCols * sizeof(float)));
  CORPUS_CHECK(cudaMallocHost(&outputs_host, devices * kRows * sizeof(float)));
  CORPUS_CHECK(cudaEventCreateWithFlags(&params_ready, cudaEventDisableTiming));

  for (int d = 0; d < devices; ++d) {
    Replica& r = replicas[d];
    r.device = d;
    CORPUS_CHECK(cudaSetDevice(d));
    if (d != 0) {  // as at::cuda::get_p2p_access does on the first copy between them
      int can = 0;
      CORPUS_CHECK(cudaDeviceCanAccessPeer(&can, d, 0));
      if (can) CORPUS_CHECK(cudaDeviceEnablePeerAccess(0, 0));
    }
    CORPUS_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    CORPUS_CHECK(cudaMalloc(&r.param, kCols * sizeof(float)));
    CORPUS_CHECK(cudaMalloc(&r.x, kRows * kCols * sizeof(float)));
    CORPUS_CHECK(cudaMalloc(&r.y, kRows * sizeof(float)));
    CORPUS_CHECK(cudaMalloc(&r.grad, kCols * sizeof(float)));
    CORPUS_CHECK(cudaEventCreateWithFlags(&r.forward_done, cudaEventDisableTiming));
    CORPUS_CHECK(cudaEventCreateWithFlags(&r.backward_done, cudaEventDisableTiming));
    CORPUS_CHECK(cudaEventCreateWithFlags(&r.copied, cudaEventDisableTiming));
    // Autograd's thread for this device: started with the device, as the engine does.
    r.autograd = std::thread([&r, &backward_finished, plant] {
      CORPUS_CHECK(cudaSetDevice(r.device));
      while (r.backward_work.Pop() >= 0) {
        CORPUS_CHECK(cudaStreamWaitEvent(r.stream, r.forward_done, 0));
        if (plant && r.device == 1) {
          CORPUS_CHECK(cudaMemsetAsync(r.grad, 0, kCols * sizeof(float), r.stream));
          CorpusColumnDotAtomic<<<corpus::Blocks(kRows * kCols), corpus::kThreads, 0, r.stream>>>(
              r.x, r.y, r.grad, kRows, kCols);
        } else {
          CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, r.stream>>>(
              r.x, r.y, r.grad, kRows, kCols);
        }
        CORPUS_CHECK(cudaGetLastError());  // C10_CUDA_KERNEL_LAUNCH_CHECK
        CORPUS_CHECK(cudaEventRecord(r.backward_done, r.stream));
        backward_finished.Push(r.device);
      }
    });
  }
  CORPUS_CHECK(cudaSetDevice(0));
  for (int d = 1; d < devices; ++d) {
    int can = 0;
    CORPUS_CHECK(cudaDeviceCanAccessPeer(&can, 0, d));
    if (can) CORPUS_CHECK(cudaDeviceEnablePeerAccess(d, 0));
  }
  // On the module's stream: a cudaMemcpy would go to the legacy stream, which the non-blocking
  // streams do not wait for (and a copy from pageable memory may return before it lands).
  std::vector<float> initial = corpus::MixedValues(kCols, 11);
  for (float& value : initial) value /= 4096.0f;
  CORPUS_CHECK(cudaMemcpyAsync(param0, initial.data(), kCols * sizeof(float),
                               cudaMemcpyHostToDevice, replicas[0].stream));

  // comm.gather: each replica's `count` floats copied into device 0's `dst`, from the replica's
  // own stream, and device 0's stream waiting for every copy.
  const auto gather = [&](float* dst, float* Replica::*source, int count) {
    for (Replica& r : replicas) {
      CORPUS_CHECK(cudaSetDevice(r.device));
      CORPUS_CHECK(cudaMemcpyPeerAsync(dst + r.device * count, 0, r.*source, r.device,
                                       count * sizeof(float), r.stream));
      CORPUS_CHECK(cudaEventRecord(r.copied, r.stream));
    }
    CORPUS_CHECK(cudaSetDevice(0));
    for (Replica& r : replicas) CORPUS_CHECK(cudaStreamWaitEvent(replicas[0].stream, r.copied, 0));
  };
  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> batch = corpus::MixedValues(devices * kRows * kCols, 100 + step);
    for (size_t i = 0; i < batch.size(); ++i) batch_host[i] = batch[i] / 4096.0f;
    // Broadcast from device 0's stream, after its last update (the replicas' last reads of
    // their parameters were before their backward, which device 0's stream waited for).
    CORPUS_CHECK(cudaSetDevice(0));
    cudaStream_t main_stream = replicas[0].stream;
    for (Replica& r : replicas) {
      CORPUS_CHECK(
          cudaMemcpyPeerAsync(r.param, r.device, param0, 0, kCols * sizeof(float), main_stream));
    }
    CORPUS_CHECK(cudaEventRecord(params_ready, main_stream));
    for (Replica& r : replicas) {
      CORPUS_CHECK(cudaSetDevice(r.device));
      CORPUS_CHECK(cudaStreamWaitEvent(r.stream, params_ready, 0));
      // Scatter: this device's chunk of the batch.
      CORPUS_CHECK(cudaMemcpyAsync(r.x, batch_host + r.device * kRows * kCols,
                                   kRows * kCols * sizeof(float), cudaMemcpyHostToDevice,
                                   r.stream));
    }
    // parallel_apply: a thread per device, started afresh every step.
    std::vector<std::thread> forward;
    for (Replica& r : replicas) {
      forward.emplace_back([&r] {
        CORPUS_CHECK(cudaSetDevice(r.device));
        CorpusMatVec<<<corpus::Blocks(kRows), corpus::kThreads, 0, r.stream>>>(r.x, r.param, r.y,
                                                                               kRows, kCols);
        CORPUS_CHECK(cudaGetLastError());
        CORPUS_CHECK(cudaEventRecord(r.forward_done, r.stream));
      });
    }
    for (std::thread& t : forward) t.join();
    // Gather the outputs to device 0 and compute the loss there (on the host here).
    gather(outputs0, &Replica::y, kRows);
    CORPUS_CHECK(cudaMemcpyAsync(outputs_host, outputs0, devices * kRows * sizeof(float),
                                 cudaMemcpyDeviceToHost, main_stream));
    CORPUS_CHECK(cudaStreamSynchronize(main_stream));
    double loss = 0;
    for (int i = 0; i < devices * kRows; ++i) loss += 0.5 * outputs_host[i] * outputs_host[i];
    losses.push_back(static_cast<float>(loss));
    std::printf("step %d loss %.6f\n", step, loss);
    // Backward on each device's autograd thread; gradients reduced on device 0 in device order.
    for (Replica& r : replicas) r.backward_work.Push(step);
    for (int i = 0; i < devices; ++i) backward_finished.Pop();
    gather(grads0, &Replica::grad, kCols);
    for (int d = 0; d < devices; ++d) {
      CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, main_stream>>>(
          -kLearningRate, grads0 + d * kCols, 1.0f, param0, kCols);
      CORPUS_CHECK(cudaGetLastError());
    }
  }

  std::vector<float> result(kCols);
  // The streams are non-blocking: the legacy stream's copy would not wait for the last update.
  CORPUS_CHECK(cudaStreamSynchronize(replicas[0].stream));
  CORPUS_CHECK(cudaMemcpy(result.data(), param0, kCols * sizeof(float), cudaMemcpyDeviceToHost));
  for (Replica& r : replicas) {
    r.backward_work.Push(-1);
    r.autograd.join();
    CORPUS_CHECK(cudaSetDevice(r.device));
    CORPUS_CHECK(cudaStreamSynchronize(r.stream));
  }
  CORPUS_CHECK(cudaSetDevice(0));
  CORPUS_CHECK(cudaFreeHost(batch_host));
  CORPUS_CHECK(cudaFreeHost(outputs_host));
  CORPUS_CHECK(cudaEventDestroy(params_ready));
  result.insert(result.end(), losses.begin(), losses.end());
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  return 0;
}
