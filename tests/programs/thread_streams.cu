// A deterministic program whose host threads race, as every PyTorch training process's do:
// four worker threads, each with its own stream and events, take tensors from one shared
// caching allocator (one segment; blocks go back to a free list and are handed out again in
// whatever order the threads freed them) and events from a shared pool, and run a chain of
// exact kernels on their own data; the main thread collects every result. Random sleeps make
// the threads reach the driver in another order in every run, so creation order, block
// placement and event choice vary; the results never do.
//
//   thread_streams [--plant] [--iterations N] [--refused-launch] [--stream-pool] [--empty-cache]
//                  [--exit STATUS]
//
// --plant adds one RacySum (float atomicAdd in racing order) on worker 2's stream, whose sums
// enter the checksum: then the results differ from run to run. --refused-launch makes one
// launch the device refuses (2048 threads per block) and carries on, as a program that ignores
// the error would; --stream-pool takes the workers' streams from a pool (StreamPool); --exit
// ends with STATUS after the checksum. --empty-cache gives each worker a scratch tensor of its
// own every iteration, allocated with cudaMalloc and freed once its work is done, as a caching
// allocator that empties its cache (torch.cuda.empty_cache) or serves a large tensor does: the
// driver hands a freed range out again to whichever thread allocates next, so the addresses a
// worker's scratch gets vary from run to run; each iteration also allocates, fills and frees
// kChurn blocks in quick succession. Prints "checksum <hex>".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "program_checksum.h"

__global__ void Step(float* data, int n, float add) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = data[i] * 0.5f + add;
  }
}

__global__ void VectorAdd(const float* a, const float* b, float* c, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    c[i] = a[i] + b[i];
  }
}

__global__ void RacySum(const float* values, float* sums, int n, int bins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&sums[i % bins], values[i]);
  }
}

namespace {

constexpr int kWorkers = 4;
constexpr int kN = 1 << 12;
constexpr size_t kBlock = kN * sizeof(float);
constexpr int kBlocks = 16;
constexpr int kPlantN = 1 << 16;
constexpr int kChurn = 16;  // --empty-cache: allocations freed at once, per iteration

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "thread_streams: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

void Jitter(std::minstd_rand& random) {
  std::this_thread::sleep_for(std::chrono::microseconds(random() % 400));
}

// One segment, fixed-size blocks, a free list in the order blocks were returned.
class CachingAllocator {
 public:
  CachingAllocator() { Check(cudaMalloc(&segment_, kBlock * kBlocks), "cudaMalloc segment"); }
  ~CachingAllocator() { cudaFree(segment_); }
  float* Take() {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      float* block = free_.back();
      free_.pop_back();
      return block;
    }
    if (used_ == kBlocks) {
      std::fprintf(stderr, "thread_streams: segment exhausted\n");
      std::exit(1);
    }
    return reinterpret_cast<float*>(static_cast<char*>(segment_) + kBlock * used_++);
  }
  void Give(float* block) {
    std::lock_guard lock(mutex_);
    free_.push_back(block);
  }

 private:
  void* segment_ = nullptr;
  std::mutex mutex_;
  std::vector<float*> free_;
  int used_ = 0;
};

// Streams from a pool created by whichever worker asks first and handed out in the order the
// workers ask (PyTorch's getStreamFromPool), with --stream-pool: a worker's stream then varies
// from run to run.
class StreamPool {
 public:
  cudaStream_t Take() {
    std::lock_guard lock(mutex_);
    if (streams_.empty()) {
      streams_.resize(4);
      for (cudaStream_t& stream : streams_) {
        Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      }
    }
    return streams_[next_++ % streams_.size()];
  }
  ~StreamPool() {
    for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaStream_t> streams_;
  size_t next_ = 0;
};

// Events are taken from a pool and returned, as frameworks do.
class EventPool {
 public:
  cudaEvent_t Take() {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t event = free_.back();
      free_.pop_back();
      return event;
    }
    cudaEvent_t event;
    Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    all_.push_back(event);
    return event;
  }
  void Give(cudaEvent_t event) {
    std::lock_guard lock(mutex_);
    free_.push_back(event);
  }
  ~EventPool() {
    for (cudaEvent_t event : all_) cudaEventDestroy(event);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
  std::vector<cudaEvent_t> all_;
};

void Worker(int index, int iterations, bool plant, bool empty_cache, CachingAllocator& allocator,
            EventPool& events, StreamPool* streams, std::vector<float>* result) {
  std::minstd_rand random(std::random_device{}());
  Jitter(random);
  cudaStream_t stream;
  if (streams != nullptr) {
    stream = streams->Take();
  } else {
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>((i * (index + 3)) % 101);
  float* x = allocator.Take();
  Check(cudaMemcpyAsync(x, host.data(), kBlock, cudaMemcpyHostToDevice, stream), "HtoD");
  for (int it = 0; it < iterations; ++it) {
    Jitter(random);
    float* y = allocator.Take();
    Check(cudaMemcpyAsync(y, x, kBlock, cudaMemcpyDeviceToDevice, stream), "DtoD");
    Step<<<8, 128, 0, stream>>>(y, kN, static_cast<float>((it + index) % 7));
    Check(cudaGetLastError(), "Step");
    float* z = allocator.Take();
    float* scratch = nullptr;
    if (empty_cache) {
      Check(cudaMalloc(&scratch, 2 * kBlock), "cudaMalloc scratch");
      Check(cudaMemsetAsync(scratch, 0, 2 * kBlock, stream), "memset scratch");
      VectorAdd<<<8, 128, 0, stream>>>(x, y, scratch + kN, kN);
      Check(cudaGetLastError(), "VectorAdd");
      Step<<<8, 128, 0, stream>>>(scratch + kN, kN, static_cast<float>(index));
      Check(cudaGetLastError(), "Step");
      VectorAdd<<<8, 128, 0, stream>>>(scratch, scratch + kN, z, kN);
    } else {
      VectorAdd<<<8, 128, 0, stream>>>(x, y, z, kN);
    }
    Check(cudaGetLastError(), "VectorAdd");
    cudaEvent_t done = events.Take();
    Check(cudaEventRecord(done, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(done), "cudaEventSynchronize");
    events.Give(done);
    if (scratch != nullptr) Check(cudaFree(scratch), "cudaFree scratch");
    // Churn, as threads that allocate and free the same sizes do: a range one thread frees is
    // at once another's next allocation (the tracer must never name one for the other).
    for (int churn = 0; empty_cache && churn < kChurn; ++churn) {
      void* block = nullptr;
      Check(cudaMalloc(&block, kBlock), "cudaMalloc churn");
      Check(cudaMemsetAsync(block, churn, kBlock, stream), "memset churn");
      Check(cudaFree(block), "cudaFree churn");
    }
    allocator.Give(x);
    allocator.Give(y);
    x = z;
  }
  result->assign(kN, 0.0f);
  Check(cudaMemcpyAsync(result->data(), x, kBlock, cudaMemcpyDeviceToHost, stream), "DtoH");
  if (plant && index == 2) {
    std::vector<float> values(kPlantN);
    for (int i = 0; i < kPlantN; ++i) values[i] = std::ldexp(1.0f + i % 7, i % 41 - 20);
    float* v = allocator.Take();  // the 4 sums; the values get an allocation of their own
    float* big = nullptr;
    Check(cudaMalloc(&big, kPlantN * sizeof(float)), "cudaMalloc");
    Check(cudaMemcpyAsync(big, values.data(), kPlantN * sizeof(float), cudaMemcpyHostToDevice,
                          stream),
          "HtoD plant");
    Check(cudaMemsetAsync(v, 0, 4 * sizeof(float), stream), "memset");
    RacySum<<<64, 256, 0, stream>>>(big, v, kPlantN, 4);
    Check(cudaGetLastError(), "RacySum");
    Check(cudaMemcpyAsync(result->data(), v, 4 * sizeof(float), cudaMemcpyDeviceToHost, stream),
          "DtoH plant");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    Check(cudaFree(big), "cudaFree");
    allocator.Give(v);
  }
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  allocator.Give(x);
  if (streams == nullptr) Check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  bool plant = false;
  bool refused_launch = false;
  bool stream_pool = false;
  bool empty_cache = false;
  int exit_status = 0;
  int iterations = 6;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--plant") == 0) {
      plant = true;
    } else if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
      iterations = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--refused-launch") == 0) {
      refused_launch = true;
    } else if (std::strcmp(argv[i], "--stream-pool") == 0) {
      stream_pool = true;
    } else if (std::strcmp(argv[i], "--empty-cache") == 0) {
      empty_cache = true;
    } else if (std::strcmp(argv[i], "--exit") == 0 && i + 1 < argc) {
      exit_status = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: thread_streams [--plant] [--iterations N] [--refused-launch] "
                   "[--stream-pool] [--empty-cache] [--exit STATUS]\n");
      return 2;
    }
  }
  Check(cudaFree(nullptr), "cudaFree (context)");
  CachingAllocator allocator;
  EventPool events;
  StreamPool pool;
  if (refused_launch) {
    float* block = allocator.Take();
    Step<<<1, 2048>>>(block, kN, 1.0f);
    const cudaError_t refused = cudaGetLastError();
    std::fprintf(stderr, "thread_streams: the refused launch: %s\n", cudaGetErrorName(refused));
    allocator.Give(block);
  }
  std::vector<std::vector<float>> results(kWorkers);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back(Worker, w, iterations, plant, empty_cache, std::ref(allocator),
                         std::ref(events), stream_pool ? &pool : nullptr, &results[w]);
  }
  for (std::thread& worker : workers) worker.join();
  std::vector<float> all;
  for (const auto& result : results) all.insert(all.end(), result.begin(), result.end());
  ndt::programs::PrintChecksum(all.data(), all.size() * sizeof(float));
  return exit_status;
}
