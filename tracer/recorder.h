// The recorder: the one process-global object of libndtrace.so and the per-process trace
// session it owns.
//
// Recorder is created on first use and never destroyed (hooks may run during exit). It does
// no I/O until the first intercepted CUDA call that records something: that call creates the
// Session, which builds the trace header (asking the real driver about the GPU), creates the
// trace file and registers an exit handler that closes it. Configuration comes from the
// environment: NDTRACE_OUTPUT (trace path, default `ndtrace-<pid>.ndt`), NDTRACE_STRICT=1 (when
// recording has failed, hooks return CUDA_ERROR_UNKNOWN instead of passing calls through),
// NDTRACE_QUIET=1 (no `ndtrace:` lines on stderr), which digests of device memory to take
// (DigestConfig) and where they are computed (GpuDigestConfig), NDTRACE_RING_SLOTS (record
// slots per appending thread, record_ring.h).
//
// After fork(), the child forgets the parent's session without touching it (its writer threads
// do not exist in the child) and starts its own trace, `<output>.<child pid>`, on its first
// CUDA call; a child that makes none leaves no file.
//
// Every hook enters through a HookScope (a per-thread re-entrancy guard): calls made while a
// hook is running on the same thread, including our own driver queries, are not recorded.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "formats/records.h"
#include "formats/trace_writer.h"
#include "tracer/allocation_map.h"
#include "tracer/driver_objects.h"
#include "tracer/gpu_digests.h"
#include "tracer/lineage.h"
#include "tracer/policy.h"
#include "tracer/python_stack.h"
#include "tracer/raw_op.h"
#include "tracer/record_ring.h"

namespace ndt::tracer {

// What a launch needs to know about a kernel handle (CUfunction, or CUkernel cast to one).
struct KernelInfo {
  std::string name;  // demangled; the mangled name if it does not demangle
  const char* interned_name = nullptr;  // the same, Session::InternName's (for RawOp)
  uint64_t module_id = 0;
  bool is_kernel = false;  // a CUkernel (library API), not a CUfunction
  bool params_known = false;
  std::vector<std::pair<uint64_t, uint64_t>> params;  // (offset, size) per parameter
  uint64_t param_bytes = 0;  // the sizes of `params` summed
  bool philox = false;  // the name has an at::PhiloxCudaState parameter (philox_args.h)
};

// Which digests of device memory to take, from the environment (tracer/README.md, "Digests of
// device memory"). Where they are computed (GPU or CPU) is GpuDigestConfig's business.
struct DigestConfig {
  // NDTRACE_DIGEST_EVERY=N (N >= 1): a state digest after every op whose sequence + 1 is a
  // multiple of N. 0: none.
  uint64_t every = 0;
  // NDTRACE_DIGEST_SYNC=1: a state digest after every host synchronisation op.
  bool at_sync = false;
  // A state digest when the trace is closed at exit, unless NDTRACE_DIGEST_EXIT=0.
  bool at_exit = true;
  // Managed memory a kernel is given is digested before the launch and at the next device
  // synchronisation (RecordLaunch), unless NDTRACE_DIGEST_MANAGED=0.
  bool managed = true;
  // NDTRACE_DIGEST_WINDOW=A:B or A: (op sequences, inclusive): launches, memsets and
  // device-to-device copies in [window_first, window_last] get digests of the allocations they
  // reference.
  bool window = false;
  uint64_t window_first = 0;
  uint64_t window_last = UINT64_MAX;

  bool InWindow(uint64_t sequence) const {
    return window && sequence >= window_first && sequence <= window_last;
  }
};

// Parses `A:B` or `A:` (decimal op sequences, A <= B) into `config`'s window. False, leaving
// `config` unchanged, when `text` is not of that form.
bool ParseDigestWindow(const std::string& text, DigestConfig* config);

// The configuration the NDTRACE_DIGEST_* variables ask for. An invalid value is ignored and
// described in `problems`.
DigestConfig DigestConfigFromEnvironment(std::vector<std::string>* problems);

// A device-to-host copy whose host bytes can be digested only once its stream has
// synchronised (asynchronous copies); or (`managed`) managed memory a kernel was given, whose
// bytes the host may read once the device has synchronised.
struct PendingDigest {
  uint32_t stream_id = 0;
  uint64_t op_sequence = 0;
  format::DevicePointer source;
  const void* host = nullptr;
  uint64_t bytes = 0;
  bool managed = false;
  // Not 0: `bytes` are rows of `width` bytes, `pitch` apart from `host` (a 2D copy's padded host
  // rows), digested back to back.
  uint64_t width = 0;
  uint64_t pitch = 0;
};

// How the digests of an op's memory reach the work its stream has enqueued so far: `launch`, the
// stream handle the GPU digest kernels are launched on (for the legacy-stream cuLaunchKernel:
// the null per-thread default stream is CU_STREAM_PER_THREAD), and `synchronize`, the real
// synchronisation the CPU path needs first (true when it succeeded, or nothing is needed).
struct DigestStream {
  uint64_t launch = 0;
  std::function<bool()> synchronize;
};

// One process's trace: the writer and every canonical identity. Thread-safe; its lock is
// never held across a real driver call.
//
// Records are written in the order Append is called (per appending thread; encoded into the
// writer by RecordRings' background thread, off the calling thread). An op (or state digest)
// whose digests are still being computed on the GPU is held back in its thread's ring, with the
// records that thread appends after it, until its digests have arrived: the encoder looks
// without blocking; the thread waits for them only when its ring is full; all are waited for
// at state digests and when the trace is closed.
class Session {
 public:
  Session(std::unique_ptr<format::TraceWriter> writer, format::TraceHeader header,
          uint64_t start_steady_ns, DigestConfig digests, PolicyConfig policy,
          std::unique_ptr<PinTable> pins, GpuDigestConfig gpu_digests,
          std::function<void(const std::string&)> log, size_t ring_slots = 1024);

  // ns since the trace started.
  uint64_t NowNs() const;
  // The same for `steady_ns`, a CLOCK_MONOTONIC time taken earlier (0 if before the start).
  uint64_t SinceStart(uint64_t steady_ns) const;
  // This thread's lineage id (lineage.h): the same in every run however threads interleave.
  uint32_t ThreadId();
  // The stable id of a stream handle: 0 for the legacy default stream (null handle in a
  // legacy-stream function, or CU_STREAM_LEGACY); the calling thread's per-thread default
  // stream (null handle in a _ptsz/_ptds function, or CU_STREAM_PER_THREAD) is
  // PerThreadStreamId(); a stream created through a hook got its id from its creating thread
  // (OnStreamCreated); a handle first seen otherwise gets one from the thread that names it.
  uint32_t StreamId(uint64_t handle, bool per_thread_variant);
  // A stream the calling thread has just created at `handle`: its id (lineage.h NewStreamId).
  uint32_t OnStreamCreated(uint64_t handle);
  // `address` as (allocation id, offset); id 0 and offset = address when it lies in no known
  // allocation. Naming an address inside an allocation other than its base marks the
  // allocation suballocated.
  format::DevicePointer Canonical(uint64_t address);
  // Whether `address` lies in a known allocation.
  bool IsDevice(uint64_t address);
  // False when `word` lies outside the span of every allocation made so far: a cheap test
  // before Canonical for words that are most often not addresses (a struct's fields).
  bool MayBeDevice(uint64_t word) const {
    return word >= allocation_low_.load(std::memory_order_relaxed) &&
           word < allocation_high_.load(std::memory_order_relaxed);
  }

  // The next op's sequence number, taken in issue order (dense from 0).
  uint64_t TakeOpSequence() { return next_op_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t PeekOpSequence() const { return next_op_.load(std::memory_order_relaxed); }

  // Appends `record`. An op asked for by RequestPythonStacks is followed by its Python stack,
  // taken now: call on the op's issuing thread while its call is in progress, holding no lock.
  void Append(const format::Record& record);
  // The same for an op, without copying it into a Record when nothing is held (the hot path).
  void Append(const format::OpRecord& op);
  // The same for an NVTX range record, built in its ring slot when nothing is held (the NVTX
  // hooks' path; fields.numbers.thread_id is its origin).
  void AppendNvtx(const RecordRings::NvtxFields& fields);

  // Asks for the Python stacks of the ops at `places` (NDTRACE_PYTHON_STACK; python_stack.h).
  // Call before the session is shared with other threads.
  void RequestPythonStacks(std::vector<LanePlace> places, uint32_t gil_wait_ms);

  // A new op on this thread, its sequence taken now; `EndOp` appends it with the call's status
  // and then takes the state digest the configuration asks for at this point, if any.
  // EndOp hands `op`'s contents to the recorder (no copy): afterwards `op` keeps only its
  // sequence, thread, stream, kind and status. The record BeginOp returns reuses the capacity of
  // an earlier one of this thread's (no allocation in steady state).
  format::OpRecord BeginOp(format::OpKind kind, std::string_view name, uint32_t stream_id);
  void EndOp(format::OpRecord& op, int32_t status);
  // The same for the hot path's fixed-size record (raw_op.h): BeginRawOp returns this thread's
  // RawOp, begun as BeginOp begins an op (`name` must outlive the process: a literal or
  // InternName's); EndRawOp queues it without building an OpRecord on this thread.
  // Digests in `outputs` make it an OpRecord after all (on this thread, through EndOp).
  RawOp& BeginRawOp(format::OpKind kind, const char* name, uint32_t stream_id);
  void EndRawOp(RawOp& op, int32_t status, std::vector<format::BufferDigest> outputs = {});
  // A copy of `name` that lives as long as the process (one per distinct name).
  const char* InternName(const std::string& name);
  // The op this thread has begun and not yet ended (the innermost), if any.
  static std::optional<uint64_t> OpenOp();
  // The op open on this thread that op `sequence` (itself open) was begun inside, if any.
  static std::optional<uint64_t> OpenOpAround(uint64_t sequence);

  // ---- the library layer (policy.h, library_support.h) ----
  const format::TraceHeader& header() const { return header_; }
  const PolicyConfig& policy() const { return policy_; }
  // Under --pin: the reference trace's choices; null otherwise, or when it could not be read
  // (said once when recording started).
  const PinTable* pins() const { return pins_.get(); }
  // Appends `decision` (what the policy did, or could not do, to a library choice). One that
  // was not applied is also said once on stderr per distinct `decision.action`.
  void Decide(const format::PolicyDecisionRecord& decision);

  // Allocation bookkeeping. OnAllocate, after the real call, appends an AllocationRecord. A free
  // is two calls around the real one: BeginFree takes the allocation at `base` out of the map
  // before the range can be handed to another thread's allocation (after the real call that
  // thread's OnAllocate may come first, and would be taken for it); EndFree appends the free
  // record if the real call freed it, else puts it back.
  void OnAllocate(uint64_t base, uint64_t bytes, const char* api, uint32_t stream_id);
  struct Freeing {
    std::optional<Allocation> allocation;  // null: not one of ours
    uint64_t before_op = 0;                // when it left the map: the free record's time
  };
  Freeing BeginFree(uint64_t base);
  void EndFree(const Freeing& freeing, bool freed, const char* api, uint32_t stream_id);
  // A module or library loaded from `image` (may be null); appends a ModuleLoadRecord.
  void OnModuleLoad(const void* handle, const char* api, const void* image);
  // A kernel handle obtained from a module or library by mangled name.
  void OnKernelHandle(const void* handle, const void* module_or_library, const char* mangled,
                      bool is_kernel);
  // A CUfunction obtained for a CUkernel: same kernel, same module.
  void OnKernelFunction(const void* function, const void* kernel);
  // What we know about a launched handle; queries the driver for the parameter layout the
  // first time (outside the lock). Immutable and never freed (a handle registered again gets a
  // new one): a launch copies nothing, and each thread keeps the handles it launched last.
  const KernelInfo& Kernel(const void* function);

  void AddPendingDigest(const PendingDigest& pending);

  // Whether the process has managed memory (cuMemAllocManaged) now: its launches then take the
  // OpRecord path, which digests the managed memory they are given (RecordLaunch).
  bool HasManagedMemory() const {
    return digests_.managed && managed_live_.load(std::memory_order_relaxed) != 0;
  }
  // The managed allocation containing `address`, or nullopt.
  std::optional<Allocation> FindManaged(uint64_t address);

  // The digests of the pending copies on `stream_id` (every stream if nullopt) issued before op
  // `before_op`, computed now; managed memory only when the whole device synchronised
  // (`stream_id` nullopt), once per allocation (the last op that was given it names it).
  std::vector<format::BufferDigest> TakePendingDigests(std::optional<uint32_t> stream_id,
                                                       uint64_t before_op = UINT64_MAX);

  const DigestConfig& digests() const { return digests_; }

  // Called after `op` has been appended: takes the state digest the configuration asks for at
  // this point (every N ops, host synchronisation), if any.
  void AfterOp(const format::OpRecord& op) { AfterOp(op.kind, op.sequence); }
  void AfterOp(format::OpKind kind, uint64_t sequence);

  // Synchronises the context through the real driver and appends a StateDigestRecord of every
  // live allocation (whole extent, in allocation id order) with `reason`; `after_op` is the
  // last op issued so far. When the driver cannot synchronise (no context any more, a sticky
  // error), appends a TracerNote instead and returns false. Call inside a HookScope (or with
  // the re-entrancy guard otherwise held): the driver calls must not be recorded.
  bool TakeStateDigest(const std::string& reason);

  // The digests of the whole allocations containing each (role, device address) of `buffers`,
  // deduplicated by allocation id (the first role is kept), in `buffers`' order, once `stream`'s
  // work so far is done (DigestInStreamOrder). Addresses in no known allocation and
  // allocations that cannot be read are skipped.
  std::vector<format::BufferDigest> DigestAllocations(
      const std::vector<std::pair<std::string, uint64_t>>& buffers, const DigestStream& stream);

  // The digest of exactly the `bytes` bytes at device address `address` (cut at the end of the
  // allocation containing it), named `role`, once `stream`'s work so far is done: what a copy or
  // a memset wrote, and nothing of the tensors beside it in the same allocation, which other
  // streams may be writing meanwhile. nullopt when the address is in no known allocation or the
  // bytes cannot be read.
  std::optional<format::BufferDigest> DigestRange(const std::string& role, uint64_t address,
                                                  uint64_t bytes, const DigestStream& stream);

  // The digest v1 of the `bytes` bytes at device address `address` once the work enqueued so
  // far on `stream` is done. On the GPU when that path is on in this context and the range lies
  // inside one known allocation: the kernels are enqueued on `stream.launch` and the value
  // returned is a placeholder that Append replaces when the digest arrives (`on_gpu` is set);
  // with `summarize_f32`, the bytes are staged too and the digest gets their numeric summary
  // then. Otherwise on the CPU: `stream.synchronize()` (once per `*synced`: 0 not yet, 1 done,
  // -1 failed) and a copy (DigestDevice). nullopt when neither works. Call inside a HookScope.
  std::optional<format::Digest> DigestInStreamOrder(uint64_t address, uint64_t bytes,
                                                    const DigestStream& stream, int* synced,
                                                    bool* on_gpu = nullptr,
                                                    bool summarize_f32 = false);

  // Writes the held records whose digests have arrived; with `wait`, waits for all of them
  // (after checking that their contexts still answer: a ring is never read after its context
  // is gone; digests that cannot arrive are left out with a note).
  void FlushHeldRecords(bool wait);

  // The digest v1 of `bytes` bytes of device memory at `base`, copied chunk by chunk through
  // a reusable host buffer with the real cuMemcpyDtoH_v2; nullopt when a copy fails. The
  // caller has synchronised the work that writes it. Holds a lock across the real copies
  // (taken by nothing else).
  std::optional<format::Digest> DigestDevice(uint64_t base, uint64_t bytes);

  format::TraceWriter& writer() { return *writer_; }

  // Encodes every record still queued in the threads' rings (record_ring.h) and stops the
  // encoder; later records go to the writer directly. Before the writer is closed.
  void StopRings() { rings_.Stop(); }
  RecordRings::Stats ring_stats() const { return rings_.stats(); }

  // ---- driver objects (hooks_driver.cc) ----
  // Forgets the id of the stream at `handle` (destroyed): a stream created later at the same
  // handle gets a new id.
  void RetireStream(uint64_t handle);
  // Events, graphs, executable graphs and the captures in progress.
  DriverObjects& objects() { return objects_; }

 private:
  std::unique_ptr<format::TraceWriter> writer_;
  const format::TraceHeader header_;
  const uint64_t start_steady_ns_;
  std::atomic<uint64_t> next_op_{0};

  std::mutex mutex_;  // guards everything below
  AllocationMap allocations_;
  std::unordered_map<uint64_t, uint32_t> streams_;
  std::unordered_map<const void*, uint64_t> modules_;  // CUmodule / CUlibrary -> module id
  std::unordered_map<const void*, const KernelInfo*> kernels_;  // never freed (Kernel)
  // Bumped at every change of kernels_, allocations_ and streams_: what a thread keeps of them
  // (its lookup cache) is valid while they are unchanged.
  std::atomic<uint64_t> kernels_version_{0};
  std::atomic<uint64_t> allocations_version_{0};
  std::atomic<uint64_t> managed_live_{0};  // live managed allocations
  std::atomic<uint64_t> streams_version_{0};
  // The span of every allocation made so far (MayBeDevice): it only grows.
  std::atomic<uint64_t> allocation_low_{UINT64_MAX};
  std::atomic<uint64_t> allocation_high_{0};
  std::vector<PendingDigest> pending_;
  std::vector<std::string> said_;  // unapplied decisions already said on stderr
  std::unordered_set<std::string> names_;  // InternName's (never erased: RawOp points into it)

  const DigestConfig digests_;
  const PolicyConfig policy_;
  const std::unique_ptr<PinTable> pins_;
  std::mutex digest_mutex_;                   // guards digest_buffer_
  std::vector<unsigned char> digest_buffer_;  // grown on demand up to kDigestBufferBytes
  DriverObjects objects_;

  // RecordRings::Held for this session: puts the GPU digests that have arrived into a held
  // record in place of their placeholders ({ticket, 0}); the note for those that never will.
  uint64_t SettleHeld(format::Record& record, std::vector<uint64_t>& tickets, bool wait);
  format::Record LostDigestsNote(uint64_t lost) const;
  // Append without the Python stack request.
  void AppendRecord(const format::Record& record);
  // Appends the Python stack of `op` when it is one asked for.
  void AfterAppend(const format::OpRecord& op);
  std::unique_ptr<PythonStackRequests> python_stacks_;  // null: none asked for
  GpuDigests gpu_;
  // Every record goes through its appending thread's ring, a record held for its GPU digests
  // too (RecordRings::AppendHeld): it holds back the later records of that ring only.
  RecordRings rings_;

 public:
  // ---- for capture.cc: what a captured launch references ----
  // The live allocation containing `address`, or nullopt.
  std::optional<Allocation> FindAllocation(uint64_t address) {
    std::lock_guard lock(mutex_);
    return allocations_.Find(address);
  }
  // The module id OnModuleLoad gave the module or library `handle`; 0 when unknown.
  uint64_t ModuleId(const void* handle) {
    std::lock_guard lock(mutex_);
    const auto it = modules_.find(handle);
    return it == modules_.end() ? 0 : it->second;
  }
};

// Entered by every hook for the duration of the call.
class HookScope {
 public:
  HookScope() noexcept;
  ~HookScope();
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;

  // The session to record into, or null: the call passes through unrecorded (nested call,
  // recording off or failed, trace closed).
  Session* session() const { return session_; }
  // True when NDTRACE_STRICT=1 and recording has failed: the hook must not run the call and
  // returns CUDA_ERROR_UNKNOWN.
  bool fail_closed() const { return fail_closed_; }

  // Lift the guard around a library's real call, so that the driver calls it makes are
  // recorded as ops of their own; Restore puts it back. Only while this scope holds the guard.
  void Lift() noexcept;
  void Restore() noexcept;

 private:
  bool entered_ = false;
  bool fail_closed_ = false;
  Session* session_ = nullptr;
  LibraryCallScope library_call_;  // threads created meanwhile are the library's (lineage.h)
};

// The session being recorded into, or null; never starts one (for NVTX callbacks, which are
// no CUDA calls). Any thread.
Session* CurrentSessionIfRecording() noexcept;

// Logs an internal failure of a hook (an exception caught at the boundary) once per process,
// and stops recording.
void ReportHookFailure(const char* hook) noexcept;

}  // namespace ndt::tracer
