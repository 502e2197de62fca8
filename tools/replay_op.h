// `ndtrace replay TRACE --op N [--repeat K] [--try-deterministic] [--force]`: re-executes one
// captured op of a trace on the current machine K times and reports whether its outputs vary.
// The op must have been captured (`ndtrace record --capture OPSET`): its input bytes are in the
// trace's blob stream. Replaying runs code taken from the trace (a kernel's module image, or a
// library call rebuilt from recorded descriptors) on this machine's GPU.
//
// Exit codes: 0 the outputs are bitwise stable across the K runs; 1 they vary; 2 error (the op
// is missing or was not captured, the trace is unreadable, the trace's GPU or driver does not
// match this machine without --force, the library or driver cannot be loaded, a CUDA error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replayer/op_replay.h"

namespace ndt::tools {

// What `replay --op` was asked to do. `cmd_replay.cc` parses the command line and forwards.
struct ReplayOpOptions {
  std::string trace;               // the trace file
  uint64_t op = 0;                 // the op's sequence number (as `ndtrace show` lists it)
  int repeat = 20;                 // how many times to run it (at least 2 to see variation)
  bool try_deterministic = false;  // also run every deterministic alternative algorithm
  bool force = false;              // replay even if the trace's GPU or driver differ
};

// Runs the replay described by `options`, printing the report on stdout and `error: ...` lines
// on stderr. Returns the exit code above.
int RunReplayOp(const ReplayOpOptions& options);

// Prints the table of candidates `replay --op` prints (header line and one line each).
void PrintAlgorithmTable(const std::vector<replay::AlgorithmRuns>& candidates);

}  // namespace ndt::tools
