// A synthetic trace that looks like a small training loop, written through the writer API
// with no GPU involved. The demo, the writer benchmark, the fuzz seed corpora and the CLI
// tests all use it, so it exercises every record type and most fields.
//
// The stream is repetitive like a real training loop (the same kernels every step, with
// fresh digests), which is what the writer benchmark's "compressed bytes per op" measures.
// Everything but timestamps, host, pid and start time is a function of the options: digests
// come from a PRNG seeded by (seed, thread, step, slot). With threads > 1 the op sequence
// numbers interleave as the threads race, exactly as in a real multi-threaded program.
#pragma once

#include <cstdint>

#include "formats/records.h"
#include "formats/status.h"
#include "formats/trace_writer.h"

namespace ndt::tools {

struct SyntheticOptions {
  uint64_t steps = 10;  // training steps per thread
  int threads = 1;      // appending threads, 1..256
  int streams = 2;      // CUDA streams per thread, 1..64
  uint64_t seed = 1;    // decides every digest, RNG state and algorithm choice
  // Raw kernel launches carry buffer digests too, as inside a window being bisected;
  // otherwise only library ops and copies do and state digests cover the kernels.
  bool kernel_digests = false;
};

// Fails when an option is out of range; the message names the option.
Status ValidateSyntheticOptions(const SyntheticOptions& options);

// The header a synthetic trace carries: command line {"ndtrace-synth", ...} echoing the
// options, one simulated GpuInfo named "synthetic (no device)", fixed library versions and
// environment, and a note saying no GPU was involved. host, pid and start time are real.
format::TraceHeader SyntheticHeader(const SyntheticOptions& options);

// Op records WriteSyntheticTrace appends for `options` (steps x threads x ops per step).
uint64_t SyntheticOpCount(const SyntheticOptions& options);

// Appends the synthetic stream to `writer`: allocations and a module load first, then per
// step and thread an NVTX range around a host-to-device copy and the ops of one training
// step (kernels, cuDNN backend executes, cuBLASLt matmuls, cuRAND and dropout with RNG
// state), then a state digest. Op sequences are dense from 0 across threads. With
// threads > 1 that many std::threads append concurrently; the call returns when all are
// done. Does not Close() the writer. Fails on invalid options or when the writer failed.
Status WriteSyntheticTrace(format::TraceWriter& writer, const SyntheticOptions& options);

}  // namespace ndt::tools
