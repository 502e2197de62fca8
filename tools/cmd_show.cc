// `ndtrace show`: the header and every record of a trace, as aligned text or JSON Lines.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "formats/nvtx_paths.h"
#include "formats/trace_reader.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/record_json.h"
#include "tools/record_text.h"

namespace ndt::tools {
namespace {

struct ShowOptions {
  std::string trace;
  bool json = false;
  bool stable = false;
  uint64_t from = 0;
  uint64_t limit = std::numeric_limits<uint64_t>::max();
};

// Output is built in a string and written once it holds this much.
constexpr size_t kFlushBytes = 1 << 16;

// The ops [from, end) a user asked for. Metadata belongs to the window by the op it
// precedes or follows; module loads and drop counts always do.
struct Window {
  uint64_t from = 0;
  uint64_t end = std::numeric_limits<uint64_t>::max();

  bool Holds(uint64_t sequence) const { return sequence >= from && sequence < end; }
  bool Holds(const format::Record& record) const {
    if (const auto* op = std::get_if<format::OpRecord>(&record)) return Holds(op->sequence);
    if (const auto* alloc = std::get_if<format::AllocationRecord>(&record)) {
      return Holds(alloc->before_op);
    }
    if (const auto* range = std::get_if<format::NvtxRangeRecord>(&record)) {
      return Holds(range->before_op);
    }
    if (const auto* decision = std::get_if<format::PolicyDecisionRecord>(&record)) {
      return Holds(decision->op_sequence);
    }
    if (const auto* note = std::get_if<format::TracerNote>(&record)) {
      return Holds(note->before_op);
    }
    if (const auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      return Holds(state->after_op);
    }
    return true;
  }
};

std::string ShownPath(const std::string& path, bool stable) {
  // The directory differs between runs (temporary directories); the file name does not.
  return stable ? std::filesystem::path(path).filename().string() : path;
}

int RunShow(const ShowOptions& options) {
  std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(options.trace);
  if (reader == nullptr) return kExitUsage;
  StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Open("");
  if (!out.ok()) {
    PrintError(out.status().message());
    return kExitUsage;
  }

  const TextOptions text_options{.stable = options.stable};
  const JsonOptions json_options{.stable = options.stable};
  std::string buffer;
  JsonWriter json(&buffer);
  if (options.json) {
    WriteHeaderJson(reader->header(), json_options, /*type=*/true, json);
    buffer.push_back('\n');
  } else {
    fmt::format_to(std::back_inserter(buffer), "{:<10}{}\n{:<10}{}\n", "trace",
                   ShownPath(options.trace, options.stable), "state",
                   reader->complete() ? "complete" : "incomplete: " + IncompleteText(*reader));
    AppendHeaderText(reader->header(), text_options, &buffer);
    buffer.push_back('\n');
  }

  // Records come in file order, where several threads' ops interleave chunk by chunk, so
  // the window is by sequence: every op in [from, from + limit), then the metadata right
  // after the last of them (a pop, a state digest).
  Window window;
  window.from = options.from;
  if (options.limit < std::numeric_limits<uint64_t>::max() - options.from) {
    window.end = options.from + options.limit;
  }
  const uint64_t window_ops = window.end - window.from;
  if (options.from != 0) reader->SeekToOp(options.from);
  uint64_t ops_shown = 0;
  format::Record record;
  format::NvtxPaths ranges;  // an op's enclosing NVTX ranges, resolved as it is read
  while (reader->Next(&record)) {
    ranges.Observe(record);
    const auto* op = std::get_if<format::OpRecord>(&record);
    const bool is_op = op != nullptr;
    if (ops_shown == window_ops && (is_op || !window.Holds(record))) break;
    if (!window.Holds(record)) continue;
    if (is_op) ++ops_shown;
    const format::RangeContext context =
        is_op ? ranges.Resolve(op->nvtx_range_id) : format::RangeContext{};
    if (options.json) {
      WriteRecordJson(record, json_options, json, &context);
      buffer.push_back('\n');
    } else {
      AppendRecordText(record, text_options, &buffer);
      AppendRangeContextText(context, text_options, &buffer);
    }
    if (buffer.size() >= kFlushBytes) {
      (*out)->Write(buffer);
      buffer.clear();
    }
  }
  if (options.json) {
    WriteTraceEndJson(*reader, /*type=*/true, json);
    buffer.push_back('\n');
  }
  (*out)->Write(buffer);
  if (Status closed = (*out)->Close(); !closed.ok()) {
    PrintError(closed.message());
    return kExitUsage;
  }
  return ReportTraceState(options.trace, *reader);
}

}  // namespace

Command AddShowCommand(CLI::App& parent) {
  auto options = std::make_shared<ShowOptions>();
  CLI::App* show = parent.add_subcommand("show", "Print a trace's header and records.");
  show->add_option("TRACE", options->trace, "Trace file to read")->required();
  show->add_flag("--json", options->json,
                 "JSON Lines: a header object, one object per record, an end object");
  show->add_flag("--stable", options->stable,
                 "Leave out what differs between identical runs or machines (times, host, "
                 "pid, raw addresses), for golden files and diffs");
  show->add_option("--from", options->from, "Show ops from sequence OP on (and their metadata)")
      ->type_name("OP")
      ->check(WholeNumber(0));
  show->add_option("--limit", options->limit, "Show ops OP to OP+N-1 only")
      ->type_name("N")
      ->check(WholeNumber(1));
  show->footer(kExitCodesHelp);
  return {show, [options] { return RunShow(*options); }};
}

}  // namespace ndt::tools
