// Window replay: re-executes a recorded stretch of ops A..B from the trace alone — no program —
// K times, and names the first op whose output varies (`ndtrace replay TRACE --window A:B`).
//
// Input: a trace recorded with `ndtrace record --window A:B` (NDTRACE_CAPTURE=A-B, tracer/
// capture.h): every op of the window carries its captured inputs and outputs as blobs, kernel
// launches their module image and argument bytes, copies their source bytes.
//
// How it runs. The ops are taken in recorded sequence order — the order the host issued them,
// which is one valid order of every stream and event dependency — and run one after another.
// The device memory between ops is a `DeviceImage` (below): bytes at recorded device addresses.
// An op's input is read from the image; bytes the window has not written or read before come
// from the op's captured input, which for them is the memory as it was at op A (nothing in the
// window wrote them). Each library op and kernel launch is re-executed K times on the same
// inputs through the standalone op replayers (op_replay.h; kernels at their recorded device
// addresses), and its outputs compared across the K runs and with the recorded ones. While every
// op is stable the K repeats of the window are identical up to it, so one image serves them all;
// the first op whose K outputs differ is the window's first varying op (the K repeats part
// there). Its bytes are written back to the image; memcpy and memset are applied to the image
// (copies are deterministic), synchronisations, event and stream ops only order. A call that
// writes device memory at recorded places but that no replayer re-executes is taken as
// recorded: its places are forgotten, so the ops that read them take the captured bytes (and
// one whose bytes were not captured is refused); such an op cannot be found varying.
//
// With `try_deterministic`, the varying op is replayed with its deterministic alternatives
// (op_replay.h), the first stable one takes its place, and the window runs on to its end; each
// later varying op likewise. The report then says whether the window is identical with the fix.
//
// Replaying runs code from the trace (module images, library calls chosen by it) on this
// machine's GPU: replay only traces you trust. One window replay at a time per process.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/records.h"
#include "formats/status.h"
#include "formats/trace_reader.h"
#include "replayer/fix_hints.h"
#include "replayer/op_replay.h"

namespace ndt::replay {

// Device memory as bytes at recorded device addresses, only where known: the window's state
// between ops. Not thread-safe.
class DeviceImage {
 public:
  // Records `bytes` at [address, address + bytes.size()), replacing what was known there.
  void Write(uint64_t address, std::string_view bytes);
  // Forgets [address, address + bytes): unknown again.
  void Erase(uint64_t address, uint64_t bytes);
  // Whether every byte of [address, address + bytes) is known.
  bool Covers(uint64_t address, uint64_t bytes) const;
  // The known bytes of [address, address + bytes), over `fallback` (as many bytes) where
  // unknown; the result is then known. `*from_fallback` (optional) gets the count of bytes taken
  // from `fallback`.
  std::string ReadOver(uint64_t address, std::string fallback, uint64_t* from_fallback = nullptr);
  // The bytes of [address, address + bytes) when Covers, else nullopt.
  std::optional<std::string> Read(uint64_t address, uint64_t bytes) const;
  // Bytes known.
  uint64_t known_bytes() const;

 private:
  std::map<uint64_t, std::string> segments_;  // start -> bytes; disjoint
};

// Which ops a window replay covers: sequences first..last inclusive (last: the trace's last op
// when not given).
struct WindowReplayOptions {
  uint64_t first = 0;
  std::optional<uint64_t> last;
  int repeat = 5;                  // runs of each op, at least 1 (2 to see variation)
  bool try_deterministic = false;  // replace a varying op by a stable deterministic alternative
};

// How one op of the window was treated.
enum class WindowStep {
  kReplayed,  // re-executed K times (library op, kernel launch)
  kApplied,   // a copy or memset, applied to the device image
  kOrdering,  // a synchronisation, event or stream op (or one captured into a CUDA graph, not
              // run then): the serial replay keeps its order
  kRecorded,  // a call window replay does not re-execute that writes device memory at known
              // places (cudnnSetDropoutDescriptor, cublasSaxpy_v2...): what it wrote is taken
              // from the captured inputs of the ops that read it
  kInside,    // a launch, copy or memset a library call made from inside (cuBLAS launches its
              // GEMM kernels): re-executed as part of that call, not again on its own
};

struct WindowOpResult {
  format::OpRecord op;  // without its blob arguments' bytes (they are ids)
  WindowStep step = WindowStep::kOrdering;
  std::string output_role;  // kReplayed: the compared buffer(s)
  uint64_t output_bytes = 0;
  AlgorithmRuns runs;             // kReplayed: the runs of the algorithm that ran
  bool substituted = false;       // kReplayed: `runs` is a deterministic alternative's
  uint64_t bytes_from_trace = 0;  // bytes of its inputs first read from the trace (state at A)
};

struct WindowReplayReport {
  uint64_t first = 0, last = 0;                    // the window, inclusive
  uint64_t captured_first = 0, captured_last = 0;  // ops with captured bytes in the trace
  std::vector<WindowOpResult> ops;  // in sequence order, up to where the replay stopped
  size_t ops_in_window = 0;
  int repeat = 0;
  // The first op whose K outputs differ (index in `ops`), its class, evidence and hint.
  std::optional<size_t> first_varying;
  std::vector<std::string> evidence;
  std::optional<FixHint> hint;
  // try_deterministic: the varying op's alternatives; the ops (indexes in `ops`) replaced by a
  // stable alternative, and those that vary with no stable alternative.
  std::optional<OpReplayReport> alternatives;
  std::vector<size_t> fixed;
  std::vector<size_t> unfixed;
  bool ran_to_end = false;             // every op of the window was replayed
  size_t differing_from_recorded = 0;  // replayed ops whose stable output != the recorded one
  uint64_t image_bytes = 0;            // device bytes the window touched (the image at the end)
  uint64_t bytes_from_trace = 0;       // of those, read from the trace (the state at op A)
  double replay_ms = 0;                // wall time of the whole replay (K runs of every op)
  uint64_t recorded_ns = 0;  // the window's span in the recorded run (first start..last end)

  // The window replayed identically in all K repeats, as recorded.
  bool identical() const { return ran_to_end && !first_varying; }
  // Under try_deterministic: identical once the varying ops ran their stable alternatives.
  bool identical_with_fixes() const { return ran_to_end && unfixed.empty(); }
};

// The ops of `reader`'s trace in the window (sequence order), with the sequences of the first
// and last ops that carry captured bytes; fails when the window holds no op.
struct WindowOps {
  std::vector<format::OpRecord> ops;
  uint64_t last_in_trace = 0;
  uint64_t captured_first = 0, captured_last = 0;  // 0, 0: no op captured
};
StatusOr<WindowOps> ReadWindowOps(format::TraceReader& reader, uint64_t first,
                                  std::optional<uint64_t> last);

// Whether the trace keeps what replaying `window` needs, without touching a GPU: every op is
// of a kind window replay re-executes (or only orders, or takes as recorded), each input that
// the window has not written before was captured, kernels have their module. Fails naming the first
// op that cannot be replayed and why ("op 12 (cublasSgemm_v2) reads B, which the trace did not
// keep:
// ...").
Status CheckWindow(const WindowOps& window);

// Replays the window (see the top of this file). Fails as CheckWindow does, or when a library
// or the driver cannot be loaded, or an op fails to run.
StatusOr<WindowReplayReport> ReplayWindow(format::TraceReader& reader,
                                          const WindowReplayOptions& options);

}  // namespace ndt::replay
