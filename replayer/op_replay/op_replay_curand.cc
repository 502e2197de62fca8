// Standalone replay of cuRAND host-API generation (curandGenerate, curandGenerateUniform,
// curandGenerateNormal, curandGenerateLogNormal and the three in double precision): a generator of
// the recorded type is created through the real libcurand.so.10 and, before every run, set to the
// state the op recorded (its RngState: seed, offset, ordering), so each run draws the same n
// numbers the op drew; the output is compared with the captured one. With --try-deterministic, a
// generator whose ordering was CURAND_ORDERING_PSEUDO_DYNAMIC ("adjusted to the device": another
// GPU draws another order, which the tracer's deterministic policy replaces) is also run with each
// fixed ordering.
#include <curand.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "replayer/op_replay/op_replay_internal.h"

namespace ndt::replay::internal {
namespace {

// clang-format off
#define NDT_CURAND_FUNCTIONS(X)                                                            \
  X(curandCreateGenerator) X(curandDestroyGenerator) X(curandSetPseudoRandomGeneratorSeed) \
  X(curandSetGeneratorOffset) X(curandSetGeneratorOrdering) X(curandGenerate)              \
  X(curandGenerateUniform) X(curandGenerateNormal) X(curandGenerateLogNormal)              \
  X(curandGenerateUniformDouble) X(curandGenerateNormalDouble)                             \
  X(curandGenerateLogNormalDouble)
// clang-format on

struct Curand {
#define NDT_CURAND_SLOT(name) decltype(&::name) name = nullptr;
  NDT_CURAND_FUNCTIONS(NDT_CURAND_SLOT)
#undef NDT_CURAND_SLOT
};

StatusOr<const Curand*> LoadCurand() {
  return LoadOnce<Curand>("libcurand.so.10",
                          [](void* library, Curand* curand, std::string* missing) {
#define NDT_RESOLVE(name) Resolve(library, #name, &curand->name, missing);
                            NDT_CURAND_FUNCTIONS(NDT_RESOLVE)
#undef NDT_RESOLVE
                          });
}

std::string StatusText(const char* api, curandStatus_t status) {
  return fmt::format("{}: curandStatus {}", api, static_cast<int>(status));
}

// The generator types as the tracer names them ("curand:<NAME>", tracer/hooks_curand.cc);
// pseudorandom ones only (quasirandom generators need their dimensions, not recorded yet).
std::optional<curandRngType_t> GeneratorType(const std::string& name) {
  static const std::map<std::string, curandRngType_t> kTypes = {
      {"curand:XORWOW", CURAND_RNG_PSEUDO_XORWOW},
      {"curand:MRG32K3A", CURAND_RNG_PSEUDO_MRG32K3A},
      {"curand:MTGP32", CURAND_RNG_PSEUDO_MTGP32},
      {"curand:MT19937", CURAND_RNG_PSEUDO_MT19937},
      {"curand:PHILOX4_32_10", CURAND_RNG_PSEUDO_PHILOX4_32_10}};
  if (const auto found = kTypes.find(name); found != kTypes.end()) return found->second;
  return std::nullopt;
}

constexpr std::pair<curandOrdering_t, const char*> kOrderings[] = {
    {CURAND_ORDERING_PSEUDO_DEFAULT, "PSEUDO_DEFAULT"},
    {CURAND_ORDERING_PSEUDO_BEST, "PSEUDO_BEST"},
    {CURAND_ORDERING_PSEUDO_SEEDED, "PSEUDO_SEEDED"},
    {CURAND_ORDERING_PSEUDO_LEGACY, "PSEUDO_LEGACY"},
    {CURAND_ORDERING_PSEUDO_DYNAMIC, "PSEUDO_DYNAMIC"},
};

std::optional<curandOrdering_t> Ordering(const std::string& name) {
  for (const auto& [value, text] : kOrderings) {
    if (name == text) return value;
  }
  return std::nullopt;
}

// What a generate call draws, by its name.
enum class Distribution { kBits, kUniform, kNormal, kLogNormal };

struct GenerateApi {
  const char* name;
  Distribution distribution;
  bool f64;  // doubles (else 32-bit values)
};

constexpr GenerateApi kGenerateApis[] = {
    {"curandGenerate", Distribution::kBits, false},
    {"curandGenerateUniform", Distribution::kUniform, false},
    {"curandGenerateNormal", Distribution::kNormal, false},
    {"curandGenerateLogNormal", Distribution::kLogNormal, false},
    {"curandGenerateUniformDouble", Distribution::kUniform, true},
    {"curandGenerateNormalDouble", Distribution::kNormal, true},
    {"curandGenerateLogNormalDouble", Distribution::kLogNormal, true},
};

const GenerateApi* FindGenerateApi(const std::string& name) {
  for (const GenerateApi& api : kGenerateApis) {
    if (name == api.name) return &api;
  }
  return nullptr;
}

// A generator created for one candidate ordering, destroyed with it.
class Generator {
 public:
  explicit Generator(const Curand& curand) : curand_(curand) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;
  ~Generator() {
    if (generator_ != nullptr) curand_.curandDestroyGenerator(generator_);
  }

  std::optional<std::string> Create(curandRngType_t type) {
    const curandStatus_t status = curand_.curandCreateGenerator(&generator_, type);
    if (status == CURAND_STATUS_SUCCESS) return std::nullopt;
    generator_ = nullptr;
    return StatusText("curandCreateGenerator", status);
  }

  // Sets the recorded state (with `ordering`) and draws `n` numbers into `output`.
  std::optional<std::string> Draw(const format::RngState& state, curandOrdering_t ordering,
                                  const GenerateApi& api, size_t n, double mean, double stddev,
                                  void* output) const {
    curandStatus_t status = curand_.curandSetGeneratorOrdering(generator_, ordering);
    if (status != CURAND_STATUS_SUCCESS) return StatusText("curandSetGeneratorOrdering", status);
    status = curand_.curandSetPseudoRandomGeneratorSeed(generator_, state.seed);
    if (status != CURAND_STATUS_SUCCESS) {
      return StatusText("curandSetPseudoRandomGeneratorSeed", status);
    }
    status = curand_.curandSetGeneratorOffset(generator_, state.offset);
    if (status != CURAND_STATUS_SUCCESS) return StatusText("curandSetGeneratorOffset", status);
    const auto f = static_cast<float*>(output);
    const auto d = static_cast<double*>(output);
    const auto fm = static_cast<float>(mean), fs = static_cast<float>(stddev);
    switch (api.distribution) {
      case Distribution::kBits:
        status = curand_.curandGenerate(generator_, static_cast<unsigned*>(output), n);
        break;
      case Distribution::kUniform:
        status = api.f64 ? curand_.curandGenerateUniformDouble(generator_, d, n)
                         : curand_.curandGenerateUniform(generator_, f, n);
        break;
      case Distribution::kNormal:
        status = api.f64 ? curand_.curandGenerateNormalDouble(generator_, d, n, mean, stddev)
                         : curand_.curandGenerateNormal(generator_, f, n, fm, fs);
        break;
      case Distribution::kLogNormal:
        status = api.f64 ? curand_.curandGenerateLogNormalDouble(generator_, d, n, mean, stddev)
                         : curand_.curandGenerateLogNormal(generator_, f, n, fm, fs);
        break;
    }
    if (status != CURAND_STATUS_SUCCESS) return StatusText(api.name, status);
    return std::nullopt;
  }

 private:
  const Curand& curand_;
  curandGenerator_t generator_ = nullptr;
};

bool HandlesGenerate(const format::OpRecord& op) {
  return op.kind == format::OpKind::kCurandGenerate && FindGenerateApi(op.name) != nullptr;
}

StatusOr<OpReplayReport> ReplayGenerate(format::TraceReader& reader, const format::OpRecord& op,
                                        const OpReplayOptions& options) {
  const GenerateApi& api = *FindGenerateApi(op.name);  // HandlesGenerate said it is one
  std::string missing;
  const auto number = [&](const char* name, auto fallback) {
    const format::Argument* argument = FindArgument(op, name);
    const auto* value =
        argument == nullptr ? nullptr : std::get_if<decltype(fallback)>(&argument->value);
    if (value != nullptr) return *value;
    missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
    return fallback;
  };
  const uint64_t n = number("n", uint64_t{0});
  double mean = 0, stddev = 1;
  if (api.distribution == Distribution::kNormal || api.distribution == Distribution::kLogNormal) {
    mean = number("mean", 0.0);
    stddev = number("stddev", 1.0);
  }
  if (!op.rng) missing += fmt::format("{}RNG state", missing.empty() ? "" : ", ");
  if (!missing.empty()) {
    return Status::Error(fmt::format("op {} lacks what is needed to draw its numbers again: {}",
                                     op.sequence, missing));
  }
  const std::optional<curandRngType_t> type = GeneratorType(op.rng->generator);
  if (!type) {
    return Status::Error(
        fmt::format("op {}: generator {} is not replayed (pseudorandom "
                    "generators are; quasirandom ones not yet)",
                    op.sequence, op.rng->generator));
  }
  const std::optional<curandOrdering_t> recorded_ordering = Ordering(op.rng->ordering);
  if (!recorded_ordering) {
    return Status::Error(
        fmt::format("op {}: unknown recorded ordering {}", op.sequence, op.rng->ordering));
  }
  // A capture holds at most 2^32 bytes.
  const uint64_t element = api.f64 ? 8 : 4;
  if (n == 0 || n > (uint64_t{1} << 32) / element) {
    return Status::Error(fmt::format(
        "op {} draws {} numbers: nothing to replay, or more than a capture holds", op.sequence, n));
  }
  const uint64_t bytes = n * element;

  ReplayBuffers buffers;
  buffers.buffers.resize(1);  // the output; nothing is uploaded before a run
  buffers.output = 0;
  buffers.output_bytes = bytes;
  buffers.output_dtype = api.distribution == Distribution::kBits ? "" : api.f64 ? "f64" : "f32";
  StatusOr<std::optional<std::string>> output = ReadCaptured(reader, op, "out", "output", bytes);
  if (!output.ok()) return output.status();
  buffers.recorded_output = std::move(*output);

  StatusOr<const Driver*> loaded_driver = LoadDriver();
  if (!loaded_driver.ok()) return loaded_driver.status();
  const Driver& driver = **loaded_driver;
  StatusOr<const Curand*> loaded_curand = LoadCurand();
  if (!loaded_curand.ok()) return loaded_curand.status();
  if (Status status = UseDevice(driver, op.device_ordinal); !status.ok()) return status;
  StatusOr<DeviceBuffer> memory = Allocate(driver, bytes);
  if (!memory.ok()) return memory.status();
  buffers.buffers[0].address = memory->address();

  OpReplayReport report;
  const std::string* fingerprint = TextOf(op, "fingerprint");
  report.problem =
      fmt::format("{} (seed {} offset {})", fingerprint != nullptr ? *fingerprint : op.name,
                  op.rng->seed, op.rng->offset);
  report.output_role = "output";
  report.output_bytes = bytes;

  const auto run_ordering = [&](curandOrdering_t ordering,
                                bool recorded) -> StatusOr<AlgorithmRuns> {
    AlgorithmRuns runs;
    runs.algo = ordering;
    for (const auto& [value, text] : kOrderings) {
      if (value == ordering) runs.name = fmt::format("CURAND_ORDERING_{}", text);
    }
    // As the tracer's policy decides: the device-dependent ordering is the one it replaces.
    runs.determinism = ordering == CURAND_ORDERING_PSEUDO_DYNAMIC
                           ? format::Determinism::kNondeterministic
                           : format::Determinism::kDeterministic;
    runs.recorded = recorded;
    Generator generator(**loaded_curand);
    if (std::optional<std::string> failure = generator.Create(*type)) {
      if (recorded) return Status::Error(*failure);
      runs.skipped = *failure;
      return runs;
    }
    return RunCandidate(
        driver, buffers, std::move(runs), options.repeat, [&]() -> std::optional<std::string> {
          return generator.Draw(*op.rng, ordering, api, n, mean, stddev, memory->pointer());
        });
  };

  StatusOr<AlgorithmRuns> recorded = run_ordering(*recorded_ordering, true);
  if (!recorded.ok()) {
    return recorded.status().Prefixed(fmt::format("replaying op {}", op.sequence));
  }
  report.algorithms.push_back(std::move(*recorded));
  if (options.try_deterministic && *recorded_ordering == CURAND_ORDERING_PSEUDO_DYNAMIC) {
    for (const auto& [ordering, text] : kOrderings) {
      if (ordering == CURAND_ORDERING_PSEUDO_DYNAMIC) continue;
      StatusOr<AlgorithmRuns> alternative = run_ordering(ordering, false);
      if (!alternative.ok()) {
        return alternative.status().Prefixed(
            fmt::format("replaying op {} with ordering {}", op.sequence, text));
      }
      report.algorithms.push_back(std::move(*alternative));
    }
  }
  return report;
}

}  // namespace

const Replayer kCurandReplayer = {HandlesGenerate, ReplayGenerate};

}  // namespace ndt::replay::internal
