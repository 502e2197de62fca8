#include "tools/record_text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ctime>
#include <iterator>
#include <type_traits>
#include <variant>

#include "libfacts/knob_names.h"

namespace ndt::tools {
namespace {

using Out = std::back_insert_iterator<std::string>;

constexpr const char* kMasked = "<>";
// Width of the time column that starts every line unless stable ("  12.345678s ").
constexpr int kTimeColumn = 13;

template <typename... Args>
void Append(std::string* out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(*out), format, std::forward<Args>(args)...);
}

uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

void AppendTimeColumn(uint64_t time_ns, bool has_time, const TextOptions& options,
                      std::string* out) {
  if (options.stable) return;
  if (has_time) {
    Append(out, "{:>{}.6f}s ", static_cast<double>(time_ns) * 1e-9, kTimeColumn - 2);
  } else {
    out->append(kTimeColumn, ' ');
  }
}

std::string DurationText(uint64_t start_ns, uint64_t end_ns) {
  const double ns = end_ns >= start_ns ? static_cast<double>(end_ns - start_ns) : 0.0;
  if (ns < 1e3) return fmt::format("{:.0f}ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f}us", ns * 1e-3);
  if (ns < 1e9) return fmt::format("{:.2f}ms", ns * 1e-6);
  return fmt::format("{:.3f}s", ns * 1e-9);
}

std::string UuidText(std::string_view uuid) {
  if (uuid.size() != 16) return HexBytes(uuid);
  const std::string hex = HexBytes(uuid);
  return fmt::format("GPU-{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4),
                     hex.substr(16, 4), hex.substr(20, 12));
}

std::string UtcText(uint64_t unix_ns) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm utc = {};
  if (gmtime_r(&seconds, &utc) == nullptr) return std::to_string(unix_ns) + " ns";
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:09}Z", text, unix_ns % 1000000000);
}

void AppendBuffers(const char* label, const std::vector<format::BufferDigest>& buffers,
                   const TextOptions& options, std::string* out) {
  if (buffers.empty()) return;
  Append(out, "  {}", label);
  for (const format::BufferDigest& buffer : buffers) {
    Append(out, " {}", BufferDigestText(buffer, options));
  }
}

// "r2/5": range 5 of thread 2 (formats/README.md, "NVTX ranges").
std::string RangeIdText(uint64_t id) {
  return fmt::format("r{}/{}", format::ThreadLabel(static_cast<uint32_t>(id >> 32)),
                     id & 0xffffffffu);
}

void AppendOp(const format::OpRecord& op, const TextOptions& options, std::string* out) {
  AppendTimeColumn(op.start_ns, true, options, out);
  Append(out, "op {:<7} t{:<2} s{:<3} {:<21}  {}", op.sequence, format::ThreadLabel(op.thread_id),
         format::StreamLabel(op.stream_id), format::OpKindName(op.kind), EscapeControl(op.name));
  if (!op.args.empty()) {
    out->append(" ");
    for (const format::Argument& argument : op.args) {
      Append(out, " {}", ArgumentText(argument, options));
    }
  }
  if (op.algorithm) Append(out, "  algo={}", AlgorithmText(*op.algorithm));
  if (op.rng) Append(out, "  rng={}", RngText(*op.rng));
  AppendBuffers("in", op.inputs, options, out);
  AppendBuffers("out", op.outputs, options, out);
  if (op.status != 0) Append(out, "  status={}", op.status);
  if (op.module_id != 0) Append(out, "  module=m{}", op.module_id);
  if (op.device_ordinal != 0) Append(out, "  device={}", op.device_ordinal);
  if (op.nvtx_range_id != 0) Append(out, "  nvtx={}", RangeIdText(op.nvtx_range_id));
  if (!options.stable) Append(out, "  +{}", DurationText(op.start_ns, op.end_ns));
  out->push_back('\n');
}

void AppendAllocation(const format::AllocationRecord& allocation, const TextOptions& options,
                      std::string* out) {
  AppendTimeColumn(0, false, options, out);
  Append(out, "{:<5} a{} {} B {}",
         allocation.event == format::AllocationEvent::kFree ? "free" : "alloc",
         allocation.allocation_id, allocation.bytes, EscapeControl(allocation.api));
  if (!options.stable) Append(out, " at {:#x}", allocation.raw_address);
  if (allocation.stream_id != 0) Append(out, " s{}", format::StreamLabel(allocation.stream_id));
  if (allocation.device_ordinal != 0) Append(out, " device={}", allocation.device_ordinal);
  Append(out, " (before op {})\n", allocation.before_op);
}

void AppendModule(const format::ModuleLoadRecord& module, const TextOptions& options,
                  std::string* out) {
  AppendTimeColumn(0, false, options, out);
  Append(out, "module m{} {} {} B {} {} kernels\n", module.module_id, EscapeControl(module.api),
         module.image_bytes, DigestHex(module.digest), module.kernels.size());
}

void AppendNvtx(const format::NvtxRangeRecord& range, const TextOptions& options,
                std::string* out) {
  AppendTimeColumn(range.time_ns, true, options, out);
  const std::string thread = format::ThreadLabel(range.thread_id);
  const std::string domain = range.domain.empty() ? "" : EscapeControl(range.domain) + ": ";
  switch (range.kind) {
    case format::NvtxEvent::kPush:
      Append(out, "nvtx t{} push {}{}", thread, domain, Quoted(range.name));
      break;
    case format::NvtxEvent::kPop:
      Append(out, "nvtx t{} pop", thread);
      break;
    case format::NvtxEvent::kStart:
      Append(out, "nvtx t{} start {}{}", thread, domain, Quoted(range.name));
      break;
    case format::NvtxEvent::kEnd:
      Append(out, "nvtx t{} end", thread);
      break;
    case format::NvtxEvent::kMark:
      Append(out, "nvtx t{} mark {}{}", thread, domain, Quoted(range.name));
      break;
    case format::NvtxEvent::kCategoryName:
      Append(out, "nvtx t{} category {}{} = {}", thread, domain, range.category,
             Quoted(range.name));
      break;
  }
  if (range.range_id != 0) Append(out, " {}", RangeIdText(range.range_id));
  if (range.parent_id != 0) Append(out, " in {}", RangeIdText(range.parent_id));
  if (range.category != 0 && range.kind != format::NvtxEvent::kCategoryName) {
    Append(out, " category={}", range.category);
  }
  Append(out, " (before op {})\n", range.before_op);
}

void AppendPythonStack(const format::PythonStackRecord& stack, const TextOptions& options,
                       std::string* out) {
  AppendTimeColumn(0, false, options, out);
  Append(out, "python op {} t{} lane {}#{}: {}", stack.op_sequence,
         format::ThreadLabel(stack.thread_id), stack.lane_stream, stack.lane_index,
         EscapeControl(format::PythonStackSummary(stack)));
  if (!stack.python.empty()) Append(out, " (CPython {})", EscapeControl(stack.python));
  out->push_back('\n');
  for (const format::PythonFrame& frame : stack.frames) {
    AppendTimeColumn(0, false, options, out);
    Append(out, "    {}{}\n", EscapeControl(format::PythonFrameText(frame)),
           format::IsLibraryPythonFile(frame.file) ? "  [library]" : "");
  }
}

void AppendPolicy(const format::PolicyDecisionRecord& decision, const TextOptions& options,
                  std::string* out) {
  AppendTimeColumn(0, false, options, out);
  Append(out, "policy op {}: {}", decision.op_sequence, EscapeControl(decision.action));
  if (!decision.library.empty()) Append(out, " [{}]", EscapeControl(decision.library));
  if (decision.from_choice) Append(out, "  from={}", AlgorithmText(*decision.from_choice));
  if (decision.to_choice) Append(out, "  to={}", AlgorithmText(*decision.to_choice));
  if (!decision.applied) out->append("  (not applied)");
  out->push_back('\n');
}

void AppendNote(const format::TracerNote& note, const TextOptions& options, std::string* out) {
  AppendTimeColumn(note.time_ns, true, options, out);
  Append(out, "note {}: {} (before op {})\n", SeverityName(note.severity), EscapeControl(note.text),
         note.before_op);
}

void AppendDropped(const format::DroppedRecords& dropped, const TextOptions& options,
                   std::string* out) {
  AppendTimeColumn(0, false, options, out);
  Append(out, "dropped {} records ({} B) by writer {}: {}\n", dropped.records, dropped.bytes,
         dropped.writer_id, EscapeControl(dropped.reason));
}

void AppendState(const format::StateDigestRecord& state, const TextOptions& options,
                 std::string* out) {
  AppendTimeColumn(state.time_ns, true, options, out);
  Append(out, "state after op {}: {} allocations ({})\n", state.after_op, state.allocations.size(),
         EscapeControl(state.reason));
  for (const format::BufferDigest& allocation : state.allocations) {
    if (!options.stable) out->append(kTimeColumn, ' ');
    Append(out, "      {}\n", BufferDigestText(allocation, options));
  }
}

void AppendGpuActivity(const format::GpuActivityRecord& activity, const TextOptions& options,
                       std::string* out) {
  AppendTimeColumn(activity.start_ns, true, options, out);
  std::string of = activity.op_sequence ? fmt::format("op {}", *activity.op_sequence) : "";
  if (activity.library_op_sequence) {
    of += activity.op_sequence ? fmt::format(" (in library op {})", *activity.library_op_sequence)
                               : fmt::format("library op {}", *activity.library_op_sequence);
  }
  if (of.empty())
    of = activity.ndtrace_own ? "ndtrace (its own digests and copies)" : "no recorded op";
  if (options.stable) {
    Append(out, "gpu {} of {}\n", format::GpuActivityKindName(activity.kind), of);
  } else {
    Append(out, "gpu {} of {}: {} ns on the GPU, device stream {}\n",
           format::GpuActivityKindName(activity.kind), of,
           activity.end_ns - std::min(activity.start_ns, activity.end_ns), activity.device_stream);
  }
}

}  // namespace

std::string DigestHex(const format::Digest& digest) {
  return fmt::format("{:016x}{:016x}", digest.lo, digest.hi);
}

std::string HexBytes(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char byte : bytes) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 15]);
  }
  return hex;
}

std::string EscapeControl(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\\') {
      escaped.append("\\\\");
    } else if (c == '\n') {
      escaped.append("\\n");
    } else if (c == '\t') {
      escaped.append("\\t");
    } else if (byte < 0x20 || byte == 0x7f) {
      Append(&escaped, "\\x{:02x}", byte);
    } else {
      escaped.push_back(c);
    }
  }
  return escaped;
}

std::string Quoted(std::string_view text) {
  std::string quoted = "\"";
  for (char c : EscapeControl(text)) {
    if (c == '"') quoted.push_back('\\');
    quoted.push_back(c);
  }
  quoted.push_back('"');
  return quoted;
}

const char* DeterminismName(format::Determinism determinism) {
  switch (determinism) {
    case format::Determinism::kUnknown:
      return "unknown";
    case format::Determinism::kDeterministic:
      return "deterministic";
    case format::Determinism::kNondeterministic:
      return "nondeterministic";
  }
  return "unknown";
}

const char* ChoiceSourceName(format::ChoiceSource source) {
  switch (source) {
    case format::ChoiceSource::kUnknown:
      return "unknown";
    case format::ChoiceSource::kRequested:
      return "requested";
    case format::ChoiceSource::kHeuristic:
      return "heuristic";
    case format::ChoiceSource::kBenchmark:
      return "benchmark";
    case format::ChoiceSource::kEnforced:
      return "enforced";
    case format::ChoiceSource::kPinned:
      return "pinned";
  }
  return "unknown";
}

const char* SeverityName(format::Severity severity) {
  switch (severity) {
    case format::Severity::kInfo:
      return "info";
    case format::Severity::kWarning:
      return "warning";
    case format::Severity::kError:
      return "error";
  }
  return "unknown";
}

const char* AllocationEventName(format::AllocationEvent event) {
  switch (event) {
    case format::AllocationEvent::kAllocate:
      return "allocate";
    case format::AllocationEvent::kFree:
      return "free";
  }
  return "unknown";
}

std::string PointerText(const format::DevicePointer& pointer, const TextOptions& options) {
  if (pointer.allocation_id == 0) {
    return options.stable ? "raw:<>" : fmt::format("raw:{:#x}", pointer.offset);
  }
  if (options.stable) return fmt::format("a{}+{}", pointer.allocation_id, pointer.offset);
  return fmt::format("a{}+{}@{:#x}", pointer.allocation_id, pointer.offset, pointer.raw_address);
}

std::string BufferDigestText(const format::BufferDigest& buffer, const TextOptions& options) {
  std::string text = EscapeControl(buffer.role);
  if (!text.empty()) text.push_back('@');
  // Digests carry the canonical pointer only: the raw address is in the op's arguments.
  TextOptions canonical = options;
  canonical.stable = true;
  Append(&text, "{}:{}B:", PointerText(buffer.pointer, canonical), buffer.bytes);
  if (buffer.dtype != format::DType::kUnknown) {
    Append(&text, "{}:", format::DTypeName(buffer.dtype));
  }
  text.append(DigestHex(buffer.digest));
  const format::NumericSummary& summary = buffer.summary;
  if (summary.count != 0) {
    Append(&text, "[{:.6g}..{:.6g} sum={:.6g}", summary.min, summary.max, summary.sum);
    if (summary.nan_count != 0) Append(&text, " nan={}", summary.nan_count);
    if (summary.inf_count != 0) Append(&text, " inf={}", summary.inf_count);
    text.push_back(']');
  }
  return text;
}

std::string AlgorithmText(const format::AlgorithmChoice& algorithm) {
  std::string text = fmt::format("{}:{}", EscapeControl(algorithm.library), algorithm.id);
  if (!algorithm.name.empty()) Append(&text, " {}", Quoted(algorithm.name));
  if (algorithm.determinism != format::Determinism::kUnknown) {
    Append(&text, " {}", DeterminismName(algorithm.determinism));
  }
  if (algorithm.source != format::ChoiceSource::kUnknown) {
    Append(&text, " {}", ChoiceSourceName(algorithm.source));
  }
  if (!algorithm.knobs.empty()) {
    text.append(" knobs=[");
    for (size_t i = 0; i < algorithm.knobs.size(); ++i) {
      Append(&text, "{}{}", i == 0 ? "" : ",",
             libfacts::KnobText(algorithm.library, algorithm.knobs[i].type,
                                algorithm.knobs[i].value));
    }
    text.push_back(']');
  }
  if (!algorithm.opaque.empty()) {
    Append(&text, " opaque={}B#{:016x}", algorithm.opaque.size(), Fnv1a64(algorithm.opaque));
  }
  return text;
}

std::string RngText(const format::RngState& rng) {
  std::string text =
      fmt::format("{} seed={} offset={}", EscapeControl(rng.generator), rng.seed, rng.offset);
  if (rng.subsequence != 0) Append(&text, " subsequence={}", rng.subsequence);
  if (!rng.ordering.empty()) Append(&text, " ordering={}", EscapeControl(rng.ordering));
  if (rng.device_dependent) text.append(" device-dependent");
  return text;
}

std::string ArgumentText(const format::Argument& argument, const TextOptions& options) {
  std::string text = EscapeControl(argument.name);
  text.push_back('=');
  std::visit(
      [&](const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          text.push_back('?');
        } else if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t>) {
          Append(&text, "{}", value);
        } else if constexpr (std::is_same_v<T, double>) {
          Append(&text, "{:g}", value);
        } else if constexpr (std::is_same_v<T, std::string>) {
          text.append(Quoted(value));
        } else if constexpr (std::is_same_v<T, format::Argument::Bytes>) {
          constexpr size_t kShown = 16;
          Append(&text, "<{}B:{}{}>", value.data.size(),
                 HexBytes(std::string_view(value.data).substr(0, kShown)),
                 value.data.size() > kShown ? "..." : "");
        } else if constexpr (std::is_same_v<T, format::DevicePointer>) {
          text.append(PointerText(value, options));
        } else {
          static_assert(std::is_same_v<T, format::Argument::Dims>);
          Append(&text, "[{}]", fmt::join(value, ","));
        }
      },
      argument.value);
  return text;
}

std::string CommandLineText(const std::vector<std::string>& command_line) {
  std::string text;
  for (const std::string& word : command_line) {
    if (!text.empty()) text.push_back(' ');
    const bool plain = !word.empty() && word.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                                            "TUVWXYZ0123456789-_./=:,+@%") == std::string::npos;
    if (plain) {
      text.append(word);
    } else {
      text.push_back('\'');
      for (char c : EscapeControl(word)) {
        if (c == '\'') {
          text.append("'\\''");
        } else {
          text.push_back(c);
        }
      }
      text.push_back('\'');
    }
  }
  return text;
}

void AppendHeaderText(const format::TraceHeader& header, const TextOptions& options,
                      std::string* out) {
  const auto line = [out](std::string_view key, std::string_view value) {
    Append(out, "{:<10}{}\n", key, value);
  };
  line("format", fmt::format("{} (written by ndtrace {})", header.format_version,
                             EscapeControl(header.tool_version)));
  line("command", CommandLineText(header.command_line));
  line("host", options.stable ? kMasked : EscapeControl(header.host));
  line("pid", options.stable ? kMasked : std::to_string(header.pid));
  line("rank", header.rank < 0 ? "none" : std::to_string(header.rank));
  line("started", options.stable ? kMasked : UtcText(header.start_unix_ns));
  for (const format::GpuInfo& gpu : header.gpus) {
    std::string text = EscapeControl(gpu.name);
    if (gpu.cc_major != 0 || gpu.cc_minor != 0) {
      Append(&text, ", sm_{}{}", gpu.cc_major, gpu.cc_minor);
    }
    if (gpu.sm_count != 0) Append(&text, ", {} SMs", gpu.sm_count);
    if (gpu.memory_bytes != 0) {
      Append(&text, ", {:.1f} GiB", static_cast<double>(gpu.memory_bytes) / (1 << 30));
    }
    if (!gpu.uuid.empty()) Append(&text, ", {}", UuidText(gpu.uuid));
    if (gpu.simulated) text.append(" (simulated)");
    line(fmt::format("gpu {}", gpu.ordinal), text);
  }
  const format::LibraryVersions& v = header.versions;
  std::string versions;
  for (const auto& [name, version] :
       {std::pair{"driver", v.driver}, std::pair{"runtime", v.runtime}, std::pair{"cudnn", v.cudnn},
        std::pair{"cublas", v.cublas}, std::pair{"nccl", v.nccl}, std::pair{"curand", v.curand}}) {
    if (version != 0) Append(&versions, "{}{} {}", versions.empty() ? "" : "  ", name, version);
  }
  line("versions", versions.empty() ? "unknown" : versions);
  std::string policy = format::PolicyName(header.policy);
  if (!header.pinned_from.empty()) {
    Append(&policy, " (choices from {})", EscapeControl(header.pinned_from));
  }
  line("policy", policy);
  for (const format::EnvVar& variable : header.environment) {
    line("env", EscapeControl(variable.name) + "=" + EscapeControl(variable.value));
  }
  if (!header.python.empty()) line("python", "CPython " + EscapeControl(header.python));
  for (const std::string& note : header.notes) line("note", EscapeControl(note));
}

void AppendRangeContextText(const format::RangeContext& context, const TextOptions& options,
                            std::string* out) {
  if (context.empty()) return;
  AppendTimeColumn(0, false, options, out);
  out->append("   in ");
  for (size_t i = 0; i < context.path.size(); ++i) {
    if (i != 0) out->append(" > ");
    out->append(Quoted(context.path[i]));
  }
  if (!context.framework_op.empty()) Append(out, "  op={}", EscapeControl(context.framework_op));
  if (!context.module.empty()) Append(out, "  module={}", EscapeControl(context.module));
  out->push_back('\n');
}

void AppendRecordText(const format::Record& record, const TextOptions& options, std::string* out) {
  std::visit(
      [&](const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, format::OpRecord>) {
          AppendOp(value, options, out);
        } else if constexpr (std::is_same_v<T, format::AllocationRecord>) {
          AppendAllocation(value, options, out);
        } else if constexpr (std::is_same_v<T, format::ModuleLoadRecord>) {
          AppendModule(value, options, out);
        } else if constexpr (std::is_same_v<T, format::NvtxRangeRecord>) {
          AppendNvtx(value, options, out);
        } else if constexpr (std::is_same_v<T, format::PolicyDecisionRecord>) {
          AppendPolicy(value, options, out);
        } else if constexpr (std::is_same_v<T, format::TracerNote>) {
          AppendNote(value, options, out);
        } else if constexpr (std::is_same_v<T, format::DroppedRecords>) {
          AppendDropped(value, options, out);
        } else if constexpr (std::is_same_v<T, format::PythonStackRecord>) {
          AppendPythonStack(value, options, out);
        } else if constexpr (std::is_same_v<T, format::StateDigestRecord>) {
          AppendState(value, options, out);
        } else {
          static_assert(std::is_same_v<T, format::GpuActivityRecord>);
          AppendGpuActivity(value, options, out);
        }
      },
      record);
}

}  // namespace ndt::tools
