// The cuRAND host API hooks: generators' state and every generate call.
//
// Each generator gets a shadow (type, seed, offset, ordering, stream, calls so far) and a stable
// id by creation order (1, 2, ...). Creation, destruction and the settings are recorded as ops
// of their own (kind other) naming the generator; the seed and offset values themselves appear
// in the RngState of the generate ops that consume them, not as arguments, so that a forgotten
// seed is classified where the numbers are drawn (rng_state) rather than as a different
// argument. Every generate is an OpKind::kCurandGenerate op with the state before the call, a
// fingerprint naming the generator and its call index, and the digest of its output.
//
// A generate NDTRACE_CAPTURE selects (capture.h) also stores its output as a blob: standalone
// replay draws again from the recorded state and compares.
//
// The offset advances by n per generate call of n 32-bit results (uniform, normal, log-normal and
// raw floats/uint32), the position cuRAND's absolute offset (curandSetGeneratorOffset) counts
// in; by 2n for n doubles of an XORWOW or Philox generator, each made of two 32-bit draws
// (curand_uniform.h), by n for MRG32k3a's and MTGP32's. (Checked against the stand-in, which
// follows the same rule; not yet against the real library on a GPU.)
//
// Policy:
//  - enforce: CURAND_ORDERING_PSEUDO_DYNAMIC ("adjusted to the device") is replaced by
//    PSEUDO_DEFAULT, in curandSetGeneratorOrdering and before a generate;
//  - pin: before a generate, the seed, offset and ordering recorded for the same fingerprint
//    in the reference are forced through the real setters.
#pragma GCC visibility push(default)
#include <curand.h>
#pragma GCC visibility pop

#include <cctype>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/records.h"
#include "tracer/capture.h"
#include "tracer/library_support.h"
#include "tracer/policy.h"
#include "tracer/recorder.h"

namespace ndt::tracer {
namespace {

constexpr const char* kSoname = kCurandSoname;
constexpr curandStatus_t kUnavailable = CURAND_STATUS_INITIALIZATION_FAILED;

struct ShadowGenerator {
  uint64_t id = 0;
  curandRngType_t type = CURAND_RNG_PSEUDO_DEFAULT;
  uint64_t seed = 0;
  uint64_t offset = 0;
  curandOrdering_t ordering = CURAND_ORDERING_PSEUDO_DEFAULT;
  uint64_t stream = 0;     // cudaStream_t handle
  uint64_t generates = 0;  // generate calls made so far
};

// The shadows of the live generators. Thread-safe; never destroyed (hooks run during exit).
class Generators {
 public:
  static Generators& Get() {
    static auto* generators = new Generators();
    return *generators;
  }

  uint64_t Create(curandGenerator_t handle, curandRngType_t type) {
    std::lock_guard lock(mutex_);
    ShadowGenerator shadow;
    shadow.id = NewObjectId(ObjectKind::kCurandGenerator);
    // cuRAND documents PSEUDO_DEFAULT as XORWOW.
    shadow.type = type == CURAND_RNG_PSEUDO_DEFAULT ? CURAND_RNG_PSEUDO_XORWOW : type;
    live_[handle] = shadow;
    return shadow.id;
  }

  void Destroy(curandGenerator_t handle) {
    std::lock_guard lock(mutex_);
    live_.erase(handle);
  }

  std::optional<ShadowGenerator> Find(curandGenerator_t handle) {
    std::lock_guard lock(mutex_);
    auto found = live_.find(handle);
    if (found == live_.end()) return std::nullopt;
    return found->second;
  }

  template <typename Change>
  void Update(curandGenerator_t handle, Change change) {
    std::lock_guard lock(mutex_);
    auto found = live_.find(handle);
    if (found != live_.end()) change(found->second);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<curandGenerator_t, ShadowGenerator> live_;
};

const char* TypeName(curandRngType_t type) {
  switch (type) {
    case CURAND_RNG_PSEUDO_DEFAULT:
    case CURAND_RNG_PSEUDO_XORWOW: return "XORWOW";
    case CURAND_RNG_PSEUDO_MRG32K3A: return "MRG32K3A";
    case CURAND_RNG_PSEUDO_MTGP32: return "MTGP32";
    case CURAND_RNG_PSEUDO_MT19937: return "MT19937";
    case CURAND_RNG_PSEUDO_PHILOX4_32_10: return "PHILOX4_32_10";
    case CURAND_RNG_QUASI_SOBOL32: return "SOBOL32";
    case CURAND_RNG_QUASI_SCRAMBLED_SOBOL32: return "SCRAMBLED_SOBOL32";
    case CURAND_RNG_QUASI_SOBOL64: return "SOBOL64";
    case CURAND_RNG_QUASI_SCRAMBLED_SOBOL64: return "SCRAMBLED_SOBOL64";
    default: return "UNKNOWN";
  }
}

// The short lower-case name a fingerprint uses.
std::string ShortTypeName(curandRngType_t type) {
  if (type == CURAND_RNG_PSEUDO_PHILOX4_32_10) return "philox";
  std::string name = TypeName(type);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

constexpr std::pair<curandOrdering_t, const char*> kOrderings[] = {
    {CURAND_ORDERING_PSEUDO_BEST, "PSEUDO_BEST"},
    {CURAND_ORDERING_PSEUDO_DEFAULT, "PSEUDO_DEFAULT"},
    {CURAND_ORDERING_PSEUDO_SEEDED, "PSEUDO_SEEDED"},
    {CURAND_ORDERING_PSEUDO_LEGACY, "PSEUDO_LEGACY"},
    {CURAND_ORDERING_PSEUDO_DYNAMIC, "PSEUDO_DYNAMIC"},
    {CURAND_ORDERING_QUASI_DEFAULT, "QUASI_DEFAULT"},
};

std::string OrderingName(curandOrdering_t ordering) {
  for (const auto& [value, name] : kOrderings) {
    if (value == ordering) return name;
  }
  return "ORDERING_" + std::to_string(static_cast<int>(ordering));
}

std::optional<curandOrdering_t> OrderingFromName(const std::string& text) {
  for (const auto& [value, name] : kOrderings) {
    if (text == name) return value;
  }
  return std::nullopt;
}

format::RngState StateOf(const ShadowGenerator& shadow) {
  format::RngState state;
  state.generator = std::string("curand:") + TypeName(shadow.type);
  state.seed = shadow.seed;
  state.offset = shadow.offset;
  state.ordering = OrderingName(shadow.ordering);
  state.device_dependent = shadow.ordering == CURAND_ORDERING_PSEUDO_DYNAMIC;
  return state;
}

format::Argument GeneratorArgument(const std::optional<ShadowGenerator>& shadow) {
  return UnsignedArgument("generator", shadow ? shadow->id : 0);
}

format::Argument RealArgument(std::string name, double value) {
  format::Argument argument;
  argument.name = std::move(name);
  argument.value = value;
  return argument;
}

void Decide(Session& session, uint64_t sequence, std::string action, bool applied) {
  format::PolicyDecisionRecord decision;
  decision.op_sequence = sequence;
  decision.library = "curand";
  decision.action = std::move(action);
  decision.applied = applied;
  session.Decide(decision);
}

// Enforce: a generator about to draw with the device-dependent ordering is switched to the
// default one through the real setter.
void EnforceOrdering(Session& session, uint64_t sequence, curandGenerator_t generator,
                     ShadowGenerator& shadow) {
  if (session.policy().mode != PolicyMode::kEnforce ||
      shadow.ordering != CURAND_ORDERING_PSEUDO_DYNAMIC) {
    return;
  }
  const auto set_ordering = NDT_REAL_LIBRARY(kSoname, curandSetGeneratorOrdering);
  const std::string what = "curand generator " + std::to_string(shadow.id) +
                           " ordering PSEUDO_DYNAMIC (device-dependent)";
  if (set_ordering == nullptr ||
      set_ordering(generator, CURAND_ORDERING_PSEUDO_DEFAULT) != CURAND_STATUS_SUCCESS) {
    Decide(session, sequence, "cannot replace " + what + ": the library refused PSEUDO_DEFAULT",
           false);
    return;
  }
  shadow.ordering = CURAND_ORDERING_PSEUDO_DEFAULT;
  Generators::Get().Update(generator, [](ShadowGenerator& g) {
    g.ordering = CURAND_ORDERING_PSEUDO_DEFAULT;
  });
  Decide(session, sequence, "replaced " + what + " by PSEUDO_DEFAULT", true);
}

// Pin: forces the state the reference recorded for `fingerprint` before a generate.
// `description` names the call without its index, so that an unpinnable kind of call is said
// once however often it is made.
void PinState(Session& session, uint64_t sequence, curandGenerator_t generator,
              ShadowGenerator& shadow, const std::string& fingerprint,
              const std::string& description) {
  if (session.policy().mode != PolicyMode::kPin) return;
  const std::string cannot = "cannot pin " + description + ": ";
  const PinTable* pins = session.pins();
  if (pins == nullptr) {
    Decide(session, sequence, cannot + "the reference trace could not be read", false);
    return;
  }
  if (std::string why = pins->Mismatch(session.header(), "curand"); !why.empty()) {
    Decide(session, sequence, cannot + why, false);
    return;
  }
  const format::RngState* recorded = pins->Rng(fingerprint);
  if (recorded == nullptr) {
    Decide(session, sequence, cannot + "the reference recorded no RNG state for this call",
           false);
    return;
  }
  const format::RngState current = StateOf(shadow);
  if (recorded->generator != current.generator) {
    Decide(session, sequence, cannot + "the reference used " + recorded->generator, false);
    return;
  }
  const std::optional<curandOrdering_t> ordering = OrderingFromName(recorded->ordering);
  if (!ordering) {
    Decide(session, sequence, cannot + "unknown recorded ordering " + recorded->ordering, false);
    return;
  }
  if (recorded->seed == current.seed && recorded->offset == current.offset &&
      *ordering == shadow.ordering) {
    return;  // already in the recorded state
  }
  const auto set_seed = NDT_REAL_LIBRARY(kSoname, curandSetPseudoRandomGeneratorSeed);
  const auto set_offset = NDT_REAL_LIBRARY(kSoname, curandSetGeneratorOffset);
  const auto set_ordering = NDT_REAL_LIBRARY(kSoname, curandSetGeneratorOrdering);
  if (set_seed == nullptr || set_offset == nullptr || set_ordering == nullptr ||
      set_seed(generator, recorded->seed) != CURAND_STATUS_SUCCESS ||
      set_offset(generator, recorded->offset) != CURAND_STATUS_SUCCESS ||
      set_ordering(generator, *ordering) != CURAND_STATUS_SUCCESS) {
    Decide(session, sequence, cannot + "the library refused the recorded state", false);
    return;
  }
  const std::string action = "pinned curand generator " + std::to_string(shadow.id) +
                             " to seed " + std::to_string(recorded->seed) + " offset " +
                             std::to_string(recorded->offset) + " " + recorded->ordering +
                             " (the program had seed " + std::to_string(current.seed) +
                             " offset " + std::to_string(current.offset) + " " +
                             current.ordering + ")";
  shadow.seed = recorded->seed;
  shadow.offset = recorded->offset;
  shadow.ordering = *ordering;
  Generators::Get().Update(generator, [&](ShadowGenerator& g) {
    g.seed = shadow.seed;
    g.offset = shadow.offset;
    g.ordering = shadow.ordering;
  });
  Decide(session, sequence, action, true);
}

// What a generate call draws.
struct Draw {
  const char* distribution;  // "uniform", "normal", "log_normal", "bits"
  format::DType dtype;       // kF32 or kF64 (kUnknown: raw 32-bit bits)
  double mean = 0;           // "normal", "log_normal"
  double stddev = 0;         // "normal", "log_normal"

  bool HasParameters() const {
    return std::strcmp(distribution, "uniform") != 0 && std::strcmp(distribution, "bits") != 0;
  }
  uint64_t ElementBytes() const { return dtype == format::DType::kF64 ? 8 : 4; }
  // The generator's 32-bit draws one value takes, by which its offset advances: a double of
  // XORWOW or Philox is made of two (curand_uniform.h's _curand_uniform_double_hq), one of
  // MRG32k3a or MTGP32 of one.
  uint64_t WordsPerValue(curandRngType_t type) const {
    const bool two = type == CURAND_RNG_PSEUDO_DEFAULT || type == CURAND_RNG_PSEUDO_XORWOW ||
                     type == CURAND_RNG_PSEUDO_PHILOX4_32_10;
    return dtype == format::DType::kF64 && two ? 2 : 1;
  }
};

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

// What names a draw's parameters after its size: " mean=0 stddev=1", or nothing.
std::string DrawParameters(const Draw& draw) {
  if (!draw.HasParameters()) return "";
  return " mean=" + Number(draw.mean) + " stddev=" + Number(draw.stddev);
}

// "philox uniform n=4", "philox normal f64 n=4 mean=0 stddev=1": what a call draws.
std::string DrawText(const ShadowGenerator& shadow, const Draw& draw, size_t n) {
  return ShortTypeName(shadow.type) + " " + draw.distribution +
         (draw.dtype == format::DType::kF64 ? " f64" : "") + " n=" + std::to_string(n) +
         DrawParameters(draw);
}

// "curand generator 1 philox uniform n=4": a generate call without its index.
std::string DrawDescription(const ShadowGenerator& shadow, const Draw& draw, size_t n) {
  return "curand generator " + std::to_string(shadow.id) + " " + DrawText(shadow, draw, n);
}

// "curand generator 1 generate 0: philox uniform n=4": the key a pinned draw's state is found by.
std::string DrawFingerprint(const ShadowGenerator& shadow, const Draw& draw, size_t n) {
  return "curand generator " + std::to_string(shadow.id) + " generate " +
         std::to_string(shadow.generates) + ": " + DrawText(shadow, draw, n);
}

// A generate call's record besides its header, as a plain struct (the way of GemmFacts in
// hooks_cublas.cc): AddGenerateArguments makes the arguments and RNG state of it, on the calling
// thread or, metadata only, on the encoder's (RawOp::SetFacts).
struct GenerateFacts {
  bool known;              // the generator was made while traced: `shadow` is its state
  ShadowGenerator shadow;  // as the call runs (after the policy's changes)
  Draw draw;
  uint64_t n;
  format::DevicePointer output;
};

void AddGenerateArguments(const GenerateFacts& f, format::OpRecord& op) {
  op.args.push_back(UnsignedArgument("generator", f.known ? f.shadow.id : 0));
  op.args.push_back(UnsignedArgument("n", f.n));
  if (f.draw.HasParameters()) {
    op.args.push_back(RealArgument("mean", f.draw.mean));
    op.args.push_back(RealArgument("stddev", f.draw.stddev));
  }
  format::Argument& output = op.args.emplace_back();
  output.name = "output";
  output.value = f.output;
  if (f.known) {
    op.args.push_back(TextArgument("fingerprint", DrawFingerprint(f.shadow, f.draw, f.n)));
    op.rng = StateOf(f.shadow);
  }
}

// Records a generate call around the real call; metadata only (no digest, nothing captured)
// the record is built off the calling thread.
template <typename Real>
curandStatus_t RecordGenerate(Session& session, RealCall<curandStatus_t>& call, const char* api,
                              curandGenerator_t generator, const void* output, size_t n,
                              const Draw& draw, Real real) {
  std::optional<ShadowGenerator> shadow = Generators::Get().Find(generator);
  const uint64_t stream = shadow ? shadow->stream : 0;
  const uint32_t stream_id = session.StreamId(stream, false);
  const bool raw = LibraryOpOffThread(session);
  RawOp* raw_op =
      raw ? &session.BeginRawOp(format::OpKind::kCurandGenerate, api, stream_id) : nullptr;
  format::OpRecord op;
  if (!raw) op = session.BeginOp(format::OpKind::kCurandGenerate, api, stream_id);
  const uint64_t sequence = raw ? raw_op->sequence : op.sequence;
  if (shadow) {
    EnforceOrdering(session, sequence, generator, *shadow);
    if (session.policy().mode == PolicyMode::kPin) {
      PinState(session, sequence, generator, *shadow, DrawFingerprint(*shadow, draw, n),
               DrawDescription(*shadow, draw, n));
    }
  }
  const auto address = reinterpret_cast<uint64_t>(output);
  const GenerateFacts facts{shadow.has_value(), shadow.value_or(ShadowGenerator{}), draw, n,
                            session.Canonical(address)};
  if (raw) {
    raw_op->SetFacts<&AddGenerateArguments>(facts);
  } else {
    AddGenerateArguments(facts, op);
  }
  const curandStatus_t result = call.Run(real);
  if (shadow) {
    Generators::Get().Update(generator, [&](ShadowGenerator& g) {
      if (result == CURAND_STATUS_SUCCESS) g.offset += n * draw.WordsPerValue(g.type);
      ++g.generates;
    });
  }
  if (raw) {
    session.EndRawOp(*raw_op, static_cast<int32_t>(result));
    return result;
  }
  if (result == CURAND_STATUS_SUCCESS && n > 0) {
    const std::vector<Extent> outputs = {{"output", address, n * draw.ElementBytes(), draw.dtype}};
    op.outputs = DigestExtents(session, stream, outputs);
    // Standalone replay draws again from the state in op.rng; the numbers drawn are what its
    // runs are compared with.
    if (CaptureWanted(op)) CaptureExtents(session, stream, outputs, "out", &op);
  }
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

// The hook of a generate call: `real` draws `n` values into `output`; `parameters` follow `n`
// in its signature (a normal's mean and standard deviation).
template <typename Real, typename Out, typename... Parameters>
curandStatus_t HookGenerate(const char* api, Real real, const Draw& draw,
                            curandGenerator_t generator, Out* output, size_t n,
                            Parameters... parameters) {
  const auto call_real = [&] { return real(generator, output, n, parameters...); };
  return RunLibraryHook<curandStatus_t>(api, real != nullptr, kUnavailable, call_real,
                                        [&](Session& session, RealCall<curandStatus_t>& call) {
                                          return RecordGenerate(session, call, api, generator,
                                                                output, n, draw, call_real);
                                        });
}

// Records a setting of `generator` as an op of its own, making the real call.
template <typename Real>
curandStatus_t RecordSetting(Session& session, RealCall<curandStatus_t>& call, const char* api,
                             curandGenerator_t generator, std::vector<format::Argument> extra,
                             Real real) {
  const std::optional<ShadowGenerator> shadow = Generators::Get().Find(generator);
  format::OpRecord op = session.BeginOp(format::OpKind::kOther, api,
                                        session.StreamId(shadow ? shadow->stream : 0, false));
  op.args.push_back(GeneratorArgument(shadow));
  for (format::Argument& argument : extra) op.args.push_back(std::move(argument));
  const curandStatus_t result = call.Run(real);
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

}  // namespace
}  // namespace ndt::tracer

using ndt::format::DType;
using ndt::format::DType;
using ndt::tracer::Generators;
using ndt::tracer::RealCall;
using ndt::tracer::RunLibraryHook;
using ndt::tracer::Session;
using ndt::tracer::ShadowGenerator;

extern "C" curandStatus_t curandCreateGenerator(curandGenerator_t* generator,
                                                curandRngType_t rng_type) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandCreateGenerator);
  const auto make = [&]() {
    const curandStatus_t result = real(generator, rng_type);
    if (result == CURAND_STATUS_SUCCESS) Generators::Get().Create(*generator, rng_type);
    return result;
  };
  return RunLibraryHook<curandStatus_t>(
      "curandCreateGenerator", real != nullptr, ndt::tracer::kUnavailable, make,
      [&](Session& session, RealCall<curandStatus_t>& call) {
        ndt::format::OpRecord op =
            session.BeginOp(ndt::format::OpKind::kOther, "curandCreateGenerator", 0);
        const curandStatus_t result = call.Run(make);
        if (result == CURAND_STATUS_SUCCESS) {
          op.args.push_back(ndt::tracer::GeneratorArgument(Generators::Get().Find(*generator)));
        }
        op.args.push_back(ndt::tracer::TextArgument("type", ndt::tracer::TypeName(rng_type)));
        session.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

extern "C" curandStatus_t curandDestroyGenerator(curandGenerator_t generator) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandDestroyGenerator);
  const auto destroy = [&]() {
    const curandStatus_t result = real(generator);
    if (result == CURAND_STATUS_SUCCESS) Generators::Get().Destroy(generator);
    return result;
  };
  return RunLibraryHook<curandStatus_t>(
      "curandDestroyGenerator", real != nullptr, ndt::tracer::kUnavailable, destroy,
      [&](Session& session, RealCall<curandStatus_t>& call) {
        return ndt::tracer::RecordSetting(session, call, "curandDestroyGenerator", generator, {},
                                          destroy);
      });
}

extern "C" curandStatus_t curandSetStream(curandGenerator_t generator, cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandSetStream);
  const auto set = [&]() {
    const curandStatus_t result = real(generator, stream);
    if (result == CURAND_STATUS_SUCCESS) {
      Generators::Get().Update(generator, [&](ShadowGenerator& g) {
        g.stream = reinterpret_cast<uint64_t>(stream);
      });
    }
    return result;
  };
  return RunLibraryHook<curandStatus_t>(
      "curandSetStream", real != nullptr, ndt::tracer::kUnavailable, set,
      [&](Session& session, RealCall<curandStatus_t>& call) {
        const uint32_t stream_id = session.StreamId(reinterpret_cast<uint64_t>(stream), false);
        return ndt::tracer::RecordSetting(session, call, "curandSetStream", generator,
                                          {ndt::tracer::UnsignedArgument("stream", stream_id)},
                                          set);
      });
}

extern "C" curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t generator,
                                                             unsigned long long seed) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandSetPseudoRandomGeneratorSeed);
  const auto set = [&]() {
    const curandStatus_t result = real(generator, seed);
    if (result == CURAND_STATUS_SUCCESS) {
      Generators::Get().Update(generator, [&](ShadowGenerator& g) { g.seed = seed; });
    }
    return result;
  };
  return RunLibraryHook<curandStatus_t>(
      "curandSetPseudoRandomGeneratorSeed", real != nullptr, ndt::tracer::kUnavailable, set,
      [&](Session& session, RealCall<curandStatus_t>& call) {
        return ndt::tracer::RecordSetting(session, call, "curandSetPseudoRandomGeneratorSeed",
                                          generator, {}, set);
      });
}

extern "C" curandStatus_t curandSetGeneratorOffset(curandGenerator_t generator,
                                                   unsigned long long offset) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandSetGeneratorOffset);
  const auto set = [&]() {
    const curandStatus_t result = real(generator, offset);
    if (result == CURAND_STATUS_SUCCESS) {
      Generators::Get().Update(generator, [&](ShadowGenerator& g) { g.offset = offset; });
    }
    return result;
  };
  return RunLibraryHook<curandStatus_t>(
      "curandSetGeneratorOffset", real != nullptr, ndt::tracer::kUnavailable, set,
      [&](Session& session, RealCall<curandStatus_t>& call) {
        return ndt::tracer::RecordSetting(session, call, "curandSetGeneratorOffset", generator,
                                          {}, set);
      });
}

extern "C" curandStatus_t curandSetGeneratorOrdering(curandGenerator_t generator,
                                                     curandOrdering_t order) {
  const auto real = NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandSetGeneratorOrdering);
  curandOrdering_t effective = order;
  const auto set = [&]() {
    const curandStatus_t result = real(generator, effective);
    if (result == CURAND_STATUS_SUCCESS) {
      Generators::Get().Update(generator, [&](ShadowGenerator& g) { g.ordering = effective; });
    }
    return result;
  };
  return RunLibraryHook<curandStatus_t>(
      "curandSetGeneratorOrdering", real != nullptr, ndt::tracer::kUnavailable, set,
      [&](Session& session, RealCall<curandStatus_t>& call) {
        const std::optional<ShadowGenerator> shadow = Generators::Get().Find(generator);
        const uint64_t sequence = session.PeekOpSequence();
        const bool replace = session.policy().mode == ndt::tracer::PolicyMode::kEnforce &&
                             order == CURAND_ORDERING_PSEUDO_DYNAMIC;
        if (replace) effective = CURAND_ORDERING_PSEUDO_DEFAULT;
        const curandStatus_t result = ndt::tracer::RecordSetting(
            session, call, "curandSetGeneratorOrdering", generator,
            {ndt::tracer::TextArgument("ordering", ndt::tracer::OrderingName(order))}, set);
        if (replace) {
          ndt::tracer::Decide(session, sequence,
                              "replaced curand generator " +
                                  std::to_string(shadow ? shadow->id : 0) +
                                  " ordering PSEUDO_DYNAMIC (device-dependent) by PSEUDO_DEFAULT",
                              result == CURAND_STATUS_SUCCESS);
        }
        return result;
      });
}

extern "C" curandStatus_t curandGenerate(curandGenerator_t generator, unsigned int* output_ptr,
                                         size_t num) {
  return ndt::tracer::HookGenerate("curandGenerate",
                                   NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandGenerate),
                                   {"bits", DType::kUnknown}, generator, output_ptr, num);
}

extern "C" curandStatus_t curandGenerateUniform(curandGenerator_t generator, float* output_ptr,
                                                size_t num) {
  return ndt::tracer::HookGenerate("curandGenerateUniform",
                                   NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandGenerateUniform),
                                   {"uniform", DType::kF32}, generator, output_ptr, num);
}

extern "C" curandStatus_t curandGenerateNormal(curandGenerator_t generator, float* output_ptr,
                                               size_t n, float mean, float stddev) {
  return ndt::tracer::HookGenerate(
      "curandGenerateNormal", NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandGenerateNormal),
      {"normal", DType::kF32, mean, stddev}, generator, output_ptr, n, mean, stddev);
}

extern "C" curandStatus_t curandGenerateLogNormal(curandGenerator_t generator, float* output_ptr,
                                                  size_t n, float mean, float stddev) {
  return ndt::tracer::HookGenerate(
      "curandGenerateLogNormal", NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandGenerateLogNormal),
      {"log_normal", DType::kF32, mean, stddev}, generator, output_ptr, n, mean, stddev);
}

extern "C" curandStatus_t curandGenerateUniformDouble(curandGenerator_t generator,
                                                      double* output_ptr, size_t num) {
  return ndt::tracer::HookGenerate(
      "curandGenerateUniformDouble",
      NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandGenerateUniformDouble), {"uniform", DType::kF64},
      generator, output_ptr, num);
}

extern "C" curandStatus_t curandGenerateNormalDouble(curandGenerator_t generator,
                                                     double* output_ptr, size_t n, double mean,
                                                     double stddev) {
  return ndt::tracer::HookGenerate(
      "curandGenerateNormalDouble",
      NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandGenerateNormalDouble),
      {"normal", DType::kF64, mean, stddev}, generator, output_ptr, n, mean, stddev);
}

extern "C" curandStatus_t curandGenerateLogNormalDouble(curandGenerator_t generator,
                                                        double* output_ptr, size_t n, double mean,
                                                        double stddev) {
  return ndt::tracer::HookGenerate(
      "curandGenerateLogNormalDouble",
      NDT_REAL_LIBRARY(ndt::tracer::kSoname, curandGenerateLogNormalDouble),
      {"log_normal", DType::kF64, mean, stddev}, generator, output_ptr, n, mean, stddev);
}
