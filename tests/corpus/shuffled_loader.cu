// shuffled_loader: a training loop fed by a shuffling data loader, the way torch.utils.data's
// DataLoader(shuffle=True, pin_memory=True) feeds one:
//  - a loader thread shuffles the dataset's indices at the start of every epoch with its own
//    generator (DataLoader's `generator`, seeded from the program's seed), gathers each batch's
//    rows into a page-locked staging buffer from a pool of eight (cudaHostAlloc, reused once the
//    buffer's last copy has completed), copies it on a copy stream into a tensor from the
//    caching allocator and records an event, then hands the batch to the main thread;
//  - the main thread waits for the batch's event on the compute stream, runs a linear model's
//    forward and backward (CorpusMatVec, CorpusAxpby, CorpusColumnDot) and its SGD step, reads
//    the loss back (.item()) and frees the batch's tensors; SGD depends on the batch order, so
//    the final weights do too.
// --plant: the loader's generator is seeded from std::random_device (shuffle=True without a
// seeded generator): every run trains on another order. The first op to differ is the copy of
// the first batch, and its input is host data: `check` must say the runs diverged on the CPU.
// --fail: the first step fails (as a Python exception escaping the loop does: a message, exit
// status 1) while the loader thread is still gathering and copying the first batches: how far it
// got differs from run to run, which is no divergence; `check` must say the program failed.
// The weights are checked against the host's float arithmetic within tolerance.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

constexpr int kSamples = 512, kCols = 32, kBatch = 32, kEpochs = 3, kSlots = 8;
constexpr int kBatchesPerEpoch = kSamples / kBatch;
constexpr float kRate = 1.0f / 64;

struct Batch {
  int index = -1;  // -1: the loader is done
  int slot = 0;
  float* x = nullptr;  // device: kBatch x kCols rows, then kBatch targets
  cudaEvent_t copied = nullptr;
};

// Reading and decoding a sample costs the loader CPU time, as a real dataset's __getitem__ does
// (about 10 us here); the sample itself is already in memory.
std::atomic<uint32_t> decoded{0};
void Decode(int sample) {
  uint32_t x = static_cast<uint32_t>(sample) + 1;
  for (int i = 0; i < 4000; ++i) x = x * 1664525u + 1013904223u;
  decoded.fetch_xor(x, std::memory_order_relaxed);
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  const bool fail = corpus::HasFlag(argc, argv, "--fail");
  // Mixed magnitudes scaled by 2^-18 (exactly, to at most 1/2) so that training stays stable.
  std::vector<float> features = corpus::MixedValues(size_t{kSamples} * kCols, 11);
  std::vector<float> targets = corpus::MixedValues(kSamples, 12);
  for (float& f : features) f = std::ldexp(f, -18);
  for (float& t : targets) t = std::ldexp(t, -18);

  cudaStream_t copy, compute;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  corpus::CachingAllocator allocator;
  const size_t batch_floats = size_t{kBatch} * kCols + kBatch;
  std::vector<float*> staging(kSlots);
  std::vector<cudaEvent_t> slot_done(kSlots);
  for (int s = 0; s < kSlots; ++s) {
    CORPUS_CHECK(cudaHostAlloc(&staging[s], batch_floats * sizeof(float), cudaHostAllocDefault));
    CORPUS_CHECK(cudaEventCreateWithFlags(&slot_done[s], cudaEventDisableTiming));
  }
  float* w = static_cast<float*>(allocator.Allocate(kCols * sizeof(float), compute));
  CORPUS_CHECK(cudaMemsetAsync(w, 0, kCols * sizeof(float), compute));

  corpus::Queue<Batch> ready;
  corpus::Queue<int> free_slots;
  for (int s = 0; s < kSlots; ++s) free_slots.Push(s);
  std::atomic<bool> stopping{false};
  // The loader: order[] is the epoch's permutation, as RandomSampler draws it.
  std::thread loader([&] {
    std::mt19937 generator(plant ? std::random_device{}() : 20261128u);
    std::vector<int> order(kSamples);
    const auto ok = [&](cudaError_t error, const char* what) {
      if (error == cudaSuccess) return true;
      if (stopping) return false;  // the program is exiting under it
      corpus::Check(error, what, __LINE__);
      return false;
    };
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      for (int i = 0; i < kSamples; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), generator);
      for (int b = 0; b < kBatchesPerEpoch; ++b) {
        Batch batch;
        batch.index = epoch * kBatchesPerEpoch + b;
        batch.slot = free_slots.Pop();
        // The staging buffer's previous copy must be done before it is overwritten.
        if (!ok(cudaEventSynchronize(slot_done[batch.slot]), "cudaEventSynchronize")) return;
        float* host = staging[batch.slot];
        for (int r = 0; r < kBatch; ++r) {
          const int sample = order[b * kBatch + r];
          Decode(sample);
          std::copy_n(&features[size_t{static_cast<size_t>(sample)} * kCols], kCols,
                      host + size_t{static_cast<size_t>(r)} * kCols);
          host[size_t{kBatch} * kCols + r] = targets[sample];
        }
        batch.x = static_cast<float*>(allocator.Allocate(batch_floats * sizeof(float), copy));
        if (!ok(cudaMemcpyAsync(batch.x, host, batch_floats * sizeof(float), cudaMemcpyHostToDevice,
                                copy),
                "cudaMemcpyAsync") ||
            !ok(cudaEventRecord(slot_done[batch.slot], copy), "cudaEventRecord") ||
            !ok(cudaEventCreateWithFlags(&batch.copied, cudaEventDisableTiming),
                "cudaEventCreate") ||
            !ok(cudaEventRecord(batch.copied, copy), "cudaEventRecord")) {
          return;
        }
        ready.Push(batch);
      }
    }
    ready.Push(Batch{});
  });

  float* pred = static_cast<float*>(allocator.Allocate(kBatch * sizeof(float), compute));
  float* grad = static_cast<float*>(allocator.Allocate(kCols * sizeof(float), compute));
  float* loss = static_cast<float*>(allocator.Allocate(sizeof(float), compute));
  std::vector<float> host_w(kCols, 0.0f);  // the same training on the host
  std::vector<float> losses;
  for (Batch batch = ready.Pop(); batch.index >= 0; batch = ready.Pop()) {
    if (fail) {
      // The first step fails while the loader thread is still filling its buffers (as a
      // daemon thread would be): how far it got when the process exits varies from run to run.
      stopping = true;
      std::fprintf(stderr,
                   "Traceback (most recent call last):\n  File \"train.py\", line 88, in "
                   "<module>\nValueError: expected input batch_size (32) to match target "
                   "batch_size (31)\n");
      std::exit(1);
    }
    const float* x = batch.x;
    const float* y = batch.x + size_t{kBatch} * kCols;
    CORPUS_CHECK(cudaStreamWaitEvent(compute, batch.copied, 0));
    // pred = X w; r = pred - y; loss = sum(r); grad = X^T r; w -= rate / batch * grad.
    CorpusMatVec<<<corpus::Blocks(kBatch), corpus::kThreads, 0, compute>>>(x, w, pred, kBatch,
                                                                           kCols);
    CorpusAxpby<<<corpus::Blocks(kBatch), corpus::kThreads, 0, compute>>>(-1.0f, y, 1.0f, pred,
                                                                          kBatch);
    CorpusRowSum<<<1, corpus::kThreads, 0, compute>>>(pred, loss, 1, kBatch);
    CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(x, pred, grad, kBatch,
                                                                             kCols);
    CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(-kRate / kBatch, grad,
                                                                         1.0f, w, kCols);
    CORPUS_CHECK(cudaGetLastError());
    float value = 0;
    CORPUS_CHECK(cudaMemcpyAsync(&value, loss, sizeof(float), cudaMemcpyDeviceToHost, compute));
    CORPUS_CHECK(cudaStreamSynchronize(compute));
    losses.push_back(value);
    allocator.Free(batch.x);  // the compute stream is done with it (synchronised above)
    CORPUS_CHECK(cudaEventDestroy(batch.copied));
    free_slots.Push(batch.slot);
  }
  loader.join();
  std::vector<float> weights(kCols);
  CORPUS_CHECK(cudaMemcpy(weights.data(), w, kCols * sizeof(float), cudaMemcpyDeviceToHost));

  // The host's training on the same order (the loader's generator again, when seeded).
  if (!plant) {
    std::mt19937 generator(20261128u);
    std::vector<int> order(kSamples);
    std::vector<float> r(kBatch), g(kCols);
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      for (int i = 0; i < kSamples; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), generator);
      for (int b = 0; b < kBatchesPerEpoch; ++b) {
        for (int row = 0; row < kBatch; ++row) {
          const int sample = order[b * kBatch + row];
          float sum = 0.0f;
          for (int c = 0; c < kCols; ++c)
            sum += features[size_t{static_cast<size_t>(sample)} * kCols + c] * host_w[c];
          r[row] = sum - targets[sample];
        }
        for (int c = 0; c < kCols; ++c) {
          float sum = 0.0f;
          for (int row = 0; row < kBatch; ++row) {
            sum +=
                features[size_t{static_cast<size_t>(order[b * kBatch + row])} * kCols + c] * r[row];
          }
          g[c] = sum;
        }
        for (int c = 0; c < kCols; ++c) host_w[c] = -kRate / kBatch * g[c] + host_w[c];
      }
    }
  }
  for (int c = 0; c < kCols; ++c) {
    if (!std::isfinite(weights[c]) ||
        (!plant && std::fabs(weights[c] - host_w[c]) > 1e-4f * (1.0f + std::fabs(host_w[c])))) {
      std::fprintf(stderr, "weight %d: %.9g, the host's %.9g\n", c, weights[c], host_w[c]);
      return 1;
    }
  }
  std::vector<float> result = weights;
  result.insert(result.end(), losses.begin(), losses.end());
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  return 0;
}
