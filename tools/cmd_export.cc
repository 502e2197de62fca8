// `ndtrace export`: a trace as one JSON document, or as Chrome trace-event JSON that
// ui.perfetto.dev and chrome://tracing open. Both are streamed: one record in memory at a
// time, plus the set of tracks already named.
//
// Perfetto layout: one process (pid = the traced pid; with --diff, 1 and 2 for the two runs)
// named "ndtrace: <command>"; one
// track per CUDA stream (tid = stream id, named "stream S · host call times") holding an "X"
// event per op, from its API call's start to its return on the host; when the trace has GPU
// times (CUPTI, tracer/gpu_time.h), one track per stream named "stream S · GPU" holding an "X"
// event per kernel, copy and memset with its GPU start and duration (otherwise an instant says
// there are none); one track per host thread (named "thread N") holding NVTX ranges as
// "B"/"E" events; and one "ndtrace" track with tracer notes and state digests as instant
// events.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "formats/check.h"
#include "formats/nvtx_paths.h"
#include "formats/trace_reader.h"
#include "replayer/run_set.h"
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
// GPU tracks count down from below it, one per stream that ran GPU work.
constexpr uint64_t kGpuTidTop = kNdtraceTid - 1;
// Ops remembered to name the GPU work CUPTI reports after them.
constexpr size_t kRecentOps = size_t{1} << 16;

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
  format::NvtxPaths ranges;
  while (reader.Next(&record)) {
    buffer.push_back('\n');
    ranges.Observe(record);
    const auto* op = std::get_if<format::OpRecord>(&record);
    const format::RangeContext context =
        op != nullptr ? ranges.Resolve(op->nvtx_range_id) : format::RangeContext{};
    WriteRecordJson(record, json_options, json, &context);
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
    EndProcess();
    pid_ = pid;
    in_process_ = true;
    gpu_activities_ = 0;
    gpu_tracks_.clear();
    waiting_for_op_.clear();
    waiting_gpu_ = 0;
    recent_ops_.clear();
    recent_order_.clear();
    named_tracks_.clear();
    ranges_ = format::NvtxPaths();
    start_names_.clear();
    marked_ = marked;
    mark_ = mark;
    BeginEvent("M", 0).Key("name").String("process_name");
    json_.Key("args").BeginObject();
    json_.Key("name").String(name);
    json_.EndObject().EndObject();
  }

  void Add(const format::Record& record) {
    if (const auto* op = std::get_if<format::OpRecord>(&record)) {
      AddOp(*op, ranges_.Resolve(op->nvtx_range_id));
    } else if (const auto* activity = std::get_if<format::GpuActivityRecord>(&record)) {
      AddGpuActivity(*activity);
    } else if (const auto* range = std::get_if<format::NvtxRangeRecord>(&record)) {
      ranges_.Observe(*range);
      AddRange(*range);
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
    EndProcess();
    json_.EndArray().EndObject();
    NDT_CHECK(json_.done());
    buffer_.push_back('\n');
    out_.Write(buffer_);
    buffer_.clear();
  }

 private:
  // An NVTX event on its thread's track: push/pop as a "B"/"E" slice, start/end as an async
  // slice (it may end on another thread), a mark as an instant; category names are not drawn.
  void AddRange(const format::NvtxRangeRecord& range) {
    const uint64_t tid = (kThreadTidBase + range.thread_id) & 0x7fffffff;
    const std::string name = format::NvtxPaths::Label(range);
    NameTrack(tid, fmt::format("thread {}", format::ThreadLabel(range.thread_id)));
    switch (range.kind) {
      case format::NvtxEvent::kPush:
        BeginEvent("B", tid).Key("ts").Double(Microseconds(range.time_ns));
        json_.Key("name").String(name);
        if (!range.domain.empty()) json_.Key("cat").String(range.domain);
        break;
      case format::NvtxEvent::kPop:
        BeginEvent("E", tid).Key("ts").Double(Microseconds(range.time_ns));
        break;
      case format::NvtxEvent::kStart:
      case format::NvtxEvent::kEnd:
        BeginEvent(range.kind == format::NvtxEvent::kStart ? "b" : "e", tid)
            .Key("ts")
            .Double(Microseconds(range.time_ns));
        json_.Key("cat").String(range.domain.empty() ? "nvtx" : range.domain);
        json_.Key("id").String(fmt::format("{:#x}", range.range_id));
        json_.Key("name").String(range.kind == format::NvtxEvent::kStart
                                     ? name
                                     : start_names_[range.range_id]);
        if (range.kind == format::NvtxEvent::kStart) start_names_[range.range_id] = name;
        else start_names_.erase(range.range_id);
        break;
      case format::NvtxEvent::kMark:
        BeginEvent("i", tid).Key("s").String("t").Key("name").String(name);
        json_.Key("ts").Double(Microseconds(range.time_ns));
        break;
      case format::NvtxEvent::kCategoryName:
        return;
    }
    EndEvent();
  }

  void AddOp(const format::OpRecord& op, const format::RangeContext& context) {
    NameTrack(op.stream_id, fmt::format("stream {} · host call times", format::StreamLabel(op.stream_id)));
    recent_ops_[op.sequence] = {op.stream_id, op.name};
    recent_order_.push_back(op.sequence);
    if (recent_order_.size() > kRecentOps) {
      recent_ops_.erase(recent_order_.front());
      recent_order_.pop_front();
    }
    if (const auto waiting = waiting_for_op_.find(op.sequence); waiting != waiting_for_op_.end()) {
      for (const format::GpuActivityRecord& activity : waiting->second) {
        EmitGpuActivity(activity, StreamGpuTrack(op.stream_id), &op.name);
      }
      waiting_gpu_ -= waiting->second.size();
      waiting_for_op_.erase(waiting);
    }
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
    if (!context.empty()) WriteRangeContextJson(context, json_);
    if (marked) json_.Key("divergence").String(mark_);
    json_.EndObject();
    EndEvent();
  }

  // A kernel, copy or memset as the GPU ran it, on the GPU track of the stream of the op that
  // started it. CUPTI delivers it after its op most of the time but not always (another
  // thread's records may land first): one whose op is not seen yet waits for it (bounded).
  void AddGpuActivity(const format::GpuActivityRecord& activity) {
    ++gpu_activities_;
    // Its own op (a launch, copy, memset), else the library op whose kernel it is.
    const std::optional<uint64_t> owner =
        activity.op_sequence ? activity.op_sequence : activity.library_op_sequence;
    if (!owner) {
      EmitGpuActivity(activity,
                      activity.ndtrace_own ? "ndtrace's own GPU work (digests, copies)"
                                           : "GPU work of no recorded op",
                      nullptr);
      return;
    }
    const auto op = recent_ops_.find(*owner);
    if (op != recent_ops_.end()) {
      EmitGpuActivity(activity, StreamGpuTrack(op->second.stream_id), &op->second.name);
    } else if (waiting_gpu_ < kRecentOps) {
      waiting_for_op_[*owner].push_back(activity);
      ++waiting_gpu_;
    } else {
      EmitGpuActivity(activity, DeviceGpuTrack(activity), nullptr);
    }
  }

  static std::string StreamGpuTrack(uint32_t stream_id) {
    return fmt::format("stream {} · GPU", format::StreamLabel(stream_id));
  }
  static std::string DeviceGpuTrack(const format::GpuActivityRecord& activity) {
    return fmt::format("device stream {} · GPU", activity.device_stream);
  }

  void EmitGpuActivity(const format::GpuActivityRecord& activity, const std::string& track,
                       const std::string* op_name) {
    auto [it, added] = gpu_tracks_.try_emplace(track, kGpuTidTop - gpu_tracks_.size());
    NameTrack(it->second, track);
    BeginEvent("X", it->second);
    const char* kind = format::GpuActivityKindName(activity.kind);
    json_.Key("name").String(op_name != nullptr ? *op_name : kind);
    json_.Key("cat").String(std::string("gpu_") + kind);
    json_.Key("ts").Double(Microseconds(activity.start_ns));
    json_.Key("dur").Double(
        Microseconds(activity.end_ns >= activity.start_ns ? activity.end_ns - activity.start_ns : 0));
    json_.Key("args").BeginObject();
    if (activity.op_sequence) json_.Key("op").Uint(*activity.op_sequence);
    if (activity.library_op_sequence) json_.Key("library_op").Uint(*activity.library_op_sequence);
    json_.Key("device_stream").Uint(activity.device_stream);
    json_.EndObject();
    EndEvent();
  }

  // Says, at the end of a process with no GPU activity, that its times are host times.
  void EndProcess() {
    if (!in_process_) return;
    in_process_ = false;
    for (const auto& [sequence, activities] : waiting_for_op_) {  // their ops never came
      for (const format::GpuActivityRecord& activity : activities) {
        EmitGpuActivity(activity, DeviceGpuTrack(activity), nullptr);
      }
    }
    waiting_for_op_.clear();
    waiting_gpu_ = 0;
    if (gpu_activities_ != 0) return;
    Instant("no GPU times in this trace (recorded without CUPTI, or with --no-gpu-time): the "
            "stream tracks show host API call times, not GPU work",
            0);
    EndInstant();
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
  format::NvtxPaths ranges_;  // this process's open NVTX ranges
  std::map<uint64_t, std::string> start_names_;  // open start/end ranges, for their end event
  std::optional<uint64_t> marked_;
  std::string mark_;
  bool in_process_ = false;
  uint64_t gpu_activities_ = 0;
  std::map<std::string, uint64_t> gpu_tracks_;  // track name -> tid
  struct OpSeen {
    uint32_t stream_id = 0;
    std::string name;
  };
  std::unordered_map<uint64_t, OpSeen> recent_ops_;  // by sequence, the last kRecentOps
  std::deque<uint64_t> recent_order_;
  std::unordered_map<uint64_t, std::vector<format::GpuActivityRecord>> waiting_for_op_;
  size_t waiting_gpu_ = 0;
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
// Both runs on one timeline, every process of each (run_set.h): for the i-th pair, process 2i+1
// is run A's and 2i+2 run B's, all from their trace's start, the first divergent op flagged in
// each; then the processes present in one run only. Returns the worst trace state (damage).
int ExportPerfettoDiff(const ExportOptions& options, const replay::RunDiff& diff, OutputFile& out) {
  PerfettoWriter writer(out);
  uint32_t pid = 0;
  int state = kExitOk;
  const auto add = [&](const std::string& path, const std::string& name,
                       std::optional<uint64_t> marked, const std::string& mark) {
    std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(path);
    if (reader == nullptr) {
      state = std::max(state, static_cast<int>(kExitUsage));
      return;
    }
    writer.BeginProcess(++pid, name, marked, mark);
    reader->ReadAhead(true);
    format::Record record;
    while (reader->Next(&record)) writer.Add(record);
    state = std::max(state, ReportTraceState(path, *reader));
  };
  for (const auto& [key, report] : diff.processes) {
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
    const std::string process = diff.single() ? std::string() : " (" + key + ")";
    add(report.path_a, "run A" + process + ": " + report.path_a, marked_a, mark);
    add(report.path_b, "run B" + process + ": " + report.path_b, marked_b, mark);
  }
  for (const auto& [run, path, keys] :
       {std::tuple{"A", options.trace, &diff.only_in_a}, {"B", options.diff_with, &diff.only_in_b}}) {
    if (keys->empty()) continue;
    StatusOr<std::vector<replay::ProcessTrace>> traces = replay::FindProcessTraces(path);
    if (!traces.ok()) continue;
    for (const replay::ProcessTrace& trace : *traces) {
      if (std::find(keys->begin(), keys->end(), trace.key) == keys->end()) continue;
      add(trace.path, std::string("run ") + run + " only (" + trace.key + "): " + trace.path,
          std::nullopt, "");
    }
  }
  writer.Finish();
  return state;
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
  const auto open_output = [&]() -> std::unique_ptr<OutputFile> {
    StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Open(options.output);
    if (!out.ok()) {
      PrintError(out.status().message());
      return nullptr;
    }
    return std::move(out).value();
  };
  if (!options.diff_with.empty()) {
    StatusOr<replay::RunDiff> diff = replay::DiffRuns(options.trace, options.diff_with);
    if (!diff.ok()) {
      PrintError(diff.status().message());
      return kExitUsage;
    }
    std::unique_ptr<OutputFile> out = open_output();
    if (out == nullptr) return kExitUsage;
    const int state = ExportPerfettoDiff(options, *diff, *out);
    if (Status closed = out->Close(); !closed.ok()) {
      PrintError(closed.message());
      return kExitUsage;
    }
    return state;
  }
  std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(options.trace);
  if (reader == nullptr) return kExitUsage;
  std::unique_ptr<OutputFile> out = open_output();
  if (out == nullptr) return kExitUsage;
  reader->ReadAhead(true);
  if (options.format == "json") {
    ExportJson(*reader, options, *out);
  } else {
    ExportPerfetto(*reader, *out);
  }
  if (Status closed = out->Close(); !closed.ok()) {
    PrintError(closed.message());
    return kExitUsage;
  }
  return ReportTraceState(options.trace, *reader);
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
