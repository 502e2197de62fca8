// Names that do not depend on how host threads interleave.
//
// A trace is compared with another run's, so nothing in it that is compared may depend on
// the order in which racing threads reached the driver. Threads are therefore named by their
// **lineage** — the main thread is 0, the k-th thread it created is k, the j-th thread that one
// created is k + (j << 8), and so on (8 bits per level, 4 levels; deeper or wider lineages get
// a 31-bit hash of the whole path with bit 31 set) — learned by the exported `pthread_create`
// hook, which hands each new thread its parent's lineage and its own ordinal. A program whose
// threads create threads in a fixed order (PyTorch's autograd, pin-memory and NCCL threads,
// thread pools) gets the same thread ids in every run, whichever thread calls CUDA first.
//
// Driver and library objects are named by the thread that created them and their ordinal
// among that thread's objects of the same kind (`NewObjectId`), never by global creation
// order. A thread not created through `pthread_create` (nor the main thread) gets a fallback
// id by order of first sight, with bit 30 set: the only ids that may vary between runs.
//
// Thread-safe; lock-free (thread-local counters).
#pragma once

#include <cstdint>

namespace ndt::tracer {

// The calling thread's lineage id (above).
uint32_t ThreadLineageId();

// Starts a detached thread of ndtrace's own through the real pthread_create: it is given no
// lineage and does not shift the numbering of the program's threads. It must never issue a
// recorded call. Returns pthread_create's result.
int StartOwnThread(void* (*routine)(void*), void* argument);

// Marks the calling thread as inside a hooked CUDA or library call for the scope's life
// (HookScope holds one). A thread created meanwhile is the library's (the driver's, NCCL's,
// a stand-in's stream workers), made when the library decides: it is numbered apart (a hash of
// the creator's lineage and its ordinal among the creator's library threads, bit 31 set) and
// does not shift the numbers of the program's own threads.
class LibraryCallScope {
 public:
  LibraryCallScope() noexcept;
  ~LibraryCallScope();
  LibraryCallScope(const LibraryCallScope&) = delete;
  LibraryCallScope& operator=(const LibraryCallScope&) = delete;
};

// The kinds of object whose ids are handed out per creating thread.
enum class ObjectKind {
  kStream,
  kEvent,
  kAllocation,
  kGraph,
  kGraphExec,
  kCublasHandle,
  kCurandGenerator,
  kNcclComm,
  kModule,
  kCount,
};

// A new object's id: (creating thread's lineage id << 32) | its ordinal among the objects of
// `kind` this thread created (1, 2, ...). For the main thread that is 1, 2, 3, ...
uint64_t NewObjectId(ObjectKind kind);

// A new stream's 32-bit id (trace records carry 32-bit stream ids): the main thread's streams
// are 1, 2, ...; another thread's are 0x01000000 | thread << 8 | ordinal while both fit, else a
// 31-bit hash of (thread, ordinal) with bit 31 set. Never 0 (the legacy default stream).
uint32_t NewStreamId();
// The calling thread's per-thread default stream: 0x40000000 | its lineage id (30 bits).
uint32_t PerThreadStreamId();

}  // namespace ndt::tracer
