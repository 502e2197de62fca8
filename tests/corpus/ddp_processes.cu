// ddp_processes: DistributedDataParallel as `torchrun --nproc_per_node=2 train.py` runs it, one
// process per GPU. The program is its own launcher: run without RANK, it starts one worker per
// rank as torchrun does (fork + exec of itself with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT and a file store in the environment), never touches CUDA itself, waits for every
// worker and fails when one failed. A worker:
//  - selects its GPU (cudaSetDevice(LOCAL_RANK)) and meets the others through the store: rank 0
//    writes the NCCL unique id to a file there (init_method="file://..."), the others wait for it;
//    the communicator is made with ncclCommInitRankConfig, as ProcessGroupNCCL makes it;
//  - builds its model with its own random initialisation, then DDP's constructor broadcasts rank
//    0's parameters (ncclBroadcast on NCCL's stream, ordered after the compute stream by events);
//  - reads its shard of the data as DistributedSampler gives it (indices shuffled by seed +
//    epoch, every WORLD_SIZE-th one from RANK), gathered into pinned memory and copied to the GPU
//    on the compute stream;
//  - runs the forward on the main thread and the backward on autograd's device thread (a
//    long-lived thread fed by a queue); each gradient bucket, when ready, is divided by the world
//    size and all-reduced on NCCL's stream after an event (the reducer's comm hook); the SGD step
//    waits for the last bucket's event; the loss is read back every step (loss.item());
//  - meanwhile ProcessGroupNCCL's watchdog thread asks the communicator for an asynchronous
//    error every millisecond (ncclCommGetAsyncError) until the process group is destroyed;
//  - at the end all-gathers its parameters and checks they equal every other rank's (DDP keeps
//    them in sync); rank 0 prints the checksum; destroy_process_group finalizes and destroys the
//    communicator.
//
// Needs a device per rank (on the stand-in: NDT_STANDIN_DEVICES) and NCCL (the stand-in's meets
// ranks of other processes in shared memory). NCCL_ALGO=Ring is set, as for a reproducible run.
// --plant: two ranks; rank 1's backward of the second layer accumulates with float atomicAdd in
// racing order (CorpusColumnDotAtomic); its gradient then differs from run to run, and after the
// all-reduce so does rank 0's: the op to name is rank 1's kernel, not rank 0's all-reduce.
// --plant-nccl: four ranks (four devices) and NCCL_ALGO left unset, so that the all-reduce
// itself adds the ranks' gradients in racing order: the op to name is ncclAllReduce.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "corpus_common.h"
#include "corpus_kernels.cuh"
#include "corpus_nccl.h"

namespace {

constexpr int kLayers = 2;
constexpr int kRows = 64;                // samples per rank per step
constexpr int kCols = 96;                // parameters per layer
constexpr int kSamples = 4 * kRows * 3;  // 3 or 6 steps per epoch with 4 or 2 ranks
constexpr int kEpochs = 2;
constexpr float kLearningRate = 1e-5f;

int EnvInt(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) {
    std::fprintf(stderr, "%s is not set\n", name);
    std::exit(2);
  }
  return std::atoi(text);
}

// torchrun: one worker per rank, each the same program with the rank in its environment.
int Launch(int world, char** argv) {
  char store[] = "/tmp/ddp_store.XXXXXX";
  if (mkdtemp(store) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  std::vector<pid_t> workers;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 2;
    }
    if (pid == 0) {
      const std::string r = std::to_string(rank);
      setenv("RANK", r.c_str(), 1);
      setenv("LOCAL_RANK", r.c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", "29500", 1);
      setenv("DDP_FILE_STORE", store, 1);
      execv("/proc/self/exe", argv);
      std::perror("execv");
      _exit(127);
    }
    workers.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : workers) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  const std::string id_file = std::string(store) + "/nccl_id";
  unlink(id_file.c_str());
  rmdir(store);
  if (failed != 0) {
    std::fprintf(stderr, "ddp_processes: %d of %d workers failed\n", failed, world);
    return 1;
  }
  return 0;
}

// The rendezvous: rank 0 publishes the unique id in the store, the others wait for it.
ncclUniqueId Rendezvous(int rank) {
  const std::string store = std::getenv("DDP_FILE_STORE") ? std::getenv("DDP_FILE_STORE") : "";
  const std::string path = store + "/nccl_id";
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string partial = path + ".partial";
    FILE* file = std::fopen(partial.c_str(), "wb");
    if (file == nullptr || std::fwrite(&id, sizeof(id), 1, file) != 1 || std::fclose(file) != 0 ||
        std::rename(partial.c_str(), path.c_str()) != 0) {
      std::perror("writing the store");
      std::exit(2);
    }
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    if (FILE* file = std::fopen(path.c_str(), "rb")) {
      const bool read = std::fread(&id, sizeof(id), 1, file) == 1;
      std::fclose(file);
      if (read) return id;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "rank %d: no unique id in the store after 30 s\n", rank);
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// DistributedSampler: the epoch's permutation of every sample, every world-th from `rank`.
std::vector<int> Shard(int rank, int world, int epoch) {
  std::vector<int> indices(kSamples);
  std::iota(indices.begin(), indices.end(), 0);
  std::mt19937 generator(1234 + epoch);
  std::shuffle(indices.begin(), indices.end(), generator);
  std::vector<int> mine;
  for (int i = rank; i < kSamples; i += world) mine.push_back(indices[i]);
  return mine;
}

int Worker(bool plant) {
  const int rank = EnvInt("RANK");
  const int world = EnvInt("WORLD_SIZE");
  const int local_rank = EnvInt("LOCAL_RANK");
  if ((world != 2 && world != 4) || rank < 0 || rank >= world) {
    std::fprintf(stderr, "rank %d of %d: this program runs 2 or 4 ranks\n", rank, world);
    return 2;
  }
  corpus::RequireDevices(world, "ddp_processes");
  CORPUS_CHECK(cudaSetDevice(local_rank));
  const ncclUniqueId id = Rendezvous(rank);
  // ProcessGroupNCCL creates its communicator with a config (blocking, the default).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  ncclComm_t comm;
  NCCL_CHECK(ncclCommInitRankConfig(&comm, world, id, rank, &config));
  // The watchdog: an asynchronous error would abort the communicator and the process.
  std::atomic<bool> shutting_down{false};
  std::thread watchdog([&] {
    while (!shutting_down.load()) {
      ncclResult_t async_error = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm, &async_error));
      if (async_error != ncclSuccess) {
        std::fprintf(stderr, "rank %d: watchdog: %s\n", rank, ncclGetErrorString(async_error));
        NCCL_CHECK(ncclCommAbort(comm));
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });

  cudaStream_t compute, nccl_stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&nccl_stream, cudaStreamNonBlocking));
  cudaEvent_t ready, reduced[kLayers];
  CORPUS_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  for (cudaEvent_t& e : reduced) CORPUS_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  // The model, initialised differently on every rank (each process seeds its own init).
  float *w[kLayers], *grad[kLayers], *x, *v, *v1;
  for (int l = 0; l < kLayers; ++l) {
    const std::vector<float> init = corpus::SmallMixedValues(kCols, 90 + l + 1000 * rank);
    CORPUS_CHECK(cudaMalloc(&w[l], kCols * sizeof(float)));
    CORPUS_CHECK(cudaMalloc(&grad[l], kCols * sizeof(float)));
    CORPUS_CHECK(
        cudaMemcpyAsync(w[l], init.data(), kCols * sizeof(float), cudaMemcpyHostToDevice, compute));
  }
  CORPUS_CHECK(cudaMalloc(&x, size_t{kRows} * kCols * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&v, kRows * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&v1, kRows * sizeof(float)));
  // DDP's constructor: rank 0's parameters to every rank, on NCCL's stream.
  CORPUS_CHECK(cudaEventRecord(ready, compute));
  CORPUS_CHECK(cudaStreamWaitEvent(nccl_stream, ready, 0));
  for (int l = 0; l < kLayers; ++l) {
    NCCL_CHECK(ncclBroadcast(w[l], w[l], kCols, ncclFloat, 0, comm, nccl_stream));
  }
  CORPUS_CHECK(cudaEventRecord(reduced[0], nccl_stream));
  CORPUS_CHECK(cudaStreamWaitEvent(compute, reduced[0], 0));

  const std::vector<float> dataset = corpus::SmallMixedValues(size_t{kSamples} * kCols, 7);
  float *batch_host, *loss_host;
  CORPUS_CHECK(
      cudaHostAlloc(&batch_host, size_t{kRows} * kCols * sizeof(float), cudaHostAllocDefault));
  CORPUS_CHECK(cudaHostAlloc(&loss_host, kRows * sizeof(float), cudaHostAllocDefault));

  // Autograd's device thread: the backward of a step, last layer first, each bucket handed to
  // the reducer as its gradient is ready.
  corpus::Queue<int> backward_work, backward_done;
  std::thread autograd([&] {
    CORPUS_CHECK(cudaSetDevice(local_rank));
    for (int step; (step = backward_work.Pop()) >= 0;) {
      for (int l = kLayers - 1; l >= 0; --l) {
        if (plant && rank == 1 && l == 1) {
          CORPUS_CHECK(cudaMemsetAsync(grad[l], 0, kCols * sizeof(float), compute));
          CorpusColumnDotAtomic<<<corpus::Blocks(kRows * kCols), corpus::kThreads, 0, compute>>>(
              x, v, grad[l], kRows, kCols);
        } else {
          CorpusColumnDot<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(x, v, grad[l],
                                                                                   kRows, kCols);
        }
        CORPUS_CHECK(cudaGetLastError());
        // The reducer's comm hook: bucket / world, all-reduced on NCCL's stream.
        CORPUS_CHECK(cudaEventRecord(ready, compute));
        CORPUS_CHECK(cudaStreamWaitEvent(nccl_stream, ready, 0));
        CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, nccl_stream>>>(
            1.0f / world, grad[l], 0.0f, grad[l], kCols);
        NCCL_CHECK(ncclAllReduce(grad[l], grad[l], kCols, ncclFloat, ncclSum, comm, nccl_stream));
        CORPUS_CHECK(cudaEventRecord(reduced[l], nccl_stream));
      }
      backward_done.Push(step);
    }
  });

  int step = 0;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    const std::vector<int> shard = Shard(rank, world, epoch);
    for (int s = 0; s < kSamples / (world * kRows); ++s, ++step) {
      // The loader: this step's samples gathered into pinned memory, copied on the compute
      // stream (pin_memory=True, non_blocking=True); the host buffer is reused next step, after
      // the loss read-back below has synchronised.
      for (int r = 0; r < kRows; ++r) {
        const int sample = shard[static_cast<size_t>(s * kRows + r)];
        std::copy_n(dataset.data() + size_t{static_cast<size_t>(sample)} * kCols, kCols,
                    batch_host + size_t{static_cast<size_t>(r)} * kCols);
      }
      CORPUS_CHECK(cudaMemcpyAsync(x, batch_host, size_t{kRows} * kCols * sizeof(float),
                                   cudaMemcpyHostToDevice, compute));
      // Forward: the sum of the two layers' mat-vecs.
      CorpusMatVec<<<corpus::Blocks(kRows), corpus::kThreads, 0, compute>>>(x, w[0], v, kRows,
                                                                            kCols);
      CorpusMatVec<<<corpus::Blocks(kRows), corpus::kThreads, 0, compute>>>(x, w[1], v1, kRows,
                                                                            kCols);
      CorpusAxpby<<<corpus::Blocks(kRows), corpus::kThreads, 0, compute>>>(1.0f, v1, 1.0f, v,
                                                                           kRows);
      CORPUS_CHECK(cudaGetLastError());
      CORPUS_CHECK(
          cudaMemcpyAsync(loss_host, v, kRows * sizeof(float), cudaMemcpyDeviceToHost, compute));
      CORPUS_CHECK(cudaStreamSynchronize(compute));  // loss.item(), logged
      backward_work.Push(step);
      backward_done.Pop();
      // optimizer.step(): after the reducer's last bucket.
      for (int l = 0; l < kLayers; ++l) {
        CORPUS_CHECK(cudaStreamWaitEvent(compute, reduced[l], 0));
        CorpusAxpby<<<corpus::Blocks(kCols), corpus::kThreads, 0, compute>>>(
            -kLearningRate, grad[l], 1.0f, w[l], kCols);
      }
      CORPUS_CHECK(cudaGetLastError());
    }
  }
  backward_work.Push(-1);
  autograd.join();

  // Every rank's parameters, gathered: DDP keeps them equal.
  float* gathered;
  CORPUS_CHECK(
      cudaMalloc(&gathered, size_t{static_cast<size_t>(world)} * kLayers * kCols * sizeof(float)));
  float* params;
  CORPUS_CHECK(cudaMalloc(&params, size_t{kLayers} * kCols * sizeof(float)));
  for (int l = 0; l < kLayers; ++l) {
    CORPUS_CHECK(cudaMemcpyAsync(params + l * kCols, w[l], kCols * sizeof(float),
                                 cudaMemcpyDeviceToDevice, compute));
  }
  CORPUS_CHECK(cudaEventRecord(ready, compute));
  CORPUS_CHECK(cudaStreamWaitEvent(nccl_stream, ready, 0));
  NCCL_CHECK(ncclAllGather(params, gathered, kLayers * kCols, ncclFloat, comm, nccl_stream));
  std::vector<float> all(size_t{static_cast<size_t>(world)} * kLayers * kCols);
  CORPUS_CHECK(cudaMemcpyAsync(all.data(), gathered, all.size() * sizeof(float),
                               cudaMemcpyDeviceToHost, nccl_stream));
  CORPUS_CHECK(cudaStreamSynchronize(nccl_stream));
  int status = 0;
  for (int r = 1; r < world && status == 0; ++r) {
    if (!std::equal(all.begin(), all.begin() + kLayers * kCols,
                    all.begin() + size_t{static_cast<size_t>(r)} * kLayers * kCols)) {
      std::fprintf(stderr, "rank %d: rank %d's parameters differ from rank 0's\n", rank, r);
      status = 1;
    }
  }
  if (rank == 0 && status == 0) {
    ndt::programs::PrintChecksum(all.data(), size_t{kLayers} * kCols * sizeof(float));
  }
  // destroy_process_group(): the watchdog stops, the communicator is finalized and destroyed.
  shutting_down = true;
  watchdog.join();
  NCCL_CHECK(ncclCommFinalize(comm));
  NCCL_CHECK(ncclCommDestroy(comm));
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  const bool plant_nccl = corpus::HasFlag(argc, argv, "--plant-nccl");
  if (std::getenv("RANK") == nullptr) return Launch(plant_nccl ? 4 : 2, argv);
  if (plant_nccl) {
    unsetenv("NCCL_ALGO");
  } else {
    setenv("NCCL_ALGO", "Ring", 1);
  }
  return Worker(plant);
}
