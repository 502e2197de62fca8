#include "tracer/gpu_digests.h"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string_view>
#include <thread>

#include "kernels/digest_v1.h"
#include "tracer/driver_table.h"
#include "tracer/gpu_time.h"
#if defined(NDT_HAVE_DIGEST_FATBIN)
#include "kernels/digest_v1_gpu.h"
#endif

namespace ndt::tracer {
namespace {

// Words per ring slot: lo, hi, ticket, and one of padding (32-byte slots).
constexpr uint32_t kSlotWords = 4;
constexpr uint32_t kMaxRingSlots = 1u << 20;
// Pinned host memory per context for staged bytes (GpuDigests::Enqueue's `stage`).
constexpr uint64_t kStagingBytes = uint64_t{64} << 20;
// How long a wait for one digest may last before it is given up as lost, and how often a wait
// asks the driver whether the context still answers.
constexpr auto kWaitLimit = std::chrono::seconds(10);
constexpr auto kAliveEvery = std::chrono::milliseconds(10);

template <typename Fn>
Fn Proc(const char* name) {
  return reinterpret_cast<Fn>(DriverProc(name, 13000));
}

}  // namespace

GpuDigestConfig GpuDigestConfigFromEnvironment(std::vector<std::string>* problems) {
  GpuDigestConfig config;
  if (const char* device = std::getenv("NDTRACE_DIGEST_DEVICE"); device != nullptr && *device) {
    const std::string_view value(device);
    if (value == "cpu") {
      config.device = DigestDevice::kCpu;
    } else if (value == "gpu") {
      config.device = DigestDevice::kGpu;
    } else if (value != "auto") {
      problems->push_back(std::string("ignoring NDTRACE_DIGEST_DEVICE=") + device +
                          ": not cpu, gpu or auto");
    }
  }
  if (const char* ring = std::getenv("NDTRACE_DIGEST_RING"); ring != nullptr && *ring) {
    const std::string_view text(ring);
    uint32_t slots = 0;
    const auto parsed = std::from_chars(text.data(), text.data() + text.size(), slots);
    if (parsed.ec == std::errc() && parsed.ptr == text.data() + text.size() && slots >= 1 &&
        slots <= kMaxRingSlots) {
      config.ring_slots = slots;
    } else {
      problems->push_back(std::string("ignoring NDTRACE_DIGEST_RING=") + ring +
                          ": not a whole number from 1 to 1048576");
    }
  }
  return config;
}

// One context's kernels, ring and scratch. Never freed: a context's memory goes with it, and
// freeing ours at exit could race with the driver's own teardown.
struct GpuDigests::Engine {
  CUcontext context = nullptr;
  bool dead = true;  // not set up, or its context failed: no launches, no ring reads
#if defined(NDT_HAVE_DIGEST_FATBIN)
  kernels::DigestV1Gpu kernels;
#endif
  volatile uint64_t* ring = nullptr;  // host view, kSlotWords per slot
  CUdeviceptr ring_device = 0;
  CUdeviceptr sums = 0;        // two words per slot, zero between digests
  std::vector<uint64_t> busy;  // the ticket in each slot; 0 = free
  uint32_t next = 0;
  // Staging: kStagingBytes of pinned host memory, used first in, first out.
  unsigned char* staging = nullptr;
  bool staging_failed = false;
  struct Span {
    uint64_t offset = 0;
    uint64_t bytes = 0;
    bool released = false;
  };
  std::deque<Span> spans;  // in use (or released behind one in use), oldest first
};

namespace {

// Loads the kernels into the current context and allocates the ring and the sums. Empty on
// success, else why not.
std::string SetUp(uint32_t slots, CUcontext context, void* engine_kernels, volatile uint64_t** ring,
                  CUdeviceptr* ring_device, CUdeviceptr* sums) {
#if !defined(NDT_HAVE_DIGEST_FATBIN)
  (void)slots, (void)context, (void)engine_kernels, (void)ring, (void)ring_device, (void)sums;
  return "this build has no digest kernels (no nvcc)";
#else
  (void)context;
  auto& gpu = *static_cast<kernels::DigestV1Gpu*>(engine_kernels);
  const auto get_proc_address =
      reinterpret_cast<kernels::DigestV1Gpu::GetProcAddressFn>(RealGetProcAddressV2());
  if (get_proc_address == nullptr) return "the driver has no cuGetProcAddress_v2";
  std::string error;
  if (!gpu.Load(get_proc_address, &error)) return error;
  using HostAllocFn = CUresult (*)(void**, size_t, unsigned);
  using HostDevicePointerFn = CUresult (*)(CUdeviceptr*, void*, unsigned);
  using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
  using SyncFn = CUresult (*)(CUstream);
  const auto host_alloc = Proc<HostAllocFn>("cuMemHostAlloc");
  const auto device_pointer = Proc<HostDevicePointerFn>("cuMemHostGetDevicePointer");
  const auto alloc = Proc<AllocFn>("cuMemAlloc");
  const auto synchronize = Proc<SyncFn>("cuStreamSynchronize");
  if (host_alloc == nullptr || device_pointer == nullptr || alloc == nullptr ||
      synchronize == nullptr) {
    return "the driver lacks mapped pinned memory";
  }
  void* host = nullptr;
  const size_t ring_bytes = size_t{slots} * kSlotWords * sizeof(uint64_t);
  if (const CUresult r =
          host_alloc(&host, ring_bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
      r != CUDA_SUCCESS) {
    return "cuMemHostAlloc returned " + std::to_string(r);
  }
  std::memset(host, 0, ring_bytes);
  if (const CUresult r = device_pointer(ring_device, host, 0); r != CUDA_SUCCESS) {
    return "cuMemHostGetDevicePointer returned " + std::to_string(r);
  }
  const size_t sums_bytes = size_t{slots} * 2 * sizeof(uint64_t);
  if (const CUresult r = alloc(sums, sums_bytes); r != CUDA_SUCCESS) {
    return "cuMemAlloc of the digest sums returned " + std::to_string(r);
  }
  // Once per context: the sums must be zero before any stream's first digest reads them. By a
  // digest kernel, not a memset: made from inside the program's runtime call, CUPTI's record of
  // it carries that call's correlation id, and only its name says it is ndtrace's (gpu_time.h).
  if (gpu.Zero(*sums, uint64_t{slots} * 2, nullptr) != CUDA_SUCCESS ||
      synchronize(nullptr) != CUDA_SUCCESS) {
    return "cannot zero the digest sums";
  }
  *ring = static_cast<volatile uint64_t*>(host);
  return {};
#endif
}

}  // namespace

GpuDigests::GpuDigests(GpuDigestConfig config, std::function<void(const std::string&)> log)
    : config_(config), log_(std::move(log)) {}

GpuDigests::~GpuDigests() = default;

GpuDigests::Engine* GpuDigests::EngineForCurrentContext() {
  using CurrentFn = CUresult (*)(CUcontext*);
  static const auto current = Proc<CurrentFn>("cuCtxGetCurrent");
  CUcontext context = nullptr;
  if (current == nullptr || current(&context) != CUDA_SUCCESS || context == nullptr) {
    return nullptr;
  }
  for (const auto& engine : engines_) {
    if (engine->context == context) return engine->dead ? nullptr : engine.get();
  }
  auto engine = std::make_unique<Engine>();
  engine->context = context;
  void* gpu = nullptr;
#if defined(NDT_HAVE_DIGEST_FATBIN)
  gpu = &engine->kernels;
#endif
  const std::string why =
      SetUp(config_.ring_slots, context, gpu, &engine->ring, &engine->ring_device, &engine->sums);
  engine->dead = !why.empty();
  if (engine->dead && config_.device == DigestDevice::kGpu && !said_unavailable_ && log_) {
    said_unavailable_ = true;
    log_("digests on the CPU: the GPU digest kernels cannot run (" + why + ")");
  }
  if (!engine->dead) engine->busy.assign(config_.ring_slots, 0);
  engines_.push_back(std::move(engine));
  return engines_.back()->dead ? nullptr : engines_.back().get();
}

bool GpuDigests::CollectLocked(Engine& engine, uint32_t slot) {
  const uint64_t ticket = engine.busy[slot];
  if (ticket == 0) return true;
  const volatile uint64_t* out = engine.ring + size_t{slot} * kSlotWords;
  if (out[2] != ticket) return false;
  // The kernel wrote lo and hi before the ticket (with a system-wide fence between).
  std::atomic_thread_fence(std::memory_order_acquire);
  if (auto it = tickets_.find(ticket); it != tickets_.end()) {
    it->second.arrived = true;
    it->second.digest = {out[0], out[1]};
  }
  engine.busy[slot] = 0;
  return true;
}

bool GpuDigests::AliveLocked(Engine& engine) {
  using PushFn = CUresult (*)(CUcontext);
  using PopFn = CUresult (*)(CUcontext*);
  using QueryFn = CUresult (*)(CUstream);
  static const auto push = Proc<PushFn>("cuCtxPushCurrent");
  static const auto pop = Proc<PopFn>("cuCtxPopCurrent");
  static const auto query = Proc<QueryFn>("cuStreamQuery");
  if (push == nullptr || pop == nullptr || query == nullptr) return false;
  if (push(engine.context) != CUDA_SUCCESS) return false;
  const CUresult result = query(nullptr);
  CUcontext popped = nullptr;
  pop(&popped);
  return result == CUDA_SUCCESS || result == CUDA_ERROR_NOT_READY;
}

std::optional<uint64_t> GpuDigests::ReserveStagingLocked(Engine& engine, uint64_t bytes) {
  if (bytes == 0 || bytes > kStagingBytes) return std::nullopt;
  if (engine.staging == nullptr) {
    using HostAllocFn = CUresult (*)(void**, size_t, unsigned);
    const auto host_alloc = Proc<HostAllocFn>("cuMemHostAlloc");
    void* host = nullptr;
    if (engine.staging_failed || host_alloc == nullptr ||
        host_alloc(&host, kStagingBytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) {
      engine.staging_failed = true;
      return std::nullopt;
    }
    engine.staging = static_cast<unsigned char*>(host);
  }
  uint64_t offset = 0;
  if (!engine.spans.empty()) {
    const uint64_t front = engine.spans.front().offset;
    const uint64_t end = engine.spans.back().offset + engine.spans.back().bytes;
    if (engine.spans.back().offset >= front) {  // one run, [front, end): room after it or before
      if (end + bytes <= kStagingBytes) {
        offset = end;
      } else if (bytes <= front) {
        offset = 0;
      } else {
        return std::nullopt;
      }
    } else if (end + bytes <= front) {  // wrapped: room between the two runs
      offset = end;
    } else {
      return std::nullopt;
    }
  }
  engine.spans.push_back({offset, bytes, false});
  return offset;
}

void GpuDigests::ReleaseStagingLocked(Ticket& ticket) {
  if (!ticket.staged || ticket.engine == nullptr || ticket.engine->dead) return;
  ticket.staged = false;
  auto& spans = ticket.engine->spans;
  for (auto& span : spans) {
    if (span.offset == ticket.staged_offset && !span.released) {
      span.released = true;
      break;
    }
  }
  while (!spans.empty() && spans.front().released) spans.pop_front();
}

std::optional<uint64_t> GpuDigests::Enqueue(uint64_t address, uint64_t bytes, uint64_t stream,
                                            bool stage) {
  if (!enabled()) return std::nullopt;
  std::unique_lock lock(mutex_);
  if (bytes == 0) {  // nothing to read: the digest of no bytes, at once
    const kernels::Digest128 empty = kernels::DigestV1(nullptr, 0);
    const uint64_t ticket = next_ticket_++;
    tickets_[ticket] = {nullptr, 0, true, {empty.lo, empty.hi}};
    return ticket;
  }
  const gpu_time::OwnWork own;  // the set-up memset, the staging copy and the kernels
  Engine* engine = EngineForCurrentContext();
  if (engine == nullptr) return std::nullopt;
  const uint32_t slot = engine->next;
  if (engine->busy[slot] != 0 && !CollectLocked(*engine, slot)) {
    // The ring is full: wait for the GPU to reach the oldest digest in this slot.
    ++ring_waits_;
    const auto start = std::chrono::steady_clock::now();
    auto checked = start;
    while (!CollectLocked(*engine, slot)) {
      const auto now = std::chrono::steady_clock::now();
      if (now - checked >= kAliveEvery) {
        checked = now;
        if (!AliveLocked(*engine) || now - start >= kWaitLimit) {
          engine->dead = true;
          return std::nullopt;
        }
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
      if (engine->dead) return std::nullopt;
    }
  }
  engine->next = (slot + 1) % config_.ring_slots;
  const uint64_t ticket = next_ticket_++;
  engine->busy[slot] = ticket;
  Ticket& entry = tickets_[ticket];
  entry = {engine, slot, false, {}};
  if (stage) {
    if (const std::optional<uint64_t> offset = ReserveStagingLocked(*engine, bytes)) {
      entry.staged = true;
      entry.staged_offset = *offset;
      entry.staged_bytes = bytes;
    }
  }
  const bool staged = entry.staged;
  unsigned char* const staging = staged ? engine->staging + entry.staged_offset : nullptr;
  lock.unlock();
  if (staged) {
    // Before the kernels, on the same stream: the bytes are in place when the ticket arrives.
    using CopyFn = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);
    static const auto copy = Proc<CopyFn>("cuMemcpyDtoHAsync");
    if (copy == nullptr ||
        copy(staging, address, bytes, reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
      lock.lock();
      if (auto it = tickets_.find(ticket); it != tickets_.end()) ReleaseStagingLocked(it->second);
      lock.unlock();
    }
  }
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
#if defined(NDT_HAVE_DIGEST_FATBIN)
  result = engine->kernels.Enqueue(address, bytes, engine->sums + uint64_t{slot} * 16,
                                   engine->ring_device + uint64_t{slot} * kSlotWords * 8, ticket,
                                   reinterpret_cast<CUstream>(stream));
#else
  (void)address, (void)stream;
#endif
  lock.lock();
  if (result != CUDA_SUCCESS) {
    // The slot's sums may be half written: this context digests on the CPU from now on.
    engine->dead = true;
    tickets_.erase(ticket);
    return std::nullopt;
  }
  ++launched_;
  return ticket;
}

bool GpuDigests::Outstanding(uint64_t ticket) {
  std::lock_guard lock(mutex_);
  return tickets_.contains(ticket);
}

GpuDigests::Result GpuDigests::Take(uint64_t ticket, bool wait, const StagedFn& staged) {
  std::unique_lock lock(mutex_);
  const auto start = std::chrono::steady_clock::now();
  auto checked = start;
  for (;;) {
    const auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return {};
    Ticket& entry = it->second;
    const bool reachable = entry.engine != nullptr && !entry.engine->dead;
    if (!entry.arrived && reachable) CollectLocked(*entry.engine, entry.slot);
    if (entry.arrived) {
      const Result arrived{State::kArrived, entry.digest};
      if (entry.staged && staged && !entry.engine->dead) {
        staged(entry.engine->staging + entry.staged_offset, entry.staged_bytes);
      }
      ReleaseStagingLocked(entry);
      tickets_.erase(it);
      return arrived;
    }
    if (!reachable) {
      ReleaseStagingLocked(entry);
      tickets_.erase(it);
      return {};
    }
    if (!wait) return {State::kPending, {}};
    const auto now = std::chrono::steady_clock::now();
    if (now - checked >= kAliveEvery) {
      checked = now;
      if (!AliveLocked(*entry.engine)) entry.engine->dead = true;
      if (now - start >= kWaitLimit) {
        // Its bytes may still be written: the staging stays reserved.
        tickets_.erase(it);
        return {};
      }
      continue;
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    lock.lock();
  }
}

void GpuDigests::ForgetDeadContexts() {
  std::lock_guard lock(mutex_);
  for (const auto& engine : engines_) {
    if (engine->dead) continue;
    const bool in_flight = std::any_of(engine->busy.begin(), engine->busy.end(),
                                       [](uint64_t ticket) { return ticket != 0; });
    if (in_flight && !AliveLocked(*engine)) engine->dead = true;
  }
}

uint64_t GpuDigests::launched() const {
  std::lock_guard lock(mutex_);
  return launched_;
}

uint64_t GpuDigests::ring_waits() const {
  std::lock_guard lock(mutex_);
  return ring_waits_;
}

}  // namespace ndt::tracer
