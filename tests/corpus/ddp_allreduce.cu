// ddp_allreduce: data-parallel training as torch DistributedDataParallel drives NCCL, with the
// ranks as threads of one process (the stand-in NCCL's model; on a GPU machine each rank would
// need its own device). Per rank: a compute thread runs forward (CorpusMatVec) and backward
// (CorpusColumnDot per layer, last layer first) on its compute stream and records an event when
// a layer's gradient bucket is ready; a long-lived comm thread (the reducer's) takes the bucket
// from a queue, makes its own comm stream wait for the event and all-reduces the bucket with
// ncclAllReduce on the data-parallel group (a split of the world communicator, as new_group makes
// it); the compute stream waits for the comm stream's "done" event before the SGD step
// (CorpusAxpby). Deterministic: NCCL_ALGO=Ring is set before the communicators exist (the
// stand-in's ring adds ranks in order). --plant: NCCL_ALGO is left unset, so the stand-in's
// reduction adds the ranks' contributions in racing order (four ranks: with two, a + b = b + a
// and the race would not show). --plant-backward: rank 1's backward of layer 1 accumulates with
// float atomicAdd (CorpusColumnDotAtomic), so every rank's all-reduce result differs, though only
// rank 1's inputs do. The ranks' weights are checked equal.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"
#include "corpus_nccl.h"

namespace {

bool g_plant_backward = false;  // --plant-backward

constexpr int kRanks = 4, kLayers = 2, kRows = 64, kCols = 128, kSteps = 3;

// The queue from the compute thread to the comm thread: bucket indices, -1 to stop.
class BucketQueue {
 public:
  void Push(int bucket) {
    std::lock_guard lock(mu_);
    items_.push_back(bucket);
    ready_.notify_one();
  }
  int Pop() {
    std::unique_lock lock(mu_);
    ready_.wait(lock, [&] { return !items_.empty(); });
    const int bucket = items_.front();
    items_.pop_front();
    return bucket;
  }
  // The comm thread has enqueued a step's last all-reduce and recorded its event.
  void StepReduced() {
    std::lock_guard lock(mu_);
    ++reduced_steps_;
    ready_.notify_all();
  }
  void WaitReduced(int step) {
    std::unique_lock lock(mu_);
    ready_.wait(lock, [&] { return reduced_steps_ > step; });
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<int> items_;
  int reduced_steps_ = 0;
};

void Rank(int rank, ncclUniqueId id, std::vector<float>* weights_out) {
  CORPUS_CHECK(cudaSetDevice(0));
  // As ProcessGroupNCCL makes it: with a config (blocking, the default).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t world;
  NCCL_CHECK(ncclCommInitRankConfig(&world, kRanks, id, rank, &config));
  // The data-parallel group, as new_group (or a DeviceMesh dimension) makes it from the world
  // once the default group exists: a split of it (here with every rank, ranked as before).
  ncclComm_t comm;
  NCCL_CHECK(ncclCommSplit(world, 0, rank, &comm, &config));
  cudaStream_t compute, comm_stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
  cudaEvent_t bucket_ready[kLayers], reduced;
  for (cudaEvent_t& e : bucket_ready) {
    CORPUS_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  CORPUS_CHECK(cudaEventCreateWithFlags(&reduced, cudaEventDisableTiming));

  float *x[kLayers], *w[kLayers], *grad[kLayers], *v;
  for (int l = 0; l < kLayers; ++l) {
    const std::vector<float> host_x = corpus::MixedValues(size_t{kRows} * kCols, 40 + rank * 7 + l);
    const std::vector<float> host_w = corpus::MixedValues(kCols, 90 + l);  // same on every rank
    CORPUS_CHECK(cudaMalloc(&x[l], host_x.size() * 4));
    CORPUS_CHECK(cudaMalloc(&w[l], kCols * 4));
    CORPUS_CHECK(cudaMalloc(&grad[l], kCols * 4));
    CORPUS_CHECK(
        cudaMemcpyAsync(x[l], host_x.data(), host_x.size() * 4, cudaMemcpyHostToDevice, compute));
    CORPUS_CHECK(cudaMemcpyAsync(w[l], host_w.data(), kCols * 4, cudaMemcpyHostToDevice, compute));
  }
  CORPUS_CHECK(cudaMalloc(&v, kRows * 4));

  BucketQueue queue;
  std::thread comm_thread([&] {
    CORPUS_CHECK(cudaSetDevice(0));
    for (int bucket; (bucket = queue.Pop()) >= 0;) {
      CORPUS_CHECK(cudaStreamWaitEvent(comm_stream, bucket_ready[bucket], 0));
      NCCL_CHECK(
          ncclAllReduce(grad[bucket], grad[bucket], kCols, ncclFloat, ncclSum, comm, comm_stream));
      if (bucket == 0) {  // the step's last bucket
        CORPUS_CHECK(cudaEventRecord(reduced, comm_stream));
        queue.StepReduced();
      }
    }
  });

  for (int step = 0; step < kSteps; ++step) {
    CorpusMatVec<<<corpus::Blocks(kRows), corpus::kThreads, 0, compute>>>(x[0], w[0], v, kRows,
                                                                          kCols);
    for (int l = kLayers - 1; l >= 0; --l) {  // backward: last layer's gradient first
      if (g_plant_backward && rank == 1 && l == 1) {
        CORPUS_CHECK(cudaMemsetAsync(grad[l], 0, kCols * 4, compute));
        CorpusColumnDotAtomic<<<corpus::Blocks(kRows * kCols), corpus::kThreads, 0, compute>>>(
            x[l], v, grad[l], kRows, kCols);
      } else {
        CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(x[l], v, grad[l],
                                                                                 kRows, kCols);
      }
      CORPUS_CHECK(cudaGetLastError());
      CORPUS_CHECK(cudaEventRecord(bucket_ready[l], compute));
      queue.Push(l);
    }
    // The optimizer step waits for the all-reduces: on the host until the comm thread has
    // recorded `reduced` for this step (the reducer's future), then on the stream.
    queue.WaitReduced(step);
    CORPUS_CHECK(cudaStreamWaitEvent(compute, reduced, 0));
    for (int l = 0; l < kLayers; ++l) {
      CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(-1e-4f / kRanks, grad[l],
                                                                           1.0f, w[l], kCols);
    }
  }
  queue.Push(-1);
  comm_thread.join();
  std::vector<float> weights(size_t{kLayers} * kCols);
  for (int l = 0; l < kLayers; ++l) {
    CORPUS_CHECK(cudaMemcpyAsync(weights.data() + l * kCols, w[l], kCols * 4,
                                 cudaMemcpyDeviceToHost, compute));
  }
  CORPUS_CHECK(cudaStreamSynchronize(compute));
  *weights_out = weights;
  NCCL_CHECK(ncclCommDestroy(comm));
  NCCL_CHECK(ncclCommDestroy(world));
}

}  // namespace

int main(int argc, char** argv) {
  g_plant_backward = corpus::HasFlag(argc, argv, "--plant-backward");
  if (corpus::HasFlag(argc, argv, "--plant")) {
    unsetenv("NCCL_ALGO");
  } else {
    setenv("NCCL_ALGO", "Ring", 1);
  }
  CORPUS_CHECK(cudaSetDevice(0));
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<std::vector<float>> weights(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.emplace_back(Rank, r, id, &weights[r]);
  for (std::thread& t : ranks) t.join();
  for (int r = 1; r < kRanks; ++r) {
    if (weights[r] != weights[0]) {
      std::fprintf(stderr, "rank %d's weights differ from rank 0's\n", r);
      return 1;
    }
  }
  ndt::programs::PrintChecksum(weights[0].data(), weights[0].size() * sizeof(float));
  return 0;
}
