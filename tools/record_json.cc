#include "tools/record_json.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <type_traits>
#include <variant>

#include "formats/check.h"
#include "tools/record_text.h"

namespace ndt::tools {

// ---- JsonWriter ---------------------------------------------------------------------------

namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if there is none.
size_t Utf8SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) lo = 0xa0;  // no overlong forms
    if (lead == 0xed) hi = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) lo = 0x90;
    if (lead == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return length;
}

void AppendEscaped(std::string_view text, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text, i);
      if (length == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          fmt::format_to(std::back_inserter(*out), "\\u{:04x}", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out->push_back('"');
}

}  // namespace

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!open_.empty()) {
    if (!open_.back()) out_->push_back(',');
    open_.back() = false;
  }
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_->push_back('{');
  open_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  NDT_CHECK(!open_.empty() && !after_key_) << "unbalanced JSON object";
  open_.pop_back();
  out_->push_back('}');
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_->push_back('[');
  open_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  NDT_CHECK(!open_.empty() && !after_key_) << "unbalanced JSON array";
  open_.pop_back();
  out_->push_back(']');
  return *this;
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  NDT_CHECK(!open_.empty() && !after_key_) << "JSON key outside an object";
  BeforeValue();
  AppendEscaped(key, out_);
  out_->push_back(':');
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view text) {
  BeforeValue();
  AppendEscaped(text, out_);
  return *this;
}

JsonWriter& JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  fmt::format_to(std::back_inserter(*out_), "{}", value);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  BeforeValue();
  fmt::format_to(std::back_inserter(*out_), "{}", value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  BeforeValue();
  if (std::isfinite(value)) {
    fmt::format_to(std::back_inserter(*out_), "{}", value);  // shortest round trip
  } else {
    out_->append("null");
  }
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  out_->append(value ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_->append("null");
  return *this;
}

JsonWriter& JsonWriter::Raw(std::string_view json) {
  BeforeValue();
  out_->append(json);
  return *this;
}

// ---- Records ------------------------------------------------------------------------------

namespace {

std::string RawText(uint64_t address) {
  return fmt::format("{:#x}", address);
}

void WritePointer(const format::DevicePointer& pointer, const JsonOptions& options,
                  JsonWriter& json) {
  json.BeginObject();
  json.Key("allocation_id").Uint(pointer.allocation_id);
  json.Key("offset").Uint(pointer.offset);
  if (!options.stable) json.Key("raw_address").String(RawText(pointer.raw_address));
  json.EndObject();
}

void WriteArgument(const format::Argument& argument, const JsonOptions& options, JsonWriter& json) {
  json.BeginObject();
  json.Key("name").String(argument.name);
  std::visit(
      [&](const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          json.Key("none").Null();
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          json.Key("unsigned").Uint(value);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          json.Key("signed").Int(value);
        } else if constexpr (std::is_same_v<T, double>) {
          json.Key("real").Double(value);
        } else if constexpr (std::is_same_v<T, std::string>) {
          json.Key("text").String(value);
        } else if constexpr (std::is_same_v<T, format::Argument::Bytes>) {
          json.Key("bytes").String(HexBytes(value.data));
        } else if constexpr (std::is_same_v<T, format::DevicePointer>) {
          json.Key("pointer");
          WritePointer(value, options, json);
        } else {
          static_assert(std::is_same_v<T, format::Argument::Dims>);
          json.Key("dims").BeginArray();
          for (int64_t dim : value) json.Int(dim);
          json.EndArray();
        }
      },
      argument.value);
  json.EndObject();
}

void WriteRng(const format::RngState& rng, JsonWriter& json) {
  json.BeginObject();
  json.Key("generator").String(rng.generator);
  json.Key("seed").Uint(rng.seed);
  json.Key("offset").Uint(rng.offset);
  json.Key("subsequence").Uint(rng.subsequence);
  json.Key("ordering").String(rng.ordering);
  json.Key("device_dependent").Bool(rng.device_dependent);
  json.EndObject();
}

void WriteBuffers(const std::vector<format::BufferDigest>& buffers, const JsonOptions& options,
                  JsonWriter& json) {
  json.BeginArray();
  for (const format::BufferDigest& buffer : buffers) {
    WriteBufferDigestJson(buffer, options, json);
  }
  json.EndArray();
}

void WriteStrings(const std::vector<std::string>& strings, JsonWriter& json) {
  json.BeginArray();
  for (const std::string& text : strings) json.String(text);
  json.EndArray();
}

// The fields after "type" of each record kind.
void WriteFields(const format::OpRecord& op, const JsonOptions& options, JsonWriter& json) {
  json.Key("sequence").Uint(op.sequence);
  json.Key("thread_id").Uint(op.thread_id);
  json.Key("stream_id").Uint(op.stream_id);
  json.Key("kind").String(format::OpKindName(op.kind));
  json.Key("name").String(op.name);
  json.Key("args").BeginArray();
  for (const format::Argument& argument : op.args) WriteArgument(argument, options, json);
  json.EndArray();
  if (op.algorithm) {
    json.Key("algorithm");
    WriteAlgorithmJson(*op.algorithm, json);
  }
  if (op.rng) {
    json.Key("rng");
    WriteRng(*op.rng, json);
  }
  json.Key("inputs");
  WriteBuffers(op.inputs, options, json);
  json.Key("outputs");
  WriteBuffers(op.outputs, options, json);
  json.Key("status").Int(op.status);
  if (!options.stable) {
    json.Key("start_ns").Uint(op.start_ns);
    json.Key("end_ns").Uint(op.end_ns);
  }
  json.Key("module_id").Uint(op.module_id);
  json.Key("device_ordinal").Uint(op.device_ordinal);
  if (op.nvtx_range_id != 0) json.Key("nvtx_range_id").Uint(op.nvtx_range_id);
}

void WriteFields(const format::AllocationRecord& allocation, const JsonOptions& options,
                 JsonWriter& json) {
  json.Key("allocation_id").Uint(allocation.allocation_id);
  json.Key("event").String(AllocationEventName(allocation.event));
  json.Key("bytes").Uint(allocation.bytes);
  json.Key("api").String(allocation.api);
  json.Key("device_ordinal").Uint(allocation.device_ordinal);
  if (!options.stable) json.Key("raw_address").String(RawText(allocation.raw_address));
  json.Key("before_op").Uint(allocation.before_op);
  json.Key("stream_id").Uint(allocation.stream_id);
}

void WriteFields(const format::ModuleLoadRecord& module, const JsonOptions&, JsonWriter& json) {
  json.Key("module_id").Uint(module.module_id);
  json.Key("api").String(module.api);
  json.Key("image_bytes").Uint(module.image_bytes);
  json.Key("digest").String(DigestHex(module.digest));
  json.Key("kernels");
  WriteStrings(module.kernels, json);
}

void WriteFields(const format::NvtxRangeRecord& range, const JsonOptions& options,
                 JsonWriter& json) {
  json.Key("thread_id").Uint(range.thread_id);
  json.Key("push").Bool(range.push);
  json.Key("name").String(range.name);
  json.Key("before_op").Uint(range.before_op);
  if (!options.stable) json.Key("time_ns").Uint(range.time_ns);
  if (range.range_id == 0 && range.domain.empty() && range.category == 0 &&
      (range.kind == format::NvtxEvent::kPush || range.kind == format::NvtxEvent::kPop)) {
    return;  // a range as format version 2 first wrote them: nothing more to say
  }
  json.Key("kind").String(NvtxEventName(range.kind));
  json.Key("range_id").Uint(range.range_id);
  json.Key("parent_id").Uint(range.parent_id);
  json.Key("domain").String(range.domain);
  json.Key("category").Uint(range.category);
}

void WriteFields(const format::PythonStackRecord& stack, const JsonOptions&, JsonWriter& json) {
  json.Key("op_sequence").Uint(stack.op_sequence);
  json.Key("thread_id").Uint(stack.thread_id);
  json.Key("lane_stream").Uint(stack.lane_stream);
  json.Key("lane_index").Uint(stack.lane_index);
  json.Key("status").String(format::PythonStackStatusName(stack.status));
  json.Key("frames").BeginArray();
  for (const format::PythonFrame& frame : stack.frames) {
    json.BeginObject().Key("file").String(frame.file);
    json.Key("line").Int(frame.line);
    json.Key("function").String(frame.function);
    json.Key("library").Bool(format::IsLibraryPythonFile(frame.file)).EndObject();
  }
  json.EndArray();
  json.Key("detail").String(stack.detail);
  json.Key("python").String(stack.python);
}

void WriteFields(const format::PolicyDecisionRecord& decision, const JsonOptions&,
                 JsonWriter& json) {
  json.Key("op_sequence").Uint(decision.op_sequence);
  json.Key("library").String(decision.library);
  json.Key("action").String(decision.action);
  if (decision.from_choice) {
    json.Key("from_choice");
    WriteAlgorithmJson(*decision.from_choice, json);
  }
  if (decision.to_choice) {
    json.Key("to_choice");
    WriteAlgorithmJson(*decision.to_choice, json);
  }
  json.Key("applied").Bool(decision.applied);
}

void WriteFields(const format::TracerNote& note, const JsonOptions& options, JsonWriter& json) {
  json.Key("severity").String(SeverityName(note.severity));
  json.Key("text").String(note.text);
  json.Key("before_op").Uint(note.before_op);
  if (!options.stable) json.Key("time_ns").Uint(note.time_ns);
}

void WriteFields(const format::DroppedRecords& dropped, const JsonOptions&, JsonWriter& json) {
  json.Key("writer_id").Uint(dropped.writer_id);
  json.Key("records").Uint(dropped.records);
  json.Key("bytes").Uint(dropped.bytes);
  json.Key("reason").String(dropped.reason);
}

void WriteFields(const format::StateDigestRecord& state, const JsonOptions& options,
                 JsonWriter& json) {
  json.Key("after_op").Uint(state.after_op);
  json.Key("reason").String(state.reason);
  json.Key("allocations");
  WriteBuffers(state.allocations, options, json);
  if (!options.stable) json.Key("time_ns").Uint(state.time_ns);
}

void WriteFields(const format::GpuActivityRecord& activity, const JsonOptions& options,
                 JsonWriter& json) {
  json.Key("kind").String(format::GpuActivityKindName(activity.kind));
  json.Key("op");
  activity.op_sequence ? json.Uint(*activity.op_sequence) : json.Null();
  json.Key("library_op");
  activity.library_op_sequence ? json.Uint(*activity.library_op_sequence) : json.Null();
  if (activity.ndtrace_own) json.Key("ndtrace_own").Bool(true);
  if (!options.stable) {
    json.Key("start_ns").Uint(activity.start_ns);
    json.Key("end_ns").Uint(activity.end_ns);
    json.Key("device_stream").Uint(activity.device_stream);
  }
}

}  // namespace

void WriteHeaderJson(const format::TraceHeader& header, const JsonOptions& options, bool type,
                     JsonWriter& json) {
  json.BeginObject();
  if (type) json.Key("type").String("header");
  json.Key("format_version").Uint(header.format_version);
  json.Key("tool_version").String(header.tool_version);
  json.Key("command_line");
  WriteStrings(header.command_line, json);
  if (!options.stable) {
    json.Key("host").String(header.host);
    json.Key("pid").Uint(header.pid);
  }
  json.Key("rank").Int(header.rank);
  if (!options.stable) json.Key("start_unix_ns").Uint(header.start_unix_ns);
  json.Key("gpus").BeginArray();
  for (const format::GpuInfo& gpu : header.gpus) {
    json.BeginObject();
    json.Key("ordinal").Uint(gpu.ordinal);
    json.Key("name").String(gpu.name);
    json.Key("uuid").String(HexBytes(gpu.uuid));
    json.Key("cc_major").Uint(gpu.cc_major);
    json.Key("cc_minor").Uint(gpu.cc_minor);
    json.Key("sm_count").Uint(gpu.sm_count);
    json.Key("memory_bytes").Uint(gpu.memory_bytes);
    json.Key("simulated").Bool(gpu.simulated);
    json.EndObject();
  }
  json.EndArray();
  const format::LibraryVersions& v = header.versions;
  json.Key("versions").BeginObject();
  json.Key("driver").Uint(v.driver);
  json.Key("runtime").Uint(v.runtime);
  json.Key("cudnn").Uint(v.cudnn);
  json.Key("cublas").Uint(v.cublas);
  json.Key("nccl").Uint(v.nccl);
  json.Key("curand").Uint(v.curand);
  json.EndObject();
  json.Key("environment").BeginArray();
  for (const format::EnvVar& variable : header.environment) {
    json.BeginObject().Key("name").String(variable.name);
    json.Key("value").String(variable.value).EndObject();
  }
  json.EndArray();
  json.Key("policy").String(format::PolicyName(header.policy));
  json.Key("pinned_from").String(header.pinned_from);
  json.Key("python").String(header.python);
  json.Key("notes");
  WriteStrings(header.notes, json);
  json.EndObject();
}

void WriteRecordJson(const format::Record& record, const JsonOptions& options, JsonWriter& json,
                     const format::RangeContext* context) {
  json.BeginObject();
  json.Key("type").String(format::RecordTypeName(record));
  std::visit([&](const auto& value) { WriteFields(value, options, json); }, record);
  if (context != nullptr && !context->empty()) WriteRangeContextJson(*context, json);
  json.EndObject();
}

void WriteRangeContextJson(const format::RangeContext& context, JsonWriter& json) {
  json.Key("nvtx_ranges");
  WriteStrings(context.path, json);
  if (!context.framework_op.empty()) json.Key("framework_op").String(context.framework_op);
  if (!context.module.empty()) json.Key("module").String(context.module);
}

const char* NvtxEventName(format::NvtxEvent kind) {
  switch (kind) {
    case format::NvtxEvent::kPush: return "push";
    case format::NvtxEvent::kPop: return "pop";
    case format::NvtxEvent::kStart: return "start";
    case format::NvtxEvent::kEnd: return "end";
    case format::NvtxEvent::kMark: return "mark";
    case format::NvtxEvent::kCategoryName: return "category_name";
  }
  return "unknown";
}

void WriteAlgorithmJson(const format::AlgorithmChoice& algorithm, JsonWriter& json) {
  json.BeginObject();
  json.Key("library").String(algorithm.library);
  json.Key("id").Int(algorithm.id);
  json.Key("name").String(algorithm.name);
  json.Key("knobs").BeginArray();
  for (const format::Knob& knob : algorithm.knobs) {
    json.BeginObject().Key("type").Int(knob.type).Key("value").Int(knob.value).EndObject();
  }
  json.EndArray();
  json.Key("opaque").String(HexBytes(algorithm.opaque));
  json.Key("determinism").String(DeterminismName(algorithm.determinism));
  json.Key("source").String(ChoiceSourceName(algorithm.source));
  json.EndObject();
}

void WriteBufferDigestJson(const format::BufferDigest& buffer, const JsonOptions& options,
                           JsonWriter& json) {
  json.BeginObject();
  json.Key("role").String(buffer.role);
  json.Key("pointer");
  WritePointer(buffer.pointer, options, json);
  json.Key("bytes").Uint(buffer.bytes);
  json.Key("digest").String(DigestHex(buffer.digest));
  json.Key("dtype").String(format::DTypeName(buffer.dtype));
  const format::NumericSummary& summary = buffer.summary;
  if (summary.count != 0) {
    json.Key("summary").BeginObject();
    json.Key("count").Uint(summary.count);
    json.Key("min").Double(summary.min);
    json.Key("max").Double(summary.max);
    json.Key("sum").Double(summary.sum);
    json.Key("nan_count").Uint(summary.nan_count);
    json.Key("inf_count").Uint(summary.inf_count);
    json.EndObject();
  }
  json.EndObject();
}

void WriteTraceEndJson(const format::TraceReader& reader, bool type, JsonWriter& json) {
  json.BeginObject();
  if (type) json.Key("type").String("end");
  json.Key("complete").Bool(reader.complete());
  json.Key("truncated_tail_bytes").Uint(reader.truncated_tail_bytes());
  json.Key("damage").BeginArray();
  for (const format::TraceDamage& damage : reader.damage()) {
    json.BeginObject();
    json.Key("begin").Uint(damage.begin);
    json.Key("end").Uint(damage.end);
    json.Key("what").String(damage.what);
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
}

}  // namespace ndt::tools
