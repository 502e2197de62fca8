// The stand-in libcupti.so.13: the part of CUPTI's activity API ndtrace uses (tracer/gpu_time.h),
// over the stand-in driver's reports of the work it runs (standin_activity.h).
//
// As CUPTI does: every runtime call and every driver call made outside the runtime that starts
// work gets a correlation id, and the work's CONCURRENT_KERNEL / MEMCPY / MEMSET record (with its
// start and end, from the steady clock as cuptiGetTimestamp gives it) carries it: a driver call
// the runtime makes inside a runtime call has no id of its own, and its work carries the runtime
// call's. External correlation records come only with API records (CUPTI's header: "when a CUPTI
// activity API record is created while within an external API region"), so only when the RUNTIME
// or DRIVER kind is enabled: before the API record, one per kind of external id pushed on the
// thread when the call began: a driver call's record is written when it starts its work, a
// runtime call's when it returns (it carries the call's end time), with the ids pushed when it was
// entered; an id pushed inside a runtime call, around the driver call it makes, is not tied to
// its work, whether popped there or left pushed. As tests/programs/cupti_correlation.cu showed on
// an H200 (tools/gpu_suite.sh's gputime step): the runtime's own driver calls get no DRIVER
// records, and the work a runtime call starts carries the ids pushed before it. Records are
// written into the buffers the client hands out, in the order they happen. A full buffer is
// delivered (the client's completion callback) on the stand-in's own delivery thread, as CUPTI
// delivers on a thread of its own, never on the thread whose work filled it;
// cuptiActivityFlushAll delivers the rest on the calling thread and returns once every buffer
// handed over before it has been delivered. Only what the activities above need is implemented;
// the rest of CUPTI is absent.
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "standin_activity.h"

namespace {

struct State {
  std::mutex mutex;  // guards everything below
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  bool enabled[CUPTI_ACTIVITY_KIND_COUNT] = {};
  uint8_t* buffer = nullptr;  // the buffer being filled, from `request`
  size_t size = 0;
  size_t used = 0;
  std::vector<std::pair<uint8_t*, size_t>> full;  // filled buffers, to deliver
  std::condition_variable changed;  // `full` filled, or `delivering` fell to 0
  int delivering = 0;               // buffers taken from `full`, being delivered
  pid_t worker_pid = 0;             // the process whose delivery thread runs (fork: none)
  std::atomic<uint32_t> next_correlation{1};
};

State& Get() {
  static State* state = new State();  // never destroyed: the driver may report during exit
  return *state;
}

// The external ids pushed on this thread, per kind. Trivially destructible: the tracer's exit
// digests run after the main thread's thread-locals are destroyed.
struct Pushed {
  static constexpr int kDepth = 16;  // deeper pushes are counted, not kept
  uint64_t ids[kDepth];
  int depth = 0;
  bool empty() const { return depth == 0; }
  uint64_t back() const { return ids[std::min(depth, kDepth) - 1]; }
};
thread_local Pushed t_pushed[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];
// The runtime calls this thread is inside (nested: a launch through another runtime function),
// and the outermost one's correlation id.
thread_local int t_runtime_depth = 0;
thread_local uint32_t t_runtime_correlation = 0;
// The external ids pushed on this thread when the outermost runtime call began (0: none).
thread_local uint64_t t_runtime_external[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];
thread_local bool t_runtime_has_external[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];
thread_local uint64_t t_runtime_start_ns = 0;  // when the outermost one began

size_t RecordSize(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    default: return 0;
  }
}

size_t Padded(size_t bytes) { return (bytes + 7) / 8 * 8; }

// Copies `record` into the current buffer (asking for one, handing a full one over).
template <typename Record>
void WriteLocked(State& s, const Record& record) {
  const size_t bytes = Padded(sizeof(Record));
  if (s.buffer != nullptr && s.used + bytes > s.size) {
    s.full.emplace_back(s.buffer, s.used);
    s.buffer = nullptr;
  }
  if (s.buffer == nullptr) {
    if (s.request == nullptr) return;
    size_t max_records = 0;
    s.request(&s.buffer, &s.size, &max_records);
    s.used = 0;
    if (s.buffer == nullptr || s.size < bytes) {
      s.buffer = nullptr;
      return;  // the client gave no room: the record is dropped, as CUPTI drops it
    }
  }
  std::memcpy(s.buffer + s.used, &record, sizeof(Record));
  s.used += bytes;
}

// Hands buffers taken from `full` to the client, outside the lock; `delivering` counted them.
void Deliver(std::vector<std::pair<uint8_t*, size_t>> buffers) {
  State& s = Get();
  CUpti_BuffersCallbackCompleteFunc complete;
  {
    std::lock_guard lock(s.mutex);
    complete = s.complete;
  }
  for (auto& [buffer, valid] : buffers) {
    if (complete != nullptr) complete(nullptr, 0, buffer, valid, valid);
  }
  std::lock_guard lock(s.mutex);
  s.delivering -= static_cast<int>(buffers.size());
  if (s.delivering == 0) s.changed.notify_all();
}

// Takes every filled buffer for Deliver. Under the lock.
std::vector<std::pair<uint8_t*, size_t>> TakeFullLocked(State& s) {
  std::vector<std::pair<uint8_t*, size_t>> full;
  full.swap(s.full);
  s.delivering += static_cast<int>(full.size());
  return full;
}

void* DeliveryThread(void*) {
  State& s = Get();
  while (true) {
    std::vector<std::pair<uint8_t*, size_t>> full;
    {
      std::unique_lock lock(s.mutex);
      s.changed.wait(lock, [&] { return !s.full.empty(); });
      full = TakeFullLocked(s);
    }
    Deliver(std::move(full));
  }
}

// In the child of fork(): the parent's delivery thread and the buffers it was delivering are
// not here. Under the lock.
void ForgetParentLocked(State& s) {
  if (s.worker_pid == 0 || s.worker_pid == getpid()) return;
  s.worker_pid = 0;
  s.delivering = 0;
}

// Starts this process's delivery thread if it has none, with every signal blocked. Under the
// lock. Without one (pthread_create failed), buffers are delivered at the flush.
void StartDeliveryLocked(State& s) {
  ForgetParentLocked(s);
  if (s.worker_pid != 0) return;
  s.worker_pid = getpid();
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  pthread_create(&thread, &attributes, DeliveryThread, nullptr);
  pthread_attr_destroy(&attributes);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

// After a record was written: a filled buffer goes to the delivery thread. Under the lock.
void HandOverLocked(State& s) {
  if (s.full.empty()) return;
  StartDeliveryLocked(s);
  s.changed.notify_all();
}

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// The API record of call `correlation` (RUNTIME or DRIVER), preceded by the external correlation
// records of the ids pushed on this thread when the call began (a driver call: now; a runtime
// call: t_runtime_external); nothing when its kind is not enabled. Under the lock.
void WriteApiRecordLocked(State& s, CUpti_ActivityKind kind, uint32_t correlation) {
  if (!s.enabled[kind]) return;
  const bool runtime = kind == CUPTI_ACTIVITY_KIND_RUNTIME;
  if (s.enabled[CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION]) {
    for (int external = 0; external < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++external) {
      if (runtime ? !t_runtime_has_external[external] : t_pushed[external].empty()) continue;
      CUpti_ActivityExternalCorrelation record{};
      record.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      record.externalKind = static_cast<CUpti_ExternalCorrelationKind>(external);
      record.externalId = runtime ? t_runtime_external[external] : t_pushed[external].back();
      record.correlationId = correlation;
      WriteLocked(s, record);
    }
  }
  CUpti_ActivityAPI record{};
  record.kind = kind;
  record.end = NowNs();
  record.start = runtime ? t_runtime_start_ns : record.end;
  record.processId = static_cast<uint32_t>(getpid());
  record.threadId = static_cast<uint32_t>(pthread_self());
  record.correlationId = correlation;
  WriteLocked(s, record);
}

// A driver call that starts work: the correlation id its work carries.
uint32_t ApiCall(int /*work*/) {
  State& s = Get();
  if (t_runtime_depth > 0) {  // the runtime's own call
    return t_runtime_correlation;
  }
  const uint32_t correlation = s.next_correlation.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(s.mutex);
  WriteApiRecordLocked(s, CUPTI_ACTIVITY_KIND_DRIVER, correlation);
  HandOverLocked(s);
  return correlation;
}

void RuntimeCall(int entering) {
  State& s = Get();
  if (entering != 0) {
    if (t_runtime_depth++ == 0) {
      t_runtime_correlation = s.next_correlation.fetch_add(1, std::memory_order_relaxed);
      t_runtime_start_ns = NowNs();
      for (int external = 0; external < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++external) {
        t_runtime_has_external[external] = !t_pushed[external].empty();
        t_runtime_external[external] = t_pushed[external].empty() ? 0 : t_pushed[external].back();
      }
    }
    return;
  }
  if (t_runtime_depth == 0 || --t_runtime_depth > 0) return;
  std::lock_guard lock(s.mutex);
  WriteApiRecordLocked(s, CUPTI_ACTIVITY_KIND_RUNTIME, t_runtime_correlation);
  HandOverLocked(s);
}

template <typename Record>
void Fill(Record* record, CUpti_ActivityKind kind, uint32_t correlation, uint64_t start,
          uint64_t end, uint32_t stream) {
  record->kind = kind;
  record->start = start;
  record->end = end;
  record->streamId = stream;
  record->correlationId = correlation;
}

void Ran(int kind, uint32_t correlation, uint64_t start, uint64_t end, uint32_t stream,
         uint64_t bytes, const char* name, uint32_t copy) {
  State& s = Get();
  {
    std::lock_guard lock(s.mutex);
    if (kind == kNdtActivityKernel && s.enabled[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]) {
      CUpti_ActivityKernel10 record{};
      Fill(&record, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, correlation, start, end, stream);
      record.completed = end;
      record.name = name;
      WriteLocked(s, record);
    } else if (kind == kNdtActivityMemcpy && s.enabled[CUPTI_ACTIVITY_KIND_MEMCPY]) {
      CUpti_ActivityMemcpy6 record{};
      Fill(&record, CUPTI_ACTIVITY_KIND_MEMCPY, correlation, start, end, stream);
      record.bytes = bytes;
      record.copyKind = static_cast<uint8_t>(copy & 0xff);
      record.srcKind = static_cast<uint8_t>((copy >> 8) & 0xff);
      record.dstKind = static_cast<uint8_t>((copy >> 16) & 0xff);
      WriteLocked(s, record);
    } else if (kind == kNdtActivityMemset && s.enabled[CUPTI_ACTIVITY_KIND_MEMSET]) {
      CUpti_ActivityMemset4 record{};
      Fill(&record, CUPTI_ACTIVITY_KIND_MEMSET, correlation, start, end, stream);
      record.bytes = bytes;
      WriteLocked(s, record);
    }
    HandOverLocked(s);
  }
}

const NdtStandinActivitySink kSink{ApiCall, RuntimeCall, Ran};

// Tells the stand-in driver to report to us. Loaded here if the program has not yet (a real
// libcupti needs libcuda.so.1: a profiler can enable activities before the first CUDA call).
bool ListenToDriver(bool on) {
  static void* const driver = dlopen("libcuda.so.1", RTLD_NOW);  // kept, as a DT_NEEDED is
  if (driver == nullptr) return false;
  auto set = reinterpret_cast<void (*)(const NdtStandinActivitySink*)>(
      dlsym(driver, "ndt_standin_set_activity_sink"));
  if (set == nullptr) return false;
  set(on ? &kSink : nullptr);
  return true;
}

}  // namespace

extern "C" {

// Marks this libcupti as ndtrace's stand-in: on a stand-in device the tracer uses no other.
__attribute__((visibility("default"))) extern const int ndt_standin_cupti;
const int ndt_standin_cupti = 1;

CUptiResult cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char** text) {
  if (text == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *text = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (stand-in)";
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now().time_since_epoch())
                                         .count());
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  if (request == nullptr || complete == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard lock(Get().mutex);
  Get().request = request;
  Get().complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (RecordSize(kind) == 0) return CUPTI_ERROR_NOT_SUPPORTED;
  if (!ListenToDriver(true)) return CUPTI_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(Get().mutex);
  Get().enabled[kind] = true;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (RecordSize(kind) == 0) return CUPTI_ERROR_NOT_SUPPORTED;
  std::lock_guard lock(Get().mutex);
  Get().enabled[kind] = false;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  State& s = Get();
  std::vector<std::pair<uint8_t*, size_t>> full;
  {
    std::lock_guard lock(s.mutex);
    ForgetParentLocked(s);
    if (s.buffer != nullptr) {
      s.full.emplace_back(s.buffer, s.used);
      s.buffer = nullptr;
    }
    full = TakeFullLocked(s);
  }
  Deliver(std::move(full));
  // Buffers the delivery thread took earlier: delivered before this returns.
  std::unique_lock lock(s.mutex);
  s.changed.wait(lock, [&] { return s.delivering == 0; });
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  uint8_t* next = buffer;
  if (*record != nullptr) {
    const size_t size = RecordSize((*record)->kind);
    if (size == 0) return CUPTI_ERROR_INVALID_KIND;
    next = reinterpret_cast<uint8_t*>(*record) + Padded(size);
  }
  if (next + sizeof(CUpti_Activity) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  const size_t size = RecordSize(reinterpret_cast<CUpti_Activity*>(next)->kind);
  if (size == 0 || next + size > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                   uint64_t id) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  Pushed& pushed = t_pushed[kind];
  if (pushed.depth < Pushed::kDepth) pushed.ids[pushed.depth] = id;
  ++pushed.depth;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                  uint64_t* id) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  Pushed& pushed = t_pushed[kind];
  if (pushed.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (id != nullptr) *id = pushed.back();
  --pushed.depth;
  return CUPTI_SUCCESS;
}

}  // extern "C"
