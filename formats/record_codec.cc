#include "formats/record_codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "formats/byte_order.h"
#include "trace.capnp.h"

namespace ndt::format::codec {
namespace {

namespace wire = ::ndt::format::wire;

// ---- Plain -> wire ----------------------------------------------------------------------

capnp::Text::Reader AsText(const std::string& s) {
  return capnp::Text::Reader(s.c_str(), s.size());
}

capnp::Data::Reader AsData(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

template <typename WireEnum, typename PlainEnum>
WireEnum ToWire(PlainEnum value) {
  return static_cast<WireEnum>(static_cast<std::underlying_type_t<PlainEnum>>(value));
}

// Sets a text field only when non-empty: an unset Text reads back as "".
#define NDT_SET_TEXT(builder, Field, value)                    \
  do {                                                         \
    if (!(value).empty()) (builder).set##Field(AsText(value)); \
  } while (0)

void WritePointer(const DevicePointer& p, wire::DevicePointer::Builder b) {
  b.setAllocationId(p.allocation_id);
  b.setOffset(p.offset);
  b.setRawAddress(p.raw_address);
}

void WriteArgument(const Argument& a, wire::Argument::Builder b) {
  NDT_SET_TEXT(b, Name, a.name);
  const auto& v = a.value;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    b.setUnsigned(*u);
  } else if (const auto* s = std::get_if<int64_t>(&v)) {
    b.setSigned(*s);
  } else if (const auto* r = std::get_if<double>(&v)) {
    b.setReal(*r);
  } else if (const auto* t = std::get_if<std::string>(&v)) {
    b.setText(AsText(*t));
  } else if (const auto* bytes = std::get_if<Argument::Bytes>(&v)) {
    b.setBytes(AsData(bytes->data));
  } else if (const auto* p = std::get_if<DevicePointer>(&v)) {
    WritePointer(*p, b.initPointer());
  } else if (const auto* dims = std::get_if<Argument::Dims>(&v)) {
    auto list = b.initDims(static_cast<unsigned>(dims->size()));
    for (size_t i = 0; i < dims->size(); ++i) list.set(static_cast<unsigned>(i), (*dims)[i]);
  } else {
    b.setNone();
  }
}

void WriteChoice(const AlgorithmChoice& c, wire::AlgorithmChoice::Builder b) {
  NDT_SET_TEXT(b, Library, c.library);
  b.setId(c.id);
  NDT_SET_TEXT(b, Name, c.name);
  if (!c.knobs.empty()) {
    auto list = b.initKnobs(static_cast<unsigned>(c.knobs.size()));
    for (size_t i = 0; i < c.knobs.size(); ++i) {
      list[static_cast<unsigned>(i)].setType(c.knobs[i].type);
      list[static_cast<unsigned>(i)].setValue(c.knobs[i].value);
    }
  }
  if (!c.opaque.empty()) b.setOpaque(AsData(c.opaque));
  b.setDeterminism(ToWire<wire::Determinism>(c.determinism));
  b.setSource(ToWire<wire::ChoiceSource>(c.source));
}

void WriteRng(const RngState& r, wire::RngState::Builder b) {
  NDT_SET_TEXT(b, Generator, r.generator);
  b.setSeed(r.seed);
  b.setOffset(r.offset);
  b.setSubsequence(r.subsequence);
  NDT_SET_TEXT(b, Ordering, r.ordering);
  b.setDeviceDependent(r.device_dependent);
}

void WriteSummary(const NumericSummary& s, wire::NumericSummary::Builder b) {
  b.setCount(s.count);
  b.setMin(s.min);
  b.setMax(s.max);
  b.setSum(s.sum);
  b.setNanCount(s.nan_count);
  b.setInfCount(s.inf_count);
}

void WriteBufferDigest(const BufferDigest& d, wire::BufferDigest::Builder b) {
  NDT_SET_TEXT(b, Role, d.role);
  if (d.pointer != DevicePointer{}) WritePointer(d.pointer, b.initPointer());
  b.setBytes(d.bytes);
  b.setDigestLo(d.digest.lo);
  b.setDigestHi(d.digest.hi);
  b.setDtype(ToWire<wire::DType>(d.dtype));
  if (d.summary != NumericSummary{}) WriteSummary(d.summary, b.initSummary());
  b.setSuballocated(d.suballocated);
}

template <typename ListBuilder>
void WriteBufferDigests(const std::vector<BufferDigest>& digests, ListBuilder list) {
  for (size_t i = 0; i < digests.size(); ++i) {
    WriteBufferDigest(digests[i], list[static_cast<unsigned>(i)]);
  }
}

template <typename ListBuilder>
void WriteTexts(const std::vector<std::string>& texts, ListBuilder list) {
  for (size_t i = 0; i < texts.size(); ++i) list.set(static_cast<unsigned>(i), AsText(texts[i]));
}

// An op's numbers (its data section: where they are set among the pointers changes no byte),
// from an OpRecord or an OpView.
template <typename Op>
void WriteOpNumbers(const Op& r, uint32_t device_ordinal, wire::OpRecord::Builder b) {
  b.setSequence(r.sequence);
  b.setThreadId(r.thread_id);
  b.setStreamId(r.stream_id);
  b.setKind(ToWire<wire::OpKind>(r.kind));
  b.setStatus(r.status);
  b.setStartNs(r.start_ns);
  b.setEndNs(r.end_ns);
  b.setModuleId(r.module_id);
  b.setDeviceOrdinal(device_ordinal);
  b.setNvtxRangeId(r.nvtx_range_id);
}

void Write(const OpRecord& r, wire::Record::Builder root) {
  auto b = root.initOp();
  WriteOpNumbers(r, r.device_ordinal, b);
  NDT_SET_TEXT(b, Name, r.name);
  if (!r.args.empty()) {
    auto list = b.initArgs(static_cast<unsigned>(r.args.size()));
    for (size_t i = 0; i < r.args.size(); ++i) {
      WriteArgument(r.args[i], list[static_cast<unsigned>(i)]);
    }
  }
  if (r.algorithm) WriteChoice(*r.algorithm, b.initAlgorithm());
  if (r.rng) WriteRng(*r.rng, b.initRng());
  if (!r.inputs.empty()) {
    WriteBufferDigests(r.inputs, b.initInputs(static_cast<unsigned>(r.inputs.size())));
  }
  if (!r.outputs.empty()) {
    WriteBufferDigests(r.outputs, b.initOutputs(static_cast<unsigned>(r.outputs.size())));
  }
}

// The same op record from an OpView: what Write(OpRecord) does with the OpRecord holding these
// values, its pointers made in the same order (so the same bytes).
void Write(const OpView& r, wire::Record::Builder root) {
  auto b = root.initOp();
  WriteOpNumbers(r, 0, b);
  if (r.name[0] != '\0') b.setName(r.name);
  const size_t count = r.arg_count + (r.inside != 0 ? 1 : 0);
  if (count != 0) {
    auto list = b.initArgs(static_cast<unsigned>(count));
    for (size_t i = 0; i < r.arg_count; ++i) {
      const OpView::Arg& a = r.args[i];
      auto w = list[static_cast<unsigned>(i)];
      if (a.name[0] != '\0') w.setName(a.name);
      switch (a.type) {
        case OpView::Arg::Type::kUnsigned:
          w.setUnsigned(a.a);
          break;
        case OpView::Arg::Type::kSigned:
          w.setSigned(static_cast<int64_t>(a.a));
          break;
        case OpView::Arg::Type::kPointer:
          WritePointer(DevicePointer{a.a, a.b, a.c}, w.initPointer());
          break;
        case OpView::Arg::Type::kDims: {
          auto dims = w.initDims(3);
          dims.set(0, static_cast<int64_t>(a.a));
          dims.set(1, static_cast<int64_t>(a.b));
          dims.set(2, static_cast<int64_t>(a.c));
          break;
        }
        case OpView::Arg::Type::kBytes:
          w.setBytes(capnp::Data::Reader(r.bytes + a.a, a.b));
          break;
      }
    }
    if (r.inside != 0) {
      auto w = list[static_cast<unsigned>(r.arg_count)];
      w.setName("insideOp");
      w.setUnsigned(r.inside);
    }
  }
}

void Write(const AllocationRecord& r, wire::Record::Builder root) {
  auto b = root.initAllocation();
  b.setAllocationId(r.allocation_id);
  b.setEvent(ToWire<wire::AllocationEvent>(r.event));
  b.setBytes(r.bytes);
  NDT_SET_TEXT(b, Api, r.api);
  b.setDeviceOrdinal(r.device_ordinal);
  b.setRawAddress(r.raw_address);
  b.setBeforeOp(r.before_op);
  b.setStreamId(r.stream_id);
}

void Write(const ModuleLoadRecord& r, wire::Record::Builder root) {
  auto b = root.initModuleLoad();
  b.setModuleId(r.module_id);
  NDT_SET_TEXT(b, Api, r.api);
  b.setImageBytes(r.image_bytes);
  b.setDigestLo(r.digest.lo);
  b.setDigestHi(r.digest.hi);
  if (!r.kernels.empty()) {
    WriteTexts(r.kernels, b.initKernels(static_cast<unsigned>(r.kernels.size())));
  }
}

void Write(const NvtxRangeRecord& r, wire::Record::Builder root) {
  auto b = root.initNvtxRange();
  b.setThreadId(r.thread_id);
  b.setPush(r.push);
  NDT_SET_TEXT(b, Name, r.name);
  b.setBeforeOp(r.before_op);
  b.setTimeNs(r.time_ns);
  b.setKind(static_cast<wire::NvtxEvent>(r.kind));
  b.setRangeId(r.range_id);
  b.setParentId(r.parent_id);
  NDT_SET_TEXT(b, Domain, r.domain);
  b.setCategory(r.category);
}

void Write(const PythonStackRecord& r, wire::Record::Builder root) {
  auto b = root.initPythonStack();
  b.setOpSequence(r.op_sequence);
  b.setThreadId(r.thread_id);
  b.setLaneStream(r.lane_stream);
  b.setLaneIndex(r.lane_index);
  b.setStatus(ToWire<wire::PythonStackStatus>(r.status));
  if (!r.frames.empty()) {
    auto list = b.initFrames(static_cast<unsigned>(r.frames.size()));
    for (size_t i = 0; i < r.frames.size(); ++i) {
      auto fb = list[static_cast<unsigned>(i)];
      NDT_SET_TEXT(fb, File, r.frames[i].file);
      fb.setLine(r.frames[i].line);
      NDT_SET_TEXT(fb, Function, r.frames[i].function);
    }
  }
  NDT_SET_TEXT(b, Detail, r.detail);
  NDT_SET_TEXT(b, Python, r.python);
}

void Write(const PolicyDecisionRecord& r, wire::Record::Builder root) {
  auto b = root.initPolicyDecision();
  b.setOpSequence(r.op_sequence);
  NDT_SET_TEXT(b, Library, r.library);
  NDT_SET_TEXT(b, Action, r.action);
  if (r.from_choice) WriteChoice(*r.from_choice, b.initFromChoice());
  if (r.to_choice) WriteChoice(*r.to_choice, b.initToChoice());
  b.setApplied(r.applied);
}

void Write(const TracerNote& r, wire::Record::Builder root) {
  auto b = root.initNote();
  b.setSeverity(ToWire<wire::Severity>(r.severity));
  NDT_SET_TEXT(b, Text, r.text);
  b.setBeforeOp(r.before_op);
  b.setTimeNs(r.time_ns);
}

void Write(const DroppedRecords& r, wire::Record::Builder root) {
  auto b = root.initDropped();
  b.setWriterId(r.writer_id);
  b.setRecords(r.records);
  b.setBytes(r.bytes);
  NDT_SET_TEXT(b, Reason, r.reason);
}

void Write(const StateDigestRecord& r, wire::Record::Builder root) {
  auto b = root.initStateDigest();
  b.setAfterOp(r.after_op);
  NDT_SET_TEXT(b, Reason, r.reason);
  if (!r.allocations.empty()) {
    WriteBufferDigests(r.allocations,
                       b.initAllocations(static_cast<unsigned>(r.allocations.size())));
  }
  b.setTimeNs(r.time_ns);
}

void Write(const GpuActivityRecord& r, wire::Record::Builder root) {
  auto b = root.initGpuActivity();
  b.setKind(static_cast<wire::GpuActivityKind>(r.kind));
  b.setHasOp(r.op_sequence.has_value());
  b.setOpSequence(r.op_sequence.value_or(0));
  b.setHasLibraryOp(r.library_op_sequence.has_value());
  b.setLibraryOpSequence(r.library_op_sequence.value_or(0));
  b.setStartNs(r.start_ns);
  b.setEndNs(r.end_ns);
  b.setDeviceStream(r.device_stream);
  b.setNdtraceOwn(r.ndtrace_own);
}

void WriteHeader(const TraceHeader& h, wire::TraceHeader::Builder b) {
  b.setFormatVersion(h.format_version);
  NDT_SET_TEXT(b, ToolVersion, h.tool_version);
  if (!h.command_line.empty()) {
    WriteTexts(h.command_line, b.initCommandLine(static_cast<unsigned>(h.command_line.size())));
  }
  NDT_SET_TEXT(b, Host, h.host);
  b.setPid(h.pid);
  b.setRank(h.rank);
  b.setStartUnixNs(h.start_unix_ns);
  if (!h.gpus.empty()) {
    auto list = b.initGpus(static_cast<unsigned>(h.gpus.size()));
    for (size_t i = 0; i < h.gpus.size(); ++i) {
      const GpuInfo& g = h.gpus[i];
      auto gb = list[static_cast<unsigned>(i)];
      gb.setOrdinal(g.ordinal);
      NDT_SET_TEXT(gb, Name, g.name);
      if (!g.uuid.empty()) gb.setUuid(AsData(g.uuid));
      gb.setCcMajor(g.cc_major);
      gb.setCcMinor(g.cc_minor);
      gb.setSmCount(g.sm_count);
      gb.setMemoryBytes(g.memory_bytes);
      gb.setSimulated(g.simulated);
    }
  }
  auto v = b.initVersions();
  v.setDriver(h.versions.driver);
  v.setRuntime(h.versions.runtime);
  v.setCudnn(h.versions.cudnn);
  v.setCublas(h.versions.cublas);
  v.setNccl(h.versions.nccl);
  v.setCurand(h.versions.curand);
  if (!h.environment.empty()) {
    auto list = b.initEnvironment(static_cast<unsigned>(h.environment.size()));
    for (size_t i = 0; i < h.environment.size(); ++i) {
      NDT_SET_TEXT(list[static_cast<unsigned>(i)], Name, h.environment[i].name);
      NDT_SET_TEXT(list[static_cast<unsigned>(i)], Value, h.environment[i].value);
    }
  }
  b.setPolicy(ToWire<wire::Policy>(h.policy));
  NDT_SET_TEXT(b, PinnedFrom, h.pinned_from);
  if (!h.notes.empty()) WriteTexts(h.notes, b.initNotes(static_cast<unsigned>(h.notes.size())));
  if (!h.inputs.empty()) {
    auto list = b.initInputs(static_cast<unsigned>(h.inputs.size()));
    for (size_t i = 0; i < h.inputs.size(); ++i) {
      auto fb = list[static_cast<unsigned>(i)];
      NDT_SET_TEXT(fb, Path, h.inputs[i].path);
      fb.setBytes(h.inputs[i].bytes);
      fb.setDigestLo(h.inputs[i].digest_lo);
      fb.setDigestHi(h.inputs[i].digest_hi);
    }
  }
  NDT_SET_TEXT(b, Python, h.python);
}

#undef NDT_SET_TEXT

// First segment of every message built on this thread. Zero-initialised (static storage);
// MallocMessageBuilder re-zeroes what it used when it is destroyed.
constexpr size_t kScratchWords = 1024;
alignas(8) thread_local uint64_t scratch[kScratchWords];
// Guards against reentrant use of `scratch` on one thread (e.g. from a signal handler).
thread_local bool scratch_in_use = false;

// Builds a message with `fill(builder)` and appends its frame to `out`. Small messages are
// built in a per-thread scratch segment, so the common record costs no allocation beyond
// the growth of `out`. Returns false, leaving `out` unchanged, when the payload would exceed
// kMaxRecordWords or Cap'n Proto refuses the content (e.g. a list longer than 2^29).
template <typename Fill>
bool AppendFrame(uint32_t record_type, const Fill& fill, std::string* out) {
  const size_t old_size = out->size();
  try {
    const bool use_scratch = !scratch_in_use;
    kj::ArrayPtr<capnp::word> first_segment;
    if (use_scratch) {
      scratch_in_use = true;
      first_segment = kj::arrayPtr(reinterpret_cast<capnp::word*>(scratch), kScratchWords);
    }
    struct ScratchRelease {
      bool active;
      ~ScratchRelease() {
        if (active) scratch_in_use = false;
      }
    } release{use_scratch};
    // Declared after `release`: the builder re-zeroes the scratch before it is released.
    std::optional<capnp::MallocMessageBuilder> builder;
    if (use_scratch) {
      builder.emplace(first_segment);
    } else {
      builder.emplace();
    }
    capnp::MallocMessageBuilder& message = *builder;
    fill(message);

    // Cap'n Proto's standard framing (what capnp::writeMessage writes), copied directly: the
    // segment table (segment count - 1, then each segment's size in words, as u32s, padded to a
    // word), then the segments. Most records are one segment: one table word.
    const auto segments = message.getSegmentsForOutput();
    const size_t table_words = segments.size() / 2 + 1;
    size_t payload_words = table_words;
    for (const auto& segment : segments) payload_words += segment.size();
    if (payload_words > kMaxRecordWords) return false;
    out->resize(old_size + 8 * (1 + payload_words));
    char* frame = out->data() + old_size;
    StoreLe32(frame, static_cast<uint32_t>(payload_words));
    StoreLe32(frame + 4, record_type);
    char* table = frame + 8;
    std::memset(table, 0, table_words * 8);
    StoreLe32(table, static_cast<uint32_t>(segments.size() - 1));
    char* at = table + table_words * 8;
    for (size_t i = 0; i < segments.size(); ++i) {
      StoreLe32(table + 4 * (i + 1), static_cast<uint32_t>(segments[i].size()));
      std::memcpy(at, segments[i].begin(), segments[i].size() * 8);
      at += segments[i].size() * 8;
    }
    return true;
  } catch (const kj::Exception&) {
    out->resize(old_size);
    return false;
  }
}

// ---- Wire -> plain ----------------------------------------------------------------------

std::string FromText(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

std::string FromData(capnp::Data::Reader d) {
  return std::string(reinterpret_cast<const char*>(d.begin()), d.size());
}

// Maps a wire enum to its plain twin; values beyond `count` (written by a newer ndtrace)
// become `unknown`.
template <typename PlainEnum, typename WireEnum>
PlainEnum FromWire(WireEnum value, int count, PlainEnum unknown) {
  const auto raw = static_cast<uint16_t>(value);
  return raw < count ? static_cast<PlainEnum>(raw) : unknown;
}

DevicePointer ReadPointer(wire::DevicePointer::Reader r) {
  return DevicePointer{r.getAllocationId(), r.getOffset(), r.getRawAddress()};
}

// The Read*Into functions decode into an existing struct, reusing its strings' and
// vectors' capacity: the reader decodes millions of records into the same few objects.
void AssignText(capnp::Text::Reader t, std::string* out) { out->assign(t.begin(), t.size()); }

void ReadArgumentInto(wire::Argument::Reader r, Argument* a) {
  AssignText(r.getName(), &a->name);
  switch (r.which()) {
    case wire::Argument::UNSIGNED:
      a->value = r.getUnsigned();
      break;
    case wire::Argument::SIGNED:
      a->value = r.getSigned();
      break;
    case wire::Argument::REAL:
      a->value = r.getReal();
      break;
    case wire::Argument::TEXT:
      if (!std::holds_alternative<std::string>(a->value)) a->value.emplace<std::string>();
      AssignText(r.getText(), &std::get<std::string>(a->value));
      break;
    case wire::Argument::BYTES:
      a->value = Argument::Bytes{FromData(r.getBytes())};
      break;
    case wire::Argument::POINTER:
      a->value = ReadPointer(r.getPointer());
      break;
    case wire::Argument::DIMS: {
      if (!std::holds_alternative<Argument::Dims>(a->value)) a->value.emplace<Argument::Dims>();
      auto& dims = std::get<Argument::Dims>(a->value);
      auto list = r.getDims();
      dims.resize(list.size());
      for (unsigned i = 0; i < list.size(); ++i) dims[i] = list[i];
      break;
    }
    default:  // none, or an alternative added by a newer ndtrace
      a->value = std::monostate{};
      break;
  }
}

void ReadChoiceInto(wire::AlgorithmChoice::Reader r, AlgorithmChoice* c) {
  AssignText(r.getLibrary(), &c->library);
  c->id = r.getId();
  AssignText(r.getName(), &c->name);
  auto knobs = r.getKnobs();
  c->knobs.resize(knobs.size());
  for (unsigned i = 0; i < knobs.size(); ++i) c->knobs[i] = {knobs[i].getType(), knobs[i].getValue()};
  const auto opaque = r.getOpaque();
  c->opaque.assign(reinterpret_cast<const char*>(opaque.begin()), opaque.size());
  c->determinism = FromWire(r.getDeterminism(), 3, Determinism::kUnknown);
  c->source = FromWire(r.getSource(), 6, ChoiceSource::kUnknown);
}

AlgorithmChoice ReadChoice(wire::AlgorithmChoice::Reader r) {
  AlgorithmChoice c;
  ReadChoiceInto(r, &c);
  return c;
}

void ReadRngInto(wire::RngState::Reader r, RngState* s) {
  AssignText(r.getGenerator(), &s->generator);
  s->seed = r.getSeed();
  s->offset = r.getOffset();
  s->subsequence = r.getSubsequence();
  AssignText(r.getOrdering(), &s->ordering);
  s->device_dependent = r.getDeviceDependent();
}

void ReadBufferDigestInto(wire::BufferDigest::Reader r, BufferDigest* d) {
  AssignText(r.getRole(), &d->role);
  d->pointer = ReadPointer(r.getPointer());
  d->bytes = r.getBytes();
  d->digest = Digest{r.getDigestLo(), r.getDigestHi()};
  d->dtype = FromWire(r.getDtype(), 13, DType::kUnknown);
  auto s = r.getSummary();
  d->summary = NumericSummary{s.getCount(), s.getMin(),      s.getMax(),
                              s.getSum(),   s.getNanCount(), s.getInfCount()};
  d->suballocated = r.getSuballocated();
}

template <typename ListReader>
void ReadBufferDigestsInto(ListReader list, std::vector<BufferDigest>* out) {
  out->resize(list.size());
  for (unsigned i = 0; i < list.size(); ++i) ReadBufferDigestInto(list[i], &(*out)[i]);
}

template <typename ListReader>
std::vector<BufferDigest> ReadBufferDigests(ListReader list) {
  std::vector<BufferDigest> out;
  ReadBufferDigestsInto(list, &out);
  return out;
}

template <typename ListReader>
std::vector<std::string> ReadTexts(ListReader list) {
  std::vector<std::string> out;
  out.reserve(list.size());
  for (auto t : list) out.push_back(FromText(t));
  return out;
}

void ReadOpInto(wire::OpRecord::Reader r, OpRecord* op) {
  op->sequence = r.getSequence();
  op->thread_id = r.getThreadId();
  op->stream_id = r.getStreamId();
  op->kind = FromWire(r.getKind(), kOpKindCount, OpKind::kOther);
  AssignText(r.getName(), &op->name);
  auto args = r.getArgs();
  op->args.resize(args.size());
  for (unsigned i = 0; i < args.size(); ++i) ReadArgumentInto(args[i], &op->args[i]);
  if (r.hasAlgorithm()) {
    ReadChoiceInto(r.getAlgorithm(), op->algorithm ? &*op->algorithm : &op->algorithm.emplace());
  } else {
    op->algorithm.reset();
  }
  if (r.hasRng()) {
    ReadRngInto(r.getRng(), op->rng ? &*op->rng : &op->rng.emplace());
  } else {
    op->rng.reset();
  }
  ReadBufferDigestsInto(r.getInputs(), &op->inputs);
  ReadBufferDigestsInto(r.getOutputs(), &op->outputs);
  op->status = r.getStatus();
  op->start_ns = r.getStartNs();
  op->end_ns = r.getEndNs();
  op->module_id = r.getModuleId();
  op->device_ordinal = r.getDeviceOrdinal();
  op->nvtx_range_id = r.getNvtxRangeId();
}

Status ReadAllocation(wire::AllocationRecord::Reader r, AllocationRecord* out) {
  const auto event = static_cast<uint16_t>(r.getEvent());
  if (event > static_cast<uint16_t>(AllocationEvent::kFree)) {
    return Status::Error("record: allocation event " + std::to_string(event) +
                         " is unknown (written by a newer ndtrace?)");
  }
  out->allocation_id = r.getAllocationId();
  out->event = static_cast<AllocationEvent>(event);
  out->bytes = r.getBytes();
  out->api = FromText(r.getApi());
  out->device_ordinal = r.getDeviceOrdinal();
  out->raw_address = r.getRawAddress();
  out->before_op = r.getBeforeOp();
  out->stream_id = r.getStreamId();
  return Status::Ok();
}

ModuleLoadRecord ReadModuleLoad(wire::ModuleLoadRecord::Reader r) {
  ModuleLoadRecord m;
  m.module_id = r.getModuleId();
  m.api = FromText(r.getApi());
  m.image_bytes = r.getImageBytes();
  m.digest = Digest{r.getDigestLo(), r.getDigestHi()};
  m.kernels = ReadTexts(r.getKernels());
  return m;
}

NvtxRangeRecord ReadNvtxRange(wire::NvtxRangeRecord::Reader r) {
  NvtxRangeRecord n;
  n.thread_id = r.getThreadId();
  n.push = r.getPush();
  n.name = FromText(r.getName());
  n.before_op = r.getBeforeOp();
  n.time_ns = r.getTimeNs();
  const auto kind = static_cast<uint16_t>(r.getKind());
  n.kind = kind <= static_cast<uint16_t>(NvtxEvent::kCategoryName)
               ? static_cast<NvtxEvent>(kind)
               : NvtxEvent::kMark;  // a newer kind: shown as a mark
  if (n.kind == NvtxEvent::kPush && !n.push) n.kind = NvtxEvent::kPop;  // older traces
  n.range_id = r.getRangeId();
  n.parent_id = r.getParentId();
  n.domain = FromText(r.getDomain());
  n.category = r.getCategory();
  return n;
}

Status ReadPythonStack(wire::PythonStackRecord::Reader r, PythonStackRecord* out) {
  const auto status = static_cast<uint16_t>(r.getStatus());
  if (status > static_cast<uint16_t>(PythonStackStatus::kFailed)) {
    return Status::Error("record: python stack status " + std::to_string(status) +
                         " is unknown (written by a newer ndtrace?)");
  }
  out->op_sequence = r.getOpSequence();
  out->thread_id = r.getThreadId();
  out->lane_stream = r.getLaneStream();
  out->lane_index = r.getLaneIndex();
  out->status = static_cast<PythonStackStatus>(status);
  auto frames = r.getFrames();
  out->frames.reserve(frames.size());
  for (auto f : frames) {
    out->frames.push_back(
        PythonFrame{FromText(f.getFile()), f.getLine(), FromText(f.getFunction())});
  }
  out->detail = FromText(r.getDetail());
  out->python = FromText(r.getPython());
  return Status::Ok();
}

PolicyDecisionRecord ReadPolicyDecision(wire::PolicyDecisionRecord::Reader r) {
  PolicyDecisionRecord p;
  p.op_sequence = r.getOpSequence();
  p.library = FromText(r.getLibrary());
  p.action = FromText(r.getAction());
  if (r.hasFromChoice()) p.from_choice = ReadChoice(r.getFromChoice());
  if (r.hasToChoice()) p.to_choice = ReadChoice(r.getToChoice());
  p.applied = r.getApplied();
  return p;
}

Status ReadNote(wire::TracerNote::Reader r, TracerNote* out) {
  const auto severity = static_cast<uint16_t>(r.getSeverity());
  if (severity > static_cast<uint16_t>(Severity::kError)) {
    return Status::Error("record: note severity " + std::to_string(severity) +
                         " is unknown (written by a newer ndtrace?)");
  }
  out->severity = static_cast<Severity>(severity);
  out->text = FromText(r.getText());
  out->before_op = r.getBeforeOp();
  out->time_ns = r.getTimeNs();
  return Status::Ok();
}

DroppedRecords ReadDropped(wire::DroppedRecords::Reader r) {
  return DroppedRecords{r.getWriterId(), r.getRecords(), r.getBytes(), FromText(r.getReason())};
}

StateDigestRecord ReadStateDigest(wire::StateDigestRecord::Reader r) {
  StateDigestRecord s;
  s.after_op = r.getAfterOp();
  s.reason = FromText(r.getReason());
  s.allocations = ReadBufferDigests(r.getAllocations());
  s.time_ns = r.getTimeNs();
  return s;
}

Status ReadGpuActivity(wire::GpuActivityRecord::Reader r, GpuActivityRecord* out) {
  GpuActivityRecord& g = *out;
  const auto kind = static_cast<uint16_t>(r.getKind());
  if (kind > static_cast<uint16_t>(GpuActivityKind::kMemset)) {
    return Status::Error("record: GPU activity kind " + std::to_string(kind) +
                         " is unknown (written by a newer ndtrace?)");
  }
  g.kind = static_cast<GpuActivityKind>(kind);
  if (r.getHasOp()) g.op_sequence = r.getOpSequence();
  if (r.getHasLibraryOp()) g.library_op_sequence = r.getLibraryOpSequence();
  g.start_ns = r.getStartNs();
  g.end_ns = r.getEndNs();
  g.device_stream = r.getDeviceStream();
  g.ndtrace_own = r.getNdtraceOwn();
  return Status::Ok();
}

// The op record a caller's Record held when a record of another type replaced it, kept for the
// capacity of its strings and vectors: the next op is decoded into it. (Traces interleave ops
// with NVTX ranges, GPU times and allocations; without it every op after one of them would be
// decoded into fresh strings and vectors.)
thread_local OpRecord t_spare_op;

Status ReadRecord(wire::Record::Reader r, Record* out) {
  if (r.which() != wire::Record::OP) {
    // (A caller that moved the op away left it without capacity: then the spare is kept.)
    auto* op = std::get_if<OpRecord>(out);
    if (op != nullptr && op->args.capacity() >= t_spare_op.args.capacity()) {
      t_spare_op = std::move(*op);
    }
  }
  switch (r.which()) {
    case wire::Record::OP:
      if (!std::holds_alternative<OpRecord>(*out)) out->emplace<OpRecord>(std::move(t_spare_op));
      ReadOpInto(r.getOp(), &std::get<OpRecord>(*out));
      return Status::Ok();
    case wire::Record::ALLOCATION: {
      AllocationRecord a;
      NDT_RETURN_IF_ERROR(ReadAllocation(r.getAllocation(), &a));
      *out = std::move(a);
      return Status::Ok();
    }
    case wire::Record::MODULE_LOAD:
      *out = ReadModuleLoad(r.getModuleLoad());
      return Status::Ok();
    case wire::Record::NVTX_RANGE:
      *out = ReadNvtxRange(r.getNvtxRange());
      return Status::Ok();
    case wire::Record::POLICY_DECISION:
      *out = ReadPolicyDecision(r.getPolicyDecision());
      return Status::Ok();
    case wire::Record::NOTE: {
      TracerNote n;
      NDT_RETURN_IF_ERROR(ReadNote(r.getNote(), &n));
      *out = std::move(n);
      return Status::Ok();
    }
    case wire::Record::DROPPED:
      *out = ReadDropped(r.getDropped());
      return Status::Ok();
    case wire::Record::STATE_DIGEST:
      *out = ReadStateDigest(r.getStateDigest());
      return Status::Ok();
    case wire::Record::PYTHON_STACK: {
      PythonStackRecord p;
      NDT_RETURN_IF_ERROR(ReadPythonStack(r.getPythonStack(), &p));
      *out = std::move(p);
      return Status::Ok();
    }
    case wire::Record::GPU_ACTIVITY: {
      GpuActivityRecord g;
      NDT_RETURN_IF_ERROR(ReadGpuActivity(r.getGpuActivity(), &g));
      *out = g;
      return Status::Ok();
    }
  }
  return Status::Error("record: union member " + std::to_string(static_cast<int>(r.which())) +
                       " is unknown");
}

Status ReadHeader(wire::TraceHeader::Reader r, TraceHeader* out) {
  const auto policy = static_cast<uint16_t>(r.getPolicy());
  if (policy > static_cast<uint16_t>(Policy::kReplayForce)) {
    return Status::Error("record: header policy " + std::to_string(policy) +
                         " is unknown (written by a newer ndtrace?)");
  }
  TraceHeader& h = *out;
  h.format_version = r.getFormatVersion();
  h.tool_version = FromText(r.getToolVersion());
  h.command_line = ReadTexts(r.getCommandLine());
  h.host = FromText(r.getHost());
  h.pid = r.getPid();
  h.rank = r.getRank();
  h.start_unix_ns = r.getStartUnixNs();
  auto gpus = r.getGpus();
  h.gpus.reserve(gpus.size());
  for (auto g : gpus) {
    h.gpus.push_back(GpuInfo{g.getOrdinal(), FromText(g.getName()), FromData(g.getUuid()),
                             g.getCcMajor(), g.getCcMinor(), g.getSmCount(), g.getMemoryBytes(),
                             g.getSimulated()});
  }
  auto v = r.getVersions();
  h.versions = LibraryVersions{v.getDriver(), v.getRuntime(), v.getCudnn(),
                               v.getCublas(), v.getNccl(),    v.getCurand()};
  auto env = r.getEnvironment();
  h.environment.reserve(env.size());
  for (auto e : env) h.environment.push_back(EnvVar{FromText(e.getName()), FromText(e.getValue())});
  h.policy = static_cast<Policy>(policy);
  h.pinned_from = FromText(r.getPinnedFrom());
  h.notes = ReadTexts(r.getNotes());
  auto inputs = r.getInputs();
  h.inputs.reserve(inputs.size());
  for (auto f : inputs) {
    h.inputs.push_back(
        InputFile{FromText(f.getPath()), f.getBytes(), f.getDigestLo(), f.getDigestHi()});
  }
  h.python = FromText(r.getPython());
  return Status::Ok();
}

// Collects, while it lives on this thread's stack, the recoverable exceptions Cap'n Proto
// raises for malformed content instead of letting them be thrown; Cap'n Proto then goes on
// with default values, which the caller discards.
class DecodeErrors final : public kj::ExceptionCallback {
 public:
  void onRecoverableException(kj::Exception&& exception) override {
    if (first_.empty()) first_ = exception.getDescription().cStr();
    if (first_.empty()) first_ = "malformed message";
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

// Validates the frame at words[0..word_count) and hands its message to `read`, which gets a
// capnp::MessageReader and returns a Status. `expected_type` selects which record_type
// values are acceptable: kAnyRecordType a record of the Record union, else that one frame type
// (kHeaderRecordType, kSummaryRecordType). Never throws: Cap'n Proto exceptions become Status.
constexpr uint32_t kAnyRecordType = 0xFFFFFFFF;

template <typename Read>
Status DecodeFrame(const uint64_t* words, size_t word_count, uint32_t expected_type,
                   const Read& read, size_t* consumed) {
  if (word_count < 1) return Status::Error("record: frame prefix missing (0 words left)");
  const auto* prefix = reinterpret_cast<const char*>(words);
  const uint32_t payload_words = LoadLe32(prefix);
  const uint32_t record_type = LoadLe32(prefix + 4);
  if (payload_words > kMaxRecordWords) {
    return Status::Error("record: payload of " + std::to_string(payload_words) +
                         " words exceeds the limit of " + std::to_string(kMaxRecordWords));
  }
  if (payload_words > word_count - 1) {
    return Status::Error("record: payload of " + std::to_string(payload_words) +
                         " words is truncated to " + std::to_string(word_count - 1));
  }
  const bool any = expected_type == kAnyRecordType;
  if (any ? record_type >= std::variant_size_v<Record> : record_type != expected_type) {
    return Status::Error("record: record type " + std::to_string(record_type) + " where " +
                         (any                                  ? "a record"
                          : expected_type == kHeaderRecordType ? "the header"
                                                               : "the writer summary") +
                         " was expected");
  }
  if (payload_words < 1) return Status::Error("record: payload is empty");
  const uint64_t segments =
      uint64_t{LoadLe32(reinterpret_cast<const char*>(words + 1))} + 1;
  if (segments > kMaxSegments) {
    return Status::Error("record: message declares " + std::to_string(segments) +
                         " segments, more than the limit of " + std::to_string(kMaxSegments));
  }
  // The segment table, checked here so Cap'n Proto is never handed one it would refuse:
  // every segment inside the payload, together exactly filling it, the first holding at
  // least the root pointer.
  const uint64_t table_words = segments / 2 + 1;
  if (table_words >= payload_words) {
    return Status::Error("record: segment table of " + std::to_string(segments) +
                         " segments leaves no room in a payload of " +
                         std::to_string(payload_words) + " words");
  }
  const auto* table = reinterpret_cast<const char*>(words + 1);
  uint64_t segment_words = 0;
  for (uint64_t i = 0; i < segments; ++i) {
    const uint32_t size = LoadLe32(table + 4 * (i + 1));
    if (i == 0 && size == 0) return Status::Error("record: first segment is empty");
    segment_words += size;
  }
  if (segment_words != payload_words - table_words) {
    return Status::Error("record: segments of " + std::to_string(segment_words) +
                         " words in a payload of " + std::to_string(payload_words - table_words) +
                         " words after the segment table");
  }
  // Cap'n Proto reports malformed content through kj's exception callback. Recoverable ones
  // (every check of message content) are collected here instead of thrown: an exception
  // thrown inside the shared libcapnp may not be catchable where this code is linked with its
  // own runtime (libndtrace.so: static libstdc++ and libgcc), and would end the host program.
  DecodeErrors errors;
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = 8 * uint64_t{payload_words} + 64;
    options.nestingLimit = kNestingLimit;
    const auto* begin = reinterpret_cast<const capnp::word*>(words + 1);
    capnp::FlatArrayMessageReader message(kj::arrayPtr(begin, payload_words), options);
    if (message.getEnd() != begin + payload_words) {
      return Status::Error("record: message ends " +
                           std::to_string(begin + payload_words - message.getEnd()) +
                           " words before its payload");
    }
    NDT_RETURN_IF_ERROR(read(message, record_type));
  } catch (const kj::Exception& e) {
    return Status::Error("record: " + std::string(e.getDescription().cStr()));
  }
  if (!errors.first().empty()) return Status::Error("record: " + errors.first());
  *consumed = 1 + size_t{payload_words};
  return Status::Ok();
}

}  // namespace

bool AppendRecord(const Record& record, std::string* out) {
  return AppendFrame(
      static_cast<uint32_t>(record.index()),
      [&record](capnp::MessageBuilder& message) {
        auto root = message.initRoot<wire::Record>();
        std::visit([&root](const auto& r) { Write(r, root); }, record);
      },
      out);
}

bool AppendRecord(const OpRecord& op, std::string* out) {
  static_assert(std::is_same_v<std::variant_alternative_t<0, Record>, OpRecord>);
  return AppendFrame(
      0,
      [&op](capnp::MessageBuilder& message) { Write(op, message.initRoot<wire::Record>()); },
      out);
}

bool AppendRecord(const OpView& op, std::string* out) {
  return AppendFrame(
      0, [&op](capnp::MessageBuilder& message) { Write(op, message.initRoot<wire::Record>()); },
      out);
}

bool AppendHeader(const TraceHeader& header, std::string* out) {
  return AppendFrame(
      kHeaderRecordType,
      [&header](capnp::MessageBuilder& message) {
        WriteHeader(header, message.initRoot<wire::TraceHeader>());
      },
      out);
}

bool AppendSummary(const WriterSummary& summary, std::string* out) {
  return AppendFrame(
      kSummaryRecordType,
      [&summary](capnp::MessageBuilder& message) {
        auto w = message.initRoot<wire::WriterSummary>();
        w.setRecords(summary.records);
        w.setOps(summary.ops);
        auto by_type = w.initRecordsByType(static_cast<unsigned>(summary.records_by_type.size()));
        for (size_t i = 0; i < summary.records_by_type.size(); ++i) {
          by_type.set(static_cast<unsigned>(i), summary.records_by_type[i]);
        }
        auto by_kind = w.initOpsByKind(static_cast<unsigned>(summary.ops_by_kind.size()));
        for (size_t i = 0; i < summary.ops_by_kind.size(); ++i) {
          by_kind.set(static_cast<unsigned>(i), summary.ops_by_kind[i]);
        }
        w.setChunks(summary.chunks);
        w.setUncompressedBytes(summary.uncompressed_bytes);
        w.setDroppedRecords(summary.dropped_records);
        w.setDroppedBytes(summary.dropped_bytes);
        w.setOversizedRecords(summary.oversized_records);
        w.setStallNs(summary.stall_ns);
        w.setStalls(summary.stalls);
        w.setBlobs(summary.blobs);
      },
      out);
}

Status DecodeSummary(const uint64_t* words, size_t word_count, WriterSummary* summary,
                     size_t* consumed) {
  return DecodeFrame(
      words, word_count, kSummaryRecordType,
      [summary](capnp::MessageReader& message, uint32_t) {
        auto r = message.getRoot<wire::WriterSummary>();
        WriterSummary decoded;
        decoded.records = r.getRecords();
        decoded.ops = r.getOps();
        // Bounded by the frame (1 MiB) and the traversal limit.
        for (uint64_t n : r.getRecordsByType()) decoded.records_by_type.push_back(n);
        for (uint64_t n : r.getOpsByKind()) decoded.ops_by_kind.push_back(n);
        decoded.chunks = r.getChunks();
        decoded.uncompressed_bytes = r.getUncompressedBytes();
        decoded.dropped_records = r.getDroppedRecords();
        decoded.dropped_bytes = r.getDroppedBytes();
        decoded.oversized_records = r.getOversizedRecords();
        decoded.stall_ns = r.getStallNs();
        decoded.stalls = r.getStalls();
        decoded.blobs = r.getBlobs();
        *summary = std::move(decoded);
        return Status::Ok();
      },
      consumed);
}

Status DecodeRecord(const uint64_t* words, size_t word_count, Record* record, size_t* consumed) {
  return DecodeFrame(
      words, word_count, kAnyRecordType,
      [record](capnp::MessageReader& message, uint32_t record_type) {
        auto root = message.getRoot<wire::Record>();
        const auto which = static_cast<uint32_t>(root.which());
        if (which != record_type) {
          return Status::Error("record: frame says record type " + std::to_string(record_type) +
                               " but the message holds union member " + std::to_string(which));
        }
        // Into *record itself, reusing its strings' and vectors' capacity when it holds the
        // same record type (on failure it is left valid but unspecified, as promised).
        return ReadRecord(root, record);
      },
      consumed);
}

Status PeekRecordType(const uint64_t* words, size_t word_count, uint32_t* record_type,
                      size_t* consumed) {
  if (word_count < 1) return Status::Error("record: frame prefix missing (0 words left)");
  const auto* prefix = reinterpret_cast<const char*>(words);
  const uint32_t payload_words = LoadLe32(prefix);
  *record_type = LoadLe32(prefix + 4);
  if (payload_words > kMaxRecordWords || payload_words > word_count - 1 ||
      *record_type >= std::variant_size_v<Record>) {
    return Status::Error("record: frame prefix out of bounds");  // DecodeRecord says how
  }
  *consumed = size_t{1} + payload_words;
  return Status::Ok();
}

Status DecodeHeader(const uint64_t* words, size_t word_count, TraceHeader* header,
                    size_t* consumed) {
  return DecodeFrame(
      words, word_count, kHeaderRecordType,
      [header](capnp::MessageReader& message, uint32_t) {
        TraceHeader decoded;
        NDT_RETURN_IF_ERROR(ReadHeader(message.getRoot<wire::TraceHeader>(), &decoded));
        *header = std::move(decoded);
        return Status::Ok();
      },
      consumed);
}

}  // namespace ndt::format::codec
