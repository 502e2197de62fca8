#include "tracer/gpu_time.h"

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "formats/records.h"
#include "kernels/digest_v1.h"
#include "tracer/real_dl.h"
#include "tracer/recorder.h"
#include "tracer/tls_ref.h"

namespace ndt::tracer::gpu_time {

// A thread's driver ops as CUPTI names them (DriverScope; "How a driver op is named" below).
constexpr uint64_t kRingSize = uint64_t{1} << 14;  // ops of a thread CUPTI may deliver late
struct ThreadTokens {
  uint64_t slot = 0;
  uint32_t thread = 0;  // pthread_self(), as CUPTI's API records give it (32 bits)
  uint64_t next = 0;    // the thread's next op count
  bool pushed = false;  // the token of `next` is on CUPTI's stack
  // Whether the thread's first op began with no token pushed (the runtime call that made it
  // carries none: TieFirstOpLocked), and when, on CUPTI's clock.
  std::atomic<bool> first_unannounced{false};
  uint64_t first_op_cupti_ns = 0;
  std::atomic<uint64_t> ring[kRingSize] = {};
  // Per ring entry: the library op the op was made inside, plus one (0: none), with kOwnNear
  // and kToHost.
  std::atomic<uint64_t> around[kRingSize] = {};
  // ndtrace made copies of its own since the thread's last op began (OwnWork): the next op is
  // marked kOwnNear.
  bool own_pending = false;
};

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
};

// The activity kinds ndtrace enables. The RUNTIME and DRIVER kinds (API records) because CUPTI
// writes external correlation records only before API records: without them there are none (on
// an H200 every activity came back tied to no op). Whole kinds: the API records of chosen
// functions (cuptiActivityEnableDriverApi/RuntimeApi) are written only for contexts made after
// they were asked for, and the program's context usually exists when ndtrace starts (on an
// H200, none came); whole kinds cost no more there (tools/gpu_suite.sh's gputime step).
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER};

// How a driver op is named to CUPTI. CUPTI ties the external ids pushed on a thread when an API
// call begins to that call, and work the program starts through the runtime carries the runtime
// call's correlation id: ids pushed by the driver hook inside it come too late (on an H200, the
// work of each runtime call came back tied to the thread's previous op). So what a thread keeps
// pushed between its ops is a token naming its next op, (thread slot, the thread's op count),
// which names the same op whether the program calls the runtime or the driver (whose hook pushes
// before the real call). Each op's hook writes token -> op into its thread's ring; the CUPTI
// buffer thread reads it there when the activity arrives.
constexpr uint32_t kMaxThreads = 1024;  // threads past this are not tied (untied work)
constexpr int kCountBits = 44;          // token: (slot + 1) << 44 | op count
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
// A ring entry: the op count's low 20 bits (which lap), the op kind (4 bits), the sequence.
constexpr int kSequenceBits = 40;
constexpr uint64_t kSequenceMask = (uint64_t{1} << kSequenceBits) - 1;
constexpr uint64_t kLapMask = (uint64_t{1} << 20) - 1;

std::atomic<ThreadTokens*> g_threads[kMaxThreads] = {};
std::atomic<uint32_t> g_thread_count{0};
thread_local ThreadTokens* t_tokens = nullptr;
// Whether any thread ever pushed a token (not one thread-local read per hook while off).
std::atomic<bool> g_tokens_pushed{false};
// Whether the program uses CUPTI's activity API itself (YieldToProgram): GPU times then never
// start, or stop.
std::atomic<bool> g_program_uses_cupti{false};
// The id that marks ndtrace's own GPU work (OwnWork): no op's.
constexpr uint64_t kOwnWork = UINT64_MAX;

uint64_t Token(const ThreadTokens& t, uint64_t count) {
  return ((t.slot + 1) << kCountBits) | (count & kCountMask);
}

// The calling thread's tokens, made on its first op; null past kMaxThreads threads (or out of
// memory).
ThreadTokens* ThisThread() {
  ThreadTokens*& tokens = TlsRef(t_tokens);
  if (tokens != nullptr) return tokens;
  const uint32_t slot = g_thread_count.fetch_add(1, std::memory_order_relaxed);
  if (slot >= kMaxThreads) return nullptr;
  auto* made = new (std::nothrow) ThreadTokens();
  if (made == nullptr) return nullptr;
  made->slot = slot;
  made->thread = static_cast<uint32_t>(pthread_self());
  g_threads[slot].store(made, std::memory_order_release);
  tokens = made;
  return made;
}

// In a ring entry's `around`: ndtrace copied device memory to the host (OwnWork: CPU-path
// digests, captures, Philox reads) just before or after the op. Such a copy made inside the
// program's runtime call carries that call's correlation id, so the token of the op the call
// began with: a device-to-pageable-host copy of such an op is taken for ndtrace's own.
constexpr uint64_t kOwnNear = uint64_t{1} << 63;
// In `around`: the op copies to host memory; a copy to pageable memory tied to it is its own.
constexpr uint64_t kToHost = uint64_t{1} << 62;
constexpr uint64_t kAroundFlags = kOwnNear | kToHost;

struct TokenOp {
  uint64_t sequence = 0;
  format::OpKind kind = format::OpKind::kOther;
  std::optional<uint64_t> around;  // the library op it was made inside
  bool own_near = false;           // kOwnNear
  bool to_host = false;            // kToHost
};

// The op a token names, if its thread's ring still holds it.
std::optional<TokenOp> OpOfToken(uint64_t token) {
  const uint64_t slot = (token >> kCountBits) - 1;
  if ((token >> kCountBits) == 0 || slot >= kMaxThreads) return std::nullopt;
  const ThreadTokens* t = g_threads[slot].load(std::memory_order_acquire);
  if (t == nullptr) return std::nullopt;
  const uint64_t count = token & kCountMask;
  const uint64_t index = count % kRingSize;
  const uint64_t entry = t->ring[index].load(std::memory_order_acquire);
  if (entry == 0 || (entry >> (kSequenceBits + 4)) != (count & kLapMask)) return std::nullopt;
  const uint64_t around = t->around[index].load(std::memory_order_acquire);
  // The thread may have lapped the ring between the two loads: then the entry changed too.
  if (t->ring[index].load(std::memory_order_acquire) != entry) return std::nullopt;
  TokenOp op{entry & kSequenceMask, static_cast<format::OpKind>((entry >> kSequenceBits) & 0xF),
             std::nullopt};
  if ((around & ~kAroundFlags) != 0) op.around = (around & ~kAroundFlags) - 1;
  op.own_near = (around & kOwnNear) != 0;
  op.to_host = (around & kToHost) != 0;
  return op;
}

// Whether GPU work of `activity`'s kind can be an op of `op`'s kind: a token of a thread whose
// runtime call started work through a driver function ndtrace does not record names the thread's
// next op, which is then not the work's (left untied rather than tied wrongly).
bool WorkOf(format::GpuActivityKind activity, format::OpKind op) {
  using format::OpKind;
  if (op == OpKind::kGraphLaunch) return true;
  switch (activity) {
    case format::GpuActivityKind::kKernel:  // the driver does some copies and memsets by kernel
      return op == OpKind::kKernelLaunch || op == OpKind::kMemcpy || op == OpKind::kMemset;
    case format::GpuActivityKind::kMemcpy:
      return op == OpKind::kMemcpy;
    case format::GpuActivityKind::kMemset:
      return op == OpKind::kMemset;
  }
  return false;
}

// An activity as it waits for its correlation record.
struct Pending {
  format::GpuActivityRecord record;
  bool host_copy = false;  // a copy from the device to pageable host memory
};

// What was pushed when one CUPTI correlation id's API call began: a driver op's token, a library
// op's sequence.
struct Owners {
  std::optional<uint64_t> token;
  std::optional<uint64_t> library_op;
  bool own = false;  // ndtrace's own work (OwnWork): GPU time of no op
};

struct State {
  Cupti cupti;
  std::atomic<bool> active{false};
  std::mutex mutex;  // guards everything below; CUPTI delivers buffers on its own thread
  Session* session = nullptr;
  int64_t offset_ns = 0;  // trace clock minus CUPTI's
  std::unordered_map<uint32_t, Owners> owners;  // by correlation id
  std::deque<uint32_t> owner_order;             // oldest first, to bound `owners`
  // Activities whose correlation record has not arrived yet (another buffer), by correlation
  // id; `unmatched_order` holds their ids oldest first (an id once per activity), to bound them.
  std::unordered_multimap<uint32_t, Pending> unmatched;
  std::deque<uint32_t> unmatched_order;
  // What CUPTI delivered, for the closing note: activities, those tied to an op, correlation
  // records naming an op of ndtrace's, API records.
  uint64_t activities = 0;
  uint64_t tied = 0;
  uint64_t own = 0;            // ndtrace's own work
  uint64_t never_matched = 0;  // kept without their correlation record
  uint64_t correlations = 0;
  uint64_t api_records = 0;
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

// Appends `record`, tied to the ops `owners` names. Work started inside a library call is tied
// to a driver op only when that op was made inside the same library call: a library that starts
// work by a call ndtrace does not record (the stand-in's host computations) leaves the token of
// the thread's next op, made after the library call returned.
// Appends `record` as ndtrace's own work: no op's, marked so.
void AppendOwnLocked(State& s, format::GpuActivityRecord record) {
  record.ndtrace_own = true;
  ++s.own;
  if (s.session != nullptr) s.session->Append(format::Record(record));
}

void TieLocked(State& s, const Owners& owners, const Pending& pending) {
  format::GpuActivityRecord record = pending.record;
  if (owners.own) return AppendOwnLocked(s, record);
  if (owners.token) {
    const std::optional<TokenOp> op = OpOfToken(*owners.token);
    if (op && pending.host_copy && op->own_near && !op->to_host) {
      return AppendOwnLocked(s, record);  // ndtrace's copy, made inside the program's runtime call
    }
    if (op && WorkOf(record.kind, op->kind) &&
        (!owners.library_op || op->around == owners.library_op)) {
      record.op_sequence = op->sequence;
    }
  }
  record.library_op_sequence = owners.library_op;
  if (record.op_sequence || record.library_op_sequence) ++s.tied;
  if (s.session != nullptr) s.session->Append(format::Record(record));
}

void AppendLocked(State& s, uint32_t correlation, const Pending& record) {
  ++s.activities;
  const auto owner = s.owners.find(correlation);
  if (owner == s.owners.end()) {
    if (s.unmatched_order.size() >= kUnmatchedKept) {
      // The oldest waited long enough: its correlation record is not coming (CUPTI writes it
      // before the activity's API record, so within a buffer or two). Kept, tied to no op.
      const uint32_t oldest = s.unmatched_order.front();
      s.unmatched_order.pop_front();
      if (auto it = s.unmatched.find(oldest); it != s.unmatched.end()) {
        ++s.never_matched;
        if (s.session != nullptr) s.session->Append(format::Record(it->second.record));
        s.unmatched.erase(it);
      }
    }
    s.unmatched.emplace(correlation, record);
    s.unmatched_order.push_back(correlation);
    return;
  }
  TieLocked(s, owner->second, record);
}

// Notes that correlation id `correlation`'s call began with `id` pushed as `kind` (a driver op's
// token or a library op's sequence), and ties the activities that arrived before this.
void SetOwnerLocked(State& s, uint32_t correlation, CUpti_ExternalCorrelationKind kind,
                    uint64_t id) {
  auto [it, added] = s.owners.try_emplace(correlation);
  if (added) {
    s.owner_order.push_back(correlation);
    if (s.owner_order.size() > kCorrelationsKept) {
      s.owners.erase(s.owner_order.front());
      s.owner_order.pop_front();
    }
  }
  if (kind == kDriverKind && id == kOwnWork) {
    it->second.own = true;
  } else {
    (kind == kLibraryKind ? it->second.library_op : it->second.token) = id;
  }
  // Constant time per correlation record: CUPTI writes one for every API call made with a token
  // pushed, which is every call (an earlier linear scan of up to 65,536 waiting activities made
  // a library-heavy program's recording take minutes on the H200).
  const auto [first, last] = s.unmatched.equal_range(correlation);
  for (auto waiting = first; waiting != last; ++waiting) TieLocked(s, it->second, waiting->second);
  s.unmatched.erase(first, last);  // their ids stay in unmatched_order, found there no more
}

void NoteOwnerLocked(State& s, const CUpti_ActivityExternalCorrelation& c) {
  if (c.externalKind != kDriverKind && c.externalKind != kLibraryKind) return;
  // ndtrace's own work is noted too: its activities are then kept at once, tied to no op.
  if (c.externalKind != kDriverKind || c.externalId != kOwnWork) ++s.correlations;
  SetOwnerLocked(s, c.correlationId, c.externalKind, c.externalId);
}

// A thread's first op can be made inside a runtime call that began before ndtrace had pushed a
// token on the thread. That call's API record carries no token: an API record on that thread with
// none, whose call had not ended when the op began, is taken for the op's call. The thread's
// earlier calls (cudaSetDevice, cudaMalloc) start no work; later ones all carry tokens.
constexpr uint64_t kFirstOpSlackNs = 5'000;  // CUPTI's clock read in the hook and in the record

void TieFirstOpLocked(State& s, const CUpti_ActivityAPI& api) {
  const auto owner = s.owners.find(api.correlationId);
  if (owner != s.owners.end() && owner->second.token) return;
  const uint32_t threads = std::min(g_thread_count.load(std::memory_order_relaxed), kMaxThreads);
  for (uint32_t slot = 0; slot < threads; ++slot) {
    ThreadTokens* t = g_threads[slot].load(std::memory_order_acquire);
    if (t == nullptr || t->thread != api.threadId) continue;
    if (t->first_unannounced.load(std::memory_order_acquire) &&
        api.start <= t->first_op_cupti_ns + kFirstOpSlackNs &&
        api.end + kFirstOpSlackNs >= t->first_op_cupti_ns) {
      SetOwnerLocked(s, api.correlationId, kDriverKind, Token(*t, 0));
    }
    return;
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
        case CUPTI_ACTIVITY_KIND_RUNTIME:
          ++s.api_records;
          TieFirstOpLocked(s, *reinterpret_cast<const CUpti_ActivityAPI*>(record));
          break;
        case CUPTI_ACTIVITY_KIND_DRIVER:
          ++s.api_records;
          break;
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
            ++s.activities;
            AppendOwnLocked(s, activity);
            break;
          }
          AppendLocked(s, k->correlationId, {activity});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          AppendLocked(
              s, m->correlationId,
              {Activity(s, format::GpuActivityKind::kMemcpy, m->start, m->end, m->streamId),
               m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH &&
                   m->dstKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          AppendLocked(
              s, m->correlationId,
              {Activity(s, format::GpuActivityKind::kMemset, m->start, m->end, m->streamId)});
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

// Takes the calling thread's token off CUPTI's stack.
void PopToken() {
  if (!g_tokens_pushed.load(std::memory_order_relaxed)) return;
  ThreadTokens* t = TlsRef(t_tokens);
  if (t == nullptr || !t->pushed) return;
  t->pushed = false;
  uint64_t popped = 0;
  Get().cupti.pop(kDriverKind, &popped);
}

// Puts the token of the calling thread's next op on CUPTI's stack.
void PushToken(const Cupti& c, ThreadTokens& t) {
  if (c.push(kDriverKind, Token(t, t.next)) != CUPTI_SUCCESS) return;
  t.pushed = true;
  if (!g_tokens_pushed.load(std::memory_order_relaxed)) g_tokens_pushed.store(true);
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
  if (g_program_uses_cupti.load(std::memory_order_acquire)) {
    // A profiler started before the program's first CUDA call (torch.profiler around a whole
    // run): ndtrace's buffers would take its activities.
    return "off (the program uses CUPTI's activity API itself: a profiler such as torch.profiler, "
           "and CUPTI serves one client)";
  }
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
  s.active.store(true, std::memory_order_release);
  if (g_program_uses_cupti.load(std::memory_order_acquire)) {
    // The program's profiler began on another thread meanwhile, and found GPU times not yet on.
    s.active.store(false, std::memory_order_release);
    for (CUpti_ActivityKind kind : kKinds) c.disable(kind);
    return "off (the program began using CUPTI's activity API as ndtrace started)";
  }
  return "on (CUPTI " + std::to_string(version) + ": kernels, copies and memsets)";
}

void Stop(bool flush) {
  State& s = Get();
  if (!s.active.exchange(false, std::memory_order_acq_rel)) return;
  PopToken();  // this thread's; another thread's stays pushed until its next op, of a kind
               // nobody else uses
  std::unique_lock lock(s.mutex, std::defer_lock);
  if (flush) {
    s.cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    lock.lock();
  } else if (!lock.try_lock()) {
    return;  // CUPTI's thread holds it, perhaps stopped by the same signal
  }
  // What never met its correlation record is still GPU time: kept, tied to no op.
  for (auto& [correlation, pending] : s.unmatched) {
    ++s.never_matched;
    if (s.session != nullptr) s.session->Append(format::Record(pending.record));
  }
  s.unmatched.clear();
  s.unmatched_order.clear();
  if (s.session != nullptr && s.activities > 0) {
    // How many activities found their op, and what CUPTI wrote to tie them: the first thing
    // to read when GPU time is shown as no op's (tracer/README.md, "GPU time").
    format::TracerNote note;
    note.text = "GPU time: " + std::to_string(s.activities) + " activities, " +
                std::to_string(s.tied) + " tied to ops, " + std::to_string(s.own) +
                " ndtrace's own, " + std::to_string(s.never_matched) +
                " without a correlation record; CUPTI wrote " + std::to_string(s.correlations) +
                " correlation records naming ndtrace's ops and " + std::to_string(s.api_records) +
                " API records";
    note.before_op = s.session->PeekOpSequence();
    note.time_ns = s.session->NowNs();
    s.session->Append(note);
  }
  s.session = nullptr;
}

void YieldToProgram(const char* why) {
  State& s = Get();
  g_program_uses_cupti.store(true, std::memory_order_release);  // before ndtrace starts, too
  if (!s.active.load(std::memory_order_acquire)) return;
  Session* session = nullptr;
  {
    std::lock_guard lock(s.mutex);
    session = s.session;
  }
  Stop();
  for (CUpti_ActivityKind kind : kKinds) s.cupti.disable(kind);
  if (session == nullptr) return;
  format::TracerNote note;
  note.text = std::string("GPU time: off from here: ") + why;
  note.before_op = session->PeekOpSequence();
  note.time_ns = session->NowNs();
  session->Append(note);
}

void ForgetAfterFork() {
  State& s = Get();
  s.active.store(false, std::memory_order_relaxed);
  new (&s.mutex) std::mutex();
  s.session = nullptr;
  s.unmatched.clear();
  s.unmatched_order.clear();
  s.owners.clear();
  s.owner_order.clear();
  s.activities = s.tied = s.own = s.never_matched = s.correlations = s.api_records = 0;
  g_tokens_pushed.store(false, std::memory_order_relaxed);  // the parent's: never popped here
}

DriverScope::DriverScope(std::optional<uint64_t> sequence, format::OpKind kind, bool to_host) {
  State& s = Get();
  if (!s.active.load(std::memory_order_relaxed)) {
    PopToken();  // GPU times stopped: a profiler that took CUPTI over sees none of ndtrace's ids
    return;
  }
  if (!sequence) return;
  ThreadTokens* t = ThisThread();
  if (t == nullptr) return;
  const uint64_t count = t->next;
  const std::optional<uint64_t> around = Session::OpenOpAround(*sequence);
  t->around[count % kRingSize].store(
      (around ? *around + 1 : 0) | (t->own_pending ? kOwnNear : 0) | (to_host ? kToHost : 0),
      std::memory_order_relaxed);
  t->own_pending = false;
  t->ring[count % kRingSize].store(((count & kLapMask) << (kSequenceBits + 4)) |
                                       (static_cast<uint64_t>(kind) << kSequenceBits) |
                                       (*sequence & kSequenceMask),
                                   std::memory_order_release);
  // The thread's first op: its token is pushed now, in time for a driver call; the runtime call
  // this hook may be inside began without it (TieFirstOpLocked).
  if (!t->pushed) {
    if (count == 0 && s.cupti.get_timestamp(&t->first_op_cupti_ns) == CUPTI_SUCCESS) {
      t->first_unannounced.store(true, std::memory_order_release);
    }
    PushToken(s.cupti, *t);
  }
  tokens_ = t;
}

DriverScope::~DriverScope() {
  if (tokens_ == nullptr) return;
  State& s = Get();
  if (tokens_->pushed) {
    uint64_t popped = 0;
    s.cupti.pop(kDriverKind, &popped);
    tokens_->pushed = false;
  }
  ++tokens_->next;
  if (s.active.load(std::memory_order_relaxed)) PushToken(s.cupti, *tokens_);
}

LibraryScope::LibraryScope(std::optional<uint64_t> sequence) {
  State& s = Get();
  if (!s.active.load(std::memory_order_relaxed) || !sequence) return;
  pushed_ = s.cupti.push(kLibraryKind, *sequence) == CUPTI_SUCCESS;
}

LibraryScope::~LibraryScope() {
  if (!pushed_) return;
  uint64_t popped = 0;
  Get().cupti.pop(kLibraryKind, &popped);
}

OwnWork::OwnWork(Work work) {
  State& s = Get();
  if (!s.active.load(std::memory_order_relaxed)) return;
  pushed_ = s.cupti.push(kDriverKind, kOwnWork) == CUPTI_SUCCESS;
  if (work != Work::kHostCopies) return;
  // Marks the ops these copies may be made beside (kOwnNear): the thread's last op (its digests
  // after the call) and its next (before the call). Only this thread writes these.
  if (ThreadTokens* t = TlsRef(t_tokens); t != nullptr) {
    t->own_pending = true;
    if (t->next > 0) t->around[(t->next - 1) % kRingSize].fetch_or(kOwnNear);
  }
}

OwnWork::~OwnWork() {
  if (!pushed_) return;
  uint64_t popped = 0;
  Get().cupti.pop(kDriverKind, &popped);
}

}  // namespace ndt::tracer::gpu_time
