// train_loop: a training process shaped the way PyTorch drives the driver (see
// shared/research/framework-shapes.md):
//  - a data-loader worker process forked before CUDA is initialised, host only, sends batches
//    through a pipe;
//  - a pin-memory thread reads them, copies each into a page-locked buffer from a pinned pool
//    that grows with cudaHostAlloc whenever every buffer is still in flight (how often depends on
//    timing), stages it on a copy stream with cudaMemcpyAsync into tensors from the caching
//    allocator and records an event;
//  - a caching allocator with expandable segments (the VMM API), one per stream, freed blocks
//    reused in the order threads free them;
//  - forward on the main thread (CorpusMatVec, CorpusAxpby, CorpusRowSum) on the compute stream
//    after waiting for the batch's event; backward on a long-lived "autograd" thread on the same
//    stream (CorpusColumnDot, SGD step with CorpusAxpby), handed the work through a queue while
//    the main thread blocks as loss.backward() does;
//  - an async-checkpoint thread: every second step the main thread snapshots the weights into a
//    fresh tensor and records an event, the checkpoint thread copies the snapshot to pinned host
//    memory on its own stream after waiting for that event, then frees the snapshot;
//  - the loss read back every step with cudaMemcpyAsync + cudaStreamSynchronize (.item()).
// --plant: the backward's weight gradient is CorpusColumnDotAtomic (float atomicAdd in racing
// order). Final weights, losses and checkpoints are checked against the host's float arithmetic
// within tolerance.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"

namespace {

constexpr int kRows = 64, kCols = 32, kSteps = 6;
constexpr float kRate = 1e-4f;
constexpr size_t kBatchFloats = size_t{kRows} * kCols + kRows;  // X, then the targets

// The data-loader worker: batch b is SmallMixedValues(seed 1000 + b), written whole to the pipe.
void Worker(int fd) {
  for (int b = 0; b < kSteps; ++b) {
    const std::vector<float> batch = corpus::SmallMixedValues(kBatchFloats, 1000 + b);
    const char* bytes = reinterpret_cast<const char*>(batch.data());
    size_t left = batch.size() * sizeof(float);
    while (left > 0) {
      const ssize_t n = write(fd, bytes, left);
      if (n <= 0) _exit(3);
      bytes += n;
      left -= static_cast<size_t>(n);
    }
  }
  close(fd);
  _exit(0);
}

bool ReadBatch(int fd, std::vector<float>* batch) {
  batch->resize(kBatchFloats);
  char* bytes = reinterpret_cast<char*>(batch->data());
  size_t left = kBatchFloats * sizeof(float);
  while (left > 0) {
    const ssize_t n = read(fd, bytes, left);
    if (n <= 0) return false;
    bytes += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

struct Batch {
  float* x;       // kRows x kCols, on the copy stream's segment
  float* target;  // kRows
  cudaEvent_t ready;
};

struct Snapshot {
  float* weights;  // a fresh tensor holding the weights after a step
  cudaEvent_t ready;
  int step;
};

// The host's float version of one step (forward, loss, backward, SGD), in the kernels' order.
float HostStep(const std::vector<float>& batch, std::vector<float>& w) {
  std::vector<float> v(kRows), grad(kCols);
  float loss = 0.0f;
  for (int r = 0; r < kRows; ++r) {
    float sum = 0.0f;
    for (int c = 0; c < kCols; ++c) sum += batch[r * kCols + c] * w[c];
    v[r] = -1.0f * batch[size_t{kRows} * kCols + r] + 1.0f * sum;
    loss += v[r];
  }
  for (int c = 0; c < kCols; ++c) {
    float sum = 0.0f;
    for (int r = 0; r < kRows; ++r) sum += batch[r * kCols + c] * v[r];
    grad[c] = sum;
  }
  for (int c = 0; c < kCols; ++c) w[c] = -kRate * grad[c] + 1.0f * w[c];
  return loss;
}

bool Close(float a, float b) { return std::fabs(a - b) <= 1e-3f * (1 + std::fabs(b)); }

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  // The data-loader worker, forked before anything touches CUDA.
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return 2;
  const pid_t worker = fork();
  if (worker < 0) return 2;
  if (worker == 0) {
    close(pipe_fds[0]);
    Worker(pipe_fds[1]);
  }
  close(pipe_fds[1]);

  CORPUS_CHECK(cudaSetDevice(0));
  corpus::CachingAllocator allocator(/*expandable=*/true);
  cudaStream_t compute, copy, checkpoint;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&checkpoint, cudaStreamNonBlocking));

  float* w = static_cast<float*>(allocator.Allocate(kCols * 4, compute));
  float* v = static_cast<float*>(allocator.Allocate(kRows * 4, compute));
  float* grad = static_cast<float*>(allocator.Allocate(kCols * 4, compute));
  float* loss = static_cast<float*>(allocator.Allocate(4, compute));
  std::vector<float> w_host = corpus::SmallMixedValues(kCols, 77);
  CORPUS_CHECK(cudaMemcpyAsync(w, w_host.data(), kCols * 4, cudaMemcpyHostToDevice, compute));

  // The pin-memory thread.
  corpus::Queue<Batch> batches;
  std::thread pin_thread([&] {
    CORPUS_CHECK(cudaSetDevice(0));
    struct Pinned {
      float* host;
      cudaEvent_t in_flight;
    };
    std::vector<Pinned> pool;
    std::vector<float> batch;
    for (int b = 0; b < kSteps; ++b) {
      if (!ReadBatch(pipe_fds[0], &batch)) {
        std::fprintf(stderr, "train_loop: the worker's pipe closed early\n");
        std::exit(2);
      }
      Pinned* buffer = nullptr;
      for (Pinned& p : pool) {
        if (cudaEventQuery(p.in_flight) == cudaSuccess) {
          buffer = &p;
          break;
        }
      }
      if (buffer == nullptr) {  // every buffer still in flight: the pool grows
        Pinned p;
        CORPUS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p.host), kBatchFloats * 4,
                                   cudaHostAllocDefault));
        CORPUS_CHECK(cudaEventCreateWithFlags(&p.in_flight, cudaEventDisableTiming));
        pool.push_back(p);
        buffer = &pool.back();
      }
      std::copy(batch.begin(), batch.end(), buffer->host);
      Batch staged;
      staged.x = static_cast<float*>(allocator.Allocate(size_t{kRows} * kCols * 4, copy));
      staged.target = static_cast<float*>(allocator.Allocate(kRows * 4, copy));
      CORPUS_CHECK(cudaMemcpyAsync(staged.x, buffer->host, size_t{kRows} * kCols * 4,
                                   cudaMemcpyHostToDevice, copy));
      CORPUS_CHECK(cudaMemcpyAsync(staged.target, buffer->host + size_t{kRows} * kCols,
                                   kRows * 4, cudaMemcpyHostToDevice, copy));
      CORPUS_CHECK(cudaEventRecord(buffer->in_flight, copy));
      CORPUS_CHECK(cudaEventCreateWithFlags(&staged.ready, cudaEventDisableTiming));
      CORPUS_CHECK(cudaEventRecord(staged.ready, copy));
      batches.Push(staged);
    }
    CORPUS_CHECK(cudaStreamSynchronize(copy));
    for (Pinned& p : pool) {
      CORPUS_CHECK(cudaFreeHost(p.host));
      CORPUS_CHECK(cudaEventDestroy(p.in_flight));
    }
  });

  // The autograd thread: backward jobs on the compute stream, one at a time.
  corpus::Queue<std::function<void()>> backward_jobs;
  corpus::Queue<int> backward_done;
  std::thread autograd_thread([&] {
    CORPUS_CHECK(cudaSetDevice(0));
    for (;;) {
      std::function<void()> job = backward_jobs.Pop();
      if (!job) break;
      job();
      backward_done.Push(0);
    }
  });

  // The async-checkpoint thread.
  corpus::Queue<Snapshot> snapshots;
  std::vector<std::vector<float>> checkpoints(kSteps);
  std::thread checkpoint_thread([&] {
    CORPUS_CHECK(cudaSetDevice(0));
    float* pinned = nullptr;
    CORPUS_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned), kCols * 4));
    for (;;) {
      Snapshot snapshot = snapshots.Pop();
      if (snapshot.weights == nullptr) break;
      CORPUS_CHECK(cudaStreamWaitEvent(checkpoint, snapshot.ready, 0));
      CORPUS_CHECK(cudaMemcpyAsync(pinned, snapshot.weights, kCols * 4, cudaMemcpyDeviceToHost,
                                   checkpoint));
      CORPUS_CHECK(cudaStreamSynchronize(checkpoint));
      checkpoints[snapshot.step].assign(pinned, pinned + kCols);
      allocator.Free(snapshot.weights);
      CORPUS_CHECK(cudaEventDestroy(snapshot.ready));
    }
    CORPUS_CHECK(cudaFreeHost(pinned));
  });

  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    Batch batch = batches.Pop();
    CORPUS_CHECK(cudaStreamWaitEvent(compute, batch.ready, 0));
    // Forward on the main thread.
    CorpusMatVec<<<corpus::Blocks(kRows), corpus::kThreads, 0, compute>>>(batch.x, w, v, kRows,
                                                                           kCols);
    CorpusAxpby<<<corpus::Blocks(kRows), corpus::kThreads, 0, compute>>>(-1.0f, batch.target,
                                                                          1.0f, v, kRows);
    CorpusRowSum<<<1, corpus::kThreads, 0, compute>>>(v, loss, 1, kRows);
    CORPUS_CHECK(cudaGetLastError());
    // loss.backward(): the autograd thread does it; the main thread waits.
    backward_jobs.Push([&, x = batch.x] {
      if (plant) {
        CORPUS_CHECK(cudaMemsetAsync(grad, 0, kCols * 4, compute));
        CorpusColumnDotAtomic<<<corpus::Blocks(kRows * kCols), corpus::kThreads, 0, compute>>>(
            x, v, grad, kRows, kCols);
      } else {
        CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(x, v, grad,
                                                                                 kRows, kCols);
      }
      CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(-kRate, grad, 1.0f, w,
                                                                            kCols);
      CORPUS_CHECK(cudaGetLastError());
    });
    backward_done.Pop();
    if (step % 2 == 1) {  // an async checkpoint of the weights after this step
      Snapshot snapshot{static_cast<float*>(allocator.Allocate(kCols * 4, compute)), nullptr, step};
      CORPUS_CHECK(cudaMemcpyAsync(snapshot.weights, w, kCols * 4, cudaMemcpyDeviceToDevice,
                                   compute));
      CORPUS_CHECK(cudaEventCreateWithFlags(&snapshot.ready, cudaEventDisableTiming));
      CORPUS_CHECK(cudaEventRecord(snapshot.ready, compute));
      snapshots.Push(snapshot);
    }
    float step_loss = 0;  // loss.item()
    CORPUS_CHECK(cudaMemcpyAsync(&step_loss, loss, 4, cudaMemcpyDeviceToHost, compute));
    CORPUS_CHECK(cudaStreamSynchronize(compute));
    losses.push_back(step_loss);
    allocator.Free(batch.x);
    allocator.Free(batch.target);
    CORPUS_CHECK(cudaEventDestroy(batch.ready));
  }
  backward_jobs.Push(nullptr);
  snapshots.Push(Snapshot{nullptr, nullptr, 0});
  autograd_thread.join();
  checkpoint_thread.join();
  pin_thread.join();
  int status = 0;
  waitpid(worker, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "train_loop: the data-loader worker failed\n");
    return 2;
  }

  std::vector<float> w_final(kCols);
  CORPUS_CHECK(cudaMemcpy(w_final.data(), w, kCols * 4, cudaMemcpyDeviceToHost));
  std::vector<float> result = losses;
  for (int step = 0; step < kSteps; ++step) {
    const float host_loss = HostStep(corpus::SmallMixedValues(kBatchFloats, 1000 + step), w_host);
    if (!Close(losses[step], host_loss)) {
      std::fprintf(stderr, "step %d: loss %.9g, the host computed %.9g\n", step, losses[step],
                   host_loss);
      return 1;
    }
    if (step % 2 == 1) {
      for (int c = 0; c < kCols; ++c) {
        if (!Close(checkpoints[step][c], w_host[c])) {
          std::fprintf(stderr, "checkpoint %d: w[%d] = %.9g, expected %.9g\n", step, c,
                       checkpoints[step][c], w_host[c]);
          return 1;
        }
      }
      result.insert(result.end(), checkpoints[step].begin(), checkpoints[step].end());
    }
  }
  for (int c = 0; c < kCols; ++c) {
    if (!Close(w_final[c], w_host[c])) {
      std::fprintf(stderr, "w[%d] = %.9g, the host computed %.9g\n", c, w_final[c], w_host[c]);
      return 1;
    }
  }
  result.insert(result.end(), w_final.begin(), w_final.end());
  ndt::programs::PrintChecksum(result.data(), result.size() * sizeof(float));
  return 0;
}
