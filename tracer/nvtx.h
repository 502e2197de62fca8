// NVTX ranges: libndtrace.so is the program's NVTX injection library, as Nsight's is.
//
// The NVTX v3 headers a program (or PyTorch, or any library) compiles in look at
// NVTX_INJECTION64_PATH on their first NVTX call, dlopen that library and call its
// `InitializeInjectionNvtx2` with their export table; `ndtrace record`/`check`/`run` point it at
// libndtrace.so. The tracer then fills the function slots of that NVTX copy (the CORE and CORE2
// modules: push/pop, start/end, marks, domains, registered strings, categories) with the
// callbacks below. Each NVTX copy in the process (the program's, each library's) initialises
// on its own and gets the same callbacks.
//
// Push/pop ranges live on a per-thread stack (fixed size, no allocation: a push copies its
// name into a per-thread arena). An op issued on the thread names the innermost open range by
// id (`CurrentNvtxRange`, one thread-local load); the push records of the open ranges not yet
// in the trace are written just before the op (`WriteOpenNvtxRanges`), so ranges that enclose
// no op cost no record. Start/end ranges, marks and category names are written when they
// happen. Range ids are `lineage << 32 | k` (formats/README.md, "NVTX ranges").
//
// Another injection library (Nsight's) that NVTX_INJECTION64_PATH named before ndtrace set it
// is chained: `ndtrace` passes its path as NDTRACE_NVTX_NEXT; at each initialisation the
// tracer initialises that library first with the same export table, keeps the callbacks it
// installed, installs its own, and calls the other library's after its own bookkeeping.
//
// Thread-safe: the range stacks are thread-local; domains, registered strings and category
// names are process-wide under a lock (rare calls).
#pragma once

#include <cstdint>

namespace ndt::tracer {

class Session;

// The innermost push/pop range open on the calling thread, 0 when none. Cheap.
uint64_t CurrentNvtxRange() noexcept;

// Writes into `session` the push records of the calling thread's open ranges that it does not
// hold yet, outermost first, each saying it comes before op `before_op`. Called for every op
// before its record is appended (Session::BeginOp).
void WriteOpenNvtxRanges(Session& session, uint64_t before_op);

// Writes into a session that has just started the category names NVTX was given before it.
void WriteNvtxPreamble(Session& session);

}  // namespace ndt::tracer
