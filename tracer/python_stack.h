// The Python stack of the ops a report names, taken in-process through CPython's public API.
//
// `ndtrace check` (and whoever knows which op to ask about) re-runs the program with
// NDTRACE_PYTHON_STACK naming ops by their place in a lane — thread, the stream's ordinal among
// that thread's streams by first use, position in that lane (formats/README.md "Lanes"), the
// identity that is the same in every run of the program. The tracer counts only the ops of the
// threads named, and when an op asked for is appended, on its issuing thread and while that
// call is still in progress, takes that thread's Python stack. No other op pays anything, and
// a process without CPython pays nothing at all: the API is looked up with dlsym at the first
// op asked for. The .cc file explains how the GIL is handled.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/records.h"

namespace ndt::tracer {

// An op named by its place: its thread's lineage id, its stream's ordinal among that thread's
// streams by first use, and its position (from 0) among that lane's ops other than lifecycle
// ops (format::IsLifecycleOp) — or, `top_level`, among those of them not made from inside
// another op (no "insideOp"): a library call keeps that position when the kernels it launches
// inside differ from run to run (cuDNN's engines under cudnn.benchmark do).
struct LanePlace {
  uint32_t thread_id = 0;
  uint32_t lane_stream = 0;
  uint64_t lane_index = 0;
  bool top_level = false;
  bool operator==(const LanePlace&) const = default;
};

// At most this many places in one request.
inline constexpr size_t kMaxPythonStackPlaces = 16;

// Parses NDTRACE_PYTHON_STACK: `T:S:I` places (decimal; `T:S:tI` for a top-level position),
// separated by commas, at most kMaxPythonStackPlaces. nullopt when malformed.
std::optional<std::vector<LanePlace>> ParsePythonStackRequest(std::string_view text);

// The version of the CPython whose API the process has ("3.11.7"), or empty when it has none
// (looked up in the global scope with the real dlsym; nothing is cached, nothing is called but
// Py_GetVersion).
std::string FindPythonVersion();

// Finds the ops asked for among those appended, and takes their Python stacks. Thread-safe.
class PythonStackRequests {
 public:
  // `gil_wait_ms`: how long the issuing thread waits for the GIL (CapturePythonStack).
  PythonStackRequests(std::vector<LanePlace> wanted, uint32_t gil_wait_ms);

  // Call for every op appended, in the order each thread appends them, on the thread that
  // issued `op` while its call is still in progress (its Python frames are those that made
  // the call), holding no lock of ndtrace's. Returns the record to append after `op` when it
  // is one asked for.
  std::optional<format::PythonStackRecord> OnOp(const format::OpRecord& op);

 private:
  const std::vector<LanePlace> wanted_;
  const uint32_t gil_wait_ms_;
  std::mutex mutex_;                                           // guards what follows
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> ordinal_;  // (thread, stream) -> ordinal
  std::map<uint32_t, uint32_t> streams_seen_;                  // thread -> its streams so far
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> counts_;   // (thread, ordinal) -> ops
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> top_counts_;  // the same, top-level ops
};

// The calling thread's Python stack now (status, frames innermost first, detail, python).
// Never blocks longer than `gil_wait_ms` for the GIL; never lets a failure reach the program.
format::PythonStackRecord CapturePythonStack(uint32_t gil_wait_ms);

// How long the issuing thread waits for the GIL by default (NDTRACE_PYTHON_STACK_WAIT_MS).
inline constexpr uint32_t kDefaultGilWaitMs = 2000;

}  // namespace ndt::tracer
