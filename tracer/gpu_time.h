// GPU time from CUPTI's activity API (tracer/README.md, "GPU time"): when libcupti.so.13 can
// be loaded, the GPU start and end of every kernel, copy and memset are recorded as
// GpuActivityRecords tied to the ops that started them.
//
// How ops are tied (tracer/README.md, "GPU time"): CUPTI ties to an API call the external ids
// pushed on its thread when the call began, and work started through the runtime carries the
// runtime call's correlation id, so what a thread keeps pushed (CUSTOM2) is a token naming its
// next driver op; each op's hook writes token -> op down (DriverScope) and pushes the next token
// when its real call returns. Around the real call of a library op (cuDNN, cuBLAS, ...) the
// library op's sequence is pushed as CUSTOM1 (LibraryScope). CUPTI writes the records joining a
// call's correlation id to those ids before the call's API record, so the RUNTIME and DRIVER kinds
// are enabled. Kernels are taken with CONCURRENT_KERNEL, which does not serialise the GPU (KERNEL
// would).
//
// Off with NDTRACE_GPU_TIME=0 (`--no-gpu-time`). On a stand-in device only ndtrace's stand-in
// libcupti is used (a real one would drive a driver that is not there). In a forked child, GPU
// time stays off.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "formats/records.h"

namespace ndt::tracer {

class Session;

namespace gpu_time {

struct ThreadTokens;

// Starts taking GPU times for `session` (records are appended to it as CUPTI delivers them).
// Returns what happened, for a note in the trace: "on (...)" or why it is off.
std::string Start(Session* session, bool simulated_device);
// Delivers every activity CUPTI holds (a forced flush; not when `flush` is false) and stops
// taking GPU times. Call before the session's trace is closed. A trace closed for a signal does
// not flush: the thread the signal stopped may be inside CUPTI, holding the lock a flush takes
// (every runtime and driver call writes an API record), and the trace must close at once.
void Stop(bool flush = true);
// In a forked child: forget the parent's session (CUPTI is not used there).
void ForgetAfterFork();
// The program is about to use CUPTI's activity API itself (a profiler: torch.profiler's Kineto).
// CUPTI keeps one pair of buffer callbacks per process, and a buffer of ndtrace's completed
// through the program's would be freed by it: GPU times stop here, everything CUPTI holds
// delivered first and ndtrace's activity kinds disabled, with a note in the trace saying `why`;
// when they have not started yet (a profiler around the whole run), they never start. Called by the cuptiActivityRegisterCallbacks libndtrace.so exports
// (hooks/hooks_cupti.cc), and by the Python shim as torch.profiler prepares CUDA activities
// (ndtrace_cupti_yield).
void YieldToProgram(const char* why);

// Whether GPU times are being taken (one relaxed load: the hooks' fast path).
bool Active();

// Marks the GPU work of driver op `sequence` (of `kind`), whose real call is made while it
// lives: the token of the thread's op count, already pushed (the runtime call around the hook
// began with it), is written down as naming the op, and the next op's token is pushed when it
// ends. Nothing when GPU times are off or there is no op.
class DriverScope {
 public:
  // `to_host`: the op copies to host memory (its own copy to pageable memory is then never
  // taken for ndtrace's: OwnWork).
  DriverScope(std::optional<uint64_t> sequence, format::OpKind kind, bool to_host = false);
  ~DriverScope();
  DriverScope(const DriverScope&) = delete;
  DriverScope& operator=(const DriverScope&) = delete;

 private:
  ThreadTokens* tokens_ = nullptr;
};

// Marks the GPU work the calling thread starts while it lives as library op `sequence`'s.
class LibraryScope {
 public:
  explicit LibraryScope(std::optional<uint64_t> sequence);
  ~LibraryScope();
  LibraryScope(const LibraryScope&) = delete;
  LibraryScope& operator=(const LibraryScope&) = delete;

 private:
  bool pushed_ = false;
};

// Marks the GPU work ndtrace starts on the calling thread while it lives (digest kernels, the
// copies its digests read) as no op's, over the mark a driver op may have left (Scope). Inside
// the program's runtime call the work carries that call's correlation id whatever is pushed:
// digest kernels are then told by their name (kernels::kDigestKernelPrefix), and copies to the
// host (`Work::kHostCopies`) by their direction: a copy from the device to pageable host memory
// carrying the token of an op ndtrace copied beside is taken for ndtrace's.
class OwnWork {
 public:
  enum class Work { kKernels, kHostCopies };
  explicit OwnWork(Work work);
  ~OwnWork();
  OwnWork(const OwnWork&) = delete;
  OwnWork& operator=(const OwnWork&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace gpu_time
}  // namespace ndt::tracer
