// Tests of the stand-in libnccl.so.2 on its own: point-to-point pairing and bounded waits. It is
// dlopen()ed by path and finds the stand-in libcuda.so.1 through LD_LIBRARY_PATH (set by CTest),
// as this test does for its device memory. The collectives are checked by
// tests/programs/allreduce (every call, exact data movement checked on the host) under
// tests/tracer/nccl_test.cc.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace {

void* Library(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  INFO(path << ": " << dlerror());
  REQUIRE(handle != nullptr);
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
  INFO(name);
  REQUIRE(fn != nullptr);
  return fn;
}

#define NDT_NCCL(name) Get<decltype(name)>(Nccl(), #name)
#define NDT_DRIVER(name) Get<decltype(name)>(Driver(), #name)

// Makes the stand-in device's primary context current on the calling thread.
void UseDevice() {
  static CUcontext context = [] {
    REQUIRE(NDT_DRIVER(cuInit)(0) == CUDA_SUCCESS);
    CUdevice device = 0;
    REQUIRE(NDT_DRIVER(cuDeviceGet)(&device, 0) == CUDA_SUCCESS);
    CUcontext primary = nullptr;
    REQUIRE(NDT_DRIVER(cuDevicePrimaryCtxRetain)(&primary, device) == CUDA_SUCCESS);
    return primary;
  }();
  REQUIRE(NDT_DRIVER(cuCtxSetCurrent)(context) == CUDA_SUCCESS);
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

}  // namespace
