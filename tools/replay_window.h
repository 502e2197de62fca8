// `ndtrace replay TRACE --window A:B [--repeat K] [--try-deterministic] [--force]`: re-executes
// the recorded ops A..B from the trace alone, K times (default 5), and names the first op whose
// output varies (replayer/window_replay.h). The trace must have been recorded with
// `ndtrace record --window A:B` (or a window that contains it). Replaying runs code taken from
// the trace (module images, library calls rebuilt from recorded descriptors) on this machine's
// GPU: replay only traces you trust.
//
// Exit codes: 0 every op's outputs are bitwise identical across the K repeats; 1 an op's output
// varies (with --try-deterministic too: the report then says whether the window is identical
// once the varying ops run their stable deterministic alternatives); 2 error (the
// window reads memory the trace did not keep, an op cannot be replayed in a window, the trace's
// GPU or driver does not match this machine without --force, a library or driver error).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ndt::tools {

// A window "A:B" (ops A to B inclusive) or "A:" (from A to the end of the trace).
struct WindowSpec {
  uint64_t first = 0;
  std::optional<uint64_t> last;
};

// Parses "A:B" or "A:"; nullopt for anything else, or B < A.
std::optional<WindowSpec> ParseWindowSpec(const std::string& text);

// The NDTRACE_CAPTURE range that keeps `window` ("A-B"; "A-<max>" to the end).
std::string CaptureRange(const WindowSpec& window);

struct ReplayWindowOptions {
  std::string trace;
  WindowSpec window;
  int repeat = 5;
  bool try_deterministic = false;
  bool force = false;
};

// Runs the window replay, printing the report on stdout and `error: ...` lines on stderr.
// Returns the exit code above.
int RunReplayWindow(const ReplayWindowOptions& options);

}  // namespace ndt::tools
