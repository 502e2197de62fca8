// The NVTX injection (nvtx.h): the callbacks NVTX calls, the per-thread range stacks, and the
// records they become.
#include "tracer/nvtx.h"

#define NVTX_NO_IMPL
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cwchar>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/records.h"
#include "tracer/lineage.h"
#include "tracer/real_dl.h"
#include "tracer/recorder.h"
#include "tracer/tls_ref.h"

extern "C" int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

// Our handles: the program receives pointers to these (cast to NVTX's opaque types).
struct nvtxDomainRegistration_st {
  std::string name;
  nvtxDomainHandle_t next = nullptr;  // the chained injection's handle for the same domain
};
struct nvtxStringRegistration_st {
  std::string text;
  nvtxStringHandle_t next = nullptr;
};

namespace ndt::tracer {
namespace {

constexpr uint32_t kMaxDepth = 64;        // deeper pushes are counted, not kept
constexpr uint32_t kArenaBytes = 8192;    // names of one thread's open ranges
constexpr uint32_t kMaxNameBytes = 1024;  // longer names are cut

struct OpenRange {
  uint64_t id;
  uint64_t parent;
  uint64_t steady_ns;
  const nvtxDomainRegistration_st* domain;
  uint32_t category;
  uint32_t name_offset;
  uint32_t name_bytes;
  bool closed;  // popped while a range of another domain was above it
};

// Zero-initialised plain data: no thread-local constructor runs on the hot path.
struct ThreadRanges {
  bool lineage_known;
  uint32_t lineage;
  uint32_t ordinal;   // ranges this thread opened
  uint32_t depth;     // entries in `stack`
  uint32_t overflow;  // pushes beyond kMaxDepth still open
  uint32_t written;   // stack[0, written) are in `session`'s trace
  Session* session;
  uint32_t arena_used;
  OpenRange stack[kMaxDepth];
  char arena[kArenaBytes];
};

thread_local ThreadRanges t_ranges;

uint64_t SteadyNow() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
}

uint64_t NewRangeId(ThreadRanges& t) {
  if (!t.lineage_known) {
    t.lineage = ThreadLineageId();
    t.lineage_known = true;
  }
  return (uint64_t{t.lineage} << 32) | ++t.ordinal;
}

// ---- messages -----------------------------------------------------------------------------

// Appends `code` as UTF-8 to `out` (at most `room` bytes); returns the bytes written.
uint32_t PutUtf8(uint32_t code, char* out, uint32_t room) {
  char buffer[4];
  uint32_t n = 0;
  if (code < 0x80) {
    buffer[n++] = static_cast<char>(code);
  } else if (code < 0x800) {
    buffer[n++] = static_cast<char>(0xc0 | (code >> 6));
    buffer[n++] = static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    buffer[n++] = static_cast<char>(0xe0 | (code >> 12));
    buffer[n++] = static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    buffer[n++] = static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x110000) {
    buffer[n++] = static_cast<char>(0xf0 | (code >> 18));
    buffer[n++] = static_cast<char>(0x80 | ((code >> 12) & 0x3f));
    buffer[n++] = static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    buffer[n++] = static_cast<char>(0x80 | (code & 0x3f));
  } else {
    return 0;
  }
  if (n > room) return 0;
  std::memcpy(out, buffer, n);
  return n;
}

// A message as bytes: ASCII as is, wide strings as UTF-8 (into `scratch`), registered strings
// by their text. Empty when absent.
struct Message {
  const char* data = "";
  uint32_t bytes = 0;
};

Message FromAscii(const char* text) {
  if (text == nullptr) return {};
  return {text, static_cast<uint32_t>(strnlen(text, kMaxNameBytes))};
}

Message FromWide(const wchar_t* text, char* scratch, uint32_t room) {
  if (text == nullptr) return {};
  uint32_t used = 0;
  for (; *text != 0 && used < room; ++text) {
    const uint32_t n = PutUtf8(static_cast<uint32_t>(*text), scratch + used, room - used);
    if (n == 0) break;
    used += n;
  }
  return {scratch, used};
}

Message FromAttributes(const nvtxEventAttributes_t* attributes, char* scratch, uint32_t room) {
  if (attributes == nullptr ||
      attributes->size < offsetof(nvtxEventAttributes_t, message) + sizeof(nvtxMessageValue_t)) {
    return {};
  }
  switch (attributes->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return FromAscii(attributes->message.ascii);
    case NVTX_MESSAGE_TYPE_UNICODE:
      return FromWide(attributes->message.unicode, scratch, room);
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      const auto* registered = attributes->message.registered;
      if (registered == nullptr) return {};
      const uint32_t bytes =
          static_cast<uint32_t>(std::min<size_t>(registered->text.size(), kMaxNameBytes));
      return {registered->text.data(), bytes};
    }
    default:
      return {};
  }
}

uint32_t CategoryOf(const nvtxEventAttributes_t* attributes) {
  if (attributes == nullptr ||
      attributes->size < offsetof(nvtxEventAttributes_t, category) + sizeof(uint32_t)) {
    return 0;
  }
  return attributes->category;
}

// ---- records ------------------------------------------------------------------------------

// The session to write into, never starting one (an NVTX call is no CUDA call).
Session* Active() {
  return CurrentSessionIfRecording();
}

void Write(Session& session, format::NvtxEvent kind, uint64_t range_id, uint64_t parent,
           const nvtxDomainRegistration_st* domain, uint32_t category, Message message,
           uint64_t steady_ns, uint64_t before_op) {
  RecordRings::NvtxFields fields;
  format::NvtxRangeRecord& record = fields.numbers;
  record.thread_id = ThreadLineageId();
  record.kind = kind;
  record.push = kind == format::NvtxEvent::kPush;
  record.before_op = before_op;
  record.time_ns = session.SinceStart(steady_ns);
  record.range_id = range_id;
  record.parent_id = parent;
  record.category = category;
  fields.name = {message.data, message.bytes};
  if (domain != nullptr) fields.domain = domain->name;
  session.AppendNvtx(fields);
}

// ---- the range stack ----------------------------------------------------------------------

uint64_t InnermostOpen(const ThreadRanges& t) {
  for (uint32_t i = t.depth; i > 0; --i) {
    if (!t.stack[i - 1].closed) return t.stack[i - 1].id;
  }
  return 0;
}

int Push(const nvtxDomainRegistration_st* domain, uint32_t category, Message message) {
  ThreadRanges& t = t_ranges;
  if (t.depth == kMaxDepth) {
    ++t.overflow;
    return static_cast<int>(t.depth + t.overflow - 1);
  }
  OpenRange& range = t.stack[t.depth];
  range.id = NewRangeId(t);
  range.parent = InnermostOpen(t);
  range.steady_ns = SteadyNow();
  range.domain = domain;
  range.category = category;
  range.closed = false;
  const uint32_t room = kArenaBytes - t.arena_used;
  range.name_offset = t.arena_used;
  range.name_bytes = message.bytes < room ? message.bytes : room;
  std::memcpy(t.arena + t.arena_used, message.data, range.name_bytes);
  t.arena_used += range.name_bytes;
  return static_cast<int>(t.depth++);
}

// Drops closed entries from the top of the stack.
void DropClosed(ThreadRanges& t) {
  while (t.depth > 0 && t.stack[t.depth - 1].closed) {
    --t.depth;
    t.arena_used = t.stack[t.depth].name_offset;
  }
  if (t.written > t.depth) t.written = t.depth;
}

int Pop(const nvtxDomainRegistration_st* domain) {
  ThreadRanges& t = t_ranges;
  if (t.overflow > 0) {
    --t.overflow;
    return static_cast<int>(t.depth + t.overflow);
  }
  // The innermost open range of this domain.
  uint32_t i = t.depth;
  while (i > 0 && (t.stack[i - 1].closed || t.stack[i - 1].domain != domain)) --i;
  if (i == 0) return -1;
  OpenRange& range = t.stack[i - 1];
  range.closed = true;
  if (i <= t.written) {
    Session* session = Active();
    if (session != nullptr && session == t.session) {
      Write(*session, format::NvtxEvent::kPop, range.id, 0, domain, 0, {}, SteadyNow(),
            session->PeekOpSequence());
    }
  }
  DropClosed(t);
  return static_cast<int>(i - 1);
}

// ---- process-wide: domains, strings, categories, the chained injection --------------------

struct CategoryName {
  const nvtxDomainRegistration_st* domain;
  uint32_t category;
  std::string name;
};

struct Registry {
  std::mutex mutex;
  std::deque<nvtxDomainRegistration_st> domains;  // stable addresses; never freed
  std::deque<nvtxStringRegistration_st> strings;
  std::vector<CategoryName> categories;
  // Start/end ranges still open, for a session that starts after them.
  struct OpenStart {
    uint32_t thread;
    const nvtxDomainRegistration_st* domain;
    uint32_t category;
    std::string name;
    uint64_t steady_ns;
  };
  std::unordered_map<uint64_t, OpenStart> open_starts;
  std::unordered_map<uint64_t, nvtxRangeId_t> next_ranges;  // our start id -> the next one's
};

Registry& Global() {
  static Registry* registry = new Registry();  // never destroyed: NVTX may run during exit
  return *registry;
}

// The callbacks the chained injection installed, by module and callback id.
NvtxFunctionPointer g_next_core[NVTX_CBID_CORE_SIZE];
NvtxFunctionPointer g_next_core2[NVTX_CBID_CORE2_SIZE];
std::atomic<bool> g_chained{false};

template <typename Fn>
Fn NextCore(int cbid) {
  return reinterpret_cast<Fn>(g_next_core[cbid]);
}
template <typename Fn>
Fn NextCore2(int cbid) {
  return reinterpret_cast<Fn>(g_next_core2[cbid]);
}

nvtxDomainHandle_t NextDomain(nvtxDomainHandle_t domain) {
  return domain == nullptr ? nullptr : domain->next;
}

// `attributes` as the chained injection must see them: our registered string replaced by its.
nvtxEventAttributes_t ForNext(const nvtxEventAttributes_t* attributes) {
  nvtxEventAttributes_t copy{};
  const size_t bytes = std::min<size_t>(attributes->size, sizeof(copy));
  std::memcpy(&copy, attributes, bytes);
  if (copy.messageType == NVTX_MESSAGE_TYPE_REGISTERED && copy.message.registered != nullptr) {
    copy.message.registered = copy.message.registered->next;
  }
  return copy;
}

void NameCategory(const nvtxDomainRegistration_st* domain, uint32_t category, Message name) {
  Registry& registry = Global();
  std::lock_guard lock(registry.mutex);
  registry.categories.push_back({domain, category, std::string(name.data, name.bytes)});
  if (Session* session = Active()) {
    Write(*session, format::NvtxEvent::kCategoryName, 0, 0, domain, category, name, SteadyNow(),
          session->PeekOpSequence());
  }
}

uint64_t Start(const nvtxDomainRegistration_st* domain, uint32_t category, Message message) {
  ThreadRanges& t = t_ranges;
  const uint64_t id = NewRangeId(t);
  const uint64_t now = SteadyNow();
  Registry& registry = Global();
  std::lock_guard lock(registry.mutex);
  registry.open_starts[id] = {t.lineage, domain, category, std::string(message.data, message.bytes),
                              now};
  if (Session* session = Active()) {
    Write(*session, format::NvtxEvent::kStart, id, 0, domain, category, message, now,
          session->PeekOpSequence());
  }
  return id;
}

void End(const nvtxDomainRegistration_st* domain, uint64_t id) {
  Registry& registry = Global();
  std::lock_guard lock(registry.mutex);
  registry.open_starts.erase(id);
  if (Session* session = Active()) {
    Write(*session, format::NvtxEvent::kEnd, id, 0, domain, 0, {}, SteadyNow(),
          session->PeekOpSequence());
  }
}

void Mark(const nvtxDomainRegistration_st* domain, uint32_t category, Message message) {
  if (Session* session = Active()) {
    Write(*session, format::NvtxEvent::kMark, 0, 0, domain, category, message, SteadyNow(),
          session->PeekOpSequence());
  }
}

nvtxRangeId_t StartAndChain(const nvtxDomainRegistration_st* domain, uint64_t id,
                            nvtxRangeId_t next_id) {
  if (next_id != 0) {
    Registry& registry = Global();
    std::lock_guard lock(registry.mutex);
    registry.next_ranges[id] = next_id;
  }
  (void)domain;
  return id;
}

nvtxRangeId_t TakeNextRange(nvtxRangeId_t id) {
  Registry& registry = Global();
  std::lock_guard lock(registry.mutex);
  const auto it = registry.next_ranges.find(id);
  if (it == registry.next_ranges.end()) return 0;
  const nvtxRangeId_t next = it->second;
  registry.next_ranges.erase(it);
  return next;
}

// ---- the callbacks --------------------------------------------------------------------------
// Never throw into the program: everything below allocates only in rare calls (domains,
// registered strings, categories, start/end ranges and marks while recording), guarded.

thread_local char t_scratch[kMaxNameBytes];

void CoreMarkEx(const nvtxEventAttributes_t* attributes) {
  try {
    Mark(nullptr, CategoryOf(attributes), FromAttributes(attributes, t_scratch, kMaxNameBytes));
  } catch (...) {
  }
  if (auto next = NextCore<decltype(&CoreMarkEx)>(NVTX_CBID_CORE_MarkEx); next != nullptr) {
    const nvtxEventAttributes_t copy = ForNext(attributes);
    next(&copy);
  }
}
void CoreMarkA(const char* message) {
  try {
    Mark(nullptr, 0, FromAscii(message));
  } catch (...) {
  }
  if (auto next = NextCore<decltype(&CoreMarkA)>(NVTX_CBID_CORE_MarkA)) next(message);
}
void CoreMarkW(const wchar_t* message) {
  try {
    Mark(nullptr, 0, FromWide(message, t_scratch, kMaxNameBytes));
  } catch (...) {
  }
  if (auto next = NextCore<decltype(&CoreMarkW)>(NVTX_CBID_CORE_MarkW)) next(message);
}

nvtxRangeId_t StartChecked(const nvtxDomainRegistration_st* domain, uint32_t category,
                           Message message) {
  try {
    return Start(domain, category, message);
  } catch (...) {
    ThreadRanges& t = t_ranges;
    return NewRangeId(t);
  }
}

nvtxRangeId_t CoreRangeStartEx(const nvtxEventAttributes_t* attributes) {
  const uint64_t id = StartChecked(nullptr, CategoryOf(attributes),
                                   FromAttributes(attributes, t_scratch, kMaxNameBytes));
  auto next = NextCore<decltype(&CoreRangeStartEx)>(NVTX_CBID_CORE_RangeStartEx);
  if (next == nullptr) return id;
  const nvtxEventAttributes_t copy = ForNext(attributes);
  return StartAndChain(nullptr, id, next(&copy));
}
nvtxRangeId_t CoreRangeStartA(const char* message) {
  const uint64_t id = StartChecked(nullptr, 0, FromAscii(message));
  auto next = NextCore<decltype(&CoreRangeStartA)>(NVTX_CBID_CORE_RangeStartA);
  return next == nullptr ? id : StartAndChain(nullptr, id, next(message));
}
nvtxRangeId_t CoreRangeStartW(const wchar_t* message) {
  const uint64_t id = StartChecked(nullptr, 0, FromWide(message, t_scratch, kMaxNameBytes));
  auto next = NextCore<decltype(&CoreRangeStartW)>(NVTX_CBID_CORE_RangeStartW);
  return next == nullptr ? id : StartAndChain(nullptr, id, next(message));
}
void CoreRangeEnd(nvtxRangeId_t id) {
  try {
    End(nullptr, id);
    if (auto next = NextCore<decltype(&CoreRangeEnd)>(NVTX_CBID_CORE_RangeEnd)) {
      next(TakeNextRange(id));
    }
  } catch (...) {
  }
}

int CoreRangePushEx(const nvtxEventAttributes_t* attributes) {
  const int depth =
      Push(nullptr, CategoryOf(attributes), FromAttributes(attributes, t_scratch, kMaxNameBytes));
  if (auto next = NextCore<decltype(&CoreRangePushEx)>(NVTX_CBID_CORE_RangePushEx)) {
    const nvtxEventAttributes_t copy = ForNext(attributes);
    next(&copy);
  }
  return depth;
}
int CoreRangePushA(const char* message) {
  const int depth = Push(nullptr, 0, FromAscii(message));
  if (auto next = NextCore<decltype(&CoreRangePushA)>(NVTX_CBID_CORE_RangePushA)) next(message);
  return depth;
}
int CoreRangePushW(const wchar_t* message) {
  const int depth = Push(nullptr, 0, FromWide(message, t_scratch, kMaxNameBytes));
  if (auto next = NextCore<decltype(&CoreRangePushW)>(NVTX_CBID_CORE_RangePushW)) next(message);
  return depth;
}
int CoreRangePop() {
  int depth = -1;
  try {
    depth = Pop(nullptr);
  } catch (...) {
  }
  if (auto next = NextCore<decltype(&CoreRangePop)>(NVTX_CBID_CORE_RangePop)) next();
  return depth;
}
void CoreNameCategoryA(uint32_t category, const char* name) {
  try {
    NameCategory(nullptr, category, FromAscii(name));
  } catch (...) {
  }
  if (auto next = NextCore<decltype(&CoreNameCategoryA)>(NVTX_CBID_CORE_NameCategoryA)) {
    next(category, name);
  }
}
void CoreNameCategoryW(uint32_t category, const wchar_t* name) {
  try {
    NameCategory(nullptr, category, FromWide(name, t_scratch, kMaxNameBytes));
  } catch (...) {
  }
  if (auto next = NextCore<decltype(&CoreNameCategoryW)>(NVTX_CBID_CORE_NameCategoryW)) {
    next(category, name);
  }
}

void DomainMarkEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  try {
    Mark(domain, CategoryOf(attributes), FromAttributes(attributes, t_scratch, kMaxNameBytes));
  } catch (...) {
  }
  if (auto next = NextCore2<decltype(&DomainMarkEx)>(NVTX_CBID_CORE2_DomainMarkEx)) {
    const nvtxEventAttributes_t copy = ForNext(attributes);
    next(NextDomain(domain), &copy);
  }
}
nvtxRangeId_t DomainRangeStartEx(nvtxDomainHandle_t domain,
                                 const nvtxEventAttributes_t* attributes) {
  const uint64_t id = StartChecked(domain, CategoryOf(attributes),
                                   FromAttributes(attributes, t_scratch, kMaxNameBytes));
  auto next = NextCore2<decltype(&DomainRangeStartEx)>(NVTX_CBID_CORE2_DomainRangeStartEx);
  if (next == nullptr) return id;
  const nvtxEventAttributes_t copy = ForNext(attributes);
  return StartAndChain(domain, id, next(NextDomain(domain), &copy));
}
void DomainRangeEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id) {
  try {
    End(domain, id);
    if (auto next = NextCore2<decltype(&DomainRangeEnd)>(NVTX_CBID_CORE2_DomainRangeEnd)) {
      next(NextDomain(domain), TakeNextRange(id));
    }
  } catch (...) {
  }
}
int DomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  const int depth =
      Push(domain, CategoryOf(attributes), FromAttributes(attributes, t_scratch, kMaxNameBytes));
  if (auto next = NextCore2<decltype(&DomainRangePushEx)>(NVTX_CBID_CORE2_DomainRangePushEx)) {
    const nvtxEventAttributes_t copy = ForNext(attributes);
    next(NextDomain(domain), &copy);
  }
  return depth;
}
int DomainRangePop(nvtxDomainHandle_t domain) {
  int depth = -1;
  try {
    depth = Pop(domain);
  } catch (...) {
  }
  if (auto next = NextCore2<decltype(&DomainRangePop)>(NVTX_CBID_CORE2_DomainRangePop)) {
    next(NextDomain(domain));
  }
  return depth;
}
void DomainNameCategoryA(nvtxDomainHandle_t domain, uint32_t category, const char* name) {
  try {
    NameCategory(domain, category, FromAscii(name));
  } catch (...) {
  }
  if (auto next = NextCore2<decltype(&DomainNameCategoryA)>(NVTX_CBID_CORE2_DomainNameCategoryA)) {
    next(NextDomain(domain), category, name);
  }
}
void DomainNameCategoryW(nvtxDomainHandle_t domain, uint32_t category, const wchar_t* name) {
  try {
    NameCategory(domain, category, FromWide(name, t_scratch, kMaxNameBytes));
  } catch (...) {
  }
  if (auto next = NextCore2<decltype(&DomainNameCategoryW)>(NVTX_CBID_CORE2_DomainNameCategoryW)) {
    next(NextDomain(domain), category, name);
  }
}

nvtxStringHandle_t RegisterString(Message text, nvtxStringHandle_t next) {
  try {
    Registry& registry = Global();
    std::lock_guard lock(registry.mutex);
    registry.strings.push_back({std::string(text.data, text.bytes), next});
    return &registry.strings.back();
  } catch (...) {
    return nullptr;
  }
}
nvtxStringHandle_t DomainRegisterStringA(nvtxDomainHandle_t domain, const char* text) {
  nvtxStringHandle_t next = nullptr;
  if (auto chained =
          NextCore2<decltype(&DomainRegisterStringA)>(NVTX_CBID_CORE2_DomainRegisterStringA)) {
    next = chained(NextDomain(domain), text);
  }
  return RegisterString(FromAscii(text), next);
}
nvtxStringHandle_t DomainRegisterStringW(nvtxDomainHandle_t domain, const wchar_t* text) {
  nvtxStringHandle_t next = nullptr;
  if (auto chained =
          NextCore2<decltype(&DomainRegisterStringW)>(NVTX_CBID_CORE2_DomainRegisterStringW)) {
    next = chained(NextDomain(domain), text);
  }
  return RegisterString(FromWide(text, t_scratch, kMaxNameBytes), next);
}

nvtxDomainHandle_t CreateDomain(Message name, nvtxDomainHandle_t next) {
  try {
    Registry& registry = Global();
    std::lock_guard lock(registry.mutex);
    registry.domains.push_back({std::string(name.data, name.bytes), next});
    return &registry.domains.back();
  } catch (...) {
    return nullptr;
  }
}
nvtxDomainHandle_t DomainCreateA(const char* name) {
  nvtxDomainHandle_t next = nullptr;
  if (auto chained = NextCore2<decltype(&DomainCreateA)>(NVTX_CBID_CORE2_DomainCreateA)) {
    next = chained(name);
  }
  return CreateDomain(FromAscii(name), next);
}
nvtxDomainHandle_t DomainCreateW(const wchar_t* name) {
  nvtxDomainHandle_t next = nullptr;
  if (auto chained = NextCore2<decltype(&DomainCreateW)>(NVTX_CBID_CORE2_DomainCreateW)) {
    next = chained(name);
  }
  return CreateDomain(FromWide(name, t_scratch, kMaxNameBytes), next);
}
void DomainDestroy(nvtxDomainHandle_t domain) {
  // Kept: records and open ranges may still name it.
  if (auto next = NextCore2<decltype(&DomainDestroy)>(NVTX_CBID_CORE2_DomainDestroy)) {
    next(NextDomain(domain));
  }
}

// ---- installation -----------------------------------------------------------------------------

struct Slot {
  int cbid;
  NvtxFunctionPointer function;
};

#define NDT_NVTX_SLOT(id, fn) \
  { id, reinterpret_cast<NvtxFunctionPointer>(&fn) }
const Slot kCoreSlots[] = {
    NDT_NVTX_SLOT(NVTX_CBID_CORE_MarkEx, CoreMarkEx),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_MarkA, CoreMarkA),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_MarkW, CoreMarkW),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangeStartEx, CoreRangeStartEx),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangeStartA, CoreRangeStartA),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangeStartW, CoreRangeStartW),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangeEnd, CoreRangeEnd),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangePushEx, CoreRangePushEx),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangePushA, CoreRangePushA),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangePushW, CoreRangePushW),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_RangePop, CoreRangePop),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_NameCategoryA, CoreNameCategoryA),
    NDT_NVTX_SLOT(NVTX_CBID_CORE_NameCategoryW, CoreNameCategoryW),
};
const Slot kCore2Slots[] = {
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainMarkEx, DomainMarkEx),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainRangeStartEx, DomainRangeStartEx),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainRangeEnd, DomainRangeEnd),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainRangePushEx, DomainRangePushEx),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainRangePop, DomainRangePop),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainNameCategoryA, DomainNameCategoryA),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainNameCategoryW, DomainNameCategoryW),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainRegisterStringA, DomainRegisterStringA),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainRegisterStringW, DomainRegisterStringW),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainCreateA, DomainCreateA),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainCreateW, DomainCreateW),
    NDT_NVTX_SLOT(NVTX_CBID_CORE2_DomainDestroy, DomainDestroy),
};
#undef NDT_NVTX_SLOT

struct Table {
  NvtxFunctionTable slots = nullptr;
  unsigned size = 0;
};

Table ModuleTable(const NvtxExportTableCallbacks* callbacks, NvtxCallbackModule module) {
  Table table;
  if (callbacks->GetModuleFunctionTable(module, &table.slots, &table.size) == 0) return {};
  return table;
}

// The chained injection's init function (NDTRACE_NVTX_NEXT), loaded once; null when none or
// it cannot be loaded (said once).
NvtxInitializeInjectionNvtxFunc_t NextInit() {
  static NvtxInitializeInjectionNvtxFunc_t init = []() -> NvtxInitializeInjectionNvtxFunc_t {
    const char* path = std::getenv("NDTRACE_NVTX_NEXT");
    if (path == nullptr || *path == '\0') return nullptr;
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    DlsymFn real_dlsym = RealDlsym();
    void* init_fn = handle != nullptr && real_dlsym != nullptr
                        ? real_dlsym(handle, "InitializeInjectionNvtx2")
                        : nullptr;
    if (init_fn == nullptr || init_fn == reinterpret_cast<void*>(&InitializeInjectionNvtx2)) {
      if (std::getenv("NDTRACE_QUIET") == nullptr) {
        std::fprintf(stderr,
                     "ndtrace: cannot chain the NVTX injection library %s; NVTX "
                     "ranges reach only ndtrace\n",
                     path);
      }
      return nullptr;
    }
    return reinterpret_cast<NvtxInitializeInjectionNvtxFunc_t>(init_fn);
  }();
  return init;
}

template <size_t N>
void Install(Table table, const Slot (&ours)[N], NvtxFunctionPointer* next,
             const std::vector<NvtxFunctionPointer>& before) {
  for (const Slot& slot : ours) {
    if (static_cast<unsigned>(slot.cbid) >= table.size || table.slots[slot.cbid] == nullptr) {
      continue;
    }
    NvtxFunctionPointer* target = table.slots[slot.cbid];
    const NvtxFunctionPointer now = *target;
    if (now != before[slot.cbid] && now != nullptr && next[slot.cbid] == nullptr) {
      next[slot.cbid] = now;  // the chained injection set it
    }
    *target = slot.function;
  }
}

std::vector<NvtxFunctionPointer> Snapshot(Table table) {
  std::vector<NvtxFunctionPointer> values(table.size, nullptr);
  for (unsigned i = 0; i < table.size; ++i) {
    if (table.slots[i] != nullptr) values[i] = *table.slots[i];
  }
  return values;
}

std::mutex g_init_mutex;

}  // namespace

uint64_t CurrentNvtxRange() noexcept {
  const ThreadRanges& t = TlsRef(t_ranges);
  if (t.depth == 0) return 0;
  const OpenRange& top = t.stack[t.depth - 1];
  return top.closed ? InnermostOpen(t) : top.id;
}

void WriteOpenNvtxRanges(Session& session, uint64_t before_op) {
  ThreadRanges& t = TlsRef(t_ranges);
  if (t.session != &session) {
    t.session = &session;
    t.written = 0;
  }
  if (t.written >= t.depth) return;
  for (uint32_t i = t.written; i < t.depth; ++i) {
    const OpenRange& range = t.stack[i];
    if (range.closed) continue;
    Write(session, format::NvtxEvent::kPush, range.id, range.parent, range.domain, range.category,
          {t.arena + range.name_offset, range.name_bytes}, range.steady_ns, before_op);
  }
  t.written = t.depth;
}

void WriteNvtxPreamble(Session& session) {
  Registry& registry = Global();
  std::lock_guard lock(registry.mutex);
  for (const CategoryName& category : registry.categories) {
    Write(session, format::NvtxEvent::kCategoryName, 0, 0, category.domain, category.category,
          {category.name.data(), static_cast<uint32_t>(category.name.size())}, SteadyNow(), 0);
  }
  for (const auto& [id, start] : registry.open_starts) {
    format::NvtxRangeRecord record;
    record.thread_id = start.thread;
    record.kind = format::NvtxEvent::kStart;
    record.push = false;
    record.name = start.name;
    record.time_ns = session.SinceStart(start.steady_ns);
    record.range_id = id;
    if (start.domain != nullptr) record.domain = start.domain->name;
    record.category = start.category;
    session.Append(format::Record(std::move(record)));
  }
}

}  // namespace ndt::tracer

using namespace ndt::tracer;

// NVTX's entry point into an injection library: called once by each NVTX copy in the process
// with its export table. Returns 1 (success) once our callbacks are installed.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  try {
    if (get_export_table == nullptr) return 0;
    const auto* callbacks =
        static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
    if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
        callbacks->GetModuleFunctionTable == nullptr) {
      return 0;
    }
    const Table core = ModuleTable(callbacks, NVTX_CB_MODULE_CORE);
    const Table core2 = ModuleTable(callbacks, NVTX_CB_MODULE_CORE2);
    std::lock_guard lock(g_init_mutex);
    const std::vector<NvtxFunctionPointer> core_before = Snapshot(core);
    const std::vector<NvtxFunctionPointer> core2_before = Snapshot(core2);
    if (NvtxInitializeInjectionNvtxFunc_t next = NextInit()) {
      if (next(get_export_table) != 0) g_chained.store(true, std::memory_order_relaxed);
    }
    Install(core, kCoreSlots, g_next_core, core_before);
    Install(core2, kCore2Slots, g_next_core2, core2_before);
    return 1;
  } catch (...) {
    return 0;
  }
}

// Ranges for code that has no NVTX of its own (ndtrace's Python shim on a PyTorch built
// without NVTX, through ctypes): a push/pop range in `domain` (null or empty: the default
// domain), recorded exactly as an NVTX push/pop. Return the depth as nvtxRangePush/Pop do.
extern "C" __attribute__((visibility("default"))) int ndtrace_range_push(const char* domain,
                                                                         const char* message) {
  try {
    const nvtxDomainRegistration_st* registered = nullptr;
    if (domain != nullptr && *domain != '\0') {
      static thread_local std::unordered_map<std::string, nvtxDomainHandle_t> t_domains;
      auto it = t_domains.find(domain);
      if (it == t_domains.end()) {
        it = t_domains.emplace(domain, CreateDomain(FromAscii(domain), nullptr)).first;
      }
      registered = it->second;
    }
    return Push(registered, 0, FromAscii(message));
  } catch (...) {
    return -1;
  }
}

extern "C" __attribute__((visibility("default"))) int ndtrace_range_pop(const char* domain) {
  try {
    const nvtxDomainRegistration_st* registered = nullptr;
    if (domain != nullptr && *domain != '\0') {
      // The innermost open range whose domain has this name.
      const ThreadRanges& t = t_ranges;
      for (uint32_t i = t.depth; i > 0; --i) {
        const OpenRange& range = t.stack[i - 1];
        if (!range.closed && range.domain != nullptr && range.domain->name == domain) {
          registered = range.domain;
          break;
        }
      }
      if (registered == nullptr) return -1;
    }
    return Pop(registered);
  } catch (...) {
    return -1;
  }
}
