// The stand-in libnccl.so.2: communicators whose ranks are threads of one process (or one thread
// driving every rank through ncclGroupStart/End), every collective and point-to-point call of
// nccl.h computed on the host (README.md, "The stand-in NCCL").
//
// Like the real library it exports every function twice, pncclX and an ncclX alias of it, without
// symbol versions; what it does not implement is a stub (standin_library_stubs.cc). It reaches the
// driver only through dlopen("libcuda.so.1") + cuGetProcAddress_v2, and synchronises a rank's
// stream when that rank posts a call (stand-in streams run their work when it is enqueued, so the
// send buffer is final then).
//
// A collective completes when every rank of the communicator has posted its k-th collective;
// the last rank to post computes it for all. A Send and a Recv pair up by (communicator, sender,
// receiver, k-th message between them); the second to be posted copies the data. Data movement
// (Broadcast, Bcast, AllGather, AlltoAll, Gather, Scatter, Send/Recv) is exact. Reduction
// order (AllReduce, Reduce, ReduceScatter):
//  - NCCL_ALGO=Ring (read at communicator creation, as NCCL does; --deterministic sets it):
//    rank 0, 1, ..., n-1 for every element -> bit-reproducible;
//  - otherwise: one thread per rank adds its buffer into the result with compare-and-swap loops
//    in racing order (yielding after a random number of elements), like NCCL's algorithms
//    choosing different reduction trees -> float sums vary from run to run.
// A rank never waits forever: a call whose peers do not make the matching call within
// NDT_STANDIN_NCCL_TIMEOUT_MS (default 30000) fails with ncclInvalidUsage and a line on stderr,
// and its buffers are never touched afterwards.
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
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
#include <tuple>
#include <type_traits>
#include <vector>

#include "standin_half.h"
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

// ncclFloat16 and ncclBfloat16 elements (standin_half.h): reduced by converting to float,
// combining and rounding back to nearest even at every step, as NCCL's kernels do in their
// reduction trees.
using ndt::standin::BFloat16;
using ndt::standin::FromFloat;
using ndt::standin::Half;
using ndt::standin::ToFloat;

template <typename T>
constexpr bool kNarrowFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

enum class Kind {
  kAllReduce,
  kBroadcast,  // also ncclBcast, with the same buffer to send and receive
  kReduce,
  kReduceScatter,
  kAllGather,
  kAlltoAll,
  kGather,
  kScatter,
};

// How much of a buffer a rank uses, in elements of the call's count (nccl.h's descriptions).
enum class Span { kNone, kCount, kCountRanks, kRootCount, kRootCountRanks };

struct Shape {
  Span send;
  Span recv;
  bool reduces;
};

Shape ShapeOf(Kind kind) {
  switch (kind) {
    case Kind::kAllReduce: return {Span::kCount, Span::kCount, true};
    case Kind::kBroadcast: return {Span::kRootCount, Span::kCount, false};
    case Kind::kReduce: return {Span::kCount, Span::kRootCount, true};
    case Kind::kReduceScatter: return {Span::kCountRanks, Span::kCount, true};
    case Kind::kAllGather: return {Span::kCount, Span::kCountRanks, false};
    case Kind::kAlltoAll: return {Span::kCountRanks, Span::kCountRanks, false};
    case Kind::kGather: return {Span::kCount, Span::kRootCountRanks, false};
    case Kind::kScatter: return {Span::kRootCountRanks, Span::kCount, false};
  }
  return {Span::kNone, Span::kNone, false};
}

// Bytes of a buffer `rank` uses under `span` (0: unused); false when they overflow.
bool SpanBytes(Span span, size_t count, size_t element, int rank, int root, int nranks,
               size_t* bytes) {
  *bytes = 0;
  if (span == Span::kNone) return true;
  if ((span == Span::kRootCount || span == Span::kRootCountRanks) && rank != root) return true;
  size_t elements = count;
  if ((span == Span::kCountRanks || span == Span::kRootCountRanks) &&
      __builtin_mul_overflow(elements, static_cast<size_t>(nranks), &elements)) {
    return false;
  }
  return !__builtin_mul_overflow(elements, element, bytes);
}

// What a posting rank waits for; guarded by its clique's mutex.
struct Completion {
  bool done = false;
  bool abandoned = false;  // a rank stopped waiting: its buffers may be gone, never touch them
  ncclResult_t result = ncclSuccess;
};

// One collective of a communicator: the k-th call of every rank.
struct Collective : Completion {
  Kind kind = Kind::kAllReduce;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  std::vector<const void*> send;
  std::vector<void*> recv;
  int arrived = 0;
};

// The k-th message from one rank to another: a Send and the matching Recv.
struct Message : Completion {
  bool sent = false;
  bool received = false;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t send_count = 0;
  size_t recv_count = 0;
  ncclDataType_t send_type = ncclFloat32;
  ncclDataType_t recv_type = ncclFloat32;
};

// Everything the ranks of one unique id share.
struct Clique {
  int nranks = 0;
  bool ring = false;  // NCCL_ALGO=Ring when it was created
  std::mutex mutex;
  std::condition_variable changed;
  int joined = 0;
  std::map<uint64_t, std::shared_ptr<Collective>> collectives;  // by index, until complete
  // By (sender, receiver, index of the message between them), until complete.
  std::map<std::tuple<int, int, uint64_t>, std::shared_ptr<Message>> messages;
};

bool RingRequested() {
  const char* algo = std::getenv("NCCL_ALGO");
  if (algo == nullptr) return false;
  std::string text(algo);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text == "ring";
}

// How long a rank waits for its peers' matching calls.
std::chrono::milliseconds Timeout() {
  static const std::chrono::milliseconds timeout = [] {
    const char* text = std::getenv("NDT_STANDIN_NCCL_TIMEOUT_MS");
    const long long parsed = text != nullptr ? std::atoll(text) : 0;
    return std::chrono::milliseconds(parsed > 0 ? parsed : 30000);
  }();
  return timeout;
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
  using Bits = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t,
                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  std::atomic_ref<Bits> bits(*reinterpret_cast<Bits*>(cell));
  Bits expected = bits.load(std::memory_order_relaxed);
  while (!bits.compare_exchange_weak(
      expected, std::bit_cast<Bits>(combine(std::bit_cast<T>(expected), value)),
      std::memory_order_relaxed)) {
  }
}

template <typename T>
T Combine(ncclRedOp_t op, T a, T b) {
  if constexpr (kNarrowFloat<T>) {
    return FromFloat<T>(Combine(op, ToFloat(a), ToFloat(b)));
  } else {
    switch (op) {
      case ncclProd:
        return static_cast<T>(a * b);
      case ncclMax:
        return std::max(a, b);
      case ncclMin:
        return std::min(a, b);
      default:
        return static_cast<T>(a + b);
    }
  }
}

template <typename T>
T Identity(ncclRedOp_t op) {
  if constexpr (kNarrowFloat<T>) {
    constexpr float kInfinity = std::numeric_limits<float>::infinity();
    switch (op) {
      case ncclProd:
        return FromFloat<T>(1.0f);
      case ncclMax:
        return FromFloat<T>(-kInfinity);
      case ncclMin:
        return FromFloat<T>(kInfinity);
      default:
        return FromFloat<T>(0.0f);
    }
  } else {
    switch (op) {
      case ncclProd:
        return T(1);
      case ncclMax:
        return std::numeric_limits<T>::lowest();
      case ncclMin:
        return std::numeric_limits<T>::max();
      default:
        return T(0);
    }
  }
}

// value / n: ncclAvg's last step (integers truncate).
template <typename T>
T Divide(T value, int n) {
  if constexpr (kNarrowFloat<T>) {
    return FromFloat<T>(ToFloat(value) / static_cast<float>(n));
  } else {
    return static_cast<T>(value / static_cast<T>(n));
  }
}

// Elements between yields in the racing order: 1 to this, and to an eighth of the buffer, so
// that a small buffer is interleaved too (on a loaded machine, threads that never yield run
// one after another in the order they started, every time).
constexpr unsigned kMaxRun = 1024;

// Reduces every rank's send buffer (count elements; count x nranks for ReduceScatter; ncclAvg
// adds, then divides) and
// writes the result where the kind says: every rank (AllReduce), the root (Reduce), rank r's
// block r (ReduceScatter).
template <typename T>
void Reduce(Collective& c, bool ring) {
  const int nranks = static_cast<int>(c.send.size());
  const size_t elements =
      c.kind == Kind::kReduceScatter ? c.count * static_cast<size_t>(nranks) : c.count;
  std::vector<T> result(elements);
  if (ring) {
    const T* first = static_cast<const T*>(c.send[0]);
    std::copy(first, first + elements, result.begin());
    for (int r = 1; r < nranks; ++r) {
      const T* values = static_cast<const T*>(c.send[static_cast<size_t>(r)]);
      for (size_t i = 0; i < elements; ++i) result[i] = Combine(c.op, result[i], values[i]);
    }
  } else {
    std::fill(result.begin(), result.end(), Identity<T>(c.op));
    const auto add = [&](int r) {
      const T* values = static_cast<const T*>(c.send[static_cast<size_t>(r)]);
      std::minstd_rand random(std::random_device{}());
      const auto max_run = static_cast<unsigned>(std::clamp<size_t>(elements / 8, 1, kMaxRun));
      unsigned until_yield = random() % max_run + 1;
      for (size_t i = 0; i < elements; ++i) {
        AtomicCombine(&result[i], values[i], [&](T a, T b) { return Combine(c.op, a, b); });
        if (--until_yield == 0) {
          std::this_thread::yield();
          until_yield = random() % max_run + 1;
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
  if (c.op == ncclAvg) {  // the sum, divided by the number of ranks (integers truncated)
    for (T& value : result) value = Divide(value, nranks);
  }
  switch (c.kind) {
    case Kind::kReduce:
      std::memcpy(c.recv[static_cast<size_t>(c.root)], result.data(), elements * sizeof(T));
      break;
    case Kind::kReduceScatter:
      for (size_t r = 0; r < c.recv.size(); ++r) {
        std::memcpy(c.recv[r], result.data() + r * c.count, c.count * sizeof(T));
      }
      break;
    default:
      for (void* recv : c.recv) std::memcpy(recv, result.data(), elements * sizeof(T));
  }
}

// Moves the data of a collective that does not reduce, exactly. Every byte sent is staged
// first, so that in-place calls (a receive buffer overlapping a send buffer) read what was sent.
void Move(Collective& c) {
  const size_t n = c.send.size();
  const size_t block = c.count * TypeSize(c.type);
  const auto bytes_of = [](const void* pointer) {
    return static_cast<const unsigned char*>(pointer);
  };
  const auto bytes_at = [](void* pointer) { return static_cast<unsigned char*>(pointer); };
  std::vector<unsigned char> staged;
  switch (c.kind) {
    case Kind::kBroadcast:
      staged.assign(bytes_of(c.send[static_cast<size_t>(c.root)]),
                    bytes_of(c.send[static_cast<size_t>(c.root)]) + block);
      for (void* recv : c.recv) std::memcpy(recv, staged.data(), block);
      break;
    case Kind::kAllGather:  // recv[r] block i = send[i]
    case Kind::kGather:     // recv[root] block i = send[i]
      staged.resize(n * block);
      for (size_t i = 0; i < n; ++i) std::memcpy(staged.data() + i * block, c.send[i], block);
      for (size_t r = 0; r < n; ++r) {
        if (c.kind == Kind::kAllGather || static_cast<int>(r) == c.root) {
          std::memcpy(c.recv[r], staged.data(), n * block);
        }
      }
      break;
    case Kind::kAlltoAll:  // recv[j] block i = send[i] block j
      staged.resize(n * n * block);
      for (size_t i = 0; i < n; ++i)
        std::memcpy(staged.data() + i * n * block, c.send[i], n * block);
      for (size_t j = 0; j < n; ++j) {
        for (size_t i = 0; i < n; ++i) {
          std::memcpy(bytes_at(c.recv[j]) + i * block, staged.data() + (i * n + j) * block, block);
        }
      }
      break;
    case Kind::kScatter:  // recv[i] = send[root] block i
      staged.assign(bytes_of(c.send[static_cast<size_t>(c.root)]),
                    bytes_of(c.send[static_cast<size_t>(c.root)]) + n * block);
      for (size_t i = 0; i < n; ++i) std::memcpy(c.recv[i], staged.data() + i * block, block);
      break;
    default:
      break;
  }
}

// to[i] = from[i] * scalar for n elements of `type` (a reducible type: Post checked it).
template <typename T>
void MultiplyAs(const void* from, void* to, size_t n, const void* scalar) {
  T factor;
  std::memcpy(&factor, scalar, sizeof(T));
  const auto* in = static_cast<const T*>(from);
  auto* out = static_cast<T*>(to);
  for (size_t i = 0; i < n; ++i) out[i] = Combine(ncclProd, in[i], factor);
}

void Multiply(ncclDataType_t type, const void* from, void* to, size_t n, const void* scalar) {
  switch (type) {
    case ncclInt8:
      MultiplyAs<int8_t>(from, to, n, scalar);
      break;
    case ncclUint8:
      MultiplyAs<uint8_t>(from, to, n, scalar);
      break;
    case ncclFloat16:
      MultiplyAs<Half>(from, to, n, scalar);
      break;
    case ncclBfloat16:
      MultiplyAs<BFloat16>(from, to, n, scalar);
      break;
    case ncclInt32:
      MultiplyAs<int32_t>(from, to, n, scalar);
      break;
    case ncclUint32:
      MultiplyAs<uint32_t>(from, to, n, scalar);
      break;
    case ncclInt64:
      MultiplyAs<int64_t>(from, to, n, scalar);
      break;
    case ncclUint64:
      MultiplyAs<uint64_t>(from, to, n, scalar);
      break;
    case ncclFloat32:
      MultiplyAs<float>(from, to, n, scalar);
      break;
    case ncclFloat64:
      MultiplyAs<double>(from, to, n, scalar);
      break;
    default:
      break;
  }
}

// Computes a collective every rank has posted.
ncclResult_t Execute(Collective& c, bool ring) {
  try {
    if (!ShapeOf(c.kind).reduces) {
      Move(c);
      return ncclSuccess;
    }
    switch (c.type) {
      case ncclInt8:
        Reduce<int8_t>(c, ring);
        break;
      case ncclUint8:
        Reduce<uint8_t>(c, ring);
        break;
      case ncclFloat16:
        Reduce<Half>(c, ring);
        break;
      case ncclBfloat16:
        Reduce<BFloat16>(c, ring);
        break;
      case ncclInt32: Reduce<int32_t>(c, ring); break;
      case ncclUint32: Reduce<uint32_t>(c, ring); break;
      case ncclInt64: Reduce<int64_t>(c, ring); break;
      case ncclUint64: Reduce<uint64_t>(c, ring); break;
      case ncclFloat32: Reduce<float>(c, ring); break;
      case ncclFloat64: Reduce<double>(c, ring); break;
      default: return ncclInvalidArgument;
    }
  } catch (const std::bad_alloc&) {
    return ncclSystemError;
  }
  return ncclSuccess;
}

// Ranks in other processes (a torchrun or mpirun job: one process per rank). Every
// ncclCommInitRank outside a group meets the other ranks in POSIX shared memory named after the
// unique id ("/ndt-nccl-<creator pid>-<n>-<random>"): a header with a process-shared robust mutex
// and condition variable, and a data object that grows to the largest call. Once every rank has
// joined, a communicator whose ranks are all in this process carries on as threads do (above);
// otherwise each collective goes through the shared memory: a rank waits for the previous
// collective to be collected by every rank, stages its send buffer in its own region, and the
// last to arrive computes the result into every rank's receive region (Execute, the same order
// rules); each rank then copies its own out. Both names are unlinked once every rank has joined.
constexpr int kMaxSharedRanks = 64;

struct SharedHeader {
  pthread_mutex_t mutex;
  pthread_cond_t changed;  // CLOCK_MONOTONIC
  std::atomic<uint32_t> ready;
  int nranks;
  int joined;
  bool ring;
  pid_t pids[kMaxSharedRanks];
  uint64_t data_bytes;  // size of the data object
  // The collective in progress, guarded by `mutex`:
  uint64_t current;  // its index
  int arrived;       // ranks that staged their send buffers
  int collected;     // ranks that copied their results out
  bool done;
  bool params_set;
  ncclResult_t result;
  Kind kind;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
};

std::string SharedName(const std::string& id, const char* suffix) {
  std::string name = "/" + id + suffix;
  for (size_t i = 1; i < name.size(); ++i) {
    if (name[i] == ':') name[i] = '-';
  }
  return name;
}

// This process's view of a communicator's shared memory.
class SharedClique {
 public:
  ~SharedClique() {
    if (data_ != nullptr) munmap(data_, mapped_);
    if (header_ != nullptr) munmap(header_, sizeof(SharedHeader));
    if (data_fd_ >= 0) close(data_fd_);
  }

  // Opens (or creates) the shared memory of `id` and waits for the other ranks to join.
  static ncclResult_t Join(const std::string& id, int nranks, int rank,
                           std::unique_ptr<SharedClique>* out) {
    if (nranks > kMaxSharedRanks) {
      std::fprintf(stderr, "NCCL stand-in: at most %d ranks between processes\n", kMaxSharedRanks);
      return ncclInvalidUsage;
    }
    auto clique = std::make_unique<SharedClique>();
    const std::string header_name = SharedName(id, "");
    const std::string data_name = SharedName(id, ".data");
    const auto deadline = std::chrono::steady_clock::now() + Timeout();
    int fd = shm_open(header_name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    const bool creator = fd >= 0;
    if (creator) {
      clique->data_fd_ = shm_open(data_name.c_str(), O_RDWR | O_CREAT, 0600);
      if (clique->data_fd_ < 0 || ftruncate(fd, sizeof(SharedHeader)) != 0) {
        if (fd >= 0) close(fd);
        return ncclSystemError;
      }
    } else {
      // Another rank creates it: wait until it is whole.
      while ((fd = shm_open(header_name.c_str(), O_RDWR, 0600)) < 0 || !HasHeaderSize(fd)) {
        if (fd >= 0) close(fd);
        if (std::chrono::steady_clock::now() > deadline) return JoinTimedOut(rank, 0, nranks);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    void* mapped = mmap(nullptr, sizeof(SharedHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped == MAP_FAILED) return ncclSystemError;
    clique->header_ = static_cast<SharedHeader*>(mapped);
    SharedHeader& h = *clique->header_;
    if (creator) {
      pthread_mutexattr_t mutex_attr;
      pthread_mutexattr_init(&mutex_attr);
      pthread_mutexattr_setpshared(&mutex_attr, PTHREAD_PROCESS_SHARED);
      pthread_mutexattr_setrobust(&mutex_attr, PTHREAD_MUTEX_ROBUST);
      pthread_mutex_init(&h.mutex, &mutex_attr);
      pthread_condattr_t cond_attr;
      pthread_condattr_init(&cond_attr);
      pthread_condattr_setpshared(&cond_attr, PTHREAD_PROCESS_SHARED);
      pthread_condattr_setclock(&cond_attr, CLOCK_MONOTONIC);
      pthread_cond_init(&h.changed, &cond_attr);
      h.nranks = nranks;
      h.ring = RingRequested();
      h.result = ncclSuccess;
      h.ready.store(1, std::memory_order_release);
    } else {
      while (h.ready.load(std::memory_order_acquire) == 0) {
        if (std::chrono::steady_clock::now() > deadline) return JoinTimedOut(rank, 0, nranks);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      clique->data_fd_ = shm_open(data_name.c_str(), O_RDWR, 0600);
      if (clique->data_fd_ < 0) return ncclSystemError;
    }
    clique->nranks_ = nranks;
    clique->rank_ = rank;
    Locked lock(h);
    if (h.nranks != nranks) return ncclInvalidUsage;
    h.pids[rank] = getpid();
    if (++h.joined == nranks) {
      shm_unlink(header_name.c_str());
      shm_unlink(data_name.c_str());
    }
    pthread_cond_broadcast(&h.changed);
    if (!lock.WaitUntil([&] { return h.joined >= nranks; }, deadline)) {
      --h.joined;
      shm_unlink(header_name.c_str());  // no rank joins later: leave nothing behind
      shm_unlink(data_name.c_str());
      return JoinTimedOut(rank, h.joined, nranks);
    }
    *out = std::move(clique);
    return ncclSuccess;
  }

  // True when every rank is in this process.
  bool AllHere() const {
    for (int r = 0; r < nranks_; ++r) {
      if (header_->pids[r] != getpid()) return false;
    }
    return true;
  }

  int nranks() const { return nranks_; }

  // This rank's part of collective `index`.
  ncclResult_t Collect(uint64_t index, Kind kind, const char* what, const void* send, void* recv,
                       size_t count, ncclDataType_t type, ncclRedOp_t op, int root) {
    SharedHeader& h = *header_;
    const auto deadline = std::chrono::steady_clock::now() + Timeout();
    const size_t element = TypeSize(type);
    const Shape shape = ShapeOf(kind);
    // Every rank's region holds the largest buffer any rank sends or receives in this call.
    size_t stride = 0;
    for (int r = 0; r < nranks_; ++r) {
      size_t send_bytes = 0, recv_bytes = 0;
      SpanBytes(shape.send, count, element, r, root, nranks_, &send_bytes);
      SpanBytes(shape.recv, count, element, r, root, nranks_, &recv_bytes);
      stride = std::max({stride, send_bytes, recv_bytes});
    }
    stride = (stride + 63) / 64 * 64;
    size_t send_bytes = 0, recv_bytes = 0;
    SpanBytes(shape.send, count, element, rank_, root, nranks_, &send_bytes);
    SpanBytes(shape.recv, count, element, rank_, root, nranks_, &recv_bytes);
    const size_t needed = 2 * static_cast<size_t>(nranks_) * stride;
    {
      Locked lock(h);
      if (!lock.WaitUntil([&] { return h.current == index; }, deadline)) {
        return TimedOut(what);
      }
      if (!h.params_set) {
        h.params_set = true;
        h.kind = kind;
        h.count = count;
        h.type = type;
        h.op = op;
        h.root = root;
      } else if (h.kind != kind || h.count != count || h.type != type || h.op != op ||
                 h.root != root) {
        h.result = ncclInvalidUsage;  // the ranks disagree on the collective
      }
      if (h.data_bytes < needed) {
        if (ftruncate(data_fd_, static_cast<off_t>(needed)) != 0)
          h.result = ncclSystemError;
        else
          h.data_bytes = needed;
      }
    }
    if (!Map(needed)) return ncclSystemError;
    if (send_bytes > 0) std::memcpy(data_ + rank_ * stride, send, send_bytes);
    ncclResult_t result;
    {
      Locked lock(h);
      if (++h.arrived == nranks_) {
        if (h.result == ncclSuccess && count > 0) {
          Collective c;
          c.kind = kind;
          c.count = count;
          c.type = type;
          c.op = op;
          c.root = root;
          for (int r = 0; r < nranks_; ++r) {
            c.send.push_back(data_ + r * stride);
            c.recv.push_back(data_ + (nranks_ + r) * stride);
          }
          h.result = Execute(c, h.ring);
        }
        h.done = true;
        pthread_cond_broadcast(&h.changed);
      }
      if (!lock.WaitUntil([&] { return h.done; }, deadline)) return TimedOut(what);
      result = h.result;
    }
    if (result == ncclSuccess && recv_bytes > 0) {
      std::memcpy(recv, data_ + (nranks_ + rank_) * stride, recv_bytes);
    }
    Locked lock(h);
    if (++h.collected == nranks_) {
      ++h.current;
      h.arrived = h.collected = 0;
      h.done = h.params_set = false;
      h.result = ncclSuccess;
      pthread_cond_broadcast(&h.changed);
    }
    return result;
  }

 private:
  // The header's mutex, held; a holder that died leaves it consistent again.
  class Locked {
   public:
    explicit Locked(SharedHeader& h) : h_(h) {
      if (pthread_mutex_lock(&h_.mutex) == EOWNERDEAD) pthread_mutex_consistent(&h_.mutex);
    }
    ~Locked() { pthread_mutex_unlock(&h_.mutex); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;
    template <typename Predicate>
    bool WaitUntil(Predicate done, std::chrono::steady_clock::time_point deadline) {
      while (!done()) {
        const auto left = deadline - std::chrono::steady_clock::now();
        if (left <= std::chrono::steady_clock::duration::zero()) return false;
        timespec until{};
        clock_gettime(CLOCK_MONOTONIC, &until);
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        until.tv_sec += static_cast<time_t>(ns / 1000000000);
        until.tv_nsec += static_cast<long>(ns % 1000000000);
        if (until.tv_nsec >= 1000000000) {
          ++until.tv_sec;
          until.tv_nsec -= 1000000000;
        }
        if (pthread_cond_timedwait(&h_.changed, &h_.mutex, &until) == EOWNERDEAD) {
          pthread_mutex_consistent(&h_.mutex);
        }
      }
      return true;
    }

   private:
    SharedHeader& h_;
  };

  static bool HasHeaderSize(int fd) {
    struct stat st {};
    return fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(SharedHeader);
  }

  static ncclResult_t JoinTimedOut(int rank, int joined, int nranks) {
    std::fprintf(stderr, "NCCL stand-in: rank %d: ncclCommInitRank: %d of %d ranks joined\n", rank,
                 joined, nranks);
    return ncclInvalidUsage;
  }

  ncclResult_t TimedOut(const char* what) const {
    std::fprintf(stderr,
                 "NCCL stand-in: rank %d: %s: no matching call from the other ranks "
                 "within %lld ms\n",
                 rank_, what, static_cast<long long>(Timeout().count()));
    return ncclInvalidUsage;
  }

  // Maps at least `bytes` of the data object.
  bool Map(size_t bytes) {
    if (mapped_ >= bytes) return true;
    if (data_ != nullptr) munmap(data_, mapped_);
    void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, data_fd_, 0);
    if (mapped == MAP_FAILED) {
      data_ = nullptr;
      mapped_ = 0;
      return false;
    }
    data_ = static_cast<unsigned char*>(mapped);
    mapped_ = bytes;
    return true;
  }

  SharedHeader* header_ = nullptr;
  int data_fd_ = -1;
  unsigned char* data_ = nullptr;
  size_t mapped_ = 0;
  int nranks_ = 0;
  int rank_ = 0;
};

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;        // ranks in this process
  std::unique_ptr<SharedClique> shared;  // or not: through shared memory
  std::string id;                        // the unique id's text (ncclCommSplit derives one)
  uint64_t splits = 0;                   // ncclCommSplit calls so far
  int rank = 0;
  int device = 0;
  // Guarded by clique->mutex:
  uint64_t next_collective = 0;
  std::map<int, uint64_t> sent;      // messages sent to each peer so far
  std::map<int, uint64_t> received;  // messages received from each peer so far
  // ncclRedOpCreatePreMulSum's operators, op ncclNumOps + i (type -1: destroyed).
  struct PreMulSum {
    int type = -1;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
    const void* scalar = nullptr;  // ncclScalarDevice: read when a call uses it
    unsigned char value[8] = {};   // ncclScalarHostImmediate: read at creation
  };
  std::vector<PreMulSum> premul;
};

namespace {

// A call this thread posted: waited for at once, or inside ncclGroupStart/End at the outermost
// ncclGroupEnd.
struct Posted {
  std::shared_ptr<Clique> clique;
  std::shared_ptr<Completion> completion;
  int rank;
  const char* what;
};
thread_local int t_group_depth = 0;
thread_local std::vector<Posted> t_posted;
// Send buffers multiplied by a pre-multiplied sum's scalar, kept until the calls complete.
thread_local std::vector<std::vector<unsigned char>> t_scaled;

// Waits for `posted` to complete until `deadline`; gives up with ncclInvalidUsage then.
ncclResult_t Wait(const Posted& posted, std::chrono::steady_clock::time_point deadline) {
  Clique& clique = *posted.clique;
  Completion& completion = *posted.completion;
  std::unique_lock lock(clique.mutex);
  if (!clique.changed.wait_until(lock, deadline, [&] { return completion.done; })) {
    completion.abandoned = true;
    std::fprintf(stderr,
                 "NCCL stand-in: rank %d: %s: no matching call from the other ranks "
                 "within %lld ms\n",
                 posted.rank, posted.what, static_cast<long long>(Timeout().count()));
    return ncclInvalidUsage;
  }
  return completion.result;
}

// Waits for `posted` unless inside a group.
ncclResult_t Complete(Posted posted) {
  if (t_group_depth > 0) {
    t_posted.push_back(std::move(posted));
    return ncclSuccess;
  }
  return Wait(posted, std::chrono::steady_clock::now() + Timeout());
}

// Posts this rank's part of its next collective.
ncclResult_t PostChecked(ncclComm* comm, Kind kind, const char* what, const void* send, void* recv,
                         size_t count, ncclDataType_t type, ncclRedOp_t op, int root);

ncclResult_t Post(ncclComm* comm, Kind kind, const char* what, const void* send, void* recv,
                  size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                  cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  const size_t element = TypeSize(type);
  if (element == 0) return ncclInvalidArgument;
  const int nranks = comm->shared ? comm->shared->nranks() : comm->clique->nranks;
  if (root < 0 || root >= nranks) return ncclInvalidArgument;
  const Shape shape = ShapeOf(kind);
  const bool premul = shape.reduces && op >= ncclNumOps;
  if (shape.reduces && !premul && (op < ncclSum || op > ncclAvg)) return ncclInvalidArgument;
  if (premul && (static_cast<size_t>(op - ncclNumOps) >= comm->premul.size() ||
                 comm->premul[static_cast<size_t>(op - ncclNumOps)].type != type)) {
    return ncclInvalidArgument;
  }
  size_t send_bytes = 0;
  size_t recv_bytes = 0;
  if (!SpanBytes(shape.send, count, element, comm->rank, root, nranks, &send_bytes) ||
      !SpanBytes(shape.recv, count, element, comm->rank, root, nranks, &recv_bytes)) {
    return ncclInvalidArgument;
  }
  if ((send_bytes > 0 && !IsDeviceRange(send, send_bytes)) ||
      (recv_bytes > 0 && !IsDeviceRange(recv, recv_bytes))) {
    return ncclInvalidArgument;
  }
  if (!Synchronize(stream)) return ncclUnhandledCudaError;
  if (!premul) return PostChecked(comm, kind, what, send, recv, count, type, op, root);
  // A pre-multiplied sum: this rank's elements times its scalar, then summed.
  const ncclComm::PreMulSum& scale = comm->premul[static_cast<size_t>(op - ncclNumOps)];
  std::vector<unsigned char> scaled;
  try {
    scaled.resize(send_bytes);
    t_scaled.reserve(t_scaled.size() + 1);
  } catch (const std::bad_alloc&) {
    return ncclSystemError;
  }
  Multiply(type, send, scaled.data(), send_bytes / element,
           scale.residence == ncclScalarDevice ? scale.scalar : scale.value);
  const void* scaled_send = scaled.data();
  t_scaled.push_back(std::move(scaled));
  const ncclResult_t result =
      PostChecked(comm, kind, what, scaled_send, recv, count, type, ncclSum, root);
  if (t_group_depth == 0) t_scaled.clear();
  return result;
}

// Post's collective once its arguments are checked (buffers anywhere in this process: the
// stand-in's own exchanges use host memory).
ncclResult_t PostChecked(ncclComm* comm, Kind kind, const char* what, const void* send, void* recv,
                         size_t count, ncclDataType_t type, ncclRedOp_t op, int root) {
  if (comm->shared) {  // completed at once, inside a group too (the ranks post in one order)
    return comm->shared->Collect(comm->next_collective++, kind, what, send, recv, count, type, op,
                                 root);
  }
  Clique& clique = *comm->clique;
  Posted posted{comm->clique, nullptr, comm->rank, what};
  {
    std::lock_guard lock(clique.mutex);
    const uint64_t index = comm->next_collective++;
    std::shared_ptr<Collective>& slot = clique.collectives[index];
    if (slot == nullptr) {
      slot = std::make_shared<Collective>();
      slot->kind = kind;
      slot->count = count;
      slot->type = type;
      slot->op = op;
      slot->root = root;
      slot->send.assign(static_cast<size_t>(clique.nranks), nullptr);
      slot->recv.assign(static_cast<size_t>(clique.nranks), nullptr);
    } else if (slot->kind != kind || slot->count != count || slot->type != type || slot->op != op ||
               slot->root != root) {
      slot->result = ncclInvalidUsage;  // the ranks disagree on the collective
    }
    Collective& c = *slot;
    posted.completion = slot;
    c.send[static_cast<size_t>(comm->rank)] = send;
    c.recv[static_cast<size_t>(comm->rank)] = recv;
    if (++c.arrived == clique.nranks) {
      if (c.abandoned) c.result = ncclInvalidUsage;
      if (c.result == ncclSuccess && count > 0) c.result = Execute(c, clique.ring);
      c.done = true;
      clique.collectives.erase(index);
      clique.changed.notify_all();
    }
  }
  return Complete(std::move(posted));
}

// Posts this rank's half of its next message to (Send) or from (Recv) `peer`.
ncclResult_t PostMessage(ncclComm* comm, bool sending, const void* buffer, size_t count,
                         ncclDataType_t type, int peer, cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->shared) {
    std::fprintf(stderr, "NCCL stand-in: ncclSend/ncclRecv between processes are not supported\n");
    return ncclInvalidUsage;
  }
  const size_t element = TypeSize(type);
  if (element == 0) return ncclInvalidArgument;
  Clique& clique = *comm->clique;
  if (peer < 0 || peer >= clique.nranks) return ncclInvalidArgument;
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, element, &bytes)) return ncclInvalidArgument;
  if (bytes > 0 && !IsDeviceRange(buffer, bytes)) return ncclInvalidArgument;
  if (!Synchronize(stream)) return ncclUnhandledCudaError;
  Posted posted{comm->clique, nullptr, comm->rank, sending ? "ncclSend" : "ncclRecv"};
  {
    std::lock_guard lock(clique.mutex);
    const int from = sending ? comm->rank : peer;
    const int to = sending ? peer : comm->rank;
    const uint64_t index = sending ? comm->sent[peer]++ : comm->received[peer]++;
    const auto key = std::make_tuple(from, to, index);
    std::shared_ptr<Message>& slot = clique.messages[key];
    if (slot == nullptr) slot = std::make_shared<Message>();
    Message& m = *slot;
    posted.completion = slot;
    if (sending) {
      m.sent = true;
      m.send = buffer;
      m.send_count = count;
      m.send_type = type;
    } else {
      m.received = true;
      m.recv = const_cast<void*>(buffer);
      m.recv_count = count;
      m.recv_type = type;
    }
    if (m.sent && m.received) {
      if (m.abandoned || m.send_count != m.recv_count || m.send_type != m.recv_type) {
        m.result = ncclInvalidUsage;  // given up on, or the two sides disagree
      } else if (bytes > 0) {
        std::memmove(m.recv, m.send, bytes);
      }
      m.done = true;
      clique.messages.erase(key);
      clique.changed.notify_all();
    }
  }
  return Complete(std::move(posted));
}

std::atomic<uint64_t> g_next_id{0};

}  // namespace

// ncclX: an alias of pncclX, as in the real library (whose alias is weak; this one is strong, so
// that the weak stubs of standin_library_stubs.cc never stand in for it).
#define NDT_NCCL_ALIAS(name) extern "C" __typeof__(p##name) name __attribute__((alias("p" #name)));

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
  if (t_group_depth == 0) {  // the ranks may be in other processes: meet them
    std::unique_ptr<SharedClique> shared;
    const ncclResult_t joined = SharedClique::Join(id, nranks, rank, &shared);
    if (joined != ncclSuccess) return joined;
    if (!shared->AllHere()) {
      auto* created = new (std::nothrow) ncclComm();
      if (created == nullptr) return ncclSystemError;
      created->shared = std::move(shared);
      created->rank = rank;
      created->id = id;
      *comm = created;
      return ncclSuccess;
    }
  } else if (pid != static_cast<int>(getpid())) {
    std::fprintf(stderr,
                 "NCCL stand-in: ranks in other processes inside ncclGroupStart/End are not "
                 "supported\n");
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
  created->id = id;
  std::unique_lock lock(clique->mutex);
  ++clique->joined;
  clique->changed.notify_all();
  if (t_group_depth == 0 &&  // outside a group, initialisation waits for every rank
      !clique->changed.wait_for(lock, Timeout(),
                                [&] { return clique->joined >= clique->nranks; })) {
    --clique->joined;
    delete created;
    std::fprintf(stderr, "NCCL stand-in: rank %d: ncclCommInitRank: %d of %d ranks joined\n", rank,
                 clique->joined, nranks);
    return ncclInvalidUsage;
  }
  *comm = created;
  return ncclSuccess;
}

// The config changes nothing here: the stand-in's communicators are always ready when this
// returns (a non-blocking one never reports ncclInProgress).
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                     ncclConfig_t*) {
  return pncclCommInitRank(comm, nranks, comm_id, rank);
}

ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) return ncclInvalidArgument;
  auto clique = std::make_shared<Clique>();
  clique->nranks = ndev;
  clique->ring = RingRequested();
  clique->joined = ndev;
  ncclUniqueId id;  // named as one made by ncclGetUniqueId, for the ids ncclCommSplit derives
  pncclGetUniqueId(&id);
  for (int r = 0; r < ndev; ++r) {
    auto* created = new (std::nothrow) ncclComm();
    if (created == nullptr) return ncclSystemError;
    created->clique = clique;
    created->rank = r;
    created->id = id.internal;
    created->device = devlist != nullptr ? devlist[r] : r;
    comms[r] = created;
  }
  return ncclSuccess;
}

// Every rank of `comm` calls it (outside a group) with its color and key: the ranks of one color
// form a new communicator, ranked by key (then by rank in `comm`); NCCL_SPLIT_NOCOLOR gets none.
// The colors and keys are exchanged by an all-gather on `comm` in host memory; the new
// communicator's unique id is derived from `comm`'s, the count of its splits and the color.
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t*) {
  if (comm == nullptr || newcomm == nullptr || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) {
    return ncclInvalidArgument;
  }
  if (t_group_depth > 0) {
    std::fprintf(stderr,
                 "NCCL stand-in: ncclCommSplit inside ncclGroupStart/End is not supported\n");
    return ncclInvalidUsage;
  }
  const int nranks = comm->shared ? comm->shared->nranks() : comm->clique->nranks;
  const int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(nranks));
  const ncclResult_t exchanged = PostChecked(comm, Kind::kAllGather, "ncclCommSplit", mine,
                                             all.data(), 2, ncclInt32, ncclSum, 0);
  if (exchanged != ncclSuccess) return exchanged;
  const uint64_t split = comm->splits++;
  *newcomm = nullptr;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::vector<std::pair<int32_t, int>> members;  // (key, rank in comm) of this color
  for (size_t r = 0; r < static_cast<size_t>(nranks); ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], static_cast<int>(r));
  }
  std::sort(members.begin(), members.end());
  const auto me = std::find(members.begin(), members.end(), std::make_pair(key, comm->rank));
  const std::string id = comm->id + "|s" + std::to_string(split) + "c" + std::to_string(color);
  ncclUniqueId derived;
  if (me == members.end() || id.size() >= sizeof(derived.internal)) return ncclInternalError;
  std::memset(derived.internal, 0, sizeof(derived.internal));
  std::memcpy(derived.internal, id.data(), id.size());
  const ncclResult_t result = pncclCommInitRank(newcomm, static_cast<int>(members.size()), derived,
                                                static_cast<int>(me - members.begin()));
  if (result == ncclSuccess) (*newcomm)->device = comm->device;
  return result;
}

ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  delete comm;
  return ncclSuccess;
}

// Every call on a stand-in communicator has completed when it returns: nothing to flush.
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return comm != nullptr ? ncclSuccess : ncclInvalidArgument;
}

// Peers still waiting for this rank's part of a call give up after the timeout, as they would
// see a remote error on a GPU.
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

// No error arrives later than its call here (PyTorch's watchdog asks every few milliseconds).
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  *async_error = ncclSuccess;
  return ncclSuccess;
}

// One unique id is all the stand-in needs: the first of the `count` the ranks share.
ncclResult_t pncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int count,
                                       ncclUniqueId* ids, ncclConfig_t*) {
  if (count < 1 || ids == nullptr) return ncclInvalidArgument;
  return pncclCommInitRank(comm, nranks, ids[0], rank);
}

// ncclAvg's general form (FSDP's gradient pre-division): each rank's elements times its scalar,
// then summed. The scalar is read now (ncclScalarHostImmediate) or when a call uses the operator
// (ncclScalarDevice: device memory).
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  const size_t element = TypeSize(type);
  if (op == nullptr || scalar == nullptr || comm == nullptr || element == 0 ||
      (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) ||
      (residence == ncclScalarDevice && !IsDeviceRange(scalar, element))) {
    return ncclInvalidArgument;
  }
  ncclComm::PreMulSum created;
  created.type = type;
  created.residence = residence;
  created.scalar = scalar;
  if (residence == ncclScalarHostImmediate) std::memcpy(created.value, scalar, element);
  size_t slot = 0;
  while (slot < comm->premul.size() && comm->premul[slot].type != -1) ++slot;
  try {
    if (slot == comm->premul.size()) comm->premul.emplace_back();
  } catch (const std::bad_alloc&) {
    return ncclSystemError;
  }
  comm->premul[slot] = created;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(slot));
  return ncclSuccess;
}

ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr || op < ncclNumOps ||
      static_cast<size_t>(op - ncclNumOps) >= comm->premul.size() ||
      comm->premul[static_cast<size_t>(op - ncclNumOps)].type == -1) {
    return ncclInvalidArgument;
  }
  comm->premul[static_cast<size_t>(op - ncclNumOps)].type = -1;
  return ncclSuccess;
}

// Device memory for NCCL buffers (PyTorch's NCCL memory pool): plain device memory here.
ncclResult_t pncclMemAlloc(void** pointer, size_t size) {
  const Driver& driver = TheDriver();
  if (pointer == nullptr) return ncclInvalidArgument;
  if (driver.mem_alloc == nullptr) return ncclUnhandledCudaError;
  CUdeviceptr allocated = 0;
  if (driver.mem_alloc(&allocated, size) != CUDA_SUCCESS) return ncclUnhandledCudaError;
  *pointer = reinterpret_cast<void*>(allocated);
  return ncclSuccess;
}

ncclResult_t pncclMemFree(void* pointer) {
  const Driver& driver = TheDriver();
  if (pointer == nullptr) return ncclSuccess;
  if (driver.mem_free == nullptr ||
      driver.mem_free(reinterpret_cast<CUdeviceptr>(pointer)) != CUDA_SUCCESS) {
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// Buffer registration only makes a GPU's transfers faster: a handle that stands for the buffer.
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buffer, size_t size, void** handle) {
  if (comm == nullptr || handle == nullptr || (size > 0 && !IsDeviceRange(buffer, size))) {
    return ncclInvalidArgument;
  }
  *handle = buffer;
  return ncclSuccess;
}

ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return comm != nullptr && handle != nullptr ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->shared ? comm->shared->nranks() : comm->clique->nranks;
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
  return Post(comm, Kind::kAllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, 0,
              stream);
}

ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  return Post(comm, Kind::kBroadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum,
              root, stream);
}

ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return Post(comm, Kind::kBroadcast, "ncclBcast", buff, buff, count, datatype, ncclSum, root,
              stream);
}

ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream) {
  return Post(comm, Kind::kReduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root,
              stream);
}

ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream) {
  return Post(comm, Kind::kReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount,
              datatype, op, 0, stream);
}

ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Post(comm, Kind::kAllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype,
              ncclSum, 0, stream);
}

ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return Post(comm, Kind::kAlltoAll, "ncclAlltoAll", sendbuff, recvbuff, count, datatype, ncclSum,
              0, stream);
}

ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return Post(comm, Kind::kGather, "ncclGather", sendbuff, recvbuff, count, datatype, ncclSum, root,
              stream);
}

ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return Post(comm, Kind::kScatter, "ncclScatter", sendbuff, recvbuff, count, datatype, ncclSum,
              root, stream);
}

ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream) {
  return PostMessage(comm, true, sendbuff, count, datatype, peer, stream);
}

ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream) {
  return PostMessage(comm, false, recvbuff, count, datatype, peer, stream);
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
  const auto deadline = std::chrono::steady_clock::now() + Timeout();
  for (const Posted& one : posted) {
    const ncclResult_t waited = Wait(one, deadline);
    if (result == ncclSuccess) result = waited;
  }
  t_scaled.clear();
  return result;
}

}  // extern "C"

NDT_NCCL_ALIAS(ncclGetVersion)
NDT_NCCL_ALIAS(ncclGetErrorString)
NDT_NCCL_ALIAS(ncclGetLastError)
NDT_NCCL_ALIAS(ncclGetUniqueId)
NDT_NCCL_ALIAS(ncclCommInitRank)
NDT_NCCL_ALIAS(ncclCommInitRankConfig)
NDT_NCCL_ALIAS(ncclCommInitAll)
NDT_NCCL_ALIAS(ncclCommSplit)
NDT_NCCL_ALIAS(ncclCommDestroy)
NDT_NCCL_ALIAS(ncclCommFinalize)
NDT_NCCL_ALIAS(ncclCommAbort)
NDT_NCCL_ALIAS(ncclCommGetAsyncError)
NDT_NCCL_ALIAS(ncclCommInitRankScalable)
NDT_NCCL_ALIAS(ncclRedOpCreatePreMulSum)
NDT_NCCL_ALIAS(ncclRedOpDestroy)
NDT_NCCL_ALIAS(ncclMemAlloc)
NDT_NCCL_ALIAS(ncclMemFree)
NDT_NCCL_ALIAS(ncclCommRegister)
NDT_NCCL_ALIAS(ncclCommDeregister)
NDT_NCCL_ALIAS(ncclCommCount)
NDT_NCCL_ALIAS(ncclCommUserRank)
NDT_NCCL_ALIAS(ncclCommCuDevice)
NDT_NCCL_ALIAS(ncclAllReduce)
NDT_NCCL_ALIAS(ncclBroadcast)
NDT_NCCL_ALIAS(ncclBcast)
NDT_NCCL_ALIAS(ncclReduce)
NDT_NCCL_ALIAS(ncclReduceScatter)
NDT_NCCL_ALIAS(ncclAllGather)
NDT_NCCL_ALIAS(ncclAlltoAll)
NDT_NCCL_ALIAS(ncclGather)
NDT_NCCL_ALIAS(ncclScatter)
NDT_NCCL_ALIAS(ncclSend)
NDT_NCCL_ALIAS(ncclRecv)
NDT_NCCL_ALIAS(ncclGroupStart)
NDT_NCCL_ALIAS(ncclGroupEnd)
