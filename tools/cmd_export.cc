// `ndtrace export`: a trace as one JSON document, or as Chrome trace-event JSON that
// ui.perfetto.dev and chrome://tracing open. Both are streamed: one record in memory at a
// time, plus the set of tracks already named.
//
// Perfetto layout: one process (pid = the traced pid; with --diff, 1 and 2 for the two runs)
// named "ndtrace: <command>"; one
// track per CUDA stream (tid = stream id, named "stream N") holding an "X" event per op;
// one track per host thread (named "thread N") holding NVTX ranges as "B"/"E" events; and
// one "ndtrace" track with tracer notes and state digests as instant events.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "formats/check.h"
#include "formats/trace_reader.h"
#include "replayer/trace_diff.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/record_json.h"
#include "tools/record_text.h"

namespace ndt::tools {
namespace {

struct ExportOptions {
  std::string trace;
  std::string format;
  std::string output;
  std::string diff_with;  // --diff B: both runs on one timeline, the divergence marked
  bool stable = false;
};

constexpr size_t kFlushBytes = 1 << 16;
// Track ids of host threads and of ndtrace's own track, clear of stream ids.
// Viewers read tids as 32-bit ints.
constexpr uint64_t kThreadTidBase = uint64_t{1} << 30;
constexpr uint64_t kNdtraceTid = (uint64_t{1} << 31) - 1;

double Microseconds(uint64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

// {"header": {...}, "records": [...], "end": {...}}, one record per line.
void ExportJson(format::TraceReader& reader, const ExportOptions& options, OutputFile& out) {
  const JsonOptions json_options{.stable = options.stable};
  std::string buffer;
  JsonWriter json(&buffer);
  json.BeginObject().Key("header");
  WriteHeaderJson(reader.header(), json_options, /*type=*/false, json);
  json.Key("records").BeginArray();
  format::Record record;
  while (reader.Next(&record)) {
    buffer.push_back('\n');
    WriteRecordJson(record, json_options, json);
    if (buffer.size() >= kFlushBytes) {
      out.Write(buffer);
      buffer.clear();
    }
  }
  json.EndArray();
  buffer.push_back('\n');
  json.Key("end");
  WriteTraceEndJson(reader, /*type=*/false, json);
  json.EndObject();
  NDT_CHECK(json.done());
  buffer.push_back('\n');
  out.Write(buffer);
}

// Chrome trace-event JSON, one event per line. Holds one or more processes (a diff shows
// both runs, each as its own process).
class PerfettoWriter {
 public:
  explicit PerfettoWriter(OutputFile& out) : out_(out), json_(&buffer_) {
    json_.BeginObject().Key("displayTimeUnit").String("ns").Key("traceEvents").BeginArray();
  }

  // Starts the events of one process. `marked`: the op to flag as the first divergence,
  // with `mark` describing it.
  void BeginProcess(uint32_t pid, const std::string& name, std::optional<uint64_t> marked = {},
                    const std::string& mark = "") {
    pid_ = pid;
    named_tracks_.clear();
    marked_ = marked;
    mark_ = mark;
    BeginEvent("M", 0).Key("name").String("process_name");
    json_.Key("args").BeginObject();
    json_.Key("name").String(name);
    json_.EndObject().EndObject();
  }

  void Add(const format::Record& record) {
    if (const auto* op = std::get_if<format::OpRecord>(&record)) {
      AddOp(*op);
    } else if (const auto* range = std::get_if<format::NvtxRangeRecord>(&record)) {
      const uint64_t tid = (kThreadTidBase + range->thread_id) & 0x7fffffff;
      NameTrack(tid, fmt::format("thread {}", range->thread_id));
      BeginEvent(range->push ? "B" : "E", tid).Key("ts").Double(Microseconds(range->time_ns));
      if (range->push) json_.Key("name").String(range->name);
      EndEvent();
    } else if (const auto* note = std::get_if<format::TracerNote>(&record)) {
      Instant(fmt::format("{}: {}", SeverityName(note->severity), note->text), note->time_ns);
      json_.Key("before_op").Uint(note->before_op);
      EndInstant();
    } else if (const auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      Instant(fmt::format("state after op {}", state->after_op), state->time_ns);
      json_.Key("reason").String(state->reason);
      json_.Key("allocations").Uint(state->allocations.size());
      EndInstant();
    }
  }

  void Finish() {
    json_.EndArray().EndObject();
    NDT_CHECK(json_.done());
    buffer_.push_back('\n');
    out_.Write(buffer_);
    buffer_.clear();
  }

 private:
  void AddOp(const format::OpRecord& op) {
    NameTrack(op.stream_id, fmt::format("stream {}", op.stream_id));
    const TextOptions text_options{.stable = false};
    const uint64_t duration = op.end_ns >= op.start_ns ? op.end_ns - op.start_ns : 0;
    const bool marked = marked_ && *marked_ == op.sequence;
    if (marked) {
      Instant("first divergence: " + mark_, op.start_ns);
      json_.Key("sequence").Uint(op.sequence);
      EndInstant();
    }
    BeginEvent("X", op.stream_id);
    json_.Key("name").String(marked ? "FIRST DIVERGENCE: " + op.name : op.name);
    json_.Key("cat").String(format::OpKindName(op.kind));
    json_.Key("ts").Double(Microseconds(op.start_ns));
    json_.Key("dur").Double(Microseconds(duration));
    json_.Key("args").BeginObject();
    json_.Key("sequence").Uint(op.sequence);
    json_.Key("kind").String(format::OpKindName(op.kind));
    json_.Key("thread").Uint(op.thread_id);
    if (!op.args.empty()) {
      std::string call;
      for (const format::Argument& argument : op.args) {
        if (!call.empty()) call.push_back(' ');
        call.append(ArgumentText(argument, text_options));
      }
      json_.Key("args").String(call);
    }
    if (op.algorithm) json_.Key("algorithm").String(AlgorithmText(*op.algorithm));
    if (op.rng) json_.Key("rng").String(RngText(*op.rng));
    for (const auto& [key, buffers] :
         {std::pair{"inputs", &op.inputs}, std::pair{"outputs", &op.outputs}}) {
      if (buffers->empty()) continue;
      json_.Key(key).BeginArray();
      for (const format::BufferDigest& buffer : *buffers) {
        json_.String(BufferDigestText(buffer, text_options));
      }
      json_.EndArray();
    }
    if (op.status != 0) json_.Key("status").Int(op.status);
    if (marked) json_.Key("divergence").String(mark_);
    json_.EndObject();
    EndEvent();
  }

  // Starts an instant event on the ndtrace track and opens its "args" object.
  void Instant(const std::string& name, uint64_t time_ns) {
    NameTrack(kNdtraceTid, "ndtrace");
    BeginEvent("i", kNdtraceTid).Key("s").String("t").Key("name").String(name);
    json_.Key("ts").Double(Microseconds(time_ns));
    json_.Key("args").BeginObject();
  }
  void EndInstant() {
    json_.EndObject();
    EndEvent();
  }

  // Emits the thread_name metadata event of track `tid` the first time it is used.
  void NameTrack(uint64_t tid, const std::string& name) {
    if (!named_tracks_.insert(tid).second) return;
    BeginEvent("M", tid).Key("name").String("thread_name");
    json_.Key("args").BeginObject().Key("name").String(name).EndObject();
    EndEvent();
  }

  JsonWriter& BeginEvent(const char* phase, uint64_t tid) {
    buffer_.push_back('\n');
    return json_.BeginObject().Key("ph").String(phase).Key("pid").Uint(pid_).Key("tid").Uint(tid);
  }
  void EndEvent() {
    json_.EndObject();
    if (buffer_.size() >= kFlushBytes) {
      out_.Write(buffer_);
      buffer_.clear();
    }
  }

  uint32_t pid_ = 0;
  OutputFile& out_;
  std::string buffer_;
  JsonWriter json_;
  std::set<uint64_t> named_tracks_;
  std::optional<uint64_t> marked_;
  std::string mark_;
};

void ExportPerfetto(format::TraceReader& reader, OutputFile& out) {
  PerfettoWriter writer(out);
  writer.BeginProcess(reader.header().pid,
                      "ndtrace: " + CommandLineText(reader.header().command_line));
  format::Record record;
  while (reader.Next(&record)) writer.Add(record);
  writer.Finish();
}

// Both runs of a diff on one timeline (process 1: run A, process 2: run B; both from their
// trace's start), the first divergent op flagged in each.
void ExportPerfettoDiff(format::TraceReader& a, format::TraceReader& b,
                        const replay::DiffReport& report, OutputFile& out) {
  std::optional<uint64_t> marked_a, marked_b;
  std::string mark;
  if (report.first_divergence) {
    const replay::Divergence& d = *report.first_divergence;
    mark = std::string(replay::DivergenceClassName(d.klass)) + ": " + d.what;
    if (d.klass != replay::DivergenceClass::kUncovered) {
      marked_a = d.op.sequence;
      marked_b = d.sequence_b;
    }
  }
  PerfettoWriter writer(out);
  format::Record record;
  writer.BeginProcess(1, "run A: " + report.path_a, marked_a, mark);
  while (a.Next(&record)) writer.Add(record);
  writer.BeginProcess(2, "run B: " + report.path_b, marked_b, mark);
  while (b.Next(&record)) writer.Add(record);
  writer.Finish();
}

int RunExport(const ExportOptions& options) {
  if (options.stable && options.format != "json") {
    PrintError("--stable applies to --format json only");
    return kExitUsage;
  }
  if (!options.diff_with.empty() && options.format != "perfetto") {
    PrintError("--diff applies to --format perfetto only");
    return kExitUsage;
  }
  std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(options.trace);
  if (reader == nullptr) return kExitUsage;
  StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Open(options.output);
  if (!out.ok()) {
    PrintError(out.status().message());
    return kExitUsage;
  }
  std::unique_ptr<format::TraceReader> other;
  if (!options.diff_with.empty()) {
    other = OpenTraceOrReport(options.diff_with);
    if (other == nullptr) return kExitUsage;
    StatusOr<replay::DiffReport> report = replay::DiffTraces(options.trace, options.diff_with);
    if (!report.ok()) {
      PrintError(report.status().message());
      return kExitUsage;
    }
    ExportPerfettoDiff(*reader, *other, *report, **out);
  } else if (options.format == "json") {
    ExportJson(*reader, options, **out);
  } else {
    ExportPerfetto(*reader, **out);
  }
  if (Status closed = (*out)->Close(); !closed.ok()) {
    PrintError(closed.message());
    return kExitUsage;
  }
  // Both traces were read to their end: the damage of either is reported.
  const int state = ReportTraceState(options.trace, *reader);
  return other ? std::max(state, ReportTraceState(options.diff_with, *other)) : state;
}

}  // namespace

Command AddExportCommand(CLI::App& parent) {
  auto options = std::make_shared<ExportOptions>();
  CLI::App* command = parent.add_subcommand(
      "export", "Convert a trace to JSON, or to a timeline ui.perfetto.dev opens.");
  command->add_option("TRACE", options->trace, "Trace file to read")->required();
  command
      ->add_option("--format", options->format,
                   "json: {\"header\", \"records\", \"end\"}; perfetto: Chrome trace-event JSON")
      ->required()
      ->check(CLI::IsMember({"json", "perfetto"}));
  command->add_option("-o,--output", options->output, "Write to OUT instead of stdout")
      ->type_name("OUT");
  command->add_option("--diff", options->diff_with,
                      "With --format perfetto: put this second run beside TRACE on one timeline "
                      "and flag the first divergent op (as ndtrace diff TRACE B finds it)")
      ->type_name("B");
  command->add_flag("--stable", options->stable,
                    "With --format json: leave out times, host, pid and raw addresses");
  command->footer(kExitCodesHelp);
  return {command, [options] { return RunExport(*options); }};
}

}  // namespace ndt::tools
