// GPU time from CUPTI's activity API (tracer/README.md, "GPU time"): when libcupti.so.13 can
// be loaded, the GPU start and end of every kernel, copy and memset are recorded as
// GpuActivityRecords tied to the ops that started them.
//
// How ops are tied: before the real call of a recorded driver op (launch, copy, memset, graph
// launch) the op's sequence is pushed as CUPTI's external correlation id of kind CUSTOM2, popped
// when the thread's next op begins (Scope says why), and around the real call of a library op
// (cuDNN, cuBLAS, ...) the library op's as CUSTOM1; CUPTI then writes, before the API record of
// every runtime or driver call made while they are pushed, a record joining the call's
// correlation id to them, and the activity records carry the correlation id of the call that
// started the work (the runtime call, when the program called the runtime). Kernels are taken
// with CONCURRENT_KERNEL, which does not serialise the GPU (KERNEL would).
//
// Off with NDTRACE_GPU_TIME=0 (`--no-gpu-time`). On a stand-in device only ndtrace's stand-in
// libcupti is used (a real one would drive a driver that is not there). In a forked child, GPU
// time stays off.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ndt::tracer {

class Session;

namespace gpu_time {

// Starts taking GPU times for `session` (records are appended to it as CUPTI delivers them).
// Returns what happened, for a note in the trace: "on (...)" or why it is off.
std::string Start(Session* session, bool simulated_device);
// Delivers every activity CUPTI holds (a forced flush; not when `flush` is false) and stops
// taking GPU times. Call before the session's trace is closed. A trace closed for a signal does
// not flush: the thread the signal stopped may be inside CUPTI, holding the lock a flush takes
// (the calls that start work write API records), and the trace must close at once.
void Stop(bool flush = true);
// In a forked child: forget the parent's session (CUPTI is not used there).
void ForgetAfterFork();
// The program is registering CUPTI activity buffers of its own (a profiler: torch.profiler's
// Kineto). CUPTI keeps one pair of buffer callbacks per process, and a buffer of ndtrace's
// completed through the program's would be freed by it: GPU times stop here, everything CUPTI
// holds delivered first and ndtrace's activity kinds disabled, with a note in the trace. Called
// by the cuptiActivityRegisterCallbacks libndtrace.so exports (hooks/hooks_cupti.cc).
void YieldToProgram();

// Whether GPU times are being taken (one relaxed load: the hooks' fast path).
bool Active();

// Marks the GPU work the calling thread starts while it lives as op `sequence`'s: a driver op
// (`library` false; its mark stays until the thread's next Scope, or GPU times stop) or a library
// op. Nothing when GPU times are off or there is no op.
class Scope {
 public:
  Scope(std::optional<uint64_t> sequence, bool library);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool pushed_ = false;
  bool library_ = false;
};

// Marks the GPU work ndtrace starts on the calling thread while it lives (digest kernels, the
// copies its digests read) as no op's, over the mark a driver op may have left (Scope). Inside
// the program's runtime call the work carries that call's correlation id whatever is pushed:
// digest kernels are then told by their name (kernels::kDigestKernelPrefix).
class OwnWork {
 public:
  OwnWork();
  ~OwnWork();
  OwnWork(const OwnWork&) = delete;
  OwnWork& operator=(const OwnWork&) = delete;

 private:
  bool pushed_ = false;
};

}  // namespace gpu_time
}  // namespace ndt::tracer
