// Digests of device memory computed on the GPU, in stream order, without host synchronisation.
//
// A digest is one launch of the digest v1 kernel (kernels/digest_v1_gpu.h) on the stream of the
// op whose memory it covers; its last CTA writes the digest, then its ticket, into one slot of a
// ring in mapped pinned host memory. The host learns that a digest is done by seeing its ticket in
// its slot: no synchronisation, no copy. Everything here is the tracer's own: the kernels'
// module, the ring (cuMemHostAlloc with DEVICEMAP | PORTABLE) and the per-slot device scratch
// come from the real driver through its cuGetProcAddress_v2, never through our
// hooks, so none of it appears in the trace.
//
// One engine per context, set up lazily by the first digest asked for while that context is
// current. When it cannot be set up (no fat binary in this build, the module does not load, no
// mapped pinned memory) that context's digests go to the CPU path (Enqueue returns nullopt).
//
// The ring has a fixed number of slots; a slot is free again once its ticket has arrived and
// the digest has been copied out (into a table of arrived digests, until its record takes it).
// When the next slot is still busy, Enqueue waits for it: that is the only wait on the issuing
// thread, one per ring's worth of digests at most, and it lasts as long as the GPU needs to
// reach that digest in its stream.
//
// A digest may also take the f32 summary of its bytes (NaN and infinite counts, min, max, sum;
// for library extents' reports), computed by the same kernel in the same pass: each summary in
// flight needs an area for its CTAs' partial sums, one of 256 per context (2.1 MiB of device
// memory, allocated at the first summary); when none is free the digest goes without.
//
// Thread-safe. Never holds its lock across a kernel launch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/records.h"
#include "kernels/digest_v1_core.h"

namespace ndt::tracer {

// Where digests of device memory are computed: NDTRACE_DIGEST_DEVICE=cpu|gpu|auto.
enum class DigestDevice {
  kAuto,  // the GPU when the kernels load in the context, silently the CPU otherwise
  kCpu,   // always the CPU: synchronise, copy, digest on the host
  kGpu,   // the GPU; when the kernels cannot load, said once, then the CPU
};

struct GpuDigestConfig {
  DigestDevice device = DigestDevice::kAuto;
  // NDTRACE_DIGEST_RING=N (1 <= N <= 1048576): slots in each context's ring.
  uint32_t ring_slots = 4096;
};

// The configuration NDTRACE_DIGEST_DEVICE and NDTRACE_DIGEST_RING ask for; an invalid value is
// ignored and described in `problems`.
GpuDigestConfig GpuDigestConfigFromEnvironment(std::vector<std::string>* problems);

// `summary` of `count` floats (kernels/digest_v1_core.h) as a trace records it: min and max of
// the finite values (0 when there is none).
format::NumericSummary NumericSummaryOf(const kernels::digest_v1::F32Summary& summary,
                                        uint64_t count);

class GpuDigests {
 public:
  // `log` says one line on stderr (when NDTRACE_DIGEST_DEVICE=gpu cannot be honoured).
  GpuDigests(GpuDigestConfig config, std::function<void(const std::string&)> log);
  ~GpuDigests();
  GpuDigests(const GpuDigests&) = delete;
  GpuDigests& operator=(const GpuDigests&) = delete;

  // False when NDTRACE_DIGEST_DEVICE=cpu: callers need not try Enqueue.
  bool enabled() const { return config_.device != DigestDevice::kCpu; }

  // Enqueues on `stream` (a handle for the legacy-stream cuLaunchKernel: 0 is the legacy default
  // stream, CU_STREAM_PER_THREAD the calling thread's) the digest of the `bytes` bytes at
  // `address`, in the context current on this thread; with `summarize_f32`, their f32 summary
  // too when an area for it is free. Returns the digest's ticket (never 0), or nullopt when the
  // GPU path is off or unavailable here or the launch failed: then digest on the CPU. May wait
  // for the ring (see above). Call with the re-entrancy guard held.
  std::optional<uint64_t> Enqueue(uint64_t address, uint64_t bytes, uint64_t stream,
                                  bool summarize_f32 = false);

  // Whether `ticket` was handed out by Enqueue and not yet taken.
  bool Outstanding(uint64_t ticket);

  enum class State { kPending, kArrived, kLost };
  struct Result {
    State state = State::kLost;
    format::Digest digest;
    std::optional<format::NumericSummary> summary;  // when asked for and taken
  };
  // The digest of `ticket`, removed from the table once arrived or lost. kPending only when
  // `wait` is false. With `wait`, waits until it arrives, or its context reports an error, or 10
  // s have passed (lost). Lost: never enqueued, or its context is gone or failed.
  Result Take(uint64_t ticket, bool wait);

  // Asks every context with digests in flight whether it can still be reached (it answers a
  // stream query without an error) and marks those that cannot dead: their digests are lost.
  // At exit, before anything reads a ring that a destroyed context may have freed.
  void ForgetDeadContexts();

  // How many digests were launched, and how often a full ring made Enqueue wait.
  uint64_t launched() const;
  uint64_t ring_waits() const;

 private:
  struct Engine;
  struct Ticket {
    Engine* engine = nullptr;
    uint32_t slot = 0;
    bool arrived = false;
    format::Digest digest;
    uint64_t bytes = 0;
    std::optional<format::NumericSummary> summary;
  };

  Engine* EngineForCurrentContext();  // lock held
  // Copies slot `slot`'s digest out if its ticket has arrived; frees the slot. Lock held.
  bool CollectLocked(Engine& engine, uint32_t slot);
  // Whether `engine`'s context can still be reached. Lock held.
  bool AliveLocked(Engine& engine);
  // An area for the partial sums of slot `slot`'s summary (the areas allocated on first use),
  // given back when the slot's digest is collected. Lock held.
  std::optional<uint64_t> ReservePartialsLocked(Engine& engine, uint32_t slot);

  const GpuDigestConfig config_;
  const std::function<void(const std::string&)> log_;
  mutable std::mutex mutex_;  // guards everything below
  std::vector<std::unique_ptr<Engine>> engines_;
  std::unordered_map<uint64_t, Ticket> tickets_;  // enqueued and not yet taken
  uint64_t next_ticket_ = 1;
  uint64_t launched_ = 0;
  uint64_t ring_waits_ = 0;
  bool said_unavailable_ = false;
};

}  // namespace ndt::tracer
