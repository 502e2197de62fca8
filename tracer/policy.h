// The policy the tracer applies to library choices (DESIGN.md, "Policy"), from the environment:
//
//   NDTRACE_POLICY=observe        record choices as the program makes them (the default)
//   NDTRACE_POLICY=deterministic  replace nondeterministic choices (--deterministic)
//   NDTRACE_PIN=TRACE             force the choices recorded in TRACE (--pin TRACE); wins over
//                                 NDTRACE_POLICY
//   NDTRACE_LIBRARY_DIGESTS=0     no digests of library ops' inputs and outputs
//
// Pinning is keyed by fingerprint: every library op or choice that can be pinned carries an
// argument named "fingerprint" (text) that describes the problem canonically (shapes, dtypes,
// parameters; never pointers), and its AlgorithmChoice or RngState. A pinned run looks a
// fingerprint up in the reference trace and gets the choice the reference used most for it
// (ties: the latest), or the first RNG state recorded for it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/records.h"
#include "formats/status.h"

namespace ndt::tracer {

enum class PolicyMode { kObserve, kEnforce, kPin };

struct PolicyConfig {
  PolicyMode mode = PolicyMode::kObserve;
  std::string pin_path;         // with kPin
  bool library_digests = true;  // digests of library ops' inputs and outputs
};

// The configuration the NDTRACE_POLICY/PIN/LIBRARY_DIGESTS variables ask for; an invalid value
// is ignored and described in `problems`.
PolicyConfig PolicyFromEnvironment(std::vector<std::string>* problems);

format::Policy ToFormat(PolicyMode mode);

// The environment variables the deterministic policy sets when the program has not set them
// (cuBLAS workspace, NCCL algorithm, protocol, channels, NVLS and CollNet), name and value.
const std::vector<format::EnvVar>& DeterministicEnvironment();

// What the policy set at load time, filled by the library constructor (before main, before any
// library reads its environment): with NDTRACE_POLICY=deterministic, the variables of
// DeterministicEnvironment() the program left unset; with NDTRACE_PIN, the NCCL variables of
// DeterministicEnvironment() (algorithm, protocol, channels, NVLS, CollNet) that the reference
// trace's header recorded and the program left unset, with the reference's values.
const std::vector<format::EnvVar>& EnvironmentSetByPolicy();

// This process's rank in a run of several processes (RANK, LOCAL_RANK, SLURM_PROCID or
// OMPI_COMM_WORLD_RANK, the first set to a number >= 0), or -1.
int32_t RankFromEnvironment();

// The reference trace a process pinned to `pin_path` reads: `pin_path`.rank<R> when this
// process has rank R and that file is readable (the same rank of a multi-process reference
// run), else `pin_path`.
std::string ReferenceTracePath(const std::string& pin_path);

// The choices recorded in a reference trace, by fingerprint.
class PinTable {
 public:
  // Reads every op of the trace at `path`. Fails on an unreadable trace.
  static StatusOr<PinTable> Load(const std::string& path);

  // The choice used most for `fingerprint` (ties: the latest), if any; its source is kUnknown.
  const format::AlgorithmChoice* Choice(std::string_view fingerprint) const;
  // The first RNG state recorded for `fingerprint`, if any.
  const format::RngState* Rng(std::string_view fingerprint) const;

  // Why choices of `library` ("cudnn", "cublas", "cublasLt", "curand", "nccl") recorded in the
  // reference may not apply in a process whose header is `current`: a different GPU model, SM
  // count, or version of that library. Empty when they apply.
  std::string Mismatch(const format::TraceHeader& current, std::string_view library) const;

  // The pinned choices noted nondeterministic ("cudnn CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0"):
  // pinning them reproduces the selection, not the op's result.
  std::vector<std::string> NondeterministicChoices() const;

  const format::TraceHeader& header() const { return header_; }
  size_t size() const { return choices_.size() + rng_.size(); }

 private:
  format::TraceHeader header_;
  std::map<std::string, format::AlgorithmChoice, std::less<>> choices_;
  std::map<std::string, format::RngState, std::less<>> rng_;
};

// The variables set at load time as decisions, to record when the trace starts: "set
// NAME=VALUE" for each of EnvironmentSetByPolicy() ("... (pinned from the reference)" under
// --pin).
const std::vector<format::PolicyDecisionRecord>& DecisionsAtLoad();

// What --pin could not do for NCCL, as decisions not applied, to record (and say) when the
// program first uses NCCL: the reference left NCCL_ALGO unset (NCCL's own tuner chose, so there
// is no choice to pin), or the program set a variable to a value other than the reference's (the
// program's stands); and when NCCL variables were pinned, `pins` (the reference, if read) having
// another NCCL version or GPU than `current` (PinTable::Mismatch). Empty without --pin.
std::vector<format::PolicyDecisionRecord> NcclPinProblems(const PinTable* pins,
                                                          const format::TraceHeader& current);

// The text of the argument named "fingerprint" of `op`, or empty.
std::string_view FingerprintOf(const format::OpRecord& op);

}  // namespace ndt::tracer
