#include "replayer/op_compare.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#define XXH_INLINE_ALL  // header only: nothing to link
#include <xxhash.h>

#include "libfacts/knob_names.h"

namespace ndt::replay {
namespace {

// ---- element values ---------------------------------------------------------------------------

double HalfToDouble(uint16_t bits) {
  const int sign = bits >> 15 ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(mantissa | 0x400, exponent - 25);
}

// OCP FP8 E4M3 ("fn": no infinities, S.1111.111 is NaN).
double E4M3ToDouble(uint8_t bits) {
  const int sign = bits >> 7 ? -1 : 1;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::nan("");
  if (exponent == 0) return sign * std::ldexp(mantissa, -9);
  return sign * std::ldexp(mantissa | 0x8, exponent - 10);
}

template <typename T>
double Load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return static_cast<double>(value);
}

double Value(const char* p, format::DType dtype) {
  switch (dtype) {
    case format::DType::kF64: return Load<double>(p);
    case format::DType::kF32: return Load<float>(p);
    case format::DType::kF16: return HalfToDouble(static_cast<uint16_t>(Load<uint16_t>(p)));
    case format::DType::kBF16:
      return std::bit_cast<float>(static_cast<uint32_t>(Load<uint16_t>(p)) << 16);
    case format::DType::kF8E4M3: return E4M3ToDouble(static_cast<uint8_t>(*p));
    case format::DType::kF8E5M2: return HalfToDouble(static_cast<uint16_t>(uint8_t(*p) << 8));
    case format::DType::kI64: return Load<int64_t>(p);
    case format::DType::kI32: return Load<int32_t>(p);
    case format::DType::kI16: return Load<int16_t>(p);
    case format::DType::kI8: return Load<int8_t>(p);
    case format::DType::kU8:
    case format::DType::kBool:
    case format::DType::kUnknown: break;
  }
  return Load<uint8_t>(p);
}

// ---- demangled parameter lists ----------------------------------------------------------------

std::string_view Trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// The top-level parameters of "name(p0, p1, ...)" (templates and nested parentheses kept
// whole), or nothing when the name does not end in a parameter list.
std::vector<std::string_view> Parameters(std::string_view name) {
  if (name.empty() || name.back() != ')') return {};
  int depth = 0;
  size_t open = std::string_view::npos;
  for (size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')' || name[i] == '>') ++depth;
    if (name[i] == '(' || name[i] == '<') --depth;
    if (depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string_view::npos || name[open] != '(') return {};
  const std::string_view list = name.substr(open + 1, name.size() - open - 2);
  std::vector<std::string_view> parameters;
  size_t begin = 0;
  depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      parameters.push_back(Trim(list.substr(begin, i - begin)));
      begin = i + 1;
    } else if (list[i] == '<' || list[i] == '(') {
      ++depth;
    } else if (list[i] == '>' || list[i] == ')') {
      --depth;
    }
  }
  return parameters;
}

}  // namespace

bool SameArgument(const format::Argument& a, const format::Argument& b) {
  if (a.value.index() != b.value.index() || a.name != b.name) return false;
  if (std::holds_alternative<format::DevicePointer>(a.value) || a.value == b.value) return true;
  return a.name == "event" || a.name == "stream" || a.name == "eventStream";
}

uint64_t LaneKeys::Key(const format::OpRecord& op) {
  auto [it, added] = ordinal_.try_emplace({op.thread_id, op.stream_id}, 0);
  if (added) it->second = next_[op.thread_id]++;
  return (uint64_t{op.thread_id} << 32) | it->second;
}

uint64_t LaneKeys::Find(const format::OpRecord& op) const {
  if (auto it = ordinal_.find({op.thread_id, op.stream_id}); it != ordinal_.end()) {
    return (uint64_t{op.thread_id} << 32) | it->second;
  }
  const auto next = next_.find(op.thread_id);
  return (uint64_t{op.thread_id} << 32) | (next == next_.end() ? 0 : next->second);
}

bool IsBlobArgument(std::string_view name) { return name.rfind("blob:", 0) == 0; }

namespace {

// Arguments that record what a measurement found, not what the program asked for: the
// fastest entry of a cuDNN Find (`first`) is ranked by timing. The algorithm the program then
// runs is compared on its convolution (an algorithm-selection divergence when it differs).
bool Measured(const format::OpRecord& op, std::string_view argument) {
  return argument == "first" && op.name.rfind("cudnnFind", 0) == 0;
}

// Whether a.args[i] and b.args[j] are kernel parameter bytes compared through the data rather
// than as bytes: a by-value struct (larger than 8 bytes: PyTorch's TensorInfo leaves the sizes
// and strides past its dims uninitialized, cuDNN's and CUTLASS's Params hold stack and heap
// addresses and padding, all of which differ from run to run in a deterministic program, as
// seen on an H200 with PyTorch 2.11); or a pointer parameter (by its demangled type) holding a
// non-null address in no device allocation in both runs, a host address (cuBLAS's split-K
// reduction is handed &alpha on the caller's stack, PyTorch's index_add a `ReduceAdd const&`);
// or a closure of any size (its demangled type holds `{lambda(`): PyTorch's elementwise kernels
// take their functor by value, and the byte of an empty lambda, or the padding after a captured
// float, is whatever the stack held (on an H100 and an H200, `pow_tensor_scalar_kernel_impl`'s
// lambda differed between two runs of a deterministic program). What they change shows in the
// digests.
bool ComparedThroughData(const format::OpRecord& a, size_t i, const format::OpRecord& b, size_t j) {
  const auto* bytes_a = std::get_if<format::Argument::Bytes>(&a.args[i].value);
  const auto* bytes_b = std::get_if<format::Argument::Bytes>(&b.args[j].value);
  const std::string& name = a.args[i].name;
  if (a.kind != format::OpKind::kKernelLaunch || bytes_a == nullptr || bytes_b == nullptr ||
      bytes_a->data.size() != bytes_b->data.size() || name != b.args[j].name ||
      name.rfind("arg", 0) != 0 || name.find('@') != std::string::npos || a.name != b.name) {
    return false;
  }
  if (bytes_a->data.size() > 8) return true;
  const std::vector<std::string_view> parameters = Parameters(a.name);
  const size_t index = std::strtoull(name.c_str() + 3, nullptr, 10);
  if (index >= parameters.size() || parameters[index].empty()) return false;
  const std::string_view type = parameters[index];
  if (type.find("{lambda(") != std::string_view::npos && type.back() != '*' && type.back() != '&') {
    return true;
  }
  if (bytes_a->data.size() < 8 || (type.back() != '*' && type.back() != '&')) return false;
  const auto nonzero = [](const std::string& word) {
    return word.find_first_not_of('\0') != std::string::npos;
  };
  return nonzero(bytes_a->data) && nonzero(bytes_b->data);
}

}  // namespace

std::optional<ArgumentMismatch> FirstDifferentArgument(const format::OpRecord& a,
                                                       const format::OpRecord& b) {
  size_t i = 0;
  size_t j = 0;
  // "insideOp" names the call an op was made from inside by its sequence, which threads shift;
  // "clique" (ncclCommInitRank) hashes a unique id that is random in every run; "result" is
  // what a BLAS reduction returned to the host, an output (compared as one, trace_diff.cc).
  const auto skipped = [](const format::OpRecord& op, size_t k) {
    return IsBlobArgument(op.args[k].name) || Measured(op, op.args[k].name) ||
           op.args[k].name == "insideOp" || op.args[k].name == "result" ||
           (op.kind == format::OpKind::kOther && op.args[k].name == "clique");
  };
  for (;;) {
    while (i < a.args.size() && skipped(a, i)) ++i;
    while (j < b.args.size() && skipped(b, j)) ++j;
    if (i == a.args.size() && j == b.args.size()) return std::nullopt;
    if (i == a.args.size() || j == b.args.size() ||
        (!SameArgument(a.args[i], b.args[j]) && !ComparedThroughData(a, i, b, j))) {
      return ArgumentMismatch{i, j};
    }
    ++i;
    ++j;
  }
}

bool SameChoice(const format::AlgorithmChoice& a, const format::AlgorithmChoice& b) {
  return a.library == b.library && a.id == b.id && a.knobs == b.knobs && a.opaque == b.opaque;
}

bool ForcedOverRequest(const format::PolicyDecisionRecord& decision) {
  if (!decision.applied || !decision.from_choice || !decision.to_choice) return false;
  const format::AlgorithmChoice& from = *decision.from_choice;
  const format::AlgorithmChoice& to = *decision.to_choice;
  return to.source == format::ChoiceSource::kPinned &&
         (from.source == format::ChoiceSource::kRequested ||
          from.source == format::ChoiceSource::kHeuristic) &&
         !SameChoice(from, to);
}

bool SameRng(const format::RngState& a, const format::RngState& b) {
  return a.generator == b.generator && a.seed == b.seed && a.offset == b.offset &&
         a.subsequence == b.subsequence && a.ordering == b.ordering;
}

const format::Argument* FindArgument(const format::OpRecord& op, std::string_view name) {
  for (const format::Argument& argument : op.args) {
    if (argument.name == name) return &argument;
  }
  return nullptr;
}

const std::string* TextOf(const format::OpRecord& op, std::string_view name) {
  const format::Argument* argument = FindArgument(op, name);
  return argument == nullptr ? nullptr : std::get_if<std::string>(&argument->value);
}

std::optional<format::BlobId> ParseBlobId(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  uint64_t halves[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    uint64_t digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    halves[i / 16] = halves[i / 16] << 4 | digit;
  }
  return format::BlobId{halves[0], halves[1]};
}

std::optional<format::BlobId> CapturedBlob(const format::OpRecord& op, std::string_view name) {
  const std::string* text = TextOf(op, name);
  return text == nullptr ? std::nullopt : ParseBlobId(*text);
}

format::DType PointerParameterDType(std::string_view demangled_name, size_t index) {
  const std::vector<std::string_view> parameters = Parameters(demangled_name);
  if (index >= parameters.size()) return format::DType::kUnknown;
  // "T const* __restrict__": qualifiers of the pointer, then of the pointee.
  const auto strip_qualifiers = [](std::string_view type) {
    for (bool stripped = true; stripped;) {
      stripped = false;
      for (std::string_view qualifier : {"const", "volatile", "__restrict__", "__restrict"}) {
        if (type.size() > qualifier.size() &&
            type.substr(type.size() - qualifier.size()) == qualifier &&
            (type[type.size() - qualifier.size() - 1] == ' ' ||
             type[type.size() - qualifier.size() - 1] == '*')) {
          type = Trim(type.substr(0, type.size() - qualifier.size()));
          stripped = true;
        }
      }
    }
    return type;
  };
  std::string_view type = strip_qualifiers(parameters[index]);
  if (type.empty() || type.back() != '*') return format::DType::kUnknown;
  type = strip_qualifiers(Trim(type.substr(0, type.size() - 1)));
  if (type.rfind("const ", 0) == 0) type = Trim(type.substr(6));
  struct Known {
    std::string_view name;
    format::DType dtype;
  };
  static constexpr Known kKnown[] = {
      {"double", format::DType::kF64},         {"float", format::DType::kF32},
      {"__half", format::DType::kF16},         {"c10::Half", format::DType::kF16},
      {"__nv_bfloat16", format::DType::kBF16}, {"c10::BFloat16", format::DType::kBF16},
      {"long", format::DType::kI64},           {"long long", format::DType::kI64},
      {"int", format::DType::kI32},            {"short", format::DType::kI16},
      {"signed char", format::DType::kI8},     {"char", format::DType::kI8},
      {"unsigned char", format::DType::kU8},   {"bool", format::DType::kBool},
  };
  for (const Known& known : kKnown) {
    if (type == known.name) return known.dtype;
  }
  return format::DType::kUnknown;
}

namespace {

// Whether each top-level parameter of `demangled_name` is a pointer to const, parsed once per
// name and thread: diff asks for every pointer argument of every launch, and launches repeat
// few names. The cache is emptied when it holds kMaxNames, so its memory stays bounded.
const std::vector<bool>& ConstPointerParameters(std::string_view demangled_name) {
  struct Hash {
    using is_transparent = void;
    // XXH3, not std::hash: demangled names run to hundreds of bytes, hashed for every pointer
    // argument diff reads.
    size_t operator()(std::string_view text) const { return XXH3_64bits(text.data(), text.size()); }
  };
  constexpr size_t kMaxNames = 4096;
  thread_local std::unordered_map<std::string, std::vector<bool>, Hash, std::equal_to<>> cache;
  if (auto it = cache.find(demangled_name); it != cache.end()) return it->second;
  if (cache.size() >= kMaxNames) cache.clear();
  std::vector<bool> is_const;
  for (const std::string_view type : Parameters(demangled_name)) {
    const size_t star = type.rfind('*');
    const std::string_view pointee =
        star == std::string_view::npos ? std::string_view() : Trim(type.substr(0, star));
    is_const.push_back(star != std::string_view::npos &&
                       (pointee.rfind("const ", 0) == 0 ||
                        (pointee.size() > 6 && pointee.substr(pointee.size() - 6) == " const")));
  }
  return cache.emplace(std::string(demangled_name), std::move(is_const)).first->second;
}

}  // namespace

bool PointerParameterIsConst(std::string_view demangled_name, size_t index) {
  const std::vector<bool>& is_const = ConstPointerParameters(demangled_name);
  return index < is_const.size() && is_const[index];
}

std::string ChoiceText(const format::AlgorithmChoice& c) {
  std::string text = c.library + " " + (c.name.empty() ? "algo " + std::to_string(c.id) : c.name);
  if (!c.knobs.empty()) {
    text += " knobs";
    for (const auto& knob : c.knobs) text += " " + libfacts::KnobText(c.library, knob.type, knob.value);
  }
  if (c.determinism == format::Determinism::kNondeterministic) text += " [nondeterministic]";
  switch (c.source) {
    case format::ChoiceSource::kBenchmark: return text + " (picked by benchmark)";
    case format::ChoiceSource::kHeuristic: return text + " (picked by heuristics)";
    case format::ChoiceSource::kPinned: return text + " (pinned)";
    case format::ChoiceSource::kEnforced: return text + " (enforced)";
    default: return text;
  }
}

ExactDifference CompareBuffers(std::string_view a, std::string_view b, format::DType dtype) {
  ExactDifference d;
  d.dtype = dtype;
  d.bytes_a = a.size();
  d.bytes_b = b.size();
  const uint64_t width = dtype == format::DType::kUnknown ? 1 : format::DTypeBytes(dtype);
  d.elements = std::min(a.size(), b.size()) / width;
  for (uint64_t i = 0; i < d.elements; ++i) {
    const char* x = a.data() + i * width;
    const char* y = b.data() + i * width;
    if (std::memcmp(x, y, width) == 0) continue;
    const double u = Value(x, dtype);
    const double v = Value(y, dtype);
    if (d.differing++ == 0) {
      d.first_index = i;
      d.first_a = u;
      d.first_b = v;
    }
    if (!std::isfinite(u) || !std::isfinite(v)) {
      ++d.non_finite;
      continue;
    }
    const double diff = std::fabs(u - v);
    const int bucket = diff > 0 ? static_cast<int>(std::floor(std::log10(diff))) -
                                      ExactDifference::kHistogramLowest
                                : 0;
    ++d.histogram[std::clamp(bucket, 0, ExactDifference::kHistogramBuckets - 1)];
    if (diff > d.max_abs_diff) {
      d.max_abs_diff = diff;
      d.max_abs_index = i;
    }
    const double scale = std::max(std::fabs(u), std::fabs(v));
    if (scale > 0) d.max_rel_diff = std::max(d.max_rel_diff, diff / scale);
  }
  return d;
}

}  // namespace ndt::replay
