// host_callbacks: a hand-written CUDA training loop, sized and synchronised the way CUDA's samples
// and hand-tuned extensions do it rather than the way PyTorch does:
//  - the grid is sized by the occupancy calculator (cudaOccupancyMaxActiveBlocksPerMultiprocessor
//    times the multiprocessor count), after cudaFuncGetAttributes and cudaFuncSetAttribute (a
//    larger dynamic shared memory allowance, as kernels with big tiles ask for);
//  - a loader thread fills two pinned staging buffers in turn, rows padded to a pitch as image
//    and tabular pipelines lay them out; each is copied to the GPU row by row with
//    cudaMemcpy2DAsync on a high-priority copy stream (cudaDeviceGetStreamPriorityRange), its
//    padding left behind, and the loader learns that the
//    copy has read it from a host function the copy stream runs (cudaLaunchHostFunc), not from a
//    synchronisation; the compute stream waits for the copy through an event recorded with
//    cudaEventRecordWithFlags;
//  - every step's end is counted by a stream callback (cudaStreamAddCallback);
//  - before it synchronises, the loop asks whether its stream is being captured
//    (cudaStreamIsCapturing), as PyTorch does before any synchronisation;
//  - the heap limit is raised (cudaDeviceSetLimit) and steps 2 and 3 are bracketed by
//    cudaProfilerStart/Stop (an nsys capture range);
//  - at the end the last batch is read back into padded pinned rows, as an image pipeline
//    downloads a frame (cudaMemcpy2DAsync device to host on the copy stream), and is part of
//    the checksum.
// Deterministic. --plant: the backward accumulates with float atomicAdd in racing order
// (CorpusColumnDotAtomic).
#include <cuda_profiler_api.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

constexpr int kRows = 96, kCols = 64, kSteps = 12, kBuffers = 2;
constexpr int kPitch = kCols + 8;  // floats per staged row: a row and its padding
constexpr float kLearningRate = 0.05f;

// The two staging buffers' state, shared by the loader thread and the copy stream's host
// functions.
struct Staging {
  std::mutex mu;
  std::condition_variable changed;
  bool free[kBuffers] = {true, true};
};

struct Release {
  Staging* staging;
  int buffer;
};

// Runs on the copy stream once the copy out of the buffer is done.
void ReleaseBuffer(void* data) {
  auto* release = static_cast<Release*>(data);
  {
    std::lock_guard lock(release->staging->mu);
    release->staging->free[release->buffer] = true;
  }
  release->staging->changed.notify_all();
}

void CountStep(cudaStream_t, cudaError_t status, void* data) {
  if (status == cudaSuccess) static_cast<std::atomic<int>*>(data)->fetch_add(1);
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");

  // Launch geometry from the occupancy calculator.
  int sms = 0;
  CORPUS_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaFuncAttributes attributes;
  CORPUS_CHECK(cudaFuncGetAttributes(&attributes, CorpusMatVec));
  const int threads = std::min(256, attributes.maxThreadsPerBlock);
  CORPUS_CHECK(
      cudaFuncSetAttribute(CorpusMatVec, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
  int per_sm = 0;
  CORPUS_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, CorpusColumnDot, threads, 0));
  if (per_sm < 1) {
    std::fprintf(stderr, "the occupancy calculator fits no block of %d threads\n", threads);
    return 1;
  }
  const dim3 grid(static_cast<unsigned>(std::min(per_sm * sms, 8)));
  const dim3 block(static_cast<unsigned>(threads));

  CORPUS_CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, size_t{16} << 20));
  size_t heap = 0;
  CORPUS_CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
  if (heap != size_t{16} << 20) {
    std::fprintf(stderr, "the heap limit reads back as %zu\n", heap);
    return 1;
  }

  int least = 0, greatest = 0;
  CORPUS_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t compute, copy;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithPriority(&copy, cudaStreamNonBlocking, greatest));
  int priority = 0;
  CORPUS_CHECK(cudaStreamGetPriority(copy, &priority));
  if (priority != greatest) {
    std::fprintf(stderr, "the copy stream's priority reads back as %d, not %d\n", priority,
                 greatest);
    return 1;
  }
  // copied[b]: x[b] holds its batch; consumed[b]: the compute stream is done reading it.
  cudaEvent_t copied[kBuffers], consumed[kBuffers];
  for (int b = 0; b < kBuffers; ++b) {
    CORPUS_CHECK(cudaEventCreateWithFlags(&copied[b], cudaEventDisableTiming));
    CORPUS_CHECK(cudaEventCreateWithFlags(&consumed[b], cudaEventDisableTiming));
  }

  float *staging_host[kBuffers], *x[kBuffers], *w, *v, *grad, *loss_host;
  for (int b = 0; b < kBuffers; ++b) {
    CORPUS_CHECK(cudaMallocHost(&staging_host[b], size_t{kRows} * kPitch * sizeof(float)));
    CORPUS_CHECK(cudaMalloc(&x[b], size_t{kRows} * kCols * sizeof(float)));
  }
  CORPUS_CHECK(cudaMalloc(&w, kCols * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&v, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&grad, kCols * sizeof(float)));
  CORPUS_CHECK(cudaMallocHost(&loss_host, kRows * sizeof(float)));
  const std::vector<float> init = corpus::SmallMixedValues(kCols, 3);
  CORPUS_CHECK(
      cudaMemcpyAsync(w, init.data(), kCols * sizeof(float), cudaMemcpyHostToDevice, compute));

  // The loader: step s's batch into buffer s % 2 once the copy stream has released it, then
  // hands the step to the main thread.
  Staging staging;
  Release releases[kBuffers] = {{&staging, 0}, {&staging, 1}};
  corpus::Queue<int> loaded;
  std::random_device stale;
  std::thread loader([&] {
    for (int step = 0; step < kSteps; ++step) {
      const int b = step % kBuffers;
      {
        std::unique_lock lock(staging.mu);
        staging.changed.wait(lock, [&] { return staging.free[b]; });
        staging.free[b] = false;
      }
      const std::vector<float> batch =
          corpus::SmallMixedValues(size_t{kRows} * kCols, 100 + static_cast<unsigned>(step));
      // The padding after each row holds whatever the buffer held before (here: bytes that
      // differ from run to run); only the rows are copied to the GPU.
      for (int r = 0; r < kRows; ++r) {
        float* row = staging_host[b] + static_cast<size_t>(r) * kPitch;
        std::copy_n(batch.begin() + r * kCols, kCols, row);
        for (int p = kCols; p < kPitch; ++p) row[p] = static_cast<float>(stale());
      }
      loaded.Push(step);
    }
  });

  std::atomic<int> steps_done{0};
  for (int step = 0; step < kSteps; ++step) {
    if (step == 2) CORPUS_CHECK(cudaProfilerStart());
    const int s = loaded.Pop();
    const int b = s % kBuffers;
    CORPUS_CHECK(cudaStreamWaitEvent(copy, consumed[b], 0));  // two steps ago's reads of x[b]
    CORPUS_CHECK(cudaMemcpy2DAsync(x[b], kCols * sizeof(float), staging_host[b],
                                   kPitch * sizeof(float), kCols * sizeof(float), kRows,
                                   cudaMemcpyHostToDevice, copy));
    CORPUS_CHECK(cudaLaunchHostFunc(copy, ReleaseBuffer, &releases[b]));
    CORPUS_CHECK(cudaEventRecordWithFlags(copied[b], copy, cudaEventRecordDefault));
    CORPUS_CHECK(cudaStreamWaitEvent(compute, copied[b], 0));
    // Forward, loss read back, backward and the SGD step, all on the compute stream.
    CorpusMatVec<<<grid, block, 0, compute>>>(x[b], w, v, kRows, kCols);
    CORPUS_CHECK(
        cudaMemcpyAsync(loss_host, v, kRows * sizeof(float), cudaMemcpyDeviceToHost, compute));
    if (plant) {
      CORPUS_CHECK(cudaMemsetAsync(grad, 0, kCols * sizeof(float), compute));
      CorpusColumnDotAtomic<<<grid, block, 0, compute>>>(x[b], v, grad, kRows, kCols);
    } else {
      CorpusColumnDot<<<grid, block, 0, compute>>>(x[b], v, grad, kRows, kCols);
    }
    CORPUS_CHECK(cudaEventRecord(consumed[b], compute));
    CorpusAxpby<<<grid, block, 0, compute>>>(-kLearningRate / kRows, grad, 1.0f, w, kCols);
    CORPUS_CHECK(cudaGetLastError());
    CORPUS_CHECK(cudaStreamAddCallback(compute, CountStep, &steps_done, 0));
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
    CORPUS_CHECK(cudaStreamIsCapturing(compute, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) {
      std::fprintf(stderr, "the compute stream is being captured\n");
      return 1;
    }
    if (step % 4 == 3) CORPUS_CHECK(cudaStreamSynchronize(compute));  // loss.item(), logged
    if (step == 3) CORPUS_CHECK(cudaProfilerStop());
  }
  loader.join();
  std::vector<float> weights(kCols);
  CORPUS_CHECK(
      cudaMemcpyAsync(weights.data(), w, kCols * sizeof(float), cudaMemcpyDeviceToHost, compute));
  CORPUS_CHECK(cudaStreamSynchronize(compute));
  // The last batch, back into padded rows (its padding keeps the loader's run-varying bytes).
  const int last = (kSteps - 1) % kBuffers;
  CORPUS_CHECK(cudaMemcpy2DAsync(staging_host[last], kPitch * sizeof(float), x[last],
                                 kCols * sizeof(float), kCols * sizeof(float), kRows,
                                 cudaMemcpyDeviceToHost, copy));
  CORPUS_CHECK(cudaStreamSynchronize(copy));
  std::vector<float> printed = weights;
  for (int r = 0; r < kRows; ++r) {
    const float* row = staging_host[last] + static_cast<size_t>(r) * kPitch;
    printed.insert(printed.end(), row, row + kCols);
  }
  if (steps_done.load() != kSteps) {
    std::fprintf(stderr, "%d of %d steps' callbacks ran\n", steps_done.load(), kSteps);
    return 1;
  }
  ndt::programs::PrintChecksum(printed.data(), printed.size() * sizeof(float));
  return 0;
}
