#include "tracer/gpu_time.h"

#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cupti_work_cbids.h"
#include "formats/records.h"
#include "kernels/digest_v1.h"
#include "tracer/real_dl.h"
#include "tracer/recorder.h"
#include "tracer/tls_ref.h"

namespace ndt::tracer::gpu_time {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;  // per buffer CUPTI asks for
constexpr size_t kCorrelationsKept = size_t{1} << 16;
constexpr size_t kUnmatchedKept = size_t{1} << 16;
// torch.profiler's Kineto pushes CUSTOM0 around its ops and CUSTOM1 around user annotations;
// a driver op's id, which can stay pushed after its hook returns (Scope), is CUSTOM2, which it
// does not use.
constexpr CUpti_ExternalCorrelationKind kDriverKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
constexpr CUpti_ExternalCorrelationKind kLibraryKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;

// The CUPTI functions we call, from the libcupti we loaded.
struct Cupti {
  CUptiResult (*get_version)(uint32_t*) = nullptr;
  CUptiResult (*get_timestamp)(uint64_t*) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*push)(CUpti_ExternalCorrelationKind, uint64_t) = nullptr;
  CUptiResult (*pop)(CUpti_ExternalCorrelationKind, uint64_t*) = nullptr;
  // Optional (older CUPTIs lack them): API records of chosen functions only.
  CUptiResult (*enable_driver_api)(CUpti_CallbackId, uint8_t) = nullptr;
  CUptiResult (*enable_runtime_api)(CUpti_CallbackId, uint8_t) = nullptr;
};

// The activity kinds ndtrace enables; and the API records of the runtime and driver functions
// that start work (cupti_work_cbids.h), or where CUPTI cannot choose functions, the RUNTIME and
// DRIVER kinds whole. API records are not read: CUPTI writes external correlation records only
// before API records, so without them there are none (on an H200 every activity came back tied
// to no op). Only the calls that start work: an API record costs every call that has one.
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
constexpr CUpti_ActivityKind kApiKinds[] = {CUPTI_ACTIVITY_KIND_RUNTIME,
                                            CUPTI_ACTIVITY_KIND_DRIVER};

// Turns the API records of the work-starting functions on or off; false when a call failed.
bool SetWorkApiRecords(const Cupti& c, bool on) {
  bool ok = true;
  if (c.enable_driver_api != nullptr && c.enable_runtime_api != nullptr) {
    for (uint32_t cbid : kDriverWorkCbids) ok &= c.enable_driver_api(cbid, on) == CUPTI_SUCCESS;
    for (uint32_t cbid : kRuntimeWorkCbids) ok &= c.enable_runtime_api(cbid, on) == CUPTI_SUCCESS;
    return ok;
  }
  for (CUpti_ActivityKind kind : kApiKinds) {
    ok &= (on ? c.enable(kind) : c.disable(kind)) == CUPTI_SUCCESS;
  }
  return ok;
}

// Whether this thread's last driver op left its id pushed (Scope), and whether any thread's
// ever did (not one thread-local read per hook while GPU times are off).
thread_local bool t_driver_id_pushed = false;
std::atomic<bool> g_driver_ids_pushed{false};
// The driver id that marks ndtrace's own GPU work (OwnWork): no op's.
constexpr uint64_t kOwnWork = UINT64_MAX;

// Which ops one CUPTI correlation id (one driver API call) belongs to.
struct Owners {
  std::optional<uint64_t> op;
  std::optional<uint64_t> library_op;
};

struct State {
  Cupti cupti;
  std::atomic<bool> active{false};
  std::mutex mutex;  // guards everything below; CUPTI delivers buffers on its own thread
  Session* session = nullptr;
  int64_t offset_ns = 0;  // trace clock minus CUPTI's
  std::unordered_map<uint32_t, Owners> owners;  // by correlation id
  std::deque<uint32_t> owner_order;             // oldest first, to bound `owners`
  // Activities whose correlation record has not arrived yet (another buffer).
  std::vector<std::pair<uint32_t, format::GpuActivityRecord>> unmatched;
};

State& Get() {
  static State* state = new State();  // never destroyed: CUPTI may deliver during exit
  return *state;
}

uint64_t TraceTime(const State& s, uint64_t cupti_ns) {
  const int64_t t = static_cast<int64_t>(cupti_ns) + s.offset_ns;
  return t < 0 ? 0 : static_cast<uint64_t>(t);
}

void CUPTIAPI RequestBuffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void AppendLocked(State& s, uint32_t correlation, format::GpuActivityRecord record) {
  const auto owner = s.owners.find(correlation);
  if (owner == s.owners.end()) {
    if (s.unmatched.size() < kUnmatchedKept) s.unmatched.emplace_back(correlation, record);
    return;
  }
  record.op_sequence = owner->second.op;
  record.library_op_sequence = owner->second.library_op;
  if (s.session != nullptr) s.session->Append(format::Record(record));
}

void NoteOwnerLocked(State& s, const CUpti_ActivityExternalCorrelation& c) {
  if (c.externalKind != kDriverKind && c.externalKind != kLibraryKind) return;
  if (c.externalKind == kDriverKind && c.externalId == kOwnWork) return;
  auto [it, added] = s.owners.try_emplace(c.correlationId);
  if (added) {
    s.owner_order.push_back(c.correlationId);
    if (s.owner_order.size() > kCorrelationsKept) {
      s.owners.erase(s.owner_order.front());
      s.owner_order.pop_front();
    }
  }
  (c.externalKind == kLibraryKind ? it->second.library_op : it->second.op) = c.externalId;
  // Activities that arrived before this record.
  for (size_t i = 0; i < s.unmatched.size();) {
    if (s.unmatched[i].first != c.correlationId) {
      ++i;
      continue;
    }
    format::GpuActivityRecord record = s.unmatched[i].second;
    record.op_sequence = it->second.op;
    record.library_op_sequence = it->second.library_op;
    if (s.session != nullptr) s.session->Append(format::Record(record));
    s.unmatched.erase(s.unmatched.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

format::GpuActivityRecord Activity(const State& s, format::GpuActivityKind kind, uint64_t start,
                                   uint64_t end, uint32_t stream) {
  format::GpuActivityRecord record;
  record.kind = kind;
  record.start_ns = TraceTime(s, start);
  record.end_ns = TraceTime(s, end);
  record.device_stream = stream;
  return record;
}

void CUPTIAPI CompleteBuffer(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  State& s = Get();
  try {
    std::lock_guard lock(s.mutex);
    CUpti_Activity* record = nullptr;
    while (s.cupti.next_record != nullptr &&
           s.cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
          NoteOwnerLocked(s, *reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record));
          break;
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          format::GpuActivityRecord activity =
              Activity(s, format::GpuActivityKind::kKernel, k->start, k->end, k->streamId);
          // A digest kernel ndtrace launched from inside the program's runtime call carries
          // that call's correlation id: its own work all the same (OwnWork cannot mark it).
          if (k->name != nullptr && std::strncmp(k->name, kernels::kDigestKernelPrefix,
                                                 sizeof kernels::kDigestKernelPrefix - 1) == 0) {
            if (s.session != nullptr) s.session->Append(format::Record(activity));
            break;
          }
          AppendLocked(s, k->correlationId, activity);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          AppendLocked(s, m->correlationId,
                       Activity(s, format::GpuActivityKind::kMemcpy, m->start, m->end, m->streamId));
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          AppendLocked(s, m->correlationId,
                       Activity(s, format::GpuActivityKind::kMemset, m->start, m->end, m->streamId));
          break;
        }
        default:
          break;
      }
    }
  } catch (...) {
    // Never into CUPTI's thread: the activities of this buffer are lost.
  }
  std::free(buffer);
}

// Takes the id of the calling thread's last driver op off CUPTI's stack (Scope).
void PopDriverId() {
  if (!g_driver_ids_pushed.load(std::memory_order_relaxed)) return;
  bool& pushed = TlsRef(t_driver_id_pushed);
  if (!pushed) return;
  pushed = false;
  uint64_t popped = 0;
  Get().cupti.pop(kDriverKind, &popped);
}

template <typename F>
bool Resolve(void* library, const char* name, F* out) {
  *out = reinterpret_cast<F>(RealDlsym()(library, name));
  return *out != nullptr;
}

}  // namespace

bool Active() { return Get().active.load(std::memory_order_relaxed); }

std::string Start(Session* session, bool simulated_device) {
  const char* setting = std::getenv("NDTRACE_GPU_TIME");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return "off (NDTRACE_GPU_TIME=0)";
  const char* path = std::getenv("NDTRACE_CUPTI");
  const char* library_name = path != nullptr && *path != '\0' ? path : "libcupti.so.13";
  void* library = dlopen(library_name, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return std::string("off (no CUPTI: cannot load ") + library_name + ")";
  if (simulated_device && RealDlsym()(library, "ndt_standin_cupti") == nullptr) {
    return "off (a stand-in device and a real libcupti: CUPTI needs the real driver)";
  }
  State& s = Get();
  Cupti& c = s.cupti;
  if (!Resolve(library, "cuptiGetVersion", &c.get_version) ||
      !Resolve(library, "cuptiGetTimestamp", &c.get_timestamp) ||
      !Resolve(library, "cuptiActivityEnable", &c.enable) ||
      !Resolve(library, "cuptiActivityDisable", &c.disable) ||
      !Resolve(library, "cuptiActivityRegisterCallbacks", &c.register_callbacks) ||
      !Resolve(library, "cuptiActivityFlushAll", &c.flush_all) ||
      !Resolve(library, "cuptiActivityGetNextRecord", &c.next_record) ||
      !Resolve(library, "cuptiActivityPushExternalCorrelationId", &c.push) ||
      !Resolve(library, "cuptiActivityPopExternalCorrelationId", &c.pop)) {
    return "off (libcupti lacks a function of the activity API)";
  }
  Resolve(library, "cuptiActivityEnableDriverApi", &c.enable_driver_api);
  Resolve(library, "cuptiActivityEnableRuntimeApi", &c.enable_runtime_api);
  uint32_t version = 0;
  if (c.get_version(&version) != CUPTI_SUCCESS || version != CUPTI_API_VERSION) {
    // Activity record layouts change between CUPTI versions: read none we were not built for.
    return "off (CUPTI API version " + std::to_string(version) + ", ndtrace reads " +
           std::to_string(CUPTI_API_VERSION) + ")";
  }
  {
    std::lock_guard lock(s.mutex);
    s.session = session;
    uint64_t cupti_now = 0;
    c.get_timestamp(&cupti_now);
    s.offset_ns = static_cast<int64_t>(session->NowNs()) - static_cast<int64_t>(cupti_now);
  }
  if (c.register_callbacks(RequestBuffer, CompleteBuffer) != CUPTI_SUCCESS) {
    return "off (CUPTI refused the activity buffers: another tool may own CUPTI)";
  }
  for (CUpti_ActivityKind kind : kKinds) {
    if (c.enable(kind) != CUPTI_SUCCESS) {
      for (CUpti_ActivityKind other : kKinds) c.disable(other);
      return "off (CUPTI refused activity kind " + std::to_string(static_cast<int>(kind)) + ")";
    }
  }
  if (!SetWorkApiRecords(c, true)) {
    SetWorkApiRecords(c, false);
    for (CUpti_ActivityKind kind : kKinds) c.disable(kind);
    return "off (CUPTI refused the API records of the functions that start work)";
  }
  s.active.store(true, std::memory_order_release);
  return "on (CUPTI " + std::to_string(version) + ": kernels, copies and memsets)";
}

void Stop(bool flush) {
  State& s = Get();
  if (!s.active.exchange(false, std::memory_order_acq_rel)) return;
  PopDriverId();  // this thread's; another thread's stays pushed, of a kind nobody else uses
  std::unique_lock lock(s.mutex, std::defer_lock);
  if (flush) {
    s.cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    lock.lock();
  } else if (!lock.try_lock()) {
    return;  // CUPTI's thread holds it, perhaps stopped by the same signal
  }
  // What never met its correlation record is still GPU time: kept, tied to no op.
  for (auto& [correlation, record] : s.unmatched) {
    if (s.session != nullptr) s.session->Append(format::Record(record));
  }
  s.unmatched.clear();
  s.session = nullptr;
}

void YieldToProgram() {
  State& s = Get();
  if (!s.active.load(std::memory_order_acquire)) return;
  Session* session = nullptr;
  {
    std::lock_guard lock(s.mutex);
    session = s.session;
  }
  Stop();
  for (CUpti_ActivityKind kind : kKinds) s.cupti.disable(kind);
  SetWorkApiRecords(s.cupti, false);
  if (session == nullptr) return;
  format::TracerNote note;
  note.text =
      "GPU time: off from here: the program registered CUPTI activity buffers of its own (a "
      "profiler, such as torch.profiler with CUDA activities), and CUPTI serves one client";
  note.time_ns = session->NowNs();
  session->Append(note);
}

void ForgetAfterFork() {
  State& s = Get();
  s.active.store(false, std::memory_order_relaxed);
  new (&s.mutex) std::mutex();
  s.session = nullptr;
  s.unmatched.clear();
  s.owners.clear();
  s.owner_order.clear();
}

// A driver op's id is pushed before its real call and popped only when this thread's next op
// begins (or GPU times stop): the program may have reached the driver through the runtime
// (cudaLaunchKernel calls cuLaunchKernel), whose work carries the runtime call's correlation id,
// and CUPTI writes that call's record, preceded by the ids pushed then, when it returns, after
// the hook has. A library op's id is popped when its call returns. What the runtime calls on the
// thread in between (cudaGetLastError) is tied to the op too; such calls start no work.
Scope::Scope(std::optional<uint64_t> sequence, bool library) : library_(library) {
  PopDriverId();  // also after GPU times stopped: a profiler that took CUPTI over sees none
  State& s = Get();
  if (!s.active.load(std::memory_order_relaxed) || !sequence) return;
  pushed_ = s.cupti.push(library ? kLibraryKind : kDriverKind, *sequence) == CUPTI_SUCCESS;
  if (pushed_ && !library) {
    t_driver_id_pushed = true;
    if (!g_driver_ids_pushed.load(std::memory_order_relaxed)) g_driver_ids_pushed.store(true);
  }
}

Scope::~Scope() {
  if (!pushed_ || !library_) return;
  uint64_t popped = 0;
  Get().cupti.pop(kLibraryKind, &popped);
}

OwnWork::OwnWork() {
  State& s = Get();
  if (!s.active.load(std::memory_order_relaxed)) return;
  pushed_ = s.cupti.push(kDriverKind, kOwnWork) == CUPTI_SUCCESS;
}

OwnWork::~OwnWork() {
  if (!pushed_) return;
  uint64_t popped = 0;
  Get().cupti.pop(kDriverKind, &popped);
}

}  // namespace ndt::tracer::gpu_time
