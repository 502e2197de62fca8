// The stand-in libcuda.so.1: the part of the CUDA driver API that ndtrace's tests use, on the
// CPU, for machines without a GPU. Nothing it computes is a GPU result.
//
// What is real: the ABI. Every entry point has the prototype of the CUDA 13.0 cuda.h (compiled
// with __CUDA_API_VERSION_INTERNAL, as the driver itself is, so each ABI variant such as
// cuMemAlloc_v2 or cuLaunchKernel_ptsz is declared under its exported name), symbols carry no
// version, and cuGetProcAddress_v2 hands out the variant a caller's (name, cudaVersion, flags)
// selects, as the driver does. Every other symbol the real driver exports is defined too and
// returns CUDA_ERROR_NOT_SUPPORTED (standin_driver_stubs.cc).
//
// What is not:
// - Device memory is host memory: a device pointer is the address of an aligned host block
//   (zero-filled), recorded in an allocation table that range checks and pointer queries use.
// - There is one device (NDT_STANDIN_DEVICES=N: N of them, at most 8), each with one (primary)
//   context. Device memory, streams, events and modules belong to the device whose context made
//   them; a kernel launched on another device's stream, or an event recorded on one, is refused
//   (CUDA_ERROR_INVALID_HANDLE), as the driver refuses it. Every device reaches every device's
//   memory (copies, kernels): peer access is kept (cuCtxEnablePeerAccess refuses a second
//   enable) but not required.
// - Work runs synchronously when it is enqueued, on the calling thread, in stream order
//   trivially (with NDT_STANDIN_DEFER_LAUNCHES=1, kernels at the next driver call); events take
//   their timestamp from a steady clock when recorded.
// - A kernel is a host function found by mangled name in standin_kernels.cc; a module keeps a
//   copy of the image it was loaded from but never looks inside it.
//
// Every served call appends a line to $NDT_STANDIN_LOG when that variable is set.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "standin_activity.h"
#include "standin_async.h"
#include "standin_driver_internal.h"
#include "standin_immortal.h"
#include "standin_kernels.h"

// cuda.h declares the handle structs; the stand-in defines them.
struct CUctx_st {
  CUdevice device = 0;
};

struct CUstream_st {
  CUdevice device = 0;  // of the context that made it
  unsigned flags = 0;
  int priority = 0;
  unsigned long long id = 0;
  CUgraph_st* capture = nullptr;  // the graph this stream is capturing into, if any
  std::shared_ptr<ndt::standin::WorkQueue> queue;  // NDT_STANDIN_ASYNC: its worker's queue
};

struct CUevent_st {
  CUdevice device = 0;
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
  CUgraph_st* capture = nullptr;  // recorded on a capturing stream: the capture it belongs to
  std::shared_ptr<ndt::standin::EventSync> sync =  // NDT_STANDIN_ASYNC: completion of records
      std::make_shared<ndt::standin::EventSync>();
};

// Graph capture: each node is the captured call, re-run on the launch stream at cuGraphLaunch.
struct CUgraphNode_st {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::function<CUresult(CUstream)> run;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
  CUstream origin = nullptr;  // the stream whose capture made it, while capturing
  uint64_t capture_id = 0;    // the capture sequence that made it (cuStreamGetCaptureInfo)
};

struct CUgraphExec_st {
  std::vector<std::function<CUresult(CUstream)>> work;
};

// A memory pool. It keeps no freed memory of its own (every pool allocates like cuMemAlloc_v2):
// its reserved memory is what its live allocations use.
struct CUmemPoolHandle_st {
  bool is_default = false;
  cuuint64_t release_threshold = 0;
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
  cuuint64_t used = 0;       // bytes of its live allocations
  cuuint64_t used_high = 0;  // the most since creation or the last reset
};

struct CUfunc_st {
  CUmod_st* module = nullptr;
  std::string name;
  const ndt::standin::HostKernel* kernel = nullptr;
};

struct CUmod_st {
  CUdevice device = 0;
  std::vector<unsigned char> image;
  std::map<std::string, std::unique_ptr<CUfunc_st>, std::less<>> functions;
  CUlib_st* library = nullptr;  // set for the per-context module of a library
};

struct CUkern_st {
  CUlib_st* library = nullptr;
  std::string name;
  const ndt::standin::HostKernel* kernel = nullptr;
  CUfunc_st* function = nullptr;  // in the library's context module, once asked for
};

struct CUlib_st {
  std::vector<unsigned char> image;
  std::map<std::string, std::unique_ptr<CUkern_st>, std::less<>> kernels;
  CUmod_st* context_module = nullptr;
};

namespace ndt::standin {
namespace {

constexpr int kDriverVersion = 13000;
constexpr char kDeviceName[] = "ndtrace stand-in device";
constexpr unsigned char kDeviceUuid[16] = {'n', 'd', 't', 'r', 'a', 'c', 'e', '-',
                                           's', 't', 'a', 'n', 'd', 'i', 'n', 0};
constexpr std::size_t kTotalMemBytes = std::size_t{16} << 30;
constexpr int kMaxDevices = 8;
constexpr std::size_t kAllocationAlignment = 256;
constexpr std::size_t kFreedBytesKept = std::size_t{256} << 20;  // Driver::freed
constexpr unsigned kMaxSharedMemPerBlock = 48 * 1024;
constexpr int kLeastStreamPriority = 0;
constexpr int kGreatestStreamPriority = -5;
constexpr unsigned long long kLegacyStreamId = 0;
constexpr unsigned long long kPerThreadStreamId = 1;
constexpr unsigned long long kFirstStreamId = 16;
// The magic numbers of the images cuModuleLoadData accepts besides ELF and PTX.
constexpr std::uint32_t kFatbinMagic = 0xBA55ED50;         // fatbinary.h: a fat binary
constexpr std::uint32_t kFatbinWrapperMagic = 0x466243B1;  // __fatBinC_Wrapper_t from nvcc

struct AlignedFree {
  void operator()(unsigned char* p) const { std::free(p); }
};

// A device allocation: owned host memory, or (memory null) a cuMemMap'ed range of a reservation.
// `pinned_host`: page-locked host memory from cuMemHostAlloc, mapped into the device's address
// space at the same address (unified addressing), so kernels and copies reach it like device
// memory; freed with cuMemFreeHost only.
struct Allocation {
  std::unique_ptr<unsigned char, AlignedFree> memory;
  std::size_t size = 0;
  unsigned long long buffer_id = 0;
  bool pinned_host = false;
  bool registered = false;  // pinned by cuMemHostRegister (memory null: the program owns it)
  unsigned host_flags = 0;  // cuMemHostAlloc / cuMemHostRegister flags, for cuMemHostGetFlags
  CUmemPoolHandle_st* pool = nullptr;  // the pool it came from (stream-ordered allocation)
  CUdevice device = 0;                 // of the context that made it
};

// A device's primary context.
struct Primary {
  CUctx_st context;
  int retains = 0;
  unsigned flags = 0;
  bool peer[kMaxDevices] = {};  // cuCtxEnablePeerAccess from this context to device i
  bool faulted = false;         // a kernel reached memory it may not: sticky until a reset
};

// All driver state. Every member is guarded by `mu`; kernels and host functions run without it.
struct Driver {
  Driver() {
    for (int i = 0; i < kMaxDevices; ++i) primaries[i].context.device = i;
  }
  std::mutex mu;
  bool initialized = false;
  Primary primaries[kMaxDevices];
  std::map<std::uintptr_t, Allocation> allocations;  // by base address
  std::size_t allocated_bytes[kMaxDevices] = {};     // device memory in use, per device
  // Freed device blocks by rounded size, the newest last among equals: an allocation of a size
  // freed before gets the newest such block's address back, as the driver hands a freed range
  // out again (at most kFreedBytesKept of them; a block beyond is given back to the host).
  std::multimap<std::pair<CUdevice, std::size_t>, std::unique_ptr<unsigned char, AlignedFree>>
      freed;  // by (device, rounded size)
  std::size_t freed_bytes = 0;
  unsigned long long next_buffer_id = 1;
  unsigned long long next_stream_id = kFirstStreamId;
  std::unordered_map<CUstream, std::unique_ptr<CUstream_st>> streams;
  std::unordered_map<CUevent, std::unique_ptr<CUevent_st>> events;
  std::unordered_map<CUmodule, std::unique_ptr<CUmod_st>> modules;
  std::unordered_map<CUlibrary, std::unique_ptr<CUlib_st>> libraries;
  std::unordered_set<CUfunction> functions;  // live, owned by their module
  std::unordered_set<CUkernel> kernels;      // live, owned by their library
  // Graphs, executable graphs and captures in progress.
  std::unordered_map<CUgraph, std::unique_ptr<CUgraph_st>> graphs;
  std::unordered_map<CUgraphExec, std::unique_ptr<CUgraphExec_st>> graph_execs;
  std::unordered_set<CUgraph> capturing;
  // Memory pools (all allocate like cuMemAlloc) and the virtual memory API: reserved ranges
  // (PROT_NONE mappings) and physical allocations (memfd files mapped into them by cuMemMap).
  CUmemPoolHandle_st default_pool{true};
  std::unordered_map<CUmemoryPool, std::unique_ptr<CUmemPoolHandle_st>> pools;
  std::map<std::uintptr_t, std::size_t> reservations;  // base -> bytes
  struct Physical {
    int fd = -1;
    std::size_t size = 0;
  };
  std::unordered_map<CUmemGenericAllocationHandle, Physical> physical;
  CUmemGenericAllocationHandle next_physical = 1;
};

Driver& GetDriver() {
  static Immortal<Driver> driver;
  return *driver;
}

// NDT_STANDIN_DEVICES: how many devices there are (1 to kMaxDevices; default 1).
int DeviceCount() {
  static const int count = [] {
    const char* value = std::getenv("NDT_STANDIN_DEVICES");
    const long n = value != nullptr ? std::strtol(value, nullptr, 10) : 1;
    return static_cast<int>(std::clamp<long>(n, 1, kMaxDevices));
  }();
  return count;
}

// NDT_STANDIN_P2P=0: the devices cannot reach each other's memory (a PCIe machine without
// peer-to-peer): cuDeviceCanAccessPeer says 0 and cuCtxEnablePeerAccess is refused.
bool PeerToPeer() {
  static const bool p2p = [] {
    const char* value = std::getenv("NDT_STANDIN_P2P");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  return p2p;
}

// The primary context `context` is, or null when it is none.
Primary* PrimaryOf(CUcontext context) {
  Driver& d = GetDriver();
  for (int i = 0; i < DeviceCount(); ++i) {
    if (context == &d.primaries[i].context) return &d.primaries[i];
  }
  return nullptr;
}

// The calling thread's context stack; the current context is its top. Trivially destructible,
// as the real driver's is not a C++ object: it still works while the thread's C++ thread-locals
// are destroyed at exit, when the tracer's exit flush pushes contexts (a std::vector here was
// destroyed first, and every context then looked gone).
struct ContextStack {
  static constexpr size_t kDepth = 64;
  CUcontext entries[kDepth];
  size_t depth;
  bool empty() const { return depth == 0; }
  CUcontext& back() { return entries[depth - 1]; }
  bool push_back(CUcontext context) {
    if (depth == kDepth) return false;
    entries[depth++] = context;
    return true;
  }
  void pop_back() { --depth; }
};
thread_local ContextStack t_context_stack;

CUcontext CurrentContext() {
  return t_context_stack.empty() ? nullptr : t_context_stack.back();
}

int OpenCallLog() {
  const char* path = std::getenv("NDT_STANDIN_LOG");
  if (path == nullptr || *path == '\0') return -1;
  return ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

// NDT_STANDIN_DEFER_LAUNCHES=1: a kernel launch (on any stream, not captured) does not run when
// it is enqueued but at the start of the next driver call served, by whichever thread makes it,
// in launch order: what runs later on a GPU. Every other call (copies, memsets, synchronisation,
// queries, events, frees) first runs the launches waiting, so the order of work is kept. Host
// memory written by a kernel (mapped pinned memory) is only up to date after a later driver
// call, as on a GPU without synchronisation. A deferred kernel's fault is not reported.
bool DeferLaunches() {
  static const bool defer = [] {
    const char* value = std::getenv("NDT_STANDIN_DEFER_LAUNCHES");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return defer;
}

// NDT_STANDIN_FREE_RETURN_US=N: a free of device memory returns N microseconds after the range
// is free for the next allocation, by any thread: a driver call preempted on its way out, made
// wide enough that a tracer's work after the real call always races with another thread's
// allocation of the same range.
unsigned FreeReturnMicroseconds() {
  static const unsigned delay = [] {
    const char* value = std::getenv("NDT_STANDIN_FREE_RETURN_US");
    return value != nullptr ? static_cast<unsigned>(std::strtoul(value, nullptr, 10)) : 0u;
  }();
  return delay;
}

struct DeferredLaunches {
  std::mutex mu;  // held while they run, so that they run in order
  std::deque<std::function<void()>> work;
};

DeferredLaunches& GetDeferredLaunches() {
  static Immortal<DeferredLaunches> deferred;
  return *deferred;
}

// Runs the deferred launches, oldest first. Called by every served entry point first.
void RunDeferredLaunches() {
  if (!DeferLaunches()) return;
  DeferredLaunches& deferred = GetDeferredLaunches();
  std::lock_guard lock(deferred.mu);
  while (!deferred.work.empty()) {
    std::function<void()> launch = std::move(deferred.work.front());
    deferred.work.pop_front();
    launch();
  }
}

// Runs `body`, turning a C++ exception into a CUresult: nothing may unwind into a C caller.
template <typename Body>
CUresult Guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

CUresult RequireInitLocked(const Driver& d) {
  return d.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// Calls that work on device memory, streams, events and modules need the primary context
// current on the calling thread and alive (retained at least once).
CUresult RequireContextLocked(const Driver& d) {
  if (!d.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  const CUcontext current = CurrentContext();
  if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const Primary* primary = PrimaryOf(current);
  if (primary == nullptr || primary->retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (primary->faulted) return CUDA_ERROR_ILLEGAL_ADDRESS;  // as a GPU's context after a fault
  return CUDA_SUCCESS;
}

// The device of the calling thread's context (0 when it has none).
CUdevice CurrentDevice() {
  const CUcontext current = CurrentContext();
  return current != nullptr ? current->device : 0;
}

CUresult RequireDevice(CUdevice device) {
  return device >= 0 && device < DeviceCount() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// The allocation containing `address`, or allocations.end().
std::map<std::uintptr_t, Allocation>::const_iterator FindAllocationLocked(const Driver& d,
                                                                          std::uintptr_t address) {
  auto it = d.allocations.upper_bound(address);
  if (it == d.allocations.begin()) return d.allocations.end();
  --it;
  if (address - it->first >= it->second.size) return d.allocations.end();
  return it;
}

// cuMemcpyPeer*: both contexts valid, each pointer memory of its context's device.
CUresult CheckPeerCopy(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                       CUcontext src_context) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (PrimaryOf(dst_context) == nullptr || PrimaryOf(src_context) == nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  const auto dst_at = FindAllocationLocked(d, dst);
  const auto src_at = FindAllocationLocked(d, src);
  if (dst_at == d.allocations.end() || src_at == d.allocations.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dst_at->second.device != dst_context->device ||
      src_at->second.device != src_context->device) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// A range inside one allocation, or (the virtual memory API, as expandable segments grow) across
// cuMemMap'ed chunks that follow each other without a gap.
bool DeviceRangeLocked(const Driver& d, std::uintptr_t address, std::size_t bytes) {
  auto it = FindAllocationLocked(d, address);
  if (it == d.allocations.end()) return false;
  std::size_t available = it->second.size - (address - it->first);
  while (bytes > available && it->second.memory == nullptr && !it->second.pinned_host) {
    const std::uintptr_t end = it->first + it->second.size;
    it = std::next(it);
    if (it == d.allocations.end() || it->first != end || it->second.memory != nullptr ||
        it->second.pinned_host) {
      return false;
    }
    available += it->second.size;
  }
  return bytes <= available;
}

// The DeviceRangeCheck handed to host kernels; takes the lock itself.
bool CheckDeviceRange(std::uintptr_t address, std::size_t bytes) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  return DeviceRangeLocked(d, address, bytes);
}

bool IsBuiltinStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

CUresult CheckStreamLocked(const Driver& d, CUstream stream) {
  if (IsBuiltinStream(stream)) return CUDA_SUCCESS;
  return d.streams.contains(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// A valid stream of the current context's device: a kernel launch or an event record on
// another device's stream is refused. The built-in streams are the current context's own.
CUresult CheckOwnStreamLocked(const Driver& d, CUstream stream) {
  if (IsBuiltinStream(stream)) return CUDA_SUCCESS;
  const auto it = d.streams.find(stream);
  return it != d.streams.end() && it->second->device == CurrentDevice() ? CUDA_SUCCESS
                                                                        : CUDA_ERROR_INVALID_HANDLE;
}

// The graph `stream` is capturing into, or null (built-in streams never capture).
CUgraph_st* CaptureLocked(const Driver& d, CUstream stream) {
  if (IsBuiltinStream(stream)) return nullptr;
  const auto it = d.streams.find(stream);
  return it == d.streams.end() ? nullptr : it->second->capture;
}

// NDT_STANDIN_ASYNC: the queue of a valid stream. The null stream is the legacy default stream
// here; entry points of the per-thread API pass CU_STREAM_PER_THREAD for it.
std::shared_ptr<WorkQueue> QueueForLocked(const Driver& d, CUstream stream) {
  if (stream == nullptr || stream == CU_STREAM_LEGACY) return LegacyWorkQueue();
  if (stream == CU_STREAM_PER_THREAD) return PerThreadWorkQueue();
  return d.streams.at(stream)->queue;
}

// What a device-memory API does first under NDT_STANDIN_ASYNC when it would free or unmap
// memory that queued work may still use: wait for the whole device, as cudaFree does.
void SynchronizeBeforeFree() {
  if (AsyncStreams()) SynchronizeAllQueues();
}

void AddNodeLocked(CUgraph_st* graph, CUgraphNodeType type,
                   std::function<CUresult(CUstream)> run) {
  auto node = std::make_unique<CUgraphNode_st>();
  node->type = type;
  node->run = std::move(run);
  graph->nodes.push_back(std::move(node));
}

CUevent_st* FindEventLocked(Driver& d, CUevent event) {
  const auto it = d.events.find(event);
  return it == d.events.end() ? nullptr : it->second.get();
}

void DestroyModuleLocked(Driver& d, CUmodule module) {
  const auto it = d.modules.find(module);
  if (it == d.modules.end()) return;
  for (const auto& [name, function] : it->second->functions) d.functions.erase(function.get());
  d.modules.erase(it);
}

// Frees everything `device`'s primary context owns: what cuDevicePrimaryCtxReset and the last
// cuDevicePrimaryCtxRelease do. Libraries are context-independent and stay loaded, but lose
// their module and functions in that context.
void DestroyContextResourcesLocked(Driver& d, CUdevice device) {
  d.primaries[device].faulted = false;
  std::erase_if(d.allocations, [&](const auto& entry) { return entry.second.device == device; });
  d.allocated_bytes[device] = 0;
  for (auto it = d.freed.begin(); it != d.freed.end();) {
    if (it->first.first == device) {
      d.freed_bytes -= it->first.second;
      it = d.freed.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(d.streams, [&](const auto& entry) { return entry.second->device == device; });
  std::erase_if(d.events, [&](const auto& entry) { return entry.second->device == device; });
  for (auto& [handle, library] : d.libraries) {
    if (library->context_module == nullptr || library->context_module->device != device) continue;
    library->context_module = nullptr;
    for (auto& [name, kernel] : library->kernels) kernel->function = nullptr;
  }
  std::vector<CUmodule> modules;
  for (const auto& [handle, module] : d.modules) {
    if (module->device == device) modules.push_back(handle);
  }
  for (CUmodule module : modules) DestroyModuleLocked(d, module);
}

// The size of a loadable image: a fat binary (bare or behind nvcc's wrapper), a cubin (ELF) or
// NUL-terminated PTX text. 0 for anything else.
std::size_t ImageSize(const void** image) {
  const auto* bytes = static_cast<const unsigned char*>(*image);
  std::uint32_t magic;
  std::memcpy(&magic, bytes, sizeof(magic));
  if (magic == kFatbinWrapperMagic) {
    const void* data;  // __fatBinC_Wrapper_t: int magic; int version; const u64* data; ...
    std::memcpy(&data, bytes + 8, sizeof(data));
    if (data == nullptr) return 0;
    *image = data;
    bytes = static_cast<const unsigned char*>(data);
    std::memcpy(&magic, bytes, sizeof(magic));
  }
  if (magic == kFatbinMagic) {  // u32 magic; u16 version; u16 header size; u64 payload size
    std::uint16_t header_size;
    std::uint64_t payload_size;
    std::memcpy(&header_size, bytes + 6, sizeof(header_size));
    std::memcpy(&payload_size, bytes + 8, sizeof(payload_size));
    return header_size + payload_size;
  }
  if (std::memcmp(bytes, ELFMAG, SELFMAG) == 0) {
    if (bytes[EI_CLASS] != ELFCLASS64) return 0;
    Elf64_Ehdr header;
    std::memcpy(&header, bytes, sizeof(header));
    const std::size_t sections = header.e_shoff + std::size_t{header.e_shnum} * header.e_shentsize;
    const std::size_t segments = header.e_phoff + std::size_t{header.e_phnum} * header.e_phentsize;
    return std::max({sections, segments, sizeof(header)});
  }
  if (bytes[0] == '/' || bytes[0] == '.' || bytes[0] == '\n' || bytes[0] == ' ' ||
      bytes[0] == '\t') {
    return std::strlen(reinterpret_cast<const char*>(bytes)) + 1;
  }
  return 0;
}

CUresult CopyImage(const void* image, std::vector<unsigned char>* out) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t size = ImageSize(&image);
  if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
  const auto* bytes = static_cast<const unsigned char*>(image);
  out->assign(bytes, bytes + size);
  return CUDA_SUCCESS;
}

CUresult LoadModuleLocked(Driver& d, CUmodule* module, const void* image) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto loaded = std::make_unique<CUmod_st>();
  loaded->device = CurrentDevice();
  if (const CUresult r = CopyImage(image, &loaded->image); r != CUDA_SUCCESS) return r;
  *module = loaded.get();
  d.modules.emplace(loaded.get(), std::move(loaded));
  return CUDA_SUCCESS;
}

// The host implementation of kernel `name`; null, said once per name on stderr, when the
// stand-in has none: such a kernel cannot run here (never a silent skip).
const HostKernel* HostKernelOrSay(std::string_view name) {
  const HostKernel* kernel = FindHostKernel(name);
  if (kernel != nullptr) return kernel;
  static std::mutex mutex;
  static std::set<std::string, std::less<>>* said = new std::set<std::string, std::less<>>();
  std::lock_guard lock(mutex);
  if (said->emplace(name).second) {
    std::fprintf(stderr,
                 "ndtrace stand-in device: kernel %.*s has no host implementation, so it cannot "
                 "run here (CUDA_ERROR_NOT_FOUND); the stand-in runs only the kernels "
                 "tests/standin/README.md lists: run this program on a GPU\n",
                 static_cast<int>(name.size()), name.data());
  }
  return nullptr;
}

// The function `name` of `module`, created on first request (later requests return the same
// handle, as the driver does). NOT_FOUND when no host implementation has that name.
CUresult GetFunctionLocked(Driver& d, CUmod_st* module, std::string_view name, CUfunction* out) {
  if (const auto it = module->functions.find(name); it != module->functions.end()) {
    *out = it->second.get();
    return CUDA_SUCCESS;
  }
  const HostKernel* kernel = HostKernelOrSay(name);
  if (kernel == nullptr) return CUDA_ERROR_NOT_FOUND;
  auto function = std::make_unique<CUfunc_st>();
  function->module = module;
  function->name = std::string(name);
  function->kernel = kernel;
  *out = function.get();
  d.functions.insert(function.get());
  module->functions.emplace(std::string(name), std::move(function));
  return CUDA_SUCCESS;
}

// The library's module in the primary context, created on first request.
CUmod_st* LibraryModuleLocked(Driver& d, CUlib_st* library) {
  if (library->context_module == nullptr) {
    auto module = std::make_unique<CUmod_st>();
    module->image = library->image;
    module->library = library;
    module->device = CurrentDevice();
    library->context_module = module.get();
    d.modules.emplace(module.get(), std::move(module));
  }
  return library->context_module;
}

// The host kernel behind a launchable handle: a CUfunction, or a CUkernel cast to CUfunction
// (which cuLaunchKernel documents as allowed).
const HostKernel* LaunchTargetLocked(const Driver& d, CUfunction f) {
  if (d.functions.contains(f)) return f->kernel;
  const auto kernel = reinterpret_cast<CUkernel>(f);
  if (d.kernels.contains(kernel)) return kernel->kernel;
  return nullptr;
}

CUresult ParamInfo(const HostKernel& kernel, std::size_t index, std::size_t* offset,
                   std::size_t* size) {
  if (index >= kernel.params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = kernel.params[index].offset;
  if (size != nullptr) *size = kernel.params[index].size;
  return CUDA_SUCCESS;
}

// ---- CUPTI activity: what the stand-in libcupti reports (standin_activity.h) ----

std::atomic<const NdtStandinActivitySink*> g_activity_sink{nullptr};

// One driver call's GPU work as CUPTI sees it: correlation 0 when nobody listens.
struct Activity {
  std::uint32_t correlation = 0;
  int kind = kNdtActivityKernel;
  std::uint32_t stream = 0;
  std::uint64_t bytes = 0;
  const char* name = nullptr;  // a kernel's (a string literal of the host kernel registry)
  std::uint32_t copy = 0;      // a copy's NdtStandinCopy
};

// CUPTI's stream number: the stream's id; the legacy and per-thread default streams 0 and 1.
std::uint32_t ActivityStream(CUstream stream) {
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  if (handle == 0 || handle == reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY)) return 0;
  if (handle == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD)) return 1;
  return static_cast<std::uint32_t>(stream->id);
}

// The stand-in libraries' entry kernel (standin_library_driver.h), and this thread's last launch
// of it whose work (ndt_standin_run_as_kernel) has not been reported yet (correlation 0: none).
constexpr std::string_view kLibraryEntryKernel = "_Z21standin_library_entry13LibraryParams";
thread_local Activity t_library_launch;

// On the calling thread, for a call that starts work.
Activity BeginActivity(int kind, CUstream stream, std::uint64_t bytes = 0) {
  const NdtStandinActivitySink* sink = g_activity_sink.load(std::memory_order_acquire);
  if (sink == nullptr) return {};
  return {sink->api_call(kind), kind, ActivityStream(stream), bytes};
}

std::uint64_t MonotonicNs() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Runs `work` (the GPU work itself), telling CUPTI when it ran.
template <typename Work>
auto Timed(const Activity& activity, Work&& work) {
  const NdtStandinActivitySink* sink = g_activity_sink.load(std::memory_order_acquire);
  if (activity.correlation == 0 || sink == nullptr) return work();
  const std::uint64_t start = MonotonicNs();
  auto result = work();
  sink->ran(activity.kind, activity.correlation, start, MonotonicNs(), activity.stream,
            activity.bytes, activity.name, activity.copy);
  return result;
}

// Whether every pointer argument of a launch in the current context is memory its device may
// reach: its own, pinned host memory, or a peer's with peer access enabled. A pointer-sized
// argument that is no device address is not a pointer. (A GPU faults when the kernel runs and
// the context is lost; here the launch fails and the context is marked faulted.)
bool ReachableLocked(const Driver& d, const HostKernel& kernel, void** params) {
  const Primary& current = d.primaries[CurrentDevice()];
  for (std::size_t i = 0; i < kernel.params.size(); ++i) {
    if (kernel.params[i].size != sizeof(std::uintptr_t)) continue;
    std::uintptr_t value;
    std::memcpy(&value, params[i], sizeof(value));
    const auto it = FindAllocationLocked(d, value);
    if (it == d.allocations.end() || it->second.pinned_host) continue;
    if (it->second.device != CurrentDevice() && !current.peer[it->second.device]) return false;
  }
  return true;
}

CUresult Launch(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_mem_bytes, CUstream stream,
                void** kernel_params, void** extra) {
  Driver& d = GetDriver();
  const HostKernel* kernel;
  CUgraph_st* capture;
  std::shared_ptr<WorkQueue> queue;
  {
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    kernel = LaunchTargetLocked(d, f);
    if (kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (const CUresult r = CheckOwnStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
    if (kernel_params != nullptr && !ReachableLocked(d, *kernel, kernel_params)) {
      d.primaries[CurrentDevice()].faulted = true;
      LogDriverCall("fault: a kernel read another device's memory without peer access");
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    capture = CaptureLocked(d, stream);
    if (capture == nullptr && AsyncStreams()) queue = QueueForLocked(d, stream);
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (grid.x > static_cast<unsigned>(INT_MAX) || grid.y > 65535 || grid.z > 65535 ||
      block.x > 1024 || block.y > 1024 || block.z > 64 ||
      std::uint64_t{block.x} * block.y * block.z > 1024 ||
      shared_mem_bytes > kMaxSharedMemPerBlock) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<void*> from_extra;
  if (extra != nullptr) {  // {BUFFER_POINTER, p, BUFFER_SIZE, &size, END} in any order
    const unsigned char* buffer = nullptr;
    const std::size_t* buffer_size = nullptr;
    for (std::size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = static_cast<const unsigned char*>(extra[i + 1]);
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        buffer_size = static_cast<const std::size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (buffer == nullptr || buffer_size == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (const ParamSlot& slot : kernel->params) {
      if (slot.offset + slot.size > *buffer_size) return CUDA_ERROR_INVALID_VALUE;
      from_extra.push_back(const_cast<unsigned char*>(buffer + slot.offset));
    }
    kernel_params = from_extra.data();
  }
  if (kernel_params == nullptr && !kernel->params.empty()) return CUDA_ERROR_INVALID_VALUE;
  if (capture != nullptr) {
    // Captured: keep a copy of the argument bytes and launch them again at cuGraphLaunch.
    std::vector<std::vector<unsigned char>> copies;
    for (std::size_t i = 0; i < kernel->params.size(); ++i) {
      const auto* bytes = static_cast<const unsigned char*>(kernel_params[i]);
      copies.emplace_back(bytes, bytes + kernel->params[i].size);
    }
    std::lock_guard lock(d.mu);
    AddNodeLocked(capture, CU_GRAPH_NODE_TYPE_KERNEL,
                  [f, grid, block, shared_mem_bytes, copies](CUstream on) mutable {
                    std::vector<void*> pointers;
                    for (auto& copy : copies) pointers.push_back(copy.data());
                    return Launch(f, grid, block, shared_mem_bytes, on, pointers.data(), nullptr);
                  });
    return CUDA_SUCCESS;
  }
  const LaunchGeometry geometry{grid, block, shared_mem_bytes};
  Activity activity = BeginActivity(kNdtActivityKernel, stream);
  activity.name = kernel->mangled_name.data();
  if (kernel->mangled_name == kLibraryEntryKernel) {
    // The stand-in libraries' entry kernel computes nothing; their host computation that
    // follows (ndt_standin_run_as_kernel) is this launch's work, as on a GPU.
    t_library_launch = activity;
    activity.correlation = 0;
  }
  if (queue != nullptr) {  // its fault is reported by the next synchronisation with the stream
    std::vector<std::vector<unsigned char>> copies;
    for (std::size_t i = 0; i < kernel->params.size(); ++i) {
      const auto* bytes = static_cast<const unsigned char*>(kernel_params[i]);
      copies.emplace_back(bytes, bytes + kernel->params[i].size);
    }
    Enqueue(queue, [kernel, geometry, copies, activity]() mutable {
      std::vector<void*> pointers;
      for (auto& copy : copies) pointers.push_back(copy.data());
      return Timed(activity, [&] {
        return kernel->run(geometry, KernelArgs(pointers.data(), &CheckDeviceRange))
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_ILLEGAL_ADDRESS;
      });
    });
    return CUDA_SUCCESS;
  }
  if (DeferLaunches()) {
    std::vector<std::vector<unsigned char>> copies;
    for (std::size_t i = 0; i < kernel->params.size(); ++i) {
      const auto* bytes = static_cast<const unsigned char*>(kernel_params[i]);
      copies.emplace_back(bytes, bytes + kernel->params[i].size);
    }
    DeferredLaunches& deferred = GetDeferredLaunches();
    std::lock_guard lock(deferred.mu);
    deferred.work.push_back([kernel, geometry, copies, activity]() mutable {
      std::vector<void*> pointers;
      for (auto& copy : copies) pointers.push_back(copy.data());
      Timed(activity, [&] { return kernel->run(geometry, KernelArgs(pointers.data(), &CheckDeviceRange)); });
    });
    return CUDA_SUCCESS;
  }
  const KernelArgs args(kernel_params, &CheckDeviceRange);
  return Timed(activity, [&] { return kernel->run(geometry, args); }) ? CUDA_SUCCESS
                                                                      : CUDA_ERROR_ILLEGAL_ADDRESS;
}

CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** kernel_params, void** extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (config->numAttrs > 0 && config->attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Launch(f, {config->gridDimX, config->gridDimY, config->gridDimZ},
                {config->blockDimX, config->blockDimY, config->blockDimZ}, config->sharedMemBytes,
                config->hStream, kernel_params, extra);
}

// Which side of a copy an address must be on. kAny is cuMemcpy's unified addressing: an address
// inside an allocation is device memory (and the whole range must fit), anything else is host.
enum class Side { kHost, kDevice, kAny };

CUresult CheckSideLocked(const Driver& d, std::uintptr_t address, std::size_t bytes, Side side) {
  if (address == 0) return CUDA_ERROR_INVALID_VALUE;
  switch (side) {
    case Side::kHost:
      return CUDA_SUCCESS;
    case Side::kDevice:
      return DeviceRangeLocked(d, address, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case Side::kAny:
      if (FindAllocationLocked(d, address) == d.allocations.end()) return CUDA_SUCCESS;
      return DeviceRangeLocked(d, address, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// Whether `address` is pinned host memory (cuMemHostAlloc, cuMemHostRegister) or device memory,
// that is in the allocation table, and which of the two.
struct Placement {
  bool in_table = false;
  bool pinned_host = false;
};

Placement PlacementLocked(const Driver& d, std::uintptr_t address) {
  const auto it = FindAllocationLocked(d, address);
  if (it == d.allocations.end()) return {};
  return {true, it->second.pinned_host};
}

// A copy between `src` and `dst` as CUPTI's memcpy record describes it (NdtStandinCopy):
// memory the driver did not allocate is pageable host memory.
std::uint32_t CopyOf(const Placement& src, const Placement& dst) {
  constexpr std::uint32_t kPageable = 1, kPinned = 2, kDevice = 3;  // CUPTI's memory kinds
  const auto memory = [](const Placement& at) {
    return !at.in_table ? kPageable : at.pinned_host ? kPinned : kDevice;
  };
  const bool from_device = memory(src) == kDevice, to_device = memory(dst) == kDevice;
  // CUPTI's copy kinds: HTOD 1, DTOH 2, DTOD 8, HTOH 9.
  const std::uint32_t kind = from_device ? (to_device ? 8 : 2) : (to_device ? 1 : 9);
  return NdtStandinCopy(kind, memory(src), memory(dst));
}

// `height` rows of `width` bytes on `stream`, each side's rows `pitch` bytes apart (a 1D copy is
// one row: Copy). `host_synchronous`: the copy comes from a synchronous API (cuMemcpy,
// cuMemcpyHtoD_v2, cuMemcpy2D_v2, ...). Under NDT_STANDIN_ASYNC the copy is one item of the
// stream's work, and the host waits as CUDA's "API synchronization behavior" says: pageable
// source rows are staged (back to back) when the call is made; a pageable destination, or pinned
// host memory in a synchronous copy, makes the call return only once the copy has run;
// device-to-device copies never wait.
CUresult CopyRows(std::uintptr_t dst, Side dst_side, std::size_t dst_pitch, std::uintptr_t src,
                  Side src_side, std::size_t src_pitch, std::size_t width, std::size_t height,
                  CUstream stream, bool host_synchronous) {
  Driver& d = GetDriver();
  std::shared_ptr<WorkQueue> queue;
  Placement dst_at;
  Placement src_at;
  {
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (const CUresult r = CheckStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
    if (width == 0 || height == 0) return CUDA_SUCCESS;
    std::size_t dst_span = 0, src_span = 0, total = 0;
    if (__builtin_mul_overflow(height - 1, dst_pitch, &dst_span) ||
        __builtin_add_overflow(dst_span, width, &dst_span) ||
        __builtin_mul_overflow(height - 1, src_pitch, &src_span) ||
        __builtin_add_overflow(src_span, width, &src_span) ||
        __builtin_mul_overflow(width, height, &total)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (const CUresult r = CheckSideLocked(d, dst, dst_span, dst_side); r != CUDA_SUCCESS) return r;
    if (const CUresult r = CheckSideLocked(d, src, src_span, src_side); r != CUDA_SUCCESS) return r;
    if (CUgraph_st* capture = CaptureLocked(d, stream)) {
      AddNodeLocked(capture, CU_GRAPH_NODE_TYPE_MEMCPY, [=](CUstream on) {
        return CopyRows(dst, dst_side, dst_pitch, src, src_side, src_pitch, width, height, on,
                        false);
      });
      return CUDA_SUCCESS;
    }
    dst_at = PlacementLocked(d, dst);
    src_at = PlacementLocked(d, src);
    if (AsyncStreams()) queue = QueueForLocked(d, stream);
  }
  const auto move_rows = [=](std::uintptr_t from, std::size_t from_pitch) {
    for (std::size_t row = 0; row < height; ++row) {
      std::memmove(reinterpret_cast<void*>(dst + row * dst_pitch),
                   reinterpret_cast<const void*>(from + row * from_pitch), width);
    }
    return CUDA_SUCCESS;
  };
  Activity activity = BeginActivity(kNdtActivityMemcpy, stream, width * height);
  activity.copy = CopyOf(src_at, dst_at);
  if (queue == nullptr) return Timed(activity, [&] { return move_rows(src, src_pitch); });
  WorkItem item;
  if (!src_at.in_table) {
    auto staged = std::make_shared<std::vector<unsigned char>>(width * height);
    for (std::size_t row = 0; row < height; ++row) {
      std::memcpy(staged->data() + row * width,
                  reinterpret_cast<const void*>(src + row * src_pitch), width);
    }
    item = [=] {
      return Timed(activity, [&] {
        return move_rows(reinterpret_cast<std::uintptr_t>(staged->data()), width);
      });
    };
  } else {
    item = [=] { return Timed(activity, [&] { return move_rows(src, src_pitch); }); };
  }
  const std::uint64_t ticket = Enqueue(queue, std::move(item));
  const bool wait =
      !dst_at.in_table || (host_synchronous && (dst_at.pinned_host || src_at.pinned_host));
  return wait ? WaitForTicket(queue, ticket) : CUDA_SUCCESS;
}

// A copy of `bytes` on `stream` (CopyRows' rules).
CUresult Copy(std::uintptr_t dst, Side dst_side, std::uintptr_t src, Side src_side,
              std::size_t bytes, CUstream stream, bool host_synchronous = false) {
  return CopyRows(dst, dst_side, bytes, src, src_side, bytes, bytes, 1, stream, host_synchronous);
}

// A 2D copy (cuMemcpy2D*): the rows CopyRows moves, from host, device or unified memory on each
// side. Arrays are not supported.
CUresult Copy2D(const CUDA_MEMCPY2D* copy, CUstream stream, bool host_synchronous) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto side_of = [](CUmemorytype type, Side* side) {
    switch (type) {
      case CU_MEMORYTYPE_HOST:
        *side = Side::kHost;
        return true;
      case CU_MEMORYTYPE_DEVICE:
        *side = Side::kDevice;
        return true;
      case CU_MEMORYTYPE_UNIFIED:
        *side = Side::kAny;
        return true;
      default:
        return false;  // CU_MEMORYTYPE_ARRAY
    }
  };
  Side src_side, dst_side;
  if (!side_of(copy->srcMemoryType, &src_side) || !side_of(copy->dstMemoryType, &dst_side)) {
    return copy->srcMemoryType == CU_MEMORYTYPE_ARRAY || copy->dstMemoryType == CU_MEMORYTYPE_ARRAY
               ? CUDA_ERROR_NOT_SUPPORTED
               : CUDA_ERROR_INVALID_VALUE;
  }
  const std::size_t width = copy->WidthInBytes, height = copy->Height;
  if (height > 1 && (copy->srcPitch < width || copy->dstPitch < width)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto base = [](Side side, const void* host, CUdeviceptr device) {
    return side == Side::kHost ? reinterpret_cast<std::uintptr_t>(host)
                               : static_cast<std::uintptr_t>(device);
  };
  const std::uintptr_t src = base(src_side, copy->srcHost, copy->srcDevice) + copy->srcXInBytes +
                             copy->srcY * copy->srcPitch;
  const std::uintptr_t dst = base(dst_side, copy->dstHost, copy->dstDevice) + copy->dstXInBytes +
                             copy->dstY * copy->dstPitch;
  return CopyRows(dst, dst_side, copy->dstPitch, src, src_side, copy->srcPitch, width, height,
                  stream, host_synchronous);
}

// cuMemcpyPeer*: a copy between two devices' memory, each pointer memory of its context's
// device.
CUresult PeerCopy(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src, CUcontext src_context,
                  std::size_t bytes, CUstream stream, bool host_synchronous) {
  if (const CUresult r = CheckPeerCopy(dst, dst_context, src, src_context); r != CUDA_SUCCESS) {
    return r;
  }
  return Copy(dst, Side::kDevice, src, Side::kDevice, bytes, stream, host_synchronous);
}

// Writes `count` copies of the `element_size`-byte `pattern` at `dst`, which must be aligned to
// the element size.
// Under NDT_STANDIN_ASYNC a memset is queued; a synchronous one (`host_synchronous`) on pinned
// host memory returns once it has run, as CUDA documents.
CUresult Fill(std::uintptr_t dst, const void* pattern, std::size_t element_size, std::size_t count,
              CUstream stream, bool host_synchronous = false) {
  Driver& d = GetDriver();
  std::shared_ptr<WorkQueue> queue;
  bool pinned_host = false;
  {
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (const CUresult r = CheckStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
    if (dst % element_size != 0) return CUDA_ERROR_INVALID_VALUE;
    if (count == 0) return CUDA_SUCCESS;
    if (count > SIZE_MAX / element_size) return CUDA_ERROR_INVALID_VALUE;
    if (!DeviceRangeLocked(d, dst, count * element_size)) return CUDA_ERROR_INVALID_VALUE;
    if (CUgraph_st* capture = CaptureLocked(d, stream)) {
      std::array<unsigned char, 8> value{};
      std::memcpy(value.data(), pattern, std::min(element_size, value.size()));
      AddNodeLocked(capture, CU_GRAPH_NODE_TYPE_MEMSET, [=](CUstream on) {
        return Fill(dst, value.data(), element_size, count, on);
      });
      return CUDA_SUCCESS;
    }
    if (AsyncStreams()) {
      queue = QueueForLocked(d, stream);
      pinned_host = PlacementLocked(d, dst).pinned_host;
    }
  }
  const Activity activity = BeginActivity(kNdtActivityMemset, stream, count * element_size);
  if (queue != nullptr) {
    std::array<unsigned char, 8> value{};
    std::memcpy(value.data(), pattern, std::min(element_size, value.size()));
    const std::uint64_t ticket = Enqueue(queue, [=] {
      return Timed(activity, [&] {
        auto* out = reinterpret_cast<unsigned char*>(dst);
        for (std::size_t i = 0; i < count; ++i) {
          std::memcpy(out + i * element_size, value.data(), element_size);
        }
        return CUDA_SUCCESS;
      });
    });
    return host_synchronous && pinned_host ? WaitForTicket(queue, ticket) : CUDA_SUCCESS;
  }
  return Timed(activity, [&] {
    auto* out = reinterpret_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
      std::memcpy(out + i * element_size, pattern, element_size);
    }
    return CUDA_SUCCESS;
  });
}

// Synchronising a capturing stream is not allowed (the real driver also invalidates the
// capture; the stand-in only refuses).
CUresult StreamSync(CUstream stream) {
  Driver& d = GetDriver();
  std::shared_ptr<WorkQueue> queue;
  {
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (const CUresult r = CheckStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
    if (CaptureLocked(d, stream) != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!AsyncStreams()) return CUDA_SUCCESS;
    queue = QueueForLocked(d, stream);
  }
  return SynchronizeQueue(queue);
}

// cuStreamQuery: NOT_READY while queued work has not run.
CUresult StreamQuery(CUstream stream) {
  Driver& d = GetDriver();
  std::shared_ptr<WorkQueue> queue;
  {
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (const CUresult r = CheckStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
    if (!AsyncStreams() || CaptureLocked(d, stream) != nullptr) return CUDA_SUCCESS;
    queue = QueueForLocked(d, stream);
  }
  return QueueIdle(queue) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// cuLaunchHostFunc: runs `fn` now, or under NDT_STANDIN_ASYNC on the stream's worker in order.
CUresult LaunchHostFunc(CUstream stream, CUhostFn fn, void* user_data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = GetDriver();
  std::shared_ptr<WorkQueue> queue;
  {
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (const CUresult r = CheckStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
    if (AsyncStreams() && CaptureLocked(d, stream) == nullptr) queue = QueueForLocked(d, stream);
  }
  if (queue == nullptr) {
    fn(user_data);
    return CUDA_SUCCESS;
  }
  Enqueue(queue, [fn, user_data] {
    fn(user_data);
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

CUresult CreateStream(CUstream* out, unsigned flags, int priority) {
  return Guarded([&] {
    Driver& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (out == nullptr || (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto stream = std::make_unique<CUstream_st>();
    stream->device = CurrentDevice();
    stream->flags = flags;
    stream->priority = std::clamp(priority, kGreatestStreamPriority, kLeastStreamPriority);
    stream->id = d.next_stream_id++;
    if (AsyncStreams()) stream->queue = NewWorkQueue((flags & CU_STREAM_NON_BLOCKING) == 0);
    *out = stream.get();
    d.streams.emplace(stream.get(), std::move(stream));
    return CUDA_SUCCESS;
  });
}

// Returns at once; queued work still runs, then the stream's worker exits.
CUresult DestroyStream(CUstream stream) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = d.streams.find(stream);
  if (it == d.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second->queue != nullptr) CloseQueue(it->second->queue);
  d.streams.erase(it);
  return CUDA_SUCCESS;
}

CUresult StreamWaitEvent(CUstream stream, CUevent event, unsigned flags) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = CheckStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
  CUevent_st* e = FindEventLocked(d, event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != 0 && flags != CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
  // Waiting on an event recorded inside a capture joins that capture (cross-stream capture).
  if (e->capture != nullptr && d.capturing.contains(e->capture) && !IsBuiltinStream(stream)) {
    d.streams.at(stream)->capture = e->capture;
  }
  if (AsyncStreams() && CaptureLocked(d, stream) == nullptr) {
    EnqueueEventWait(QueueForLocked(d, stream), e->sync);
  }
  return CUDA_SUCCESS;
}

// Streams are queried for flags, priority and id; the built-in streams have fixed answers.
template <typename Visit>
CUresult WithStream(CUstream stream, bool per_thread_api, Visit&& visit) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (IsBuiltinStream(stream)) {
    const bool per_thread = stream == CU_STREAM_PER_THREAD || (stream == nullptr && per_thread_api);
    CUstream_st builtin;
    builtin.device = CurrentDevice();
    builtin.id = per_thread ? kPerThreadStreamId : kLegacyStreamId;
    visit(builtin);
    return CUDA_SUCCESS;
  }
  const auto it = d.streams.find(stream);
  if (it == d.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  visit(*it->second);
  return CUDA_SUCCESS;
}

CUresult RecordEvent(CUevent event, CUstream stream) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = CheckOwnStreamLocked(d, stream); r != CUDA_SUCCESS) return r;
  CUevent_st* e = FindEventLocked(d, event);
  if (e == nullptr || e->device != CurrentDevice()) return CUDA_ERROR_INVALID_HANDLE;
  e->capture = CaptureLocked(d, stream);
  if (e->capture != nullptr) return CUDA_SUCCESS;  // an edge of the graph, not a node
  e->recorded = true;
  e->time = std::chrono::steady_clock::now();
  if (AsyncStreams()) EnqueueEventRecord(QueueForLocked(d, stream), e->sync);
  return CUDA_SUCCESS;
}

// cuEventSynchronize (`wait`) and cuEventQuery: under NDT_STANDIN_ASYNC an event is complete when
// its latest record has run; otherwise every event is complete.
CUresult EventOp(CUevent event, bool wait) {
  Driver& d = GetDriver();
  std::shared_ptr<EventSync> sync;
  {
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    CUevent_st* e = FindEventLocked(d, event);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (!AsyncStreams()) return CUDA_SUCCESS;
    sync = e->sync;
  }
  if (wait) {
    WaitForEvent(sync);
    return CUDA_SUCCESS;
  }
  return EventComplete(sync) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult ElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUevent_st* a = FindEventLocked(d, start);
  const CUevent_st* b = FindEventLocked(d, end);
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
  if (AsyncStreams()) {
    std::chrono::steady_clock::time_point ta;
    std::chrono::steady_clock::time_point tb;
    if (!EventTime(a->sync, &ta) || !EventTime(b->sync, &tb)) return CUDA_ERROR_NOT_READY;
    *milliseconds = std::chrono::duration<float, std::milli>(tb - ta).count();
    return CUDA_SUCCESS;
  }
  *milliseconds = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return CUDA_SUCCESS;
}

CUresult DestroyEvent(CUevent event) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  return d.events.erase(event) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult ReleasePrimary(CUdevice device) {
  SynchronizeBeforeFree();
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(device); r != CUDA_SUCCESS) return r;
  Primary& primary = d.primaries[device];
  if (primary.retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary.retains == 0) DestroyContextResourcesLocked(d, device);
  return CUDA_SUCCESS;
}

CUresult ResetPrimary(CUdevice device) {
  SynchronizeBeforeFree();
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(device); r != CUDA_SUCCESS) return r;
  DestroyContextResourcesLocked(d, device);
  return CUDA_SUCCESS;
}

CUresult SetPrimaryFlags(CUdevice device, unsigned flags) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(device); r != CUDA_SUCCESS) return r;
  d.primaries[device].flags = flags;
  return CUDA_SUCCESS;
}

CUresult PushContext(CUcontext context) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (PrimaryOf(context) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return t_context_stack.push_back(context) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult PopContext(CUcontext* context) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (t_context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (context != nullptr) *context = t_context_stack.back();
  t_context_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult ContextDevice(CUdevice* device, CUcontext context) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (context == nullptr) {
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    context = CurrentContext();
  } else if (PrimaryOf(context) == nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = context->device;
  return CUDA_SUCCESS;
}

// Waits for the context's device only: other devices' streams go on running.
CUresult SynchronizeContext(CUcontext context) {
  Driver& d = GetDriver();
  std::vector<std::shared_ptr<WorkQueue>> other_devices;
  {
    std::lock_guard lock(d.mu);
    if (context == nullptr) {
      if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
      context = CurrentContext();
    } else if (PrimaryOf(context) == nullptr) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (!AsyncStreams()) return CUDA_SUCCESS;
    for (const auto& [handle, stream] : d.streams) {
      if (stream->device != context->device) other_devices.push_back(stream->queue);
    }
  }
  return SynchronizeQueuesExcept(other_devices);
}

CUresult DeviceUuid(CUuuid* uuid, CUdevice device) {
  Driver& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(device); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(uuid->bytes, kDeviceUuid, sizeof(kDeviceUuid));
  uuid->bytes[15] = static_cast<char>(device);  // the first device's is the single device's
  return CUDA_SUCCESS;
}

// What cuDeviceGetAttribute reports: an H200-like sm_90 part with 4 SMs. Attributes not listed
// are 0 (not supported / not present).
struct AttributeRow {
  CUdevice_attribute attribute;
  int value;
};

constexpr AttributeRow kAttributes[] = {
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, INT_MAX},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, kMaxSharedMemPerBlock},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_PITCH, INT_MAX},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000},  // kHz
    {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512},
    {CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT},
    {CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, 512},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
    {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000},  // kHz
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 6144},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50 * 1024 * 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
    {CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
    {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},  // stream-ordered allocation
};

int AttributeValue(CUdevice_attribute attribute) {
  for (const AttributeRow& row : kAttributes) {
    if (row.attribute == attribute) return row.value;
  }
  return 0;
}

// The error names and descriptions cuGetErrorName/cuGetErrorString return. Names come from
// cuda.h (standin_cu_results.inc); descriptions are the driver's for the common errors and the
// name for the rest.
struct ResultText {
  CUresult result;
  const char* name;
};

constexpr ResultText kResultNames[] = {
#define NDT_CU_RESULT(name) {name, #name},
#include "standin_cu_results.inc"
#undef NDT_CU_RESULT
};

constexpr ResultText kResultDescriptions[] = {
    {CUDA_SUCCESS, "no error"},
    {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "unknown error"},
};

// cuGetProcAddress: which exported variant a (base name, cudaVersion, flags) query selects.
// For each base name, the rows are in increasing `version`; a query takes the last row whose
// version is at most its cudaVersion, and the per-thread-default-stream variant when it asks
// for one and the row has it. The versions are the ones in cudaTypedefs.h's PFN_<name>_v<N>.
struct ProcRow {
  std::string_view base;
  int version;
  void* legacy;
  std::string_view legacy_name;
  void* per_thread;
  std::string_view per_thread_name;
};

#define NDT_PROC(base, version, fn) \
  { base, version, reinterpret_cast<void*>(&fn), #fn, reinterpret_cast<void*>(&fn), #fn }
#define NDT_PROC_PT(base, version, fn, pt_fn) \
  { base, version, reinterpret_cast<void*>(&fn), #fn, reinterpret_cast<void*>(&pt_fn), #pt_fn }

const ProcRow kProcRows[] = {
    NDT_PROC("cuInit", 2000, cuInit),
    NDT_PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
    NDT_PROC("cuGetErrorName", 6000, cuGetErrorName),
    NDT_PROC("cuGetErrorString", 6000, cuGetErrorString),
    NDT_PROC("cuGetProcAddress", 11030, cuGetProcAddress),
    NDT_PROC("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    NDT_PROC("cuDeviceGet", 2000, cuDeviceGet),
    NDT_PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
    NDT_PROC("cuDeviceGetName", 2000, cuDeviceGetName),
    NDT_PROC("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    NDT_PROC("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    NDT_PROC("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    NDT_PROC("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    NDT_PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    NDT_PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    NDT_PROC("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    NDT_PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    NDT_PROC("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    NDT_PROC("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    NDT_PROC("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    NDT_PROC("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    NDT_PROC("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    NDT_PROC("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    NDT_PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    NDT_PROC("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    NDT_PROC("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    NDT_PROC("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    NDT_PROC("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    NDT_PROC("cuCtxGetDevice", 2000, cuCtxGetDevice),
    NDT_PROC("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    NDT_PROC("cuCtxSynchronize", 2000, cuCtxSynchronize),
    NDT_PROC("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    NDT_PROC("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    NDT_PROC("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    NDT_PROC("cuMemAlloc", 2000, cuMemAlloc),
    NDT_PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
    NDT_PROC("cuMemFree", 2000, cuMemFree),
    NDT_PROC("cuMemFree", 3020, cuMemFree_v2),
    NDT_PROC("cuMemGetInfo", 2000, cuMemGetInfo),
    NDT_PROC("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    NDT_PROC("cuMemGetAddressRange", 2000, cuMemGetAddressRange),
    NDT_PROC("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    NDT_PROC("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    NDT_PROC_PT("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    NDT_PROC_PT("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    NDT_PROC("cuMemcpyHtoD", 2000, cuMemcpyHtoD),
    NDT_PROC_PT("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    NDT_PROC("cuMemcpyDtoH", 2000, cuMemcpyDtoH),
    NDT_PROC_PT("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    NDT_PROC("cuMemcpyDtoD", 2000, cuMemcpyDtoD),
    NDT_PROC_PT("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    NDT_PROC("cuMemcpyHtoDAsync", 2000, cuMemcpyHtoDAsync),
    NDT_PROC_PT("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    NDT_PROC_PT("cuMemcpy2D", 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds),
    NDT_PROC_PT("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds),
    NDT_PROC_PT("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz),
    NDT_PROC("cuMemcpyDtoHAsync", 2000, cuMemcpyDtoHAsync),
    NDT_PROC_PT("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    NDT_PROC("cuMemcpyDtoDAsync", 3000, cuMemcpyDtoDAsync),
    NDT_PROC_PT("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    NDT_PROC_PT("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds),
    NDT_PROC_PT("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz),
    NDT_PROC("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    NDT_PROC("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    NDT_PROC("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    NDT_PROC("cuMemsetD8", 2000, cuMemsetD8),
    NDT_PROC_PT("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    NDT_PROC("cuMemsetD16", 2000, cuMemsetD16),
    NDT_PROC_PT("cuMemsetD16", 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds),
    NDT_PROC("cuMemsetD32", 2000, cuMemsetD32),
    NDT_PROC_PT("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    NDT_PROC_PT("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    NDT_PROC_PT("cuMemsetD16Async", 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz),
    NDT_PROC_PT("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    NDT_PROC("cuStreamCreate", 2000, cuStreamCreate),
    NDT_PROC("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    NDT_PROC("cuStreamDestroy", 2000, cuStreamDestroy),
    NDT_PROC("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    NDT_PROC_PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    NDT_PROC_PT("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    NDT_PROC_PT("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    NDT_PROC_PT("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    NDT_PROC_PT("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    NDT_PROC_PT("cuStreamGetId", 12000, cuStreamGetId, cuStreamGetId_ptsz),
    NDT_PROC_PT("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    NDT_PROC("cuEventCreate", 2000, cuEventCreate),
    NDT_PROC_PT("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    NDT_PROC_PT("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags,
                cuEventRecordWithFlags_ptsz),
    NDT_PROC("cuEventSynchronize", 2000, cuEventSynchronize),
    NDT_PROC("cuEventQuery", 2000, cuEventQuery),
    NDT_PROC("cuEventElapsedTime", 2000, cuEventElapsedTime),
    NDT_PROC("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    NDT_PROC("cuEventDestroy", 2000, cuEventDestroy),
    NDT_PROC("cuEventDestroy", 4000, cuEventDestroy_v2),
    NDT_PROC("cuModuleLoadData", 2000, cuModuleLoadData),
    NDT_PROC("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    NDT_PROC("cuModuleLoadFatBinary", 2000, cuModuleLoadFatBinary),
    NDT_PROC("cuModuleGetFunction", 2000, cuModuleGetFunction),
    NDT_PROC("cuModuleUnload", 2000, cuModuleUnload),
    NDT_PROC("cuModuleGetLoadingMode", 11070, cuModuleGetLoadingMode),
    NDT_PROC("cuLibraryLoadData", 12000, cuLibraryLoadData),
    NDT_PROC("cuLibraryUnload", 12000, cuLibraryUnload),
    NDT_PROC("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    NDT_PROC("cuLibraryGetModule", 12000, cuLibraryGetModule),
    NDT_PROC("cuKernelGetFunction", 12000, cuKernelGetFunction),
    NDT_PROC("cuKernelGetName", 12030, cuKernelGetName),
    NDT_PROC("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    NDT_PROC("cuKernelGetLibrary", 12050, cuKernelGetLibrary),
    NDT_PROC("cuFuncGetName", 12030, cuFuncGetName),
    NDT_PROC("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    NDT_PROC("cuFuncGetModule", 11000, cuFuncGetModule),
    NDT_PROC("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    NDT_PROC_PT("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    NDT_PROC_PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    NDT_PROC("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    NDT_PROC("cuMemPoolCreate", 11020, cuMemPoolCreate),
    NDT_PROC("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    NDT_PROC("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    NDT_PROC("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    NDT_PROC("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    NDT_PROC_PT("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    NDT_PROC_PT("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    NDT_PROC_PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync,
                cuMemAllocFromPoolAsync_ptsz),
    NDT_PROC("cuMemAllocManaged", 6000, cuMemAllocManaged),
    NDT_PROC("cuMemHostAlloc", 2020, cuMemHostAlloc),
    NDT_PROC("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    NDT_PROC("cuMemFreeHost", 2000, cuMemFreeHost),
    NDT_PROC("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    NDT_PROC("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    NDT_PROC("cuMemHostUnregister", 4000, cuMemHostUnregister),
    NDT_PROC("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    NDT_PROC("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    NDT_PROC("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    NDT_PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
    NDT_PROC("cuMemAddressFree", 10020, cuMemAddressFree),
    NDT_PROC("cuMemCreate", 10020, cuMemCreate),
    NDT_PROC("cuMemRelease", 10020, cuMemRelease),
    NDT_PROC("cuMemMap", 10020, cuMemMap),
    NDT_PROC("cuMemUnmap", 10020, cuMemUnmap),
    NDT_PROC("cuMemSetAccess", 10020, cuMemSetAccess),
    NDT_PROC_PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2,
                cuStreamBeginCapture_v2_ptsz),
    NDT_PROC_PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    NDT_PROC_PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    NDT_PROC_PT("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3,
                cuStreamGetCaptureInfo_v3_ptsz),
    NDT_PROC("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    NDT_PROC("cuGraphGetNodes", 10000, cuGraphGetNodes),
    NDT_PROC("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    NDT_PROC("cuGraphInstantiate", 11040, cuGraphInstantiateWithFlags),
    NDT_PROC("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    NDT_PROC_PT("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    NDT_PROC("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    NDT_PROC("cuGraphDestroy", 10000, cuGraphDestroy),
};

#undef NDT_PROC
#undef NDT_PROC_PT

// `name` without an ABI suffix (_v2, _v3, _ptds, _ptsz, in any combination).
std::string_view BaseName(std::string_view name) {
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (std::string_view suffix : {"_ptds", "_ptsz"}) {
      if (name.ends_with(suffix)) {
        name.remove_suffix(suffix.size());
        stripped = true;
      }
    }
    const std::size_t underscore = name.rfind("_v");
    if (underscore != std::string_view::npos && underscore + 2 < name.size() &&
        name.find_first_not_of("0123456789", underscore + 2) == std::string_view::npos) {
      name.remove_suffix(name.size() - underscore);
      stripped = true;
    }
  }
  return name;
}

struct ProcLookup {
  CUresult result;
  CUdriverProcAddressQueryResult status;
  void* address;
  std::string_view name;  // of the symbol handed out, for the log
};

ProcLookup LookUpProc(std::string_view symbol, int cuda_version, cuuint64_t flags) {
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcRow* chosen = nullptr;
  bool known = false;
  for (const ProcRow& row : kProcRows) {
    if (row.base != symbol) continue;
    known = true;
    if (row.version <= cuda_version) chosen = &row;
  }
  if (chosen != nullptr) {
    return per_thread ? ProcLookup{CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS, chosen->per_thread,
                                   chosen->per_thread_name}
                      : ProcLookup{CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS, chosen->legacy,
                                   chosen->legacy_name};
  }
  if (known) {
    return {CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, nullptr, {}};
  }
  // Not implemented but exported by the real driver: hand out the stub, which fails cleanly.
  for (const DriverEntryPoint& entry : AllDriverEntryPoints()) {
    if (BaseName(entry.name) == symbol) {
      return {CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS, entry.address, entry.name};
    }
  }
  return {CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, nullptr, {}};
}

CUresult GetProcAddress(const char* api, const char* symbol, void** pfn, int cuda_version,
                        cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~kKnownFlags) != 0) {
    LogDriverCall(std::string(api) + " -> invalid value");
    return CUDA_ERROR_INVALID_VALUE;
  }
  const ProcLookup found = LookUpProc(symbol, cuda_version, flags);
  *pfn = found.address;
  if (status != nullptr) *status = found.status;
  std::string line = std::string(api) + " " + symbol + " " + std::to_string(cuda_version) + " " +
                     std::to_string(flags) + " -> ";
  if (found.result == CUDA_SUCCESS) {
    line += found.name;
  } else if (found.status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) {
    line += "version not sufficient";
  } else {
    line += "not found";
  }
  LogDriverCall(line);
  return found.result;
}

}  // namespace

void LogDriverCall(std::string_view line) {
  static const int fd = OpenCallLog();
  if (fd < 0) return;
  char buffer[512];
  const std::size_t n = std::min(line.size(), sizeof(buffer) - 1);
  std::memcpy(buffer, line.data(), n);
  buffer[n] = '\n';
  [[maybe_unused]] const ssize_t written = ::write(fd, buffer, n + 1);
}

}  // namespace ndt::standin

namespace ndt::standin {
CUresult Allocate(CUdeviceptr* dptr, size_t bytesize, const CUstream* stream,
                  bool pinned_host = false);
CUresult Free(CUdeviceptr dptr, const CUstream* stream, bool pinned_host = false);
CUresult FreeNow(CUdeviceptr dptr, const CUstream* stream, bool pinned_host);
}  // namespace ndt::standin

using ndt::standin::Dim3;
using ndt::standin::GetDriver;
using ndt::standin::Guarded;
using ndt::standin::RequireContextLocked;
using ndt::standin::RequireDevice;
using ndt::standin::RequireInitLocked;
using ndt::standin::Side;

#define NDT_SERVE()                          \
  do {                                       \
    ::ndt::standin::RunDeferredLaunches();   \
    ::ndt::standin::LogDriverCall(__func__); \
  } while (false)

// The stream an entry point of the per-thread API (_ptsz) means: the null stream is the calling
// thread's default stream.
static CUstream PerThread(CUstream stream) {
  return stream == nullptr ? CU_STREAM_PER_THREAD : stream;
}

extern "C" {

__attribute__((visibility("default"))) void ndt_standin_set_activity_sink(
    const NdtStandinActivitySink* sink) {
  ndt::standin::g_activity_sink.store(sink, std::memory_order_release);
}

__attribute__((visibility("default"))) void ndt_standin_runtime_call(int entering) {
  const NdtStandinActivitySink* sink =
      ndt::standin::g_activity_sink.load(std::memory_order_acquire);
  if (sink != nullptr) sink->runtime_call(entering);
}

__attribute__((visibility("default"))) void ndt_standin_run_as_kernel(CUstream stream,
                                                                      void (*work)(void*),
                                                                      void* context) {
  using namespace ndt::standin;
  // The work of the library's entry launch made just before, if any: else a kernel of its own.
  Activity activity = t_library_launch;
  t_library_launch = Activity{};
  if (activity.correlation == 0) activity = BeginActivity(kNdtActivityKernel, stream);
  Timed(activity, [&] {
    work(context);
    return 0;
  });
}

// cuStreamSynchronize for the stand-in libraries, which synchronise before they compute on the
// host: reached by dlsym, not through an entry point a tracer interposes, because the real
// libraries' calls are asynchronous and make no such call.
__attribute__((visibility("default"))) CUresult ndt_standin_stream_synchronize(CUstream stream) {
  ::ndt::standin::RunDeferredLaunches();
  return ndt::standin::StreamSync(stream);
}

// --- Initialization, version, errors -------------------------------------------------------

CUresult cuInit(unsigned int flags) {
  NDT_SERVE();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  d.initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  NDT_SERVE();
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = ndt::standin::kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  NDT_SERVE();
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& entry : ndt::standin::kResultNames) {
    if (entry.result == error) {
      *pStr = entry.name;
      return CUDA_SUCCESS;
    }
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  NDT_SERVE();
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& entry : ndt::standin::kResultDescriptions) {
    if (entry.result == error) {
      *pStr = entry.name;
      return CUDA_SUCCESS;
    }
  }
  for (const auto& entry : ndt::standin::kResultNames) {
    if (entry.result == error) {
      *pStr = entry.name;
      return CUDA_SUCCESS;
    }
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return Guarded([&] {
    return ndt::standin::GetProcAddress("cuGetProcAddress_v2", symbol, pfn, cudaVersion, flags,
                                        symbolStatus);
  });
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return Guarded([&] {
    return ndt::standin::GetProcAddress("cuGetProcAddress", symbol, pfn, cudaVersion, flags,
                                        nullptr);
  });
}

// --- Devices ---------------------------------------------------------------------------------

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ndt::standin::RequireDevice(ordinal) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = ndt::standin::DeviceCount();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(dev); r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", ndt::standin::kDeviceName);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  NDT_SERVE();
  return ndt::standin::DeviceUuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  NDT_SERVE();
  return ndt::standin::DeviceUuid(uuid, dev);
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(dev); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || static_cast<int>(attrib) <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pi = ndt::standin::AttributeValue(attrib);
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(dev); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = ndt::standin::kTotalMemBytes;
  return CUDA_SUCCESS;
}

// --- Primary context and the context stack ----------------------------------------------------

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(dev); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ++d.primaries[dev].retains;
  *pctx = &d.primaries[dev].context;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  NDT_SERVE();
  return ndt::standin::ReleasePrimary(dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  NDT_SERVE();
  return ndt::standin::ReleasePrimary(dev);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  NDT_SERVE();
  return ndt::standin::ResetPrimary(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  NDT_SERVE();
  return ndt::standin::ResetPrimary(dev);
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  NDT_SERVE();
  return ndt::standin::SetPrimaryFlags(dev, flags);
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  NDT_SERVE();
  return ndt::standin::SetPrimaryFlags(dev, flags);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(dev); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = d.primaries[dev].flags;
  *active = d.primaries[dev].retains > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = ndt::standin::CurrentContext();
  return CUDA_SUCCESS;
}

// Replaces the top of the calling thread's context stack; NULL pops it.
CUresult cuCtxSetCurrent(CUcontext ctx) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  auto& stack = ndt::standin::t_context_stack;
  if (ctx == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (ndt::standin::PrimaryOf(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) {
    stack.push_back(ctx);  // an empty stack has room
  } else {
    stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) {
  NDT_SERVE();
  return ndt::standin::PushContext(ctx);
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  NDT_SERVE();
  return ndt::standin::PushContext(ctx);
}

CUresult cuCtxPopCurrent(CUcontext* pctx) {
  NDT_SERVE();
  return ndt::standin::PopContext(pctx);
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  NDT_SERVE();
  return ndt::standin::PopContext(pctx);
}

CUresult cuCtxGetDevice(CUdevice* device) {
  NDT_SERVE();
  return ndt::standin::ContextDevice(device, nullptr);
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  NDT_SERVE();
  return ndt::standin::ContextDevice(device, ctx);
}

// Work runs when it is enqueued, so there is never anything to wait for.
CUresult cuCtxSynchronize(void) {
  NDT_SERVE();
  return ndt::standin::SynchronizeContext(nullptr);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  NDT_SERVE();
  return ndt::standin::SynchronizeContext(ctx);
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (ctx != nullptr && ndt::standin::PrimaryOf(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = ndt::standin::kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (leastPriority != nullptr) *leastPriority = ndt::standin::kLeastStreamPriority;
  if (greatestPriority != nullptr) *greatestPriority = ndt::standin::kGreatestStreamPriority;
  return CUDA_SUCCESS;
}

// --- Memory -----------------------------------------------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  NDT_SERVE();
  return ndt::standin::Allocate(dptr, bytesize, nullptr);
}
}  // extern "C"

namespace ndt::standin {

// cuMemAlloc_v2 and every allocator that behaves like it here (pools, managed, pitched, and
// with `pinned_host` cuMemHostAlloc): an aligned, zero-filled host block. `stream`, when not
// null, must be a valid stream. Pinned host memory does not count against device memory.
CUresult Allocate(CUdeviceptr* dptr, size_t bytesize, const CUstream* stream, bool pinned_host) {
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (stream != nullptr) {
      if (const CUresult r = CheckStreamLocked(d, *stream); r != CUDA_SUCCESS) return r;
    }
    if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    constexpr std::size_t kAlign = ndt::standin::kAllocationAlignment;
    const CUdevice device = CurrentDevice();
    if (!pinned_host && bytesize > ndt::standin::kTotalMemBytes - d.allocated_bytes[device]) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    const std::size_t rounded = (bytesize + kAlign - 1) / kAlign * kAlign;
    std::unique_ptr<unsigned char, AlignedFree> memory;
    if (auto reuse = d.freed.upper_bound({device, rounded});
        !pinned_host && reuse != d.freed.begin() &&
        std::prev(reuse)->first == std::pair{device, rounded}) {
      memory = std::move(std::prev(reuse)->second);
      d.freed.erase(std::prev(reuse));
      d.freed_bytes -= rounded;
    } else {
      memory.reset(static_cast<unsigned char*>(std::aligned_alloc(kAlign, rounded)));
      if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    std::memset(memory.get(), 0, rounded);
    const auto base = reinterpret_cast<std::uintptr_t>(memory.get());
    ndt::standin::Allocation allocation;
    allocation.memory = std::move(memory);
    allocation.size = bytesize;
    allocation.buffer_id = d.next_buffer_id++;
    allocation.pinned_host = pinned_host;
    allocation.device = device;
    d.allocations.emplace(base, std::move(allocation));
    if (!pinned_host) d.allocated_bytes[device] += bytesize;
    *dptr = base;
    return CUDA_SUCCESS;
  });
}

// cuMemFree_v2 and the like; with `pinned_host`, cuMemFreeHost. Each frees only its own kind.
CUresult Free(CUdeviceptr dptr, const CUstream* stream, bool pinned_host) {
  const CUresult result = FreeNow(dptr, stream, pinned_host);
  if (result == CUDA_SUCCESS && FreeReturnMicroseconds() != 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(FreeReturnMicroseconds()));
  }
  return result;
}

CUresult FreeNow(CUdeviceptr dptr, const CUstream* stream, bool pinned_host) {
  ndt::standin::SynchronizeBeforeFree();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (stream != nullptr) {
    if (const CUresult r = CheckStreamLocked(d, *stream); r != CUDA_SUCCESS) return r;
  }
  const auto it = d.allocations.find(dptr);
  if (it == d.allocations.end() || it->second.memory == nullptr ||
      it->second.pinned_host != pinned_host) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUmemPoolHandle_st* pool = it->second.pool; pool != nullptr) pool->used -= it->second.size;
  if (!pinned_host) {
    d.allocated_bytes[it->second.device] -= it->second.size;
    const std::size_t rounded = (it->second.size + kAllocationAlignment - 1) /
                                kAllocationAlignment * kAllocationAlignment;
    if (d.freed_bytes + rounded <= kFreedBytesKept) {
      d.freed.emplace(std::pair{it->second.device, rounded}, std::move(it->second.memory));
      d.freed_bytes += rounded;
    }
  }
  d.allocations.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace ndt::standin

extern "C" {

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  NDT_SERVE();
  return ndt::standin::Free(dptr, nullptr);
}

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *total = ndt::standin::kTotalMemBytes;
  *free = ndt::standin::kTotalMemBytes - d.allocated_bytes[ndt::standin::CurrentDevice()];
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = ndt::standin::FindAllocationLocked(d, dptr);
  if (it == d.allocations.end()) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = it->first;
  if (psize != nullptr) *psize = it->second.size;
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto it = ndt::standin::FindAllocationLocked(d, ptr);
  if (it == d.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = &d.primaries[it->second.device].context;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) =
          it->second.pinned_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!it->second.pinned_host) return CUDA_ERROR_INVALID_VALUE;  // not mapped into the host
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = it->second.buffer_id;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = it->second.device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = it->first;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = it->second.size;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) {
  NDT_SERVE();
  return ndt::standin::Copy2D(pCopy, nullptr, true);
}

CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  NDT_SERVE();
  return ndt::standin::Copy2D(pCopy, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) {
  NDT_SERVE();
  return ndt::standin::Copy2D(pCopy, nullptr, true);
}

CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  NDT_SERVE();
  return ndt::standin::Copy2D(pCopy, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy2D(pCopy, hStream, false);
}

CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy2D(pCopy, PerThread(hStream), false);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(dst, Side::kAny, src, Side::kAny, ByteCount, nullptr, true);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(dst, Side::kAny, src, Side::kAny, ByteCount, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(dst, Side::kAny, src, Side::kAny, ByteCount, hStream);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(dst, Side::kAny, src, Side::kAny, ByteCount, PerThread(hStream));
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, reinterpret_cast<std::uintptr_t>(srcHost),
                            Side::kHost, ByteCount, nullptr, true);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, reinterpret_cast<std::uintptr_t>(srcHost),
                            Side::kHost, ByteCount, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(reinterpret_cast<std::uintptr_t>(dstHost), Side::kHost, srcDevice,
                            Side::kDevice, ByteCount, nullptr, true);
}

CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(reinterpret_cast<std::uintptr_t>(dstHost), Side::kHost, srcDevice,
                            Side::kDevice, ByteCount, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, nullptr, true);
}

CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount,
                            CU_STREAM_PER_THREAD, true);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                              CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, reinterpret_cast<std::uintptr_t>(srcHost),
                            Side::kHost, ByteCount, hStream);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                   CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, reinterpret_cast<std::uintptr_t>(srcHost),
                            Side::kHost, ByteCount, PerThread(hStream));
}

CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(reinterpret_cast<std::uintptr_t>(dstHost), Side::kHost, srcDevice,
                            Side::kDevice, ByteCount, hStream);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(reinterpret_cast<std::uintptr_t>(dstHost), Side::kHost, srcDevice,
                            Side::kDevice, ByteCount, PerThread(hStream));
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, hStream);
}

CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Copy(dstDevice, Side::kDevice, srcDevice, Side::kDevice, ByteCount, PerThread(hStream));
}

CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                      CUcontext srcContext, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::PeerCopy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, nullptr,
                                true);
}

CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount) {
  NDT_SERVE();
  return ndt::standin::PeerCopy(dstDevice, dstContext, srcDevice, srcContext, ByteCount,
                                CU_STREAM_PER_THREAD, true);
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::PeerCopy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream,
                                false);
}

CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::PeerCopy(dstDevice, dstContext, srcDevice, srcContext, ByteCount,
                                PerThread(hStream), false);
}

CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (RequireDevice(dev) != CUDA_SUCCESS || RequireDevice(peerDev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *canAccessPeer = dev != peerDev && ndt::standin::PeerToPeer() ? 1 : 0;
  return CUDA_SUCCESS;
}

// Lets the current context reach `peerContext`'s memory (kept, not required: see the top).
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (ndt::standin::PrimaryOf(peerContext) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const CUdevice self = ndt::standin::CurrentDevice();
  if (peerContext->device == self) return CUDA_ERROR_INVALID_DEVICE;
  if (!ndt::standin::PeerToPeer()) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  bool& enabled = d.primaries[self].peer[peerContext->device];
  if (enabled) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  enabled = true;
  return CUDA_SUCCESS;
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (ndt::standin::PrimaryOf(peerContext) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  bool& enabled = d.primaries[ndt::standin::CurrentDevice()].peer[peerContext->device];
  if (!enabled) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  enabled = false;
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &uc, sizeof(uc), N, nullptr, true);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &uc, sizeof(uc), N, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &us, sizeof(us), N, nullptr, true);
}

CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &us, sizeof(us), N, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &ui, sizeof(ui), N, nullptr, true);
}

CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &ui, sizeof(ui), N, CU_STREAM_PER_THREAD, true);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &uc, sizeof(uc), N, hStream);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &uc, sizeof(uc), N, PerThread(hStream));
}

CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &us, sizeof(us), N, hStream);
}

CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                               CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &us, sizeof(us), N, PerThread(hStream));
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &ui, sizeof(ui), N, hStream);
}

CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Fill(dstDevice, &ui, sizeof(ui), N, PerThread(hStream));
}

// --- Streams ----------------------------------------------------------------------------------

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  NDT_SERVE();
  return ndt::standin::CreateStream(phStream, Flags, 0);
}

CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  NDT_SERVE();
  return ndt::standin::CreateStream(phStream, flags, priority);
}

CUresult cuStreamDestroy(CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::DestroyStream(hStream);
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::DestroyStream(hStream);
}

// Work already ran at enqueue time, so a valid stream is always complete.
CUresult cuStreamSynchronize(CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::StreamSync(hStream);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::StreamSync(PerThread(hStream));
}

CUresult cuStreamQuery(CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::StreamQuery(hStream);
}

CUresult cuStreamQuery_ptsz(CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::StreamQuery(PerThread(hStream));
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  NDT_SERVE();
  return ndt::standin::StreamWaitEvent(hStream, hEvent, Flags);
}

CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  NDT_SERVE();
  return ndt::standin::StreamWaitEvent(PerThread(hStream), hEvent, Flags);
}

CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  NDT_SERVE();
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::WithStream(hStream, false, [&](const CUstream_st& s) { *flags = s.flags; });
}

CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  NDT_SERVE();
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::WithStream(PerThread(hStream), true, [&](const CUstream_st& s) { *flags = s.flags; });
}

CUresult cuStreamGetPriority(CUstream hStream, int* priority) {
  NDT_SERVE();
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::WithStream(hStream, false,
                                  [&](const CUstream_st& s) { *priority = s.priority; });
}

CUresult cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
  NDT_SERVE();
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::WithStream(PerThread(hStream), true,
                                  [&](const CUstream_st& s) { *priority = s.priority; });
}

CUresult cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  NDT_SERVE();
  if (streamId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::WithStream(hStream, false, [&](const CUstream_st& s) { *streamId = s.id; });
}

CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long* streamId) {
  NDT_SERVE();
  if (streamId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::WithStream(PerThread(hStream), true, [&](const CUstream_st& s) { *streamId = s.id; });
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  NDT_SERVE();
  return ndt::standin::LaunchHostFunc(hStream, fn, userData);
}

CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  NDT_SERVE();
  return ndt::standin::LaunchHostFunc(PerThread(hStream), fn, userData);
}

// --- Events -----------------------------------------------------------------------------------

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    constexpr unsigned kKnown =
        CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (phEvent == nullptr || (Flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto event = std::make_unique<CUevent_st>();
    event->device = ndt::standin::CurrentDevice();
    event->flags = Flags;
    *phEvent = event.get();
    d.events.emplace(event.get(), std::move(event));
    return CUDA_SUCCESS;
  });
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::RecordEvent(hEvent, hStream);
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::RecordEvent(hEvent, PerThread(hStream));
}

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  NDT_SERVE();
  if (flags & ~unsigned{CU_EVENT_RECORD_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::RecordEvent(hEvent, hStream);
}

CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  NDT_SERVE();
  if (flags & ~unsigned{CU_EVENT_RECORD_EXTERNAL}) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::RecordEvent(hEvent, PerThread(hStream));
}

// The work an event follows has already run, so every event is complete.
CUresult cuEventSynchronize(CUevent hEvent) {
  NDT_SERVE();
  return ndt::standin::EventOp(hEvent, /*wait=*/true);
}

CUresult cuEventQuery(CUevent hEvent) {
  NDT_SERVE();
  return ndt::standin::EventOp(hEvent, /*wait=*/false);
}

CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  NDT_SERVE();
  return ndt::standin::ElapsedTime(pMilliseconds, hStart, hEnd);
}

CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  NDT_SERVE();
  return ndt::standin::ElapsedTime(pMilliseconds, hStart, hEnd);
}

CUresult cuEventDestroy(CUevent hEvent) {
  NDT_SERVE();
  return ndt::standin::DestroyEvent(hEvent);
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  NDT_SERVE();
  return ndt::standin::DestroyEvent(hEvent);
}

// --- Modules ----------------------------------------------------------------------------------

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    return ndt::standin::LoadModuleLocked(d, module, image);
  });
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                            CUjit_option* options, void** optionValues) {
  NDT_SERVE();
  if (numOptions > 0 && (options == nullptr || optionValues == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    return ndt::standin::LoadModuleLocked(d, module, image);
  });
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    return ndt::standin::LoadModuleLocked(d, module, fatCubin);
  });
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto it = d.modules.find(hmod);
    if (it == d.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
    return ndt::standin::GetFunctionLocked(d, it->second.get(), name, hfunc);
  });
}

CUresult cuModuleUnload(CUmodule hmod) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = d.modules.find(hmod);
  if (it == d.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second->library != nullptr) return CUDA_ERROR_NOT_PERMITTED;  // owned by its library
  ndt::standin::DestroyModuleLocked(d, hmod);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  NDT_SERVE();
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

// --- Libraries and kernels (context-independent) ---------------------------------------------

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                           void** jitOptionsValues, unsigned int numJitOptions,
                           CUlibraryOption* libraryOptions, void** libraryOptionValues,
                           unsigned int numLibraryOptions) {
  NDT_SERVE();
  if ((numJitOptions > 0 && (jitOptions == nullptr || jitOptionsValues == nullptr)) ||
      (numLibraryOptions > 0 && (libraryOptions == nullptr || libraryOptionValues == nullptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
    if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto loaded = std::make_unique<CUlib_st>();
    if (const CUresult r = ndt::standin::CopyImage(code, &loaded->image); r != CUDA_SUCCESS) {
      return r;
    }
    *library = loaded.get();
    d.libraries.emplace(loaded.get(), std::move(loaded));
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryUnload(CUlibrary library) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = d.libraries.find(library);
  if (it == d.libraries.end()) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto& [name, kernel] : it->second->kernels) d.kernels.erase(kernel.get());
  if (it->second->context_module != nullptr) {
    ndt::standin::DestroyModuleLocked(d, it->second->context_module);
  }
  d.libraries.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
    if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto it = d.libraries.find(library);
    if (it == d.libraries.end()) return CUDA_ERROR_INVALID_HANDLE;
    CUlib_st& lib = *it->second;
    if (const auto found = lib.kernels.find(std::string_view(name)); found != lib.kernels.end()) {
      *pKernel = found->second.get();
      return CUDA_SUCCESS;
    }
    const ndt::standin::HostKernel* host = ndt::standin::HostKernelOrSay(name);
    if (host == nullptr) return CUDA_ERROR_NOT_FOUND;
    auto kernel = std::make_unique<CUkern_st>();
    kernel->library = &lib;
    kernel->name = name;
    kernel->kernel = host;
    *pKernel = kernel.get();
    d.kernels.insert(kernel.get());
    lib.kernels.emplace(name, std::move(kernel));
    return CUDA_SUCCESS;
  });
}

CUresult cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto it = d.libraries.find(library);
    if (it == d.libraries.end()) return CUDA_ERROR_INVALID_HANDLE;
    *pMod = ndt::standin::LibraryModuleLocked(d, it->second.get());
    return CUDA_SUCCESS;
  });
}

CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!d.kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
    if (kernel->function == nullptr) {
      CUmod_st* module = ndt::standin::LibraryModuleLocked(d, kernel->library);
      CUfunction function;
      if (const CUresult r = ndt::standin::GetFunctionLocked(d, module, kernel->name, &function);
          r != CUDA_SUCCESS) {
        return r;
      }
      kernel->function = function;
    }
    *pFunc = kernel->function;
    return CUDA_SUCCESS;
  });
}

CUresult cuKernelGetName(const char** name, CUkernel hfunc) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!d.kernels.contains(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *name = hfunc->name.c_str();
  return CUDA_SUCCESS;
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                              size_t* paramSize) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (!d.kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  return ndt::standin::ParamInfo(*kernel->kernel, paramIndex, paramOffset, paramSize);
}

CUresult cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!d.kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  *pLib = kernel->library;
  return CUDA_SUCCESS;
}

// --- Functions (per context). These take a CUfunction only, not a CUkernel cast to one. ------

CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!d.functions.contains(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *name = hfunc->name.c_str();
  return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                            size_t* paramSize) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (!d.functions.contains(func)) return CUDA_ERROR_INVALID_HANDLE;
  return ndt::standin::ParamInfo(*func->kernel, paramIndex, paramOffset, paramSize);
}

CUresult cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!d.functions.contains(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  *hmod = hfunc->module;
  return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (pi == nullptr || static_cast<int>(attrib) < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!d.functions.contains(hfunc)) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = 32;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      *pi = 90;
      break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *pi = 90;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = static_cast<int>(ndt::standin::kMaxSharedMemPerBlock);
      break;
    default:
      *pi = 0;
      break;
  }
  return CUDA_SUCCESS;
}

// --- Stream-ordered allocation and memory pools (every pool allocates like cuMemAlloc_v2) -----

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = RequireDevice(dev); r != CUDA_SUCCESS) return r;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pool_out = &d.default_pool;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
    if (pool == nullptr || poolProps == nullptr ||
        poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || poolProps->location.id != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto created = std::make_unique<CUmemPoolHandle_st>();
    *pool = created.get();
    d.pools.emplace(created.get(), std::move(created));
    return CUDA_SUCCESS;
  });
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (!d.pools.contains(pool)) return CUDA_ERROR_INVALID_VALUE;
  // Its live allocations stay valid (the driver releases the pool once they are freed).
  for (auto& [base, allocation] : d.allocations) {
    if (allocation.pool == pool) allocation.pool = nullptr;
  }
  d.pools.erase(pool);
  return CUDA_SUCCESS;
}

static bool KnownPoolLocked(const ndt::standin::Driver& d, CUmemoryPool pool) {
  return pool == &d.default_pool || d.pools.contains(pool);
}

// The pool's int attribute `attr` (a reuse flag), or null.
static int* ReuseFlag(CUmemoryPool pool, CUmemPool_attribute attr) {
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      return &pool->reuse_follow_event_dependencies;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      return &pool->reuse_allow_opportunistic;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return &pool->reuse_allow_internal_dependencies;
    default:
      return nullptr;
  }
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (!KnownPoolLocked(d, pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (int* flag = ReuseFlag(pool, attr); flag != nullptr) {
    *flag = *static_cast<int*>(value);
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:  // only a reset (0) is allowed
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->used_high = pool->used;
      return CUDA_SUCCESS;
    default:  // the current figures are read-only; other attributes are not kept here
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (!KnownPoolLocked(d, pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (const int* flag = ReuseFlag(pool, attr); flag != nullptr) {
    *static_cast<int*>(value) = *flag;
    return CUDA_SUCCESS;
  }
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = pool->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:  // the pool keeps nothing beyond what is used
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = pool->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = pool->used_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Nothing freed is kept by a pool here, so there is nothing to trim.
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  NDT_SERVE();
  (void)minBytesToKeep;
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  return KnownPoolLocked(d, pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Allocates from `pool` (the device's default pool for cuMemAllocAsync) and counts it there.
static CUresult AllocateFromPool(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream stream) {
  auto& d = GetDriver();
  {
    std::lock_guard lock(d.mu);
    if (!KnownPoolLocked(d, pool)) return CUDA_ERROR_INVALID_VALUE;
  }
  const CUresult result = ndt::standin::Allocate(dptr, bytesize, &stream);
  if (result != CUDA_SUCCESS) return result;
  std::lock_guard lock(d.mu);
  const auto it = d.allocations.find(*dptr);
  if (it != d.allocations.end() && KnownPoolLocked(d, pool)) {
    it->second.pool = pool;
    pool->used += bytesize;
    pool->used_high = std::max(pool->used_high, pool->used);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  NDT_SERVE();
  return AllocateFromPool(dptr, bytesize, &GetDriver().default_pool, hStream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  NDT_SERVE();
  return AllocateFromPool(dptr, bytesize, &GetDriver().default_pool, PerThread(hStream));
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                 CUstream hStream) {
  NDT_SERVE();
  return AllocateFromPool(dptr, bytesize, pool, hStream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream) {
  NDT_SERVE();
  return AllocateFromPool(dptr, bytesize, pool, PerThread(hStream));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Free(dptr, &hStream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  NDT_SERVE();
  return ndt::standin::Free(dptr, &hStream);
}

// Managed memory is device memory here (host memory already).
// Pinned host memory: a zero-filled host block in the allocation table, its device address the
// host address (unified addressing), so stream work (kernels, copies) reaches it in stream order.
CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  NDT_SERVE();
  constexpr unsigned kKnownFlags =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == nullptr || (Flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto& d = GetDriver();
  CUdeviceptr base = 0;
  const CUresult r = ndt::standin::Allocate(&base, bytesize, nullptr, true);
  if (r == CUDA_SUCCESS) {
    *pp = reinterpret_cast<void*>(base);
    std::lock_guard lock(d.mu);
    d.allocations.at(base).host_flags = Flags;
  }
  return r;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  const auto it = ndt::standin::FindAllocationLocked(d, address);
  if (it == d.allocations.end() || !it->second.pinned_host) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = address;
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void* p) {
  NDT_SERVE();
  return ndt::standin::Free(reinterpret_cast<CUdeviceptr>(p), nullptr, true);
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  NDT_SERVE();
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr base = 0;
  const CUresult r = ndt::standin::Allocate(&base, bytesize, nullptr, true);
  if (r == CUDA_SUCCESS) *pp = reinterpret_cast<void*>(base);
  return r;
}

// Page-locks the program's own memory: it becomes pinned host memory in the allocation table
// (reachable by kernels and copies at the same address) until cuMemHostUnregister.
CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  constexpr unsigned kKnownFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                   CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == nullptr || bytesize == 0 || (Flags & ~kKnownFlags) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (Flags & CU_MEMHOSTREGISTER_IOMEMORY) return CUDA_ERROR_NOT_SUPPORTED;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  const auto next = d.allocations.lower_bound(base);
  if (ndt::standin::FindAllocationLocked(d, base) != d.allocations.end() ||
      (next != d.allocations.end() && next->first < base + bytesize)) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  ndt::standin::Allocation allocation;
  allocation.size = bytesize;
  allocation.buffer_id = d.next_buffer_id++;
  allocation.pinned_host = true;
  allocation.registered = true;
  allocation.host_flags = Flags;
  allocation.device = ndt::standin::CurrentDevice();
  d.allocations.emplace(base, std::move(allocation));
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  NDT_SERVE();
  ndt::standin::SynchronizeBeforeFree();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto it = d.allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == d.allocations.end() || !it->second.registered) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  d.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto it = ndt::standin::FindAllocationLocked(d, reinterpret_cast<std::uintptr_t>(p));
  if (it == d.allocations.end() || !it->second.pinned_host) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = it->second.host_flags;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  NDT_SERVE();
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::Allocate(dptr, bytesize, nullptr);
}

// Rows padded to a multiple of 512 bytes.
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  NDT_SERVE();
  if (pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  constexpr size_t kPitchAlign = 512;
  const size_t pitch = (WidthInBytes + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
  if (Height > SIZE_MAX / pitch) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = ndt::standin::Allocate(dptr, pitch * Height, nullptr);
  if (r == CUDA_SUCCESS) *pPitch = pitch;
  return r;
}

// --- Virtual memory management: reservations are PROT_NONE mappings, physical allocations
// memfd files, cuMemMap maps one over part of a reservation (readable and writable at once;
// cuMemSetAccess only checks its range). ---------------------------------------------------------

constexpr size_t kVmmGranularity = size_t{2} << 20;

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  NDT_SERVE();
  if (granularity == nullptr || prop == nullptr ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
       option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || size == 0 || size % kVmmGranularity != 0 || flags != 0 ||
      (alignment != 0 && alignment > kVmmGranularity)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The requested address is a hint. The real driver (seen on an H200 with driver 580) placed
  // every range asked for at another process's addresses elsewhere, near its own: so does this
  // one, unless NDT_STANDIN_RESERVE_AT_HINT=1, which honours a request whose range is free
  // (MAP_FIXED_NOREPLACE never replaces a mapping; a kernel that does not know the flag takes it
  // as a hint).
  static const bool at_hint = [] {
    const char* value = std::getenv("NDT_STANDIN_RESERVE_AT_HINT");
    return value != nullptr && std::string_view(value) == "1";
  }();
  if (at_hint && addr != 0 && addr % kVmmGranularity == 0) {
    void* fixed = ::mmap(reinterpret_cast<void*>(addr), size, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (fixed == reinterpret_cast<void*>(addr)) {
      d.reservations.emplace(addr, size);
      *ptr = addr;
      return CUDA_SUCCESS;
    }
    if (fixed != MAP_FAILED) ::munmap(fixed, size);
  }
  // Anywhere else (as the real driver does when the requested range is taken): over-reserve by
  // one granule to place the range on a granule boundary.
  void* raw = ::mmap(nullptr, size + kVmmGranularity, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t base = (start + kVmmGranularity - 1) / kVmmGranularity * kVmmGranularity;
  if (base > start) ::munmap(raw, base - start);
  const std::uintptr_t end = start + size + kVmmGranularity;
  if (end > base + size) ::munmap(reinterpret_cast<void*>(base + size), end - (base + size));
  d.reservations.emplace(base, size);
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  NDT_SERVE();
  ndt::standin::SynchronizeBeforeFree();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = d.reservations.find(ptr);
  if (it == d.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto a = d.allocations.lower_bound(ptr); a != d.allocations.end() && a->first < ptr + size;) {
    a = a->second.memory == nullptr ? d.allocations.erase(a) : std::next(a);
  }
  ::munmap(reinterpret_cast<void*>(ptr), size);
  d.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 ||
      size % kVmmGranularity != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int fd = ::memfd_create("ndt-standin-vmm", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = d.next_physical++;
  d.physical.emplace(*handle, ndt::standin::Driver::Physical{fd, size});
  return CUDA_SUCCESS;
}

// Mappings keep the memory alive after release, as in CUDA.
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  NDT_SERVE();
  ndt::standin::SynchronizeBeforeFree();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = d.physical.find(handle);
  if (it == d.physical.end()) return CUDA_ERROR_INVALID_VALUE;
  ::close(it->second.fd);
  d.physical.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  const auto physical = d.physical.find(handle);
  if (physical == d.physical.end() || flags != 0 || size == 0 || offset != 0 ||
      size > physical->second.size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto reservation = d.reservations.upper_bound(ptr);
  if (reservation == d.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --reservation;
  if (ptr + size > reservation->first + reservation->second) return CUDA_ERROR_INVALID_VALUE;
  const auto next = d.allocations.lower_bound(ptr);
  if ((next != d.allocations.end() && next->first < ptr + size) ||
      ndt::standin::FindAllocationLocked(d, ptr) != d.allocations.end()) {
    return CUDA_ERROR_INVALID_VALUE;  // already mapped
  }
  void* mapped = ::mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED, physical->second.fd, 0);
  if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ndt::standin::Allocation allocation;
  allocation.size = size;
  allocation.buffer_id = d.next_buffer_id++;
  allocation.device = ndt::standin::CurrentDevice();
  d.allocations.emplace(ptr, std::move(allocation));
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  NDT_SERVE();
  ndt::standin::SynchronizeBeforeFree();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = d.allocations.find(ptr);
  if (it == d.allocations.end() || it->second.memory != nullptr || it->second.pinned_host ||
      it->second.size != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ::mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  d.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return ndt::standin::DeviceRangeLocked(d, ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// --- Graphs: stream capture records each launch, copy and memset as a node; cuGraphLaunch runs
// the nodes in capture order on its stream. Events recorded and waited on inside a capture
// join other streams to it (no nodes, as in CUDA). ----------------------------------------------

static CUresult BeginCapture(CUstream hStream, CUstreamCaptureMode mode) {
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (ndt::standin::IsBuiltinStream(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    const auto it = d.streams.find(hStream);
    if (it == d.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    if (it->second->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
    static std::atomic<uint64_t> next_capture_id{0};
    auto graph = std::make_unique<CUgraph_st>();
    graph->origin = hStream;
    graph->capture_id = ++next_capture_id;
    it->second->capture = graph.get();
    d.capturing.insert(graph.get());
    d.graphs.emplace(graph.get(), std::move(graph));
    return CUDA_SUCCESS;
  });
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  NDT_SERVE();
  return BeginCapture(hStream, mode);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  NDT_SERVE();
  return BeginCapture(PerThread(hStream), mode);
}

static CUresult EndCapture(CUstream hStream, CUgraph* phGraph) {
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgraph_st* graph = ndt::standin::CaptureLocked(d, hStream);
  if (graph == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (graph->origin != hStream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  for (auto& [handle, stream] : d.streams) {
    if (stream->capture == graph) stream->capture = nullptr;
  }
  d.capturing.erase(graph);
  graph->origin = nullptr;
  *phGraph = graph;
  return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  NDT_SERVE();
  return EndCapture(hStream, phGraph);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  NDT_SERVE();
  return EndCapture(PerThread(hStream), phGraph);
}

static CUresult IsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = ndt::standin::CheckStreamLocked(d, hStream); r != CUDA_SUCCESS) return r;
  if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *captureStatus = ndt::standin::CaptureLocked(d, hStream) != nullptr
                       ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                       : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  NDT_SERVE();
  return IsCapturing(hStream, captureStatus);
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  NDT_SERVE();
  return IsCapturing(PerThread(hStream), captureStatus);
}

// The capture a stream belongs to: its status, the capture sequence's id and graph. The graph's
// frontier is not kept: no dependencies are reported.
static CUresult GetCaptureInfo(CUstream hStream, CUstreamCaptureStatus* status_out,
                               cuuint64_t* id_out, CUgraph* graph_out,
                               const CUgraphNode** dependencies_out,
                               const CUgraphEdgeData** edge_data_out,
                               size_t* num_dependencies_out) {
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
  if (const CUresult r = ndt::standin::CheckStreamLocked(d, hStream); r != CUDA_SUCCESS) return r;
  if (status_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgraph_st* graph = ndt::standin::CaptureLocked(d, hStream);
  *status_out = graph != nullptr ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id_out != nullptr) *id_out = graph != nullptr ? graph->capture_id : 0;
  if (graph_out != nullptr) *graph_out = graph;
  if (dependencies_out != nullptr) *dependencies_out = nullptr;
  if (edge_data_out != nullptr) *edge_data_out = nullptr;
  if (num_dependencies_out != nullptr) *num_dependencies_out = 0;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                   cuuint64_t* id_out, CUgraph* graph_out,
                                   const CUgraphNode** dependencies_out,
                                   const CUgraphEdgeData** edgeData_out,
                                   size_t* numDependencies_out) {
  NDT_SERVE();
  return GetCaptureInfo(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
}

CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                        cuuint64_t* id_out, CUgraph* graph_out,
                                        const CUgraphNode** dependencies_out,
                                        const CUgraphEdgeData** edgeData_out,
                                        size_t* numDependencies_out) {
  NDT_SERVE();
  return GetCaptureInfo(PerThread(hStream), captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
}

// The calling thread's capture interaction mode: kept and exchanged (the stand-in does not refuse
// calls that a capture in another mode would make unsafe).
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  NDT_SERVE();
  thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  if (mode == nullptr ||
      (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
       *mode != CU_STREAM_CAPTURE_MODE_RELAXED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::swap(*mode, t_mode);
  return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (const CUresult r = RequireInitLocked(d); r != CUDA_SUCCESS) return r;
  const auto it = d.graphs.find(hGraph);
  if (it == d.graphs.end() || numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto& all = it->second->nodes;
  if (nodes != nullptr) {
    const size_t n = std::min(*numNodes, all.size());
    for (size_t i = 0; i < n; ++i) nodes[i] = all[i].get();
    for (size_t i = n; i < *numNodes; ++i) nodes[i] = nullptr;
    *numNodes = n;
  } else {
    *numNodes = all.size();
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  if (hNode == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [handle, graph] : d.graphs) {
    for (const auto& node : graph->nodes) {
      if (node.get() == hNode) {
        *type = node->type;
        return CUDA_SUCCESS;
      }
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                     unsigned long long flags) {
  NDT_SERVE();
  return Guarded([&] {
    auto& d = GetDriver();
    std::lock_guard lock(d.mu);
    if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
    const auto it = d.graphs.find(hGraph);
    if (phGraphExec == nullptr || it == d.graphs.end() || it->second->origin != nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (flags & ~static_cast<unsigned long long>(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                                 CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    auto exec = std::make_unique<CUgraphExec_st>();
    for (const auto& node : it->second->nodes) exec->work.push_back(node->run);
    *phGraphExec = exec.get();
    d.graph_execs.emplace(exec.get(), std::move(exec));
    return CUDA_SUCCESS;
  });
}

static CUresult GraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return Guarded([&] {
    std::vector<std::function<CUresult(CUstream)>> work;
    {
      auto& d = GetDriver();
      std::lock_guard lock(d.mu);
      if (const CUresult r = RequireContextLocked(d); r != CUDA_SUCCESS) return r;
      if (const CUresult r = ndt::standin::CheckStreamLocked(d, hStream); r != CUDA_SUCCESS) {
        return r;
      }
      if (ndt::standin::CaptureLocked(d, hStream) != nullptr) {
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // graphs in graphs: not modelled
      }
      const auto it = d.graph_execs.find(hGraphExec);
      if (it == d.graph_execs.end()) return CUDA_ERROR_INVALID_VALUE;
      work = it->second->work;
    }
    for (auto& step : work) {
      if (const CUresult r = step(hStream); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  NDT_SERVE();
  return GraphLaunch(hGraphExec, hStream);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  NDT_SERVE();
  return GraphLaunch(hGraphExec, PerThread(hStream));
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  return d.graph_execs.erase(hGraphExec) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphDestroy(CUgraph hGraph) {
  NDT_SERVE();
  auto& d = GetDriver();
  std::lock_guard lock(d.mu);
  const auto it = d.graphs.find(hGraph);
  if (it == d.graphs.end() || it->second->origin != nullptr) return CUDA_ERROR_INVALID_VALUE;
  d.graphs.erase(it);
  return CUDA_SUCCESS;
}

// --- Launch -----------------------------------------------------------------------------------

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                        void** kernelParams, void** extra) {
  NDT_SERVE();
  return Guarded([&] {
    return ndt::standin::Launch(f, Dim3{gridDimX, gridDimY, gridDimZ},
                                Dim3{blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                                kernelParams, extra);
  });
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra) {
  NDT_SERVE();
  return Guarded([&] {
    return ndt::standin::Launch(f, Dim3{gridDimX, gridDimY, gridDimZ},
                                Dim3{blockDimX, blockDimY, blockDimZ}, sharedMemBytes,
                                PerThread(hStream), kernelParams, extra);
  });
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                          void** extra) {
  NDT_SERVE();
  return Guarded([&] { return ndt::standin::LaunchEx(config, f, kernelParams, extra); });
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                               void** extra) {
  NDT_SERVE();
  return Guarded([&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUlaunchConfig per_thread = *config;
    per_thread.hStream = PerThread(config->hStream);
    return ndt::standin::LaunchEx(&per_thread, f, kernelParams, extra);
  });
}

}  // extern "C"
