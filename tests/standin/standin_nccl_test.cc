// Tests of the stand-in libnccl.so.2 on its own: point-to-point pairing, bounded waits, and ranks
// in other processes (collectives through shared memory). It is
// dlopen()ed by path and finds the stand-in libcuda.so.1 through LD_LIBRARY_PATH (set by CTest),
// as this test does for its device memory. The collectives are checked by
// tests/programs/allreduce (every call, exact data movement checked on the host) under
// tests/tracer/nccl_test.cc.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace {

// Catch's assertions are not thread-safe, and the ranks' threads call what follows: a failure
// here says what failed and aborts the test program.
void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "standin_nccl_test: %s failed\n", what);
    std::abort();
  }
}

void* Library(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) std::fprintf(stderr, "%s: %s\n", path, dlerror());
  Require(handle != nullptr, "dlopen");
  return handle;
}

void* Nccl() {
  static void* handle = Library(NDT_STANDIN_LIBNCCL);
  return handle;
}

void* Driver() {
  static void* handle = Library("libcuda.so.1");
  return handle;
}

template <typename Fn>
Fn* Get(void* library, const char* name) {
  auto* fn = reinterpret_cast<Fn*>(dlsym(library, name));
  Require(fn != nullptr, name);
  return fn;
}

#define NDT_NCCL(name) Get<decltype(name)>(Nccl(), #name)
#define NDT_DRIVER(name) Get<decltype(name)>(Driver(), #name)

// Makes the stand-in device's primary context current on the calling thread.
void UseDevice() {
  static CUcontext context = [] {
    Require(NDT_DRIVER(cuInit)(0) == CUDA_SUCCESS, "cuInit");
    CUdevice device = 0;
    Require(NDT_DRIVER(cuDeviceGet)(&device, 0) == CUDA_SUCCESS, "cuDeviceGet");
    CUcontext primary = nullptr;
    Require(NDT_DRIVER(cuDevicePrimaryCtxRetain)(&primary, device) == CUDA_SUCCESS,
            "cuDevicePrimaryCtxRetain");
    return primary;
  }();
  Require(NDT_DRIVER(cuCtxSetCurrent)(context) == CUDA_SUCCESS, "cuCtxSetCurrent");
}

// `values` in a device allocation, freed with this.
class DeviceFloats {
 public:
  explicit DeviceFloats(const std::vector<float>& values) {
    REQUIRE(NDT_DRIVER(cuMemAlloc_v2)(&pointer_, values.size() * sizeof(float)) == CUDA_SUCCESS);
    REQUIRE(NDT_DRIVER(cuMemcpyHtoD_v2)(pointer_, values.data(), values.size() * sizeof(float)) ==
            CUDA_SUCCESS);
  }
  ~DeviceFloats() { NDT_DRIVER(cuMemFree_v2)(pointer_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  void* get() const { return reinterpret_cast<void*>(pointer_); }

 private:
  CUdeviceptr pointer_ = 0;
};

std::vector<float> HostFloats(const void* device, size_t count) {
  std::vector<float> values(count);
  REQUIRE(NDT_DRIVER(cuMemcpyDtoH_v2)(values.data(), reinterpret_cast<CUdeviceptr>(device),
                                       count * sizeof(float)) == CUDA_SUCCESS);
  return values;
}

// The communicators of `ranks` ranks in this thread (ncclCommInitAll), destroyed with this.
class Communicators {
 public:
  explicit Communicators(int ranks) : comms_(static_cast<size_t>(ranks)) {
    REQUIRE(NDT_NCCL(ncclCommInitAll)(comms_.data(), ranks, nullptr) == ncclSuccess);
  }
  ~Communicators() {
    for (ncclComm_t comm : comms_) NDT_NCCL(ncclCommDestroy)(comm);
  }
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;
  ncclComm_t operator[](size_t rank) const { return comms_[rank]; }

 private:
  std::vector<ncclComm_t> comms_;
};

TEST_CASE("one thread drives a ring of sends and receives inside a group", "[standin][nccl]") {
  UseDevice();
  const Communicators comms(3);
  std::vector<std::unique_ptr<DeviceFloats>> send, recv;
  for (int r = 0; r < 3; ++r) {
    const auto value = static_cast<float>(r);
    send.push_back(std::make_unique<DeviceFloats>(std::vector<float>{value, value + 0.5f}));
    recv.push_back(std::make_unique<DeviceFloats>(std::vector<float>{-1.0f, -1.0f}));
  }
  REQUIRE(NDT_NCCL(ncclGroupStart)() == ncclSuccess);
  for (int r = 0; r < 3; ++r) {
    // Receives posted before the matching sends, which come later in the group.
    CHECK(NDT_NCCL(ncclRecv)(recv[r]->get(), 2, ncclFloat, (r + 2) % 3, comms[r], nullptr) ==
          ncclSuccess);
  }
  for (int r = 0; r < 3; ++r) {
    CHECK(NDT_NCCL(ncclSend)(send[r]->get(), 2, ncclFloat, (r + 1) % 3, comms[r], nullptr) ==
          ncclSuccess);
  }
  REQUIRE(NDT_NCCL(ncclGroupEnd)() == ncclSuccess);
  for (int r = 0; r < 3; ++r) {
    const auto from = static_cast<float>((r + 2) % 3);
    CHECK(HostFloats(recv[r]->get(), 2) == std::vector<float>{from, from + 0.5f});
  }
}

TEST_CASE("sends and receives between threads pair up in the order they were made",
          "[standin][nccl]") {
  UseDevice();
  const Communicators comms(2);
  const DeviceFloats first({1.0f});
  const DeviceFloats second({2.0f});
  const DeviceFloats got_first({0.0f});
  const DeviceFloats got_second({0.0f});
  ncclResult_t sent[2] = {ncclInternalError, ncclInternalError};
  std::thread sender([&] {
    UseDevice();
    sent[0] = NDT_NCCL(ncclSend)(first.get(), 1, ncclFloat, 1, comms[0], nullptr);
    sent[1] = NDT_NCCL(ncclSend)(second.get(), 1, ncclFloat, 1, comms[0], nullptr);
  });
  CHECK(NDT_NCCL(ncclRecv)(got_first.get(), 1, ncclFloat, 0, comms[1], nullptr) == ncclSuccess);
  CHECK(NDT_NCCL(ncclRecv)(got_second.get(), 1, ncclFloat, 0, comms[1], nullptr) == ncclSuccess);
  sender.join();
  CHECK(sent[0] == ncclSuccess);
  CHECK(sent[1] == ncclSuccess);
  CHECK(HostFloats(got_first.get(), 1) == std::vector<float>{1.0f});
  CHECK(HostFloats(got_second.get(), 1) == std::vector<float>{2.0f});
}

TEST_CASE("an unmatched send or a disagreeing pair fails with ncclInvalidUsage, never hangs",
          "[standin][nccl]") {
  // Read at the stand-in's first wait; when an earlier test in this process has waited, its
  // default (30 s) bounds the waits below instead.
  setenv("NDT_STANDIN_NCCL_TIMEOUT_MS", "300", 1);
  UseDevice();
  const Communicators comms(2);
  const DeviceFloats sent({1.0f, 2.0f});
  const DeviceFloats unwritten({0.0f, 0.0f});
  void* buffer = sent.get();
  void* other = unwritten.get();
  const auto start = std::chrono::steady_clock::now();

  SECTION("outside a group") {
    CHECK(NDT_NCCL(ncclSend)(buffer, 2, ncclFloat, 1, comms[0], nullptr) == ncclInvalidUsage);
  }
  SECTION("inside a group") {
    REQUIRE(NDT_NCCL(ncclGroupStart)() == ncclSuccess);
    CHECK(NDT_NCCL(ncclRecv)(other, 2, ncclFloat, 1, comms[0], nullptr) == ncclSuccess);
    CHECK(NDT_NCCL(ncclGroupEnd)() == ncclInvalidUsage);
    CHECK(HostFloats(other, 2) == std::vector<float>{0.0f, 0.0f});
  }
  SECTION("a receive of another count") {
    REQUIRE(NDT_NCCL(ncclGroupStart)() == ncclSuccess);
    CHECK(NDT_NCCL(ncclSend)(buffer, 2, ncclFloat, 1, comms[0], nullptr) == ncclSuccess);
    CHECK(NDT_NCCL(ncclRecv)(other, 1, ncclFloat, 0, comms[1], nullptr) == ncclSuccess);
    CHECK(NDT_NCCL(ncclGroupEnd)() == ncclInvalidUsage);
    CHECK(HostFloats(other, 2) == std::vector<float>{0.0f, 0.0f});
  }
  SECTION("a peer outside the communicator") {
    CHECK(NDT_NCCL(ncclSend)(buffer, 2, ncclFloat, 2, comms[0], nullptr) == ncclInvalidArgument);
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(35));
}

// `values` (any element type) in a device allocation, and what it holds now.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : count_(values.size()) {
    REQUIRE(NDT_DRIVER(cuMemAlloc_v2)(&pointer_, count_ * sizeof(T)) == CUDA_SUCCESS);
    REQUIRE(NDT_DRIVER(cuMemcpyHtoD_v2)(pointer_, values.data(), count_ * sizeof(T)) ==
            CUDA_SUCCESS);
  }
  ~DeviceArray() { NDT_DRIVER(cuMemFree_v2)(pointer_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* get() const { return reinterpret_cast<void*>(pointer_); }
  std::vector<T> values() const {
    std::vector<T> values(count_);
    REQUIRE(NDT_DRIVER(cuMemcpyDtoH_v2)(values.data(), pointer_, count_ * sizeof(T)) ==
            CUDA_SUCCESS);
    return values;
  }

 private:
  CUdeviceptr pointer_ = 0;
  size_t count_ = 0;
};

// An all-reduce of one array per rank on communicators made under NCCL_ALGO=Ring; rank 0's
// result.
template <typename T>
std::vector<T> RingAllReduce(const std::vector<std::vector<T>>& inputs, ncclDataType_t type,
                             ncclRedOp_t op) {
  setenv("NCCL_ALGO", "Ring", 1);
  const Communicators comms(static_cast<int>(inputs.size()));
  unsetenv("NCCL_ALGO");
  std::vector<std::unique_ptr<DeviceArray<T>>> buffers;
  for (const std::vector<T>& input : inputs) {
    buffers.push_back(std::make_unique<DeviceArray<T>>(input));
  }
  REQUIRE(NDT_NCCL(ncclGroupStart)() == ncclSuccess);
  for (size_t r = 0; r < inputs.size(); ++r) {
    CHECK(NDT_NCCL(ncclAllReduce)(buffers[r]->get(), buffers[r]->get(), inputs[r].size(), type, op,
                                  comms[r], nullptr) == ncclSuccess);
  }
  REQUIRE(NDT_NCCL(ncclGroupEnd)() == ncclSuccess);
  for (size_t r = 1; r < inputs.size(); ++r) CHECK(buffers[r]->values() == buffers[0]->values());
  return buffers[0]->values();
}

TEST_CASE("half and bfloat16 reductions round to nearest even at every step, as NCCL's do",
          "[standin][nccl]") {
  UseDevice();
  // Bits: half 1 = 0x3c00, 2 = 0x4000, 2048 = 0x6800, 2050 = 0x6801, 2^-24 = 0x0001 (the
  // smallest subnormal), 1.6669921875 = 0x3eab (5/3 to nearest even), 65504 = 0x7bff (the
  // largest finite), infinity = 0x7c00; bfloat16 1 = 0x3f80, 256 = 0x4380, 258 = 0x4381.
  SECTION("half: 2048 + 1 + 1 in rank order stays 2048 (2049 is a tie, to even)") {
    CHECK(RingAllReduce<uint16_t>(
              {{0x6800, 0x0001, 0x7bff}, {0x3c00, 0x0001, 0x7bff}, {0x3c00, 0x0000, 0x0000}},
              ncclFloat16, ncclSum) == std::vector<uint16_t>{0x6800, 0x0002, 0x7c00});
  }
  SECTION("half: the average of 1, 2 and 2 is 5/3 rounded to half") {
    CHECK(RingAllReduce<uint16_t>({{0x3c00}, {0x4000}, {0x4000}}, ncclFloat16, ncclAvg) ==
          std::vector<uint16_t>{0x3eab});
  }
  SECTION("bfloat16: 256 + 1 + 1 in rank order stays 256, and max takes the largest") {
    CHECK(RingAllReduce<uint16_t>({{0x4380}, {0x3f80}, {0x3f80}}, ncclBfloat16, ncclSum) ==
          std::vector<uint16_t>{0x4380});
    CHECK(RingAllReduce<uint16_t>({{0x4380}, {0x4381}, {0x3f80}}, ncclBfloat16, ncclMax) ==
          std::vector<uint16_t>{0x4381});
  }
  SECTION("int8 wraps as the element type does") {
    CHECK(RingAllReduce<int8_t>({{100, -3}, {100, 1}}, ncclInt8, ncclSum) ==
          std::vector<int8_t>{-56, -2});
  }
}

TEST_CASE("a pre-multiplied sum scales each rank's elements by its own scalar, host or device",
          "[standin][nccl]") {
  UseDevice();
  const Communicators comms(2);
  const DeviceArray<float> first({1.0f, 2.0f});
  const DeviceArray<float> second({3.0f, 4.0f});
  const DeviceArray<float> result({0.0f, 0.0f});
  const DeviceArray<float> other({0.0f, 0.0f});
  float half = 0.5f;
  const DeviceArray<float> two({2.0f});
  ncclRedOp_t ops[2];
  REQUIRE(NDT_NCCL(ncclRedOpCreatePreMulSum)(&ops[0], &half, ncclFloat, ncclScalarHostImmediate,
                                             comms[0]) == ncclSuccess);
  half = 100.0f;  // an immediate scalar was read at creation
  REQUIRE(NDT_NCCL(ncclRedOpCreatePreMulSum)(&ops[1], two.get(), ncclFloat, ncclScalarDevice,
                                             comms[1]) == ncclSuccess);
  CHECK(ops[0] >= ncclNumOps);
  REQUIRE(NDT_NCCL(ncclGroupStart)() == ncclSuccess);
  CHECK(NDT_NCCL(ncclAllReduce)(first.get(), result.get(), 2, ncclFloat, ops[0], comms[0],
                                nullptr) == ncclSuccess);
  CHECK(NDT_NCCL(ncclAllReduce)(second.get(), other.get(), 2, ncclFloat, ops[1], comms[1],
                                nullptr) == ncclSuccess);
  REQUIRE(NDT_NCCL(ncclGroupEnd)() == ncclSuccess);
  CHECK(result.values() == std::vector<float>{0.5f * 1 + 2.0f * 3, 0.5f * 2 + 2.0f * 4});
  CHECK(other.values() == result.values());
  CHECK(first.values() == std::vector<float>{1.0f, 2.0f});  // the send buffer is not scaled

  CHECK(NDT_NCCL(ncclRedOpDestroy)(ops[0], comms[0]) == ncclSuccess);
  CHECK(NDT_NCCL(ncclRedOpDestroy)(ops[0], comms[0]) == ncclInvalidArgument);
  CHECK(NDT_NCCL(ncclAllReduce)(first.get(), result.get(), 2, ncclFloat, ops[0], comms[0],
                                nullptr) == ncclInvalidArgument);
  CHECK(NDT_NCCL(ncclAllReduce)(second.get(), other.get(), 2, ncclDouble, ops[1], comms[1],
                                nullptr) == ncclInvalidArgument);  // made for floats
  CHECK(NDT_NCCL(ncclRedOpDestroy)(ops[1], comms[1]) == ncclSuccess);
}

TEST_CASE("what PyTorch's process group calls around its collectives", "[standin][nccl]") {
  UseDevice();
  ncclUniqueId id;
  REQUIRE(NDT_NCCL(ncclGetUniqueId)(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(NDT_NCCL(ncclCommInitRankScalable)(&comm, 1, 0, 1, &id, nullptr) == ncclSuccess);
  ncclResult_t async_error = ncclInternalError;
  CHECK(NDT_NCCL(ncclCommGetAsyncError)(comm, &async_error) == ncclSuccess);
  CHECK(async_error == ncclSuccess);

  void* pool = nullptr;
  REQUIRE(NDT_NCCL(ncclMemAlloc)(&pool, 64 * sizeof(float)) == ncclSuccess);
  CUdeviceptr base = 0;
  size_t size = 0;
  CHECK(NDT_DRIVER(cuMemGetAddressRange_v2)(&base, &size, reinterpret_cast<CUdeviceptr>(pool)) ==
        CUDA_SUCCESS);
  CHECK(size == 64 * sizeof(float));
  void* handle = nullptr;
  CHECK(NDT_NCCL(ncclCommRegister)(comm, pool, 64 * sizeof(float), &handle) == ncclSuccess);
  CHECK(handle != nullptr);
  float host[4] = {};
  CHECK(NDT_NCCL(ncclCommRegister)(comm, host, sizeof(host), &handle) == ncclInvalidArgument);
  CHECK(NDT_NCCL(ncclAllReduce)(pool, pool, 64, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(NDT_NCCL(ncclCommDeregister)(comm, handle) == ncclSuccess);
  CHECK(NDT_NCCL(ncclMemFree)(pool) == ncclSuccess);

  CHECK(NDT_NCCL(ncclCommFinalize)(comm) == ncclSuccess);
  CHECK(NDT_NCCL(ncclCommDestroy)(comm) == ncclSuccess);
  REQUIRE(NDT_NCCL(ncclGetUniqueId)(&id) == ncclSuccess);
  REQUIRE(NDT_NCCL(ncclCommInitRank)(&comm, 1, id, 0) == ncclSuccess);
  CHECK(NDT_NCCL(ncclCommAbort)(comm) == ncclSuccess);
}

// One rank of a communicator whose ranks are processes: what a forked child runs, without Catch
// (a failure is its exit status and a line on stderr). `collectives`: false joins and leaves.
int ProcessRank(int rank, int nranks, ncclUniqueId id, bool collectives) {
  const auto fail = [rank](int code, const char* what) {
    std::fprintf(stderr, "rank %d: %s\n", rank, what);
    return code;
  };
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (NDT_DRIVER(cuInit)(0) != CUDA_SUCCESS ||
      NDT_DRIVER(cuDeviceGet)(&device, 0) != CUDA_SUCCESS ||
      NDT_DRIVER(cuDevicePrimaryCtxRetain)(&context, device) != CUDA_SUCCESS ||
      NDT_DRIVER(cuCtxSetCurrent)(context) != CUDA_SUCCESS) {
    return fail(10, "no device");
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t joined = NDT_NCCL(ncclCommInitRank)(&comm, nranks, id, rank);
  if (joined == ncclInvalidUsage) return 20;  // the other ranks never came
  if (joined != ncclSuccess) return fail(11, "ncclCommInitRank failed");
  int count = 0;
  if (NDT_NCCL(ncclCommCount)(comm, &count) != ncclSuccess || count != nranks) {
    return fail(12, "ncclCommCount");
  }
  if (!collectives) return 0;
  const size_t n = static_cast<size_t>(nranks);
  std::vector<float> values(2 * n);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(rank + 1) + i;
  CUdeviceptr send = 0, recv = 0;
  if (NDT_DRIVER(cuMemAlloc_v2)(&send, 2 * n * 4) != CUDA_SUCCESS ||
      NDT_DRIVER(cuMemAlloc_v2)(&recv, 2 * n * 4) != CUDA_SUCCESS ||
      NDT_DRIVER(cuMemcpyHtoD_v2)(send, values.data(), 2 * n * 4) != CUDA_SUCCESS) {
    return fail(13, "device memory");
  }
  auto* s = reinterpret_cast<void*>(send);
  auto* r = reinterpret_cast<void*>(recv);
  std::vector<float> got(2 * n);
  const auto read = [&] {
    return NDT_DRIVER(cuMemcpyDtoH_v2)(got.data(), recv, 2 * n * 4) == CUDA_SUCCESS;
  };
  // Small integers: exact in any order of addition.
  if (NDT_NCCL(ncclAllReduce)(s, r, 2, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) {
    return 30;  // a rank that left: the others give up
  }
  if (!read()) return fail(14, "read back");
  for (size_t i = 0; i < 2; ++i) {
    if (got[i] != static_cast<float>(n * (n + 1) / 2 + n * i)) return fail(15, "ncclAllReduce");
  }
  if (NDT_NCCL(ncclAllReduce)(s, r, 2, ncclFloat, ncclAvg, comm, nullptr) != ncclSuccess ||
      !read() || got[0] != static_cast<float>(n + 1) / 2 ||
      got[1] != static_cast<float>(n + 1) / 2 + 1) {
    return fail(24, "ncclAllReduce with ncclAvg");
  }
  if (NDT_NCCL(ncclBroadcast)(s, r, 2, ncclFloat, nranks - 1, comm, nullptr) != ncclSuccess ||
      !read() || got[0] != static_cast<float>(nranks) || got[1] != static_cast<float>(nranks + 1)) {
    return fail(16, "ncclBroadcast from the last rank");
  }
  if (NDT_NCCL(ncclAllGather)(s, r, 2, ncclFloat, comm, nullptr) != ncclSuccess || !read()) {
    return fail(17, "ncclAllGather");
  }
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < 2; ++i) {
      if (got[2 * j + i] != static_cast<float>(j + 1 + i)) return fail(18, "ncclAllGather data");
    }
  }
  if (NDT_NCCL(ncclReduceScatter)(s, r, 2, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess ||
      !read()) {
    return fail(19, "ncclReduceScatter");
  }
  for (size_t i = 0; i < 2; ++i) {
    const size_t k = 2 * static_cast<size_t>(rank) + i;
    if (got[i] != static_cast<float>(n * (n + 1) / 2 + n * k))
      return fail(21, "ncclReduceScatter data");
  }
  // The even and the odd ranks, each a communicator of its own (ncclCommSplit), ranked by rank.
  ncclComm_t half = nullptr;
  if (NDT_NCCL(ncclCommSplit)(comm, rank % 2, rank, &half, nullptr) != ncclSuccess ||
      half == nullptr) {
    return fail(25, "ncclCommSplit");
  }
  int half_rank = -1;
  if (NDT_NCCL(ncclCommUserRank)(half, &half_rank) != ncclSuccess || half_rank != rank / 2) {
    return fail(26, "ncclCommSplit's ranks");
  }
  float expected = 0;
  for (int peer = rank % 2; peer < nranks; peer += 2) expected += static_cast<float>(peer + 1);
  if (NDT_NCCL(ncclAllReduce)(s, r, 1, ncclFloat, ncclSum, half, nullptr) != ncclSuccess ||
      !read() || got[0] != expected) {
    return fail(27, "ncclAllReduce on a split communicator");
  }
  if (NDT_NCCL(ncclSend)(s, 1, ncclFloat, (rank + 1) % nranks, comm, nullptr) != ncclInvalidUsage) {
    return fail(22, "ncclSend between processes should be refused");
  }
  return NDT_NCCL(ncclCommDestroy)(comm) == ncclSuccess ? 0 : fail(23, "ncclCommDestroy");
}

// Forks `started` processes as ranks 0.. of a communicator of `nranks` (the last `idle` of them
// join and leave without a collective); returns their exit statuses.
std::vector<int> RunProcessRanks(int nranks, int started, int idle) {
  Driver();  // loaded before fork, initialised in each child
  ncclUniqueId id;
  REQUIRE(NDT_NCCL(ncclGetUniqueId)(&id) == ncclSuccess);
  std::vector<pid_t> children;
  for (int rank = 0; rank < started; ++rank) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(ProcessRank(rank, nranks, id, rank < started - idle));
    children.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    statuses.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return statuses;
}

TEST_CASE("ncclCommSplit makes a communicator of each color, ranked by key", "[standin][nccl]") {
  UseDevice();
  const Communicators comms(4);
  std::vector<ncclResult_t> results(4, ncclInternalError);
  std::vector<int> ranks(4, -2), counts(4, -2);
  std::vector<float> sums(4, -1.0f);
  std::vector<std::unique_ptr<DeviceFloats>> values;
  for (int r = 0; r < 4; ++r) {
    values.push_back(std::make_unique<DeviceFloats>(std::vector<float>{static_cast<float>(r)}));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      UseDevice();
      // Rank 3 takes no part; ranks 0 and 2 are one color, ranked by key: rank 2 first.
      const int color = r == 3 ? NCCL_SPLIT_NOCOLOR : r % 2;
      ncclComm_t split = reinterpret_cast<ncclComm_t>(1);
      results[r] = NDT_NCCL(ncclCommSplit)(comms[r], color, -r, &split, nullptr);
      if (results[r] != ncclSuccess || split == nullptr) {
        ranks[r] = split == nullptr ? -1 : -3;
        return;
      }
      NDT_NCCL(ncclCommUserRank)(split, &ranks[r]);
      NDT_NCCL(ncclCommCount)(split, &counts[r]);
      if (NDT_NCCL(ncclAllReduce)(values[r]->get(), values[r]->get(), 1, ncclFloat, ncclSum, split,
                                  nullptr) == ncclSuccess) {
        NDT_DRIVER(cuMemcpyDtoH_v2)(&sums[r], reinterpret_cast<CUdeviceptr>(values[r]->get()), 4);
      }
      NDT_NCCL(ncclCommDestroy)(split);
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(results == std::vector<ncclResult_t>(4, ncclSuccess));
  CHECK(ranks == std::vector<int>{1, 0, 0, -1});
  CHECK(counts == std::vector<int>{2, 1, 2, -2});
  CHECK(sums == std::vector<float>{2.0f, 1.0f, 2.0f, -1.0f});
}

TEST_CASE("ranks in other processes meet in shared memory for every collective, ncclAvg too",
          "[standin][nccl]") {
  CHECK(RunProcessRanks(3, 3, 0) == std::vector<int>{0, 0, 0});
}

TEST_CASE("ranks in other processes give up on a rank that never comes or leaves",
          "[standin][nccl]") {
  setenv("NDT_STANDIN_NCCL_TIMEOUT_MS", "300", 1);  // read by each child
  const auto start = std::chrono::steady_clock::now();
  SECTION("a rank never joins") {
    CHECK(RunProcessRanks(2, 1, 0) == std::vector<int>{20});
  }
  SECTION("a rank leaves before the first collective") {
    CHECK(RunProcessRanks(3, 3, 1) == std::vector<int>{30, 30, 0});
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

}  // namespace
