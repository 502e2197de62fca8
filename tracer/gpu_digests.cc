#include "tracer/gpu_digests.h"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
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

namespace digest_v1 = kernels::digest_v1;

// Words per ring slot, and per slot of device scratch (kernels/digest_v1_core.h).
constexpr uint32_t kSlotWords = digest_v1::kOutWords;
constexpr uint32_t kMaxRingSlots = 1u << 20;
// Summaries in flight per context: each has kMaxGrid doubles of device memory for its CTAs'
// partial sums (2.1 MiB in all, allocated at the first summary).
constexpr uint32_t kSummaryEntries = 256;
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
  CUdeviceptr scratch = 0;     // kScratchWords per slot, zero between digests
  std::vector<uint64_t> busy;  // the ticket in each slot; 0 = free
  uint32_t next = 0;
  // The summaries' partial sums: kSummaryEntries areas of kMaxGrid doubles, the free ones in
  // `free_partials`; which one each slot's digest uses (-1: none).
  CUdeviceptr partials = 0;
  bool partials_failed = false;
  std::vector<uint32_t> free_partials;
  std::vector<int32_t> partials_of_slot;
};

namespace {

// Loads the kernels into the current context and allocates the ring and the scratch. Empty on
// success, else why not.
std::string SetUp(uint32_t slots, CUcontext context, void* engine_kernels, volatile uint64_t** ring,
                  CUdeviceptr* ring_device, CUdeviceptr* scratch) {
#if !defined(NDT_HAVE_DIGEST_FATBIN)
  (void)slots, (void)context, (void)engine_kernels, (void)ring, (void)ring_device, (void)scratch;
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
  const uint64_t scratch_words = uint64_t{slots} * digest_v1::kScratchWords;
  if (const CUresult r = alloc(scratch, scratch_words * sizeof(uint64_t)); r != CUDA_SUCCESS) {
    return "cuMemAlloc of the digest scratch returned " + std::to_string(r);
  }
  // Once per context: the scratch must be zero before any stream's first digest reads it. By a
  // digest kernel, not a memset: made from inside the program's runtime call, CUPTI's record of
  // it carries that call's correlation id, and only its name says it is ndtrace's (gpu_time.h).
  if (gpu.Zero(*scratch, scratch_words, nullptr) != CUDA_SUCCESS ||
      synchronize(nullptr) != CUDA_SUCCESS) {
    return "cannot zero the digest scratch";
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
  const std::string why = SetUp(config_.ring_slots, context, gpu, &engine->ring,
                                &engine->ring_device, &engine->scratch);
  engine->dead = !why.empty();
  if (engine->dead && config_.device == DigestDevice::kGpu && !said_unavailable_ && log_) {
    said_unavailable_ = true;
    log_("digests on the CPU: the GPU digest kernels cannot run (" + why + ")");
  }
  if (!engine->dead) {
    engine->busy.assign(config_.ring_slots, 0);
    engine->partials_of_slot.assign(config_.ring_slots, -1);
  }
  engines_.push_back(std::move(engine));
  return engines_.back()->dead ? nullptr : engines_.back().get();
}

bool GpuDigests::CollectLocked(Engine& engine, uint32_t slot) {
  const uint64_t ticket = engine.busy[slot];
  if (ticket == 0) return true;
  const volatile uint64_t* out = engine.ring + size_t{slot} * kSlotWords;
  if (out[digest_v1::kOutTicket] != ticket) return false;
  // The kernel wrote the rest before the ticket (with a system-wide fence between).
  std::atomic_thread_fence(std::memory_order_acquire);
  if (auto it = tickets_.find(ticket); it != tickets_.end()) {
    Ticket& entry = it->second;
    entry.arrived = true;
    entry.digest = {out[0], out[1]};
    if (out[6] == 1) {  // the summary's words (kernels/digest_v1_core.h)
      digest_v1::F32Summary summary{out[4], out[5], static_cast<uint32_t>(out[3]),
                                    static_cast<uint32_t>(out[3] >> 32), 0.0};
      const uint64_t sum_bits = out[2];
      std::memcpy(&summary.sum, &sum_bits, sizeof summary.sum);
      entry.summary = NumericSummaryOf(summary, entry.bytes / sizeof(float));
    }
  }
  engine.busy[slot] = 0;
  if (const int32_t partials = engine.partials_of_slot[slot]; partials >= 0) {
    engine.free_partials.push_back(static_cast<uint32_t>(partials));
    engine.partials_of_slot[slot] = -1;
  }
  return true;
}

format::NumericSummary NumericSummaryOf(const digest_v1::F32Summary& summary, uint64_t count) {
  format::NumericSummary numeric;
  numeric.count = count;
  numeric.sum = summary.sum;
  if (summary.max_key != 0) {  // some value was finite (no finite value has key 0)
    numeric.min = digest_v1::F32FromKeyValue(summary.min_key);
    numeric.max = digest_v1::F32FromKeyValue(summary.max_key);
  }
  numeric.nan_count = summary.nan;
  numeric.inf_count = summary.inf;
  return numeric;
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

std::optional<uint64_t> GpuDigests::ReservePartialsLocked(Engine& engine, uint32_t slot) {
  if (engine.partials == 0) {
    using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
    const auto alloc = Proc<AllocFn>("cuMemAlloc");
    if (engine.partials_failed || alloc == nullptr ||
        alloc(&engine.partials, size_t{kSummaryEntries} * digest_v1::kMaxGrid * sizeof(double)) !=
            CUDA_SUCCESS) {
      engine.partials_failed = true;
      engine.partials = 0;
      return std::nullopt;
    }
    for (uint32_t i = kSummaryEntries; i > 0; --i) engine.free_partials.push_back(i - 1);
  }
  if (engine.free_partials.empty()) return std::nullopt;
  const uint32_t entry = engine.free_partials.back();
  engine.free_partials.pop_back();
  engine.partials_of_slot[slot] = static_cast<int32_t>(entry);
  return engine.partials + uint64_t{entry} * digest_v1::kMaxGrid * sizeof(double);
}

std::optional<uint64_t> GpuDigests::Enqueue(uint64_t address, uint64_t bytes, uint64_t stream,
                                            bool summarize_f32) {
  if (!enabled()) return std::nullopt;
  std::unique_lock lock(mutex_);
  if (bytes == 0) {  // nothing to read: the digest of no bytes, at once
    const kernels::Digest128 empty = kernels::DigestV1(nullptr, 0);
    const uint64_t ticket = next_ticket_++;
    tickets_[ticket] = {nullptr, 0, true, {empty.lo, empty.hi}, 0, std::nullopt};
    return ticket;
  }
  const gpu_time::OwnWork own(gpu_time::OwnWork::Work::kKernels);  // set-up and digest kernels
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
  entry = {engine, slot, false, {}, bytes, std::nullopt};
  // Summaries only of f32 extents (a whole number of floats is not needed: the tail is left out).
  std::optional<uint64_t> partials;
  if (summarize_f32 && bytes >= sizeof(float)) partials = ReservePartialsLocked(*engine, slot);
  lock.unlock();
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
#if defined(NDT_HAVE_DIGEST_FATBIN)
  result = engine->kernels.Enqueue(
      address, bytes, engine->scratch + uint64_t{slot} * digest_v1::kScratchWords * 8,
      partials.value_or(0), engine->ring_device + uint64_t{slot} * kSlotWords * 8, ticket,
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

GpuDigests::Result GpuDigests::Take(uint64_t ticket, bool wait) {
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
      const Result arrived{State::kArrived, entry.digest, entry.summary};
      tickets_.erase(it);
      return arrived;
    }
    if (!reachable) {
      tickets_.erase(it);
      return {};
    }
    if (!wait) return {State::kPending, {}, std::nullopt};
    const auto now = std::chrono::steady_clock::now();
    if (now - checked >= kAliveEvery) {
      checked = now;
      if (!AliveLocked(*entry.engine)) entry.engine->dead = true;
      if (now - start >= kWaitLimit) {
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
