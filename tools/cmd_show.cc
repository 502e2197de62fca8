// `ndtrace show`: the header and every record of a trace, as aligned text or JSON Lines, ops in
// op order. On a terminal, text lines are cut to its width (--wide prints them whole).
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

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
  bool wide = false;
};

// Records held to put ops in op order: threads' ops interleave chunk by chunk in the file, each
// thread's in order. A record further out of order than this is shown where it was read.
constexpr size_t kReorderRecords = size_t{1} << 14;

// Where a record goes in op order: an op at its sequence; metadata before the op it precedes
// (allocations, NVTX events, notes: `before_op`), or after the op it is about (decisions,
// Python stacks, GPU times; a state digest after `after_op`); module loads, drop counts and GPU
// work of no op after the last op read before them (before the first op when none was). Ties
// keep file order.
struct Placed {
  uint64_t sequence = 0;
  int rank = 0;  // 0 before the op, 1 the op, 2 about it, 3 a state digest after it
  uint64_t read = 0;
  format::Record record;
  format::RangeContext context;
  bool operator>(const Placed& other) const {
    return std::tie(sequence, rank, read) > std::tie(other.sequence, other.rank, other.read);
  }
};

std::pair<uint64_t, int> PlaceOf(const format::Record& record, std::optional<uint64_t> last_op,
                                 uint64_t first) {
  if (const auto* op = std::get_if<format::OpRecord>(&record)) return {op->sequence, 1};
  if (const auto* alloc = std::get_if<format::AllocationRecord>(&record)) return {alloc->before_op, 0};
  if (const auto* range = std::get_if<format::NvtxRangeRecord>(&record)) return {range->before_op, 0};
  if (const auto* note = std::get_if<format::TracerNote>(&record)) return {note->before_op, 0};
  if (const auto* decision = std::get_if<format::PolicyDecisionRecord>(&record)) {
    return {decision->op_sequence, 2};
  }
  if (const auto* stack = std::get_if<format::PythonStackRecord>(&record)) return {stack->op_sequence, 2};
  if (const auto* activity = std::get_if<format::GpuActivityRecord>(&record)) {
    const std::optional<uint64_t> owner =
        activity->op_sequence ? activity->op_sequence : activity->library_op_sequence;
    if (owner) return {*owner, 2};
  } else if (const auto* state = std::get_if<format::StateDigestRecord>(&record)) {
    return {state->after_op, 3};
  }
  return last_op ? std::pair{*last_op, 2} : std::pair{first, 0};
}

// The width to cut text lines to: the terminal's when standard output is one (else COLUMNS, else
// 120); 0 (whole lines) when it is not a terminal.
size_t TerminalWidth() {
  if (!::isatty(STDOUT_FILENO)) return 0;
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr && std::atoi(columns) > 0) {
    return static_cast<size_t>(std::atoi(columns));
  }
  return 120;
}

// `text` (whole lines) with every line longer than `width` columns cut to it, "…" marking the
// cut. Counts UTF-8 characters, never splits one.
std::string CutLines(const std::string& text, size_t width) {
  if (width == 0) return text;
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    size_t columns = 0, at = start;
    while (at < end && columns + 1 < width) {
      ++at;
      while (at < end && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      ++columns;
    }
    if (at < end) {
      size_t rest = at, more = 0;  // one column left: the line fits if one character is left
      while (rest < end && more < 2) {
        ++rest;
        while (rest < end && (static_cast<unsigned char>(text[rest]) & 0xC0) == 0x80) ++rest;
        ++more;
      }
      if (more == 1) at = end;
    }
    out.append(text, start, at - start);
    if (at < end) out += "…";
    out.push_back('\n');
    start = end + 1;
  }
  return out;
}

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
  const size_t width = options.json || options.wide ? 0 : TerminalWidth();
  const JsonOptions json_options{.stable = options.stable};
  std::string buffer;
  JsonWriter json(&buffer);
  if (options.json) {
    WriteHeaderJson(reader->header(), json_options, /*type=*/true, json);
    buffer.push_back('\n');
  } else {
    std::string header;
    fmt::format_to(std::back_inserter(header), "{:<10}{}\n{:<10}{}\n", "trace",
                   ShownPath(options.trace, options.stable), "state",
                   reader->complete() ? "complete" : "incomplete: " + IncompleteText(*reader));
    AppendHeaderText(reader->header(), text_options, &header);
    buffer += CutLines(header, width);
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
  const auto show = [&](const Placed& placed) {
    if (options.json) {
      WriteRecordJson(placed.record, json_options, json, &placed.context);
      buffer.push_back('\n');
    } else {
      std::string text;
      AppendRecordText(placed.record, text_options, &text);
      AppendRangeContextText(placed.context, text_options, &text);
      buffer += CutLines(text, width);
    }
    if (buffer.size() >= kFlushBytes) {
      (*out)->Write(buffer);
      buffer.clear();
    }
  };
  std::priority_queue<Placed, std::vector<Placed>, std::greater<>> held;
  uint64_t ops_read = 0, read = 0;
  std::optional<uint64_t> last_op;  // the last op read
  format::Record record;
  format::NvtxPaths ranges;  // an op's enclosing NVTX ranges, resolved as it is read
  while (reader->Next(&record)) {
    ranges.Observe(record);
    const auto* op = std::get_if<format::OpRecord>(&record);
    const bool is_op = op != nullptr;
    if (ops_read == window_ops && (is_op || !window.Holds(record))) break;
    if (!window.Holds(record)) continue;
    Placed placed;
    std::tie(placed.sequence, placed.rank) = PlaceOf(record, last_op, options.from);
    if (is_op) {
      ++ops_read;
      last_op = op->sequence;
      placed.context = ranges.Resolve(op->nvtx_range_id);
    }
    placed.read = read++;
    placed.record = std::move(record);
    held.push(std::move(placed));
    if (held.size() > kReorderRecords) {
      show(held.top());
      held.pop();
    }
  }
  while (!held.empty()) {
    show(held.top());
    held.pop();
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
  show->add_flag("--wide", options->wide,
                 "Print every line whole (on a terminal, lines are cut to its width; piped "
                 "output is always whole)");
  show->footer(kExitCodesHelp);
  return {show, [options] { return RunShow(*options); }};
}

}  // namespace ndt::tools
