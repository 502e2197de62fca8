#include "tracer/policy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "formats/trace_reader.h"

namespace ndt::tracer {
namespace {

// What the constructor below did, read when recording starts. Never destroyed: read during
// exit.
struct LoadTimePolicy {
  std::vector<format::EnvVar> set;                          // EnvironmentSetByPolicy()
  std::vector<format::PolicyDecisionRecord> decisions;      // DecisionsAtLoad()
  std::vector<format::PolicyDecisionRecord> nccl_problems;  // what --pin could not do
  bool nccl_pinned = false;  // some NCCL variable was set from the reference
};

LoadTimePolicy& AtLoad() {
  static auto* policy = new LoadTimePolicy();
  return *policy;
}

bool IsNcclVariable(const std::string& name) {
  return name.rfind("NCCL_", 0) == 0;
}

// Sets `variable` (absent) and records the decision; false when setenv fails.
bool SetAtLoad(const format::EnvVar& variable, const char* why) {
  if (setenv(variable.name.c_str(), variable.value.c_str(), 0) != 0) return false;
  AtLoad().set.push_back(variable);
  format::PolicyDecisionRecord decision;
  decision.library = IsNcclVariable(variable.name) ? "nccl" : "cublas";
  decision.action = "set " + variable.name + "=" + variable.value + why;
  AtLoad().decisions.push_back(std::move(decision));
  return true;
}

void NotPinned(std::string action) {
  format::PolicyDecisionRecord decision;
  decision.library = "nccl";
  decision.action = std::move(action);
  decision.applied = false;
  AtLoad().nccl_problems.push_back(std::move(decision));
}

// The reference must be a regular file before anything opens it: opening a FIFO (or a
// device) would block or read without end inside the traced process, before main.
Status CheckRegularFile(const std::string& path) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) {
    return Status::Error(path + ": cannot open: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) return Status::Error(path + ": not a regular file");
  return Status::Ok();
}

// --pin: NCCL reads its algorithm, protocol and channel variables when a communicator is
// created, with no per-call API to force them, so the reference's values are put in the
// environment now. Only the reference's header is read (its recorded environment). An
// unreadable reference is said when recording starts (no pins at all), not here.
void PinNcclEnvironment(const std::string& pin_path) {
  const std::string path = ReferenceTracePath(pin_path);
  if (!CheckRegularFile(path).ok()) return;
  const StatusOr<format::TraceHeader> reference = format::TraceReader::ReadHeader(path);
  if (!reference.ok()) return;
  const auto recorded = [&](const std::string& name) -> const std::string* {
    for (const format::EnvVar& variable : reference->environment) {
      if (variable.name == name) return &variable.value;
    }
    return nullptr;
  };
  if (recorded("NCCL_ALGO") == nullptr) {
    NotPinned(
        "cannot pin NCCL's algorithm: the reference left NCCL_ALGO unset, so NCCL's own tuner "
        "chose it per call");
  }
  for (const format::EnvVar& variable : DeterministicEnvironment()) {
    if (!IsNcclVariable(variable.name)) continue;
    const std::string* value = recorded(variable.name);
    if (const char* own = std::getenv(variable.name.c_str()); own != nullptr) {
      if (value == nullptr || *value != own) {
        NotPinned("kept " + variable.name + "=" + own + " from the program's environment; the " +
                  (value == nullptr ? "reference left it unset"
                                    : "reference ran with " + variable.name + "=" + *value));
      }
      continue;
    }
    if (value == nullptr) continue;
    if (SetAtLoad({variable.name, *value}, " (pinned from the reference)")) {
      AtLoad().nccl_pinned = true;
    }
  }
}

// Runs before main when the library is preloaded: the variables cuBLAS and NCCL read when a
// handle or communicator is created must be in place before the program can create one.
// Single-threaded at this point, so setenv is safe. NDTRACE_PIN wins over NDTRACE_POLICY, as in
// PolicyFromEnvironment. Nothing may escape into the host: a failure leaves the environment as
// far as it got.
__attribute__((constructor)) void ApplyPolicyEnvironmentAtLoad() {
  try {
    if (const char* pin = std::getenv("NDTRACE_PIN"); pin != nullptr && *pin != '\0') {
      PinNcclEnvironment(pin);
      return;
    }
    const char* policy = std::getenv("NDTRACE_POLICY");
    if (policy == nullptr || std::strcmp(policy, "deterministic") != 0) return;
    for (const format::EnvVar& variable : DeterministicEnvironment()) {
      if (std::getenv(variable.name.c_str()) == nullptr) SetAtLoad(variable, "");
    }
  } catch (...) {
  }
}

}  // namespace

PolicyConfig PolicyFromEnvironment(std::vector<std::string>* problems) {
  PolicyConfig config;
  if (const char* policy = std::getenv("NDTRACE_POLICY"); policy != nullptr && *policy) {
    if (std::strcmp(policy, "deterministic") == 0) {
      config.mode = PolicyMode::kEnforce;
    } else if (std::strcmp(policy, "observe") != 0) {
      problems->push_back(std::string("ignoring NDTRACE_POLICY=") + policy +
                          ": not observe or deterministic");
    }
  }
  if (const char* pin = std::getenv("NDTRACE_PIN"); pin != nullptr && *pin) {
    config.mode = PolicyMode::kPin;
    config.pin_path = pin;
  }
  if (const char* digests = std::getenv("NDTRACE_LIBRARY_DIGESTS"); digests != nullptr) {
    config.library_digests = std::strcmp(digests, "0") != 0;
  }
  return config;
}

format::Policy ToFormat(PolicyMode mode) {
  switch (mode) {
    case PolicyMode::kEnforce:
      return format::Policy::kEnforce;
    case PolicyMode::kPin:
      return format::Policy::kPin;
    case PolicyMode::kObserve:
      break;
  }
  return format::Policy::kObserve;
}

const std::vector<format::EnvVar>& DeterministicEnvironment() {
  // research/cuda-interposition.md §4 (cuBLAS workspace) and §6 (NCCL strict-mode pinning).
  static const auto* variables = new std::vector<format::EnvVar>{
      {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
      {"NCCL_ALGO", "Ring"},
      {"NCCL_PROTO", "Simple"},
      {"NCCL_MIN_NCHANNELS", "4"},
      {"NCCL_MAX_NCHANNELS", "4"},
      {"NCCL_NVLS_ENABLE", "0"},
      {"NCCL_COLLNET_ENABLE", "0"},
  };
  return *variables;
}

const std::vector<format::EnvVar>& EnvironmentSetByPolicy() {
  return AtLoad().set;
}

const std::vector<format::PolicyDecisionRecord>& DecisionsAtLoad() {
  return AtLoad().decisions;
}

std::vector<format::PolicyDecisionRecord> NcclPinProblems(const PinTable* pins,
                                                          const format::TraceHeader& current) {
  std::vector<format::PolicyDecisionRecord> problems = AtLoad().nccl_problems;
  if (pins == nullptr || !AtLoad().nccl_pinned) return problems;
  if (std::string why = pins->Mismatch(current, "nccl"); !why.empty()) {
    format::PolicyDecisionRecord decision;
    decision.library = "nccl";
    decision.action =
        "NCCL variables pinned from the reference may not reproduce its choices: " + why;
    decision.applied = false;
    problems.push_back(std::move(decision));
  }
  return problems;
}

int32_t RankFromEnvironment() {
  for (const char* name : {"RANK", "LOCAL_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (end != nullptr && *end == '\0' && rank >= 0 && rank <= INT32_MAX) {
      return static_cast<int32_t>(rank);
    }
  }
  return -1;
}

std::string ReferenceTracePath(const std::string& pin_path) {
  if (const int32_t rank = RankFromEnvironment(); rank >= 0) {
    std::string ranked = pin_path + ".rank" + std::to_string(rank);
    if (access(ranked.c_str(), R_OK) == 0) return ranked;
  }
  return pin_path;
}

StatusOr<PinTable> PinTable::Load(const std::string& path) {
  NDT_RETURN_IF_ERROR(CheckRegularFile(path));
  StatusOr<std::unique_ptr<format::TraceReader>> opened = format::TraceReader::Open(path);
  if (!opened.ok()) return opened.status();
  format::TraceReader& reader = **opened;
  PinTable table;
  table.header_ = reader.header();
  // Per fingerprint, how often each distinct choice was used and when last: a program that
  // times candidates (cudnnFind, autotuning through the public API) runs each once and then
  // keeps one, so the most used choice is the one it kept (ties: the latest).
  struct Tally {
    format::AlgorithmChoice choice;
    uint64_t uses = 0;
    uint64_t last = 0;
  };
  std::map<std::string, std::vector<Tally>, std::less<>> tallies;
  uint64_t order = 0;
  format::Record record;
  while (reader.Next(&record)) {
    const auto* op = std::get_if<format::OpRecord>(&record);
    if (op == nullptr) continue;
    const std::string_view fingerprint = FingerprintOf(*op);
    if (fingerprint.empty()) continue;
    if (op->algorithm) {
      auto& candidates = tallies[std::string(fingerprint)];
      format::AlgorithmChoice choice = *op->algorithm;
      choice.source = format::ChoiceSource::kUnknown;  // how it was chosen does not matter here
      auto same = std::find_if(candidates.begin(), candidates.end(),
                               [&](const Tally& tally) { return tally.choice == choice; });
      if (same == candidates.end()) same = candidates.insert(candidates.end(), Tally{choice});
      ++same->uses;
      same->last = ++order;
    }
    if (op->rng && table.rng_.find(fingerprint) == table.rng_.end()) {
      table.rng_.emplace(std::string(fingerprint), *op->rng);
    }
  }
  for (auto& [fingerprint, candidates] : tallies) {
    const Tally& kept = *std::max_element(
        candidates.begin(), candidates.end(), [](const Tally& a, const Tally& b) {
          return a.uses != b.uses ? a.uses < b.uses : a.last < b.last;
        });
    table.choices_.emplace(fingerprint, kept.choice);
  }
  return table;
}

const format::AlgorithmChoice* PinTable::Choice(std::string_view fingerprint) const {
  auto found = choices_.find(fingerprint);
  return found == choices_.end() ? nullptr : &found->second;
}

std::vector<std::string> PinTable::NondeterministicChoices() const {
  std::vector<std::string> texts;
  for (const auto& [fingerprint, choice] : choices_) {
    if (choice.determinism != format::Determinism::kNondeterministic) continue;
    std::string text = choice.library + " " + (choice.name.empty() ? std::to_string(choice.id)
                                                                   : choice.name);
    if (std::find(texts.begin(), texts.end(), text) == texts.end()) texts.push_back(text);
  }
  return texts;
}

const format::RngState* PinTable::Rng(std::string_view fingerprint) const {
  auto found = rng_.find(fingerprint);
  return found == rng_.end() ? nullptr : &found->second;
}

std::string PinTable::Mismatch(const format::TraceHeader& current,
                               std::string_view library) const {
  if (!header_.gpus.empty() && !current.gpus.empty()) {
    const format::GpuInfo& recorded = header_.gpus.front();
    const format::GpuInfo& here = current.gpus.front();
    if (recorded.name != here.name) {
      return "the reference ran on " + recorded.name + ", this process on " + here.name;
    }
    if (recorded.sm_count != here.sm_count) {
      return "the reference GPU had " + std::to_string(recorded.sm_count) + " SMs, this one " +
             std::to_string(here.sm_count);
    }
  }
  const auto differs = [&](const char* name, uint32_t recorded, uint32_t here) -> std::string {
    if (recorded == 0 || here == 0 || recorded == here) return "";
    return std::string("the reference used ") + name + " " + std::to_string(recorded) +
           ", this process " + std::to_string(here);
  };
  const format::LibraryVersions& recorded = header_.versions;
  const format::LibraryVersions& here = current.versions;
  if (library == "cudnn") return differs("cuDNN", recorded.cudnn, here.cudnn);
  if (library == "cublas" || library == "cublasLt") {
    return differs("cuBLAS", recorded.cublas, here.cublas);
  }
  if (library == "curand") return differs("cuRAND", recorded.curand, here.curand);
  if (library == "nccl") return differs("NCCL", recorded.nccl, here.nccl);
  return "";
}

std::string_view FingerprintOf(const format::OpRecord& op) {
  for (const format::Argument& argument : op.args) {
    if (argument.name != "fingerprint") continue;
    if (const auto* text = std::get_if<std::string>(&argument.value)) return *text;
  }
  return {};
}

}  // namespace ndt::tracer
