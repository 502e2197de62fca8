#include "tracer/lineage.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "tracer/real_dl.h"
#include "tracer/tls_ref.h"

namespace ndt::tracer {
namespace {

constexpr uint64_t kMainHash = 0x6a09e667f3bcc909ull;
constexpr uint32_t kHashedBit = 0x80000000u;
constexpr uint32_t kFallbackBit = 0x40000000u;

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Self {
  bool known = false;
  uint32_t id = 0;
  uint64_t hash = 0;      // of the whole lineage path
  uint32_t depth = 0;     // levels of `id` in use, while it is packed
  uint32_t children = 0;  // threads this one created
  uint32_t library_children = 0;  // of them, inside a library call (LibraryCallScope)
  std::array<uint64_t, static_cast<size_t>(ObjectKind::kCount)> objects{};
};

thread_local Self t_self;
thread_local int t_library_calls = 0;
std::atomic<uint32_t> g_fallback{0};

Self& Current() {
  Self& self = TlsRef(t_self);
  if (!self.known) {
    self.known = true;
    if (static_cast<pid_t>(syscall(SYS_gettid)) == getpid()) {
      self.hash = kMainHash;  // the main thread: id 0
    } else {
      // Not created through our pthread_create (it ran before we were loaded, or through
      // clone): named by order of first sight.
      const uint32_t n = g_fallback.fetch_add(1, std::memory_order_relaxed) + 1;
      self.id = kFallbackBit | (n & (kFallbackBit - 1));
      self.hash = Mix(kMainHash ^ (uint64_t{0xfa11} << 32) ^ n);
      self.depth = 4;
    }
  }
  return self;
}

// What a thread being created learns from its parent.
struct Start {
  void* (*routine)(void*);
  void* argument;
  uint32_t id;
  uint64_t hash;
  uint32_t depth;
};

void* StartThread(void* opaque) {
  const Start start = *static_cast<Start*>(opaque);
  std::free(opaque);
  Self& self = t_self;
  self = Self{};
  self.known = true;
  self.id = start.id;
  self.hash = start.hash;
  self.depth = start.depth;
  return start.routine(start.argument);
}

using PthreadCreateFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

PthreadCreateFn RealPthreadCreate() {
  static const PthreadCreateFn real = [] {
    void* found = nullptr;
    if (DlvsymFn dlvsym = RealDlvsym()) {
      found = dlvsym(RTLD_NEXT, "pthread_create", "GLIBC_2.34");
      if (found == nullptr) found = dlvsym(RTLD_NEXT, "pthread_create", "GLIBC_2.2.5");
    }
    if (found == nullptr) {
      if (DlsymFn dlsym = RealDlsym()) found = dlsym(RTLD_NEXT, "pthread_create");
    }
    return reinterpret_cast<PthreadCreateFn>(found);
  }();
  return real;
}

uint32_t Hash31(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>(Mix(a * 0x100000001b3ull ^ Mix(b)) >> 33);
}

}  // namespace

uint32_t ThreadLineageId() {
  return Current().id;
}

int StartOwnThread(void* (*routine)(void*), void* argument) {
  const PthreadCreateFn real = RealPthreadCreate();
  if (real == nullptr) return EAGAIN;
  pthread_attr_t attributes;
  if (const int error = pthread_attr_init(&attributes); error != 0) return error;
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int error = real(&thread, &attributes, routine, argument);
  pthread_attr_destroy(&attributes);
  return error;
}

uint64_t NewObjectId(ObjectKind kind) {
  Self& self = Current();
  const uint64_t ordinal = ++self.objects[static_cast<size_t>(kind)];
  return (uint64_t{self.id} << 32) | (ordinal & 0xffffffffu);
}

uint32_t NewStreamId() {
  Self& self = Current();
  const uint64_t ordinal = ++self.objects[static_cast<size_t>(ObjectKind::kStream)];
  if (self.id == 0 && ordinal < (uint64_t{1} << 24)) return static_cast<uint32_t>(ordinal);
  if (self.id < (1u << 16) && ordinal < (1u << 8)) {
    return 0x01000000u | self.id << 8 | static_cast<uint32_t>(ordinal);
  }
  return kHashedBit | Hash31(self.hash, ordinal);
}

uint32_t PerThreadStreamId() {
  return kFallbackBit | (Current().id & (kFallbackBit - 1));
}

LibraryCallScope::LibraryCallScope() noexcept {
  ++t_library_calls;
}
LibraryCallScope::~LibraryCallScope() {
  --t_library_calls;
}

}  // namespace ndt::tracer

// The k-th thread a thread creates learns its lineage here. Fail-open: when the start record
// cannot be allocated, the thread is created as asked and named by first sight.
extern "C" __attribute__((visibility("default"))) int pthread_create(
    pthread_t* thread, const pthread_attr_t* attributes, void* (*routine)(void*), void* argument) {
  using namespace ndt::tracer;
  const PthreadCreateFn real = RealPthreadCreate();
  if (real == nullptr) return EAGAIN;
  Self& self = Current();
  auto* start = static_cast<Start*>(std::malloc(sizeof(Start)));
  if (start == nullptr) return real(thread, attributes, routine, argument);
  const bool library = t_library_calls > 0;
  uint32_t& counter = library ? self.library_children : self.children;
  const uint32_t ordinal = ++counter;
  start->routine = routine;
  start->argument = argument;
  start->hash = Mix(self.hash ^ Mix(ordinal) ^ (library ? 0x11b5a7ull << 40 : 0));
  const bool packed = !library && (self.id & (kHashedBit | kFallbackBit)) == 0 && self.depth < 4 &&
                      ordinal <= (self.depth == 3 ? 63u : 255u);
  if (packed) {
    start->id = self.id | ordinal << (8 * self.depth);
    start->depth = self.depth + 1;
  } else {
    start->id = kHashedBit | static_cast<uint32_t>(start->hash >> 33);
    start->depth = 4;
  }
  const int result = real(thread, attributes, StartThread, start);
  if (result != 0) {
    std::free(start);
    --counter;  // no thread: the next one takes this ordinal, as in a run where it worked
  }
  return result;
}
