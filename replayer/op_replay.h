// Standalone op replay: re-executes one captured op of a trace on this machine, many times, to
// prove on its own whether it is nondeterministic, and which deterministic alternative gives
// stable output (`ndtrace replay TRACE --op N`).
//
// The op's inputs come from the trace's blob stream (`ndtrace record --capture`, tracer/
// capture.h: text arguments "blob:in:<role>" / "blob:out:<role>" holding blob ids). Library ops
// are rebuilt from their recorded descriptors through the real library, loaded with dlopen;
// the driver is reached as the libraries reach it (dlopen libcuda.so.1 + cuGetProcAddress_v2).
// Replaying runs code chosen by the trace (a library algorithm, a captured module image) on
// this machine's GPU: replay only traces you trust.
//
// Covered: cuDNN legacy convolutions (forward, backward data, backward filter) in f32, f64,
// f16 and bf16; cuDNN backend plans (cudnnBackendExecute) of convolution graphs; cuBLAS GEMMs
// (cublasSgemm_v2, cublasDgemm_v2, cublasGemmEx) and cuBLASLt matmuls (cublasLtMatmul without
// epilogue, host scalars); cuRAND generation from pseudorandom generators; raw kernel launches
// (op_replay_kernel.cc: the captured module image, argument bytes and referenced allocations,
// re-created at their recorded device addresses). Single-threaded: one replay at a time per
// process.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/status.h"
#include "formats/trace_reader.h"
#include "kernels/digest_v1.h"

namespace ndt::replay {

// This machine's GPU and driver, as its driver reports them.
struct MachineFacts {
  std::string gpu_name;
  uint32_t cc_major = 0;
  uint32_t cc_minor = 0;
  uint32_t driver = 0;  // cuDriverGetVersion
};

// Asks the driver (libcuda.so.1, through cuGetProcAddress_v2) about device `ordinal`. Fails
// when the driver cannot be loaded or initialised or has no such device.
StatusOr<MachineFacts> QueryMachine(uint32_t ordinal);

// How the trace's GPU `ordinal` (its header) differs from `machine` in what decides an op's
// result: GPU name, compute capability, driver version. Empty when they match.
std::vector<std::string> MachineMismatches(const format::TraceHeader& header, uint32_t ordinal,
                                           const MachineFacts& machine);

// Whether `op` carries captured inputs ("blob:in:*" arguments that hold blob ids; for an op
// that reads no buffer, such as a cuRAND generate, a "blob:out:*" argument); fails naming what
// is missing otherwise.
Status CheckCaptured(const format::OpRecord& op);

// Whether standalone replay knows how to re-execute ops like `op`; fails naming its kind.
Status CheckReplayable(const format::OpRecord& op);

// Where an input of the replayed op starts from instead of its captured bytes: given the op,
// the role ("A", "x", "alloc3") and its size, the bytes, or nullopt for the captured ones.
// Window replay (window_replay.h) passes the device state the window's earlier ops left.
using InputSource = std::function<std::optional<std::string>(
    const format::OpRecord& op, const std::string& role, uint64_t bytes)>;

struct OpReplayOptions {
  int repeat = 20;                 // runs per algorithm, at least 1
  bool try_deterministic = false;  // also run every deterministic alternative algorithm
  // Set: inputs come from it first, and an input it gives need not have been captured.
  InputSource input_source;
  // Keep each candidate's first output bytes (AlgorithmRuns::first_output_bytes).
  bool keep_first_output = false;
};

// K runs of one algorithm.
struct AlgorithmRuns {
  int64_t algo = -1;
  std::string name;  // the library's name for it
  format::Determinism determinism = format::Determinism::kUnknown;
  bool recorded = false;  // the algorithm the op ran with when it was recorded
  std::string skipped;    // non-empty: why it was not run (unsupported for this problem...)
  int runs = 0;
  int distinct_outputs = 0;         // distinct digests of the output over the runs
  int runs_matching_recorded = -1;  // bitwise equal to the recorded output; -1: not recorded
  bool compared_values = false;     // f32/f64 output: the differences below are set
  double max_abs_diff = 0;          // largest |run_i - run_0| over runs and elements
  double max_rel_diff = 0;          // largest |run_i - run_0| / max(|run_i|, |run_0|)
  double ms_per_call = 0;           // mean time of one call including its synchronisation
  kernels::Digest128 first_output;  // digest v1 of the first run's output
  // The first run's output bytes (every compared buffer end to end, in the order of
  // OpReplayReport::output_role), under OpReplayOptions::keep_first_output; else empty.
  std::string first_output_bytes;

  bool stable() const { return skipped.empty() && distinct_outputs == 1; }
};

struct OpReplayReport {
  std::string problem;        // the op's fingerprint
  std::string output_role;    // the buffer(s) compared between runs ("y", "dw", "C", "D",
                              // "y+hy+cy", "alloc3+alloc5": several, end to end)
  uint64_t output_bytes = 0;
  std::vector<AlgorithmRuns> algorithms;  // the recorded one first
  std::string note;  // said after the report when non-empty (why no alternative was tried...)
};

// Re-executes `op` (captured, replayable) `options.repeat` times with its recorded algorithm,
// and with every deterministic alternative under `options.try_deterministic`, reading its
// captured buffers from `reader`. Fails when a blob cannot be read, the library or driver
// cannot be loaded, or the recorded algorithm fails to run.
StatusOr<OpReplayReport> ReplayOp(format::TraceReader& reader, const format::OpRecord& op,
                                  const OpReplayOptions& options);

}  // namespace ndt::replay
