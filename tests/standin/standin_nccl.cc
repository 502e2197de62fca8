// The stand-in libnccl.so.2: communicators whose ranks are threads of one process (or one thread
// driving every rank through ncclGroupStart/End), AllReduce and Broadcast computed on the host
// (README.md, "The stand-in NCCL").
//
// Like the real library it exports every function twice: the strong pncclX and a weak ncclX
// alias of it, without symbol versions. It reaches the driver only through
// dlopen("libcuda.so.1") + cuGetProcAddress_v2, and synchronises a rank's stream when that rank
// posts a collective (stand-in streams run their work when it is enqueued, so the send buffer is
// final then).
//
// A collective completes when every rank of the communicator has posted its k-th collective;
// the last rank to post computes it for all. Reduction order:
//  - NCCL_ALGO=Ring (read at communicator creation, as NCCL does; --deterministic sets it):
//    rank 0, 1, ..., n-1 for every element -> bit-reproducible;
//  - otherwise: one thread per rank adds its buffer into the result with compare-and-swap loops
//    in racing order (yielding after a random number of elements), like NCCL's algorithms
//    choosing different reduction trees -> float sums vary from run to run.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "standin_library_driver.h"

namespace {

size_t TypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

enum class Kind { kAllReduce, kBroadcast };

// One collective of a communicator: the k-th call of every rank.
struct Collective {
  Kind kind = Kind::kAllReduce;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  std::vector<const void*> send;
  std::vector<void*> recv;
  int arrived = 0;
  int released = 0;
  bool done = false;
  ncclResult_t result = ncclSuccess;
};

// Everything the ranks of one unique id share.
struct Clique {
  int nranks = 0;
  bool ring = false;  // NCCL_ALGO=Ring when it was created
  std::mutex mutex;
  std::condition_variable changed;
  int joined = 0;
  std::map<uint64_t, Collective> collectives;  // by collective index
};

bool RingRequested() {
  const char* algo = std::getenv("NCCL_ALGO");
  if (algo == nullptr) return false;
  std::string text(algo);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text == "ring";
}

std::mutex& RegistryMutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

// Cliques being formed by ncclCommInitRank, by unique id text.
std::map<std::string, std::weak_ptr<Clique>>& Registry() {
  static auto* registry = new std::map<std::string, std::weak_ptr<Clique>>();
  return *registry;
}

// Atomically replaces *cell by combine(*cell, value) (compare-and-swap on the bits).
template <typename T, typename Combine>
void AtomicCombine(T* cell, T value, Combine combine) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  std::atomic_ref<Bits> bits(*reinterpret_cast<Bits*>(cell));
  Bits expected = bits.load(std::memory_order_relaxed);
  while (!bits.compare_exchange_weak(
      expected, std::bit_cast<Bits>(combine(std::bit_cast<T>(expected), value)),
      std::memory_order_relaxed)) {
  }
}

template <typename T>
T Combine(ncclRedOp_t op, T a, T b) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return a + b;
  }
}

template <typename T>
T Identity(ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return T(1);
    case ncclMax: return std::numeric_limits<T>::lowest();
    case ncclMin: return std::numeric_limits<T>::max();
    default: return T(0);
  }
}

constexpr unsigned kMaxRun = 1024;  // elements between yields in the racing order: 1 to this

template <typename T>
void Reduce(Collective& c, bool ring) {
  const int nranks = static_cast<int>(c.send.size());
  std::vector<T> result(c.count);
  if (ring) {
    const T* first = static_cast<const T*>(c.send[0]);
    std::copy(first, first + c.count, result.begin());
    for (int r = 1; r < nranks; ++r) {
      const T* values = static_cast<const T*>(c.send[static_cast<size_t>(r)]);
      for (size_t i = 0; i < c.count; ++i) result[i] = Combine(c.op, result[i], values[i]);
    }
  } else {
    std::fill(result.begin(), result.end(), Identity<T>(c.op));
    const auto add = [&](int r) {
      const T* values = static_cast<const T*>(c.send[static_cast<size_t>(r)]);
      std::minstd_rand random(std::random_device{}());
      unsigned until_yield = random() % kMaxRun + 1;
      for (size_t i = 0; i < c.count; ++i) {
        AtomicCombine(&result[i], values[i], [&](T a, T b) { return Combine(c.op, a, b); });
        if (--until_yield == 0) {
          std::this_thread::yield();
          until_yield = random() % kMaxRun + 1;
        }
      }
    };
    std::latch start(nranks);
    std::vector<int> not_started;
    {
      std::vector<std::jthread> threads;
      for (int r = 0; r < nranks; ++r) {
        try {
          threads.emplace_back([&start, &add, r] {
            start.arrive_and_wait();
            add(r);
          });
        } catch (const std::system_error&) {  // no thread to spare: that rank below
          not_started.push_back(r);
          start.count_down();
        }
      }
    }
    for (int r : not_started) add(r);
  }
  for (void* recv : c.recv) std::memcpy(recv, result.data(), c.count * sizeof(T));
}

// Computes a collective every rank has posted.
ncclResult_t Execute(Collective& c, bool ring) {
  if (c.kind == Kind::kBroadcast) {
    const void* source = c.send[static_cast<size_t>(c.root)];
    const size_t bytes = c.count * TypeSize(c.type);
    for (void* recv : c.recv) {
      if (recv != source) std::memmove(recv, source, bytes);
    }
    return ncclSuccess;
  }
  switch (c.type) {
    case ncclInt32: Reduce<int32_t>(c, ring); break;
    case ncclUint32: Reduce<uint32_t>(c, ring); break;
    case ncclInt64: Reduce<int64_t>(c, ring); break;
    case ncclUint64: Reduce<uint64_t>(c, ring); break;
    case ncclFloat32: Reduce<float>(c, ring); break;
    case ncclFloat64: Reduce<double>(c, ring); break;
    default: return ncclInvalidArgument;
  }
  return ncclSuccess;
}

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  int device = 0;
  uint64_t next_collective = 0;  // guarded by clique->mutex
};

namespace {

// The collectives this thread posted inside ncclGroupStart/End, waited for at the outermost
// ncclGroupEnd.
struct Posted {
  ncclComm* comm;
  uint64_t index;
};
thread_local int t_group_depth = 0;
thread_local std::vector<Posted> t_posted;

ncclResult_t Wait(const Posted& posted) {
  Clique& clique = *posted.comm->clique;
  std::unique_lock lock(clique.mutex);
  clique.changed.wait(lock, [&] { return clique.collectives[posted.index].done; });
  Collective& c = clique.collectives[posted.index];
  const ncclResult_t result = c.result;
  if (++c.released == clique.nranks) clique.collectives.erase(posted.index);
  return result;
}

// Posts this rank's part of its next collective; waits for it unless inside a group.
ncclResult_t Post(ncclComm* comm, Kind kind, const void* send, void* recv, size_t count,
                  ncclDataType_t type, ncclRedOp_t op, int root, cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  const size_t element = TypeSize(type);
  if (element == 0) return ncclInvalidArgument;
  Clique& clique = *comm->clique;
  if (root < 0 || root >= clique.nranks) return ncclInvalidArgument;
  if (kind == Kind::kAllReduce && (op < ncclSum || op > ncclMin)) return ncclInvalidArgument;
  const bool sends = kind == Kind::kAllReduce || comm->rank == root;
  if (count > 0 && ((sends && !IsDeviceRange(send, count * element)) ||
                    !IsDeviceRange(recv, count * element))) {
    return ncclInvalidArgument;
  }
  if (!Synchronize(stream)) return ncclUnhandledCudaError;
  Posted posted{comm, 0};
  {
    std::lock_guard lock(clique.mutex);
    posted.index = comm->next_collective++;
    Collective& c = clique.collectives[posted.index];
    if (c.arrived == 0) {
      c.kind = kind;
      c.count = count;
      c.type = type;
      c.op = op;
      c.root = root;
      c.send.assign(static_cast<size_t>(clique.nranks), nullptr);
      c.recv.assign(static_cast<size_t>(clique.nranks), nullptr);
    } else if (c.kind != kind || c.count != count || c.type != type || c.op != op ||
               c.root != root) {
      c.result = ncclInvalidUsage;  // the ranks disagree on the collective
    }
    c.send[static_cast<size_t>(comm->rank)] = send;
    c.recv[static_cast<size_t>(comm->rank)] = recv;
    if (++c.arrived == clique.nranks) {
      if (c.result == ncclSuccess && count > 0) c.result = Execute(c, clique.ring);
      c.done = true;
      clique.changed.notify_all();
    }
  }
  if (t_group_depth > 0) {
    t_posted.push_back(posted);
    return ncclSuccess;
  }
  return Wait(posted);
}

std::atomic<uint64_t> g_next_id{0};

}  // namespace

// ncclX: a weak alias of pncclX, as in the real library.
#define NDT_NCCL_ALIAS(name) \
  extern "C" __typeof__(p##name) name __attribute__((weak, alias("p" #name)));

extern "C" {

ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* pncclGetLastError(ncclComm_t) {
  return "";
}

ncclResult_t pncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return ncclInvalidArgument;
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  std::snprintf(unique_id->internal, sizeof(unique_id->internal), "ndt-nccl:%d:%llu:%u",
                static_cast<int>(getpid()),
                static_cast<unsigned long long>(g_next_id.fetch_add(1)), std::random_device{}());
  return ncclSuccess;
}

ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const std::string id(comm_id.internal, strnlen(comm_id.internal, sizeof(comm_id.internal)));
  int pid = 0;
  if (std::sscanf(id.c_str(), "ndt-nccl:%d:", &pid) != 1) return ncclInvalidArgument;
  if (pid != static_cast<int>(getpid())) {
    std::fprintf(stderr, "NCCL stand-in: ranks in other processes are not supported\n");
    return ncclInvalidUsage;
  }
  std::shared_ptr<Clique> clique;
  {
    std::lock_guard lock(RegistryMutex());
    std::weak_ptr<Clique>& slot = Registry()[id];
    clique = slot.lock();
    if (clique == nullptr) {
      clique = std::make_shared<Clique>();
      clique->nranks = nranks;
      clique->ring = RingRequested();
      slot = clique;
    }
  }
  if (clique->nranks != nranks) return ncclInvalidUsage;
  auto* created = new (std::nothrow) ncclComm();
  if (created == nullptr) return ncclSystemError;
  created->clique = clique;
  created->rank = rank;
  *comm = created;
  std::unique_lock lock(clique->mutex);
  ++clique->joined;
  clique->changed.notify_all();
  if (t_group_depth == 0) {  // outside a group, initialisation waits for every rank
    clique->changed.wait(lock, [&] { return clique->joined >= clique->nranks; });
  }
  return ncclSuccess;
}

ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) return ncclInvalidArgument;
  auto clique = std::make_shared<Clique>();
  clique->nranks = ndev;
  clique->ring = RingRequested();
  clique->joined = ndev;
  for (int r = 0; r < ndev; ++r) {
    auto* created = new (std::nothrow) ncclComm();
    if (created == nullptr) return ncclSystemError;
    created->clique = clique;
    created->rank = r;
    created->device = devlist != nullptr ? devlist[r] : r;
    comms[r] = created;
  }
  return ncclSuccess;
}

ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  delete comm;
  return ncclSuccess;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->clique->nranks;
  return ncclSuccess;
}

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream) {
  return Post(comm, Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, stream);
}

ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  return Post(comm, Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, stream);
}

ncclResult_t pncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t pncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  std::vector<Posted> posted;
  posted.swap(t_posted);
  for (const Posted& one : posted) {
    const ncclResult_t waited = Wait(one);
    if (result == ncclSuccess) result = waited;
  }
  return result;
}

}  // extern "C"

NDT_NCCL_ALIAS(ncclGetVersion)
NDT_NCCL_ALIAS(ncclGetErrorString)
NDT_NCCL_ALIAS(ncclGetLastError)
NDT_NCCL_ALIAS(ncclGetUniqueId)
NDT_NCCL_ALIAS(ncclCommInitRank)
NDT_NCCL_ALIAS(ncclCommInitAll)
NDT_NCCL_ALIAS(ncclCommDestroy)
NDT_NCCL_ALIAS(ncclCommCount)
NDT_NCCL_ALIAS(ncclCommUserRank)
NDT_NCCL_ALIAS(ncclCommCuDevice)
NDT_NCCL_ALIAS(ncclAllReduce)
NDT_NCCL_ALIAS(ncclBroadcast)
NDT_NCCL_ALIAS(ncclGroupStart)
NDT_NCCL_ALIAS(ncclGroupEnd)
