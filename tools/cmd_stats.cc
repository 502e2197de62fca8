// `ndtrace stats`: what a trace holds and how well it compressed, in one pass.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/container.h"
#include "formats/trace_reader.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/record_json.h"
#include "tools/record_text.h"

namespace ndt::tools {
namespace {

struct StatsOptions {
  std::string trace;
  bool json = false;
};

constexpr size_t kTopNames = 20;
// Distinct op names counted one by one; a hostile trace cannot make the table grow beyond.
constexpr size_t kMaxDistinctNames = 1 << 16;
constexpr const char* kOtherNames = "(other names)";

struct TraceStats {
  uint64_t ops = 0;
  uint64_t records = 0;
  std::map<std::string, uint64_t> ops_by_kind;
  std::unordered_map<std::string, uint64_t> ops_by_name;
  std::map<std::string, uint64_t> records_by_type;
  std::map<std::string, uint64_t> chunks_by_kind;
  uint64_t chunks = 0;
  uint64_t record_bytes = 0;           // uncompressed payload of records chunks
  uint64_t records_payload_bytes = 0;  // compressed payload of records chunks
  uint64_t records_chunk_bytes = 0;    // records chunks on disk, headers included
  uint64_t first_start_ns = std::numeric_limits<uint64_t>::max();
  uint64_t last_end_ns = 0;
  uint64_t dropped_records = 0;

  uint64_t duration_ns() const {
    return ops == 0 || last_end_ns < first_start_ns ? 0 : last_end_ns - first_start_ns;
  }
  double compression_ratio() const {
    return records_payload_bytes == 0
               ? 0.0
               : static_cast<double>(record_bytes) / static_cast<double>(records_payload_bytes);
  }
  double bytes_per_op() const {
    return ops == 0 ? 0.0 : static_cast<double>(records_chunk_bytes) / static_cast<double>(ops);
  }
  double record_bytes_per_op() const {
    return ops == 0 ? 0.0 : static_cast<double>(record_bytes) / static_cast<double>(ops);
  }
  // The most frequent names, most frequent first (ties by name).
  std::vector<std::pair<std::string, uint64_t>> TopNames() const {
    std::vector<std::pair<std::string, uint64_t>> names(ops_by_name.begin(), ops_by_name.end());
    std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    if (names.size() > kTopNames) names.resize(kTopNames);
    return names;
  }
};

void Count(const format::Record& record, TraceStats* stats) {
  ++stats->records;
  ++stats->records_by_type[format::RecordTypeName(record)];
  if (const auto* op = std::get_if<format::OpRecord>(&record)) {
    ++stats->ops;
    ++stats->ops_by_kind[format::OpKindName(op->kind)];
    auto name = stats->ops_by_name.find(op->name);
    if (name != stats->ops_by_name.end()) {
      ++name->second;
    } else if (stats->ops_by_name.size() < kMaxDistinctNames) {
      stats->ops_by_name.emplace(op->name, 1);
    } else {
      ++stats->ops_by_name[kOtherNames];
    }
    stats->first_start_ns = std::min(stats->first_start_ns, op->start_ns);
    stats->last_end_ns = std::max(stats->last_end_ns, op->end_ns);
  } else if (const auto* dropped = std::get_if<format::DroppedRecords>(&record)) {
    stats->dropped_records += dropped->records;
  }
}

void CountChunks(const std::vector<format::ChunkInfo>& chunks, TraceStats* stats) {
  for (const format::ChunkInfo& chunk : chunks) {
    ++stats->chunks;
    ++stats->chunks_by_kind[format::ChunkKindName(chunk.kind)];
    if (chunk.kind == format::ChunkKind::kRecords) {
      stats->record_bytes += chunk.uncompressed_size;
      stats->records_payload_bytes += chunk.compressed_size;
      stats->records_chunk_bytes += chunk.end() - chunk.offset;
    }
  }
}

std::string CountsText(const std::map<std::string, uint64_t>& counts) {
  std::string text;
  for (const auto& [name, count] : counts) {
    fmt::format_to(std::back_inserter(text), "{}{} {}", text.empty() ? "" : ", ", name, count);
  }
  return text;
}

std::string StatsText(const std::string& path, const format::TraceReader& reader,
                      const TraceStats& stats) {
  std::string text;
  const auto line = [&text](std::string_view key, std::string_view value) {
    fmt::format_to(std::back_inserter(text), "{:<18}{}\n", key, value);
  };
  line("trace", path);
  line("state", reader.complete() ? "complete" : "incomplete: " + IncompleteText(reader));
  line("file bytes", std::to_string(reader.file_bytes()));
  line("chunks", fmt::format("{} ({})", stats.chunks, CountsText(stats.chunks_by_kind)));
  line("records", fmt::format("{} ({})", stats.records, CountsText(stats.records_by_type)));
  line("ops", std::to_string(stats.ops));
  line("record bytes", fmt::format("{} uncompressed, {} compressed ({:.2f}x)", stats.record_bytes,
                                   stats.records_payload_bytes, stats.compression_ratio()));
  line("bytes per op", fmt::format("{:.1f} in the file, {:.1f} uncompressed", stats.bytes_per_op(),
                                   stats.record_bytes_per_op()));
  line("duration", fmt::format("{:.6f} s (first op start to last op end)",
                               static_cast<double>(stats.duration_ns()) * 1e-9));
  line("truncated tail", fmt::format("{} B", reader.truncated_tail_bytes()));
  line("dropped records", std::to_string(stats.dropped_records));
  line("damage", fmt::format("{} ranges", reader.damage().size()));
  text.append("\nops by kind\n");
  std::vector<std::pair<std::string, uint64_t>> kinds(stats.ops_by_kind.begin(),
                                                      stats.ops_by_kind.end());
  std::stable_sort(kinds.begin(), kinds.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [kind, count] : kinds) {
    fmt::format_to(std::back_inserter(text), "  {:>10}  {}\n", count, kind);
  }
  fmt::format_to(std::back_inserter(text), "\nops by name (top {} of {})\n", kTopNames,
                 stats.ops_by_name.size());
  for (const auto& [name, count] : stats.TopNames()) {
    fmt::format_to(std::back_inserter(text), "  {:>10}  {}\n", count, EscapeControl(name));
  }
  return text;
}

void WriteCounts(const std::map<std::string, uint64_t>& counts, JsonWriter& json) {
  json.BeginObject();
  for (const auto& [name, count] : counts) json.Key(name).Uint(count);
  json.EndObject();
}

std::string StatsJson(const std::string& path, const format::TraceReader& reader,
                      const TraceStats& stats) {
  std::string text;
  JsonWriter json(&text);
  json.BeginObject();
  json.Key("trace").String(path);
  json.Key("complete").Bool(reader.complete());
  json.Key("truncated_tail_bytes").Uint(reader.truncated_tail_bytes());
  json.Key("file_bytes").Uint(reader.file_bytes());
  json.Key("chunks").Uint(stats.chunks);
  json.Key("chunks_by_kind");
  WriteCounts(stats.chunks_by_kind, json);
  json.Key("records").Uint(stats.records);
  json.Key("records_by_type");
  WriteCounts(stats.records_by_type, json);
  json.Key("ops").Uint(stats.ops);
  json.Key("ops_by_kind");
  WriteCounts(stats.ops_by_kind, json);
  json.Key("distinct_op_names").Uint(stats.ops_by_name.size());
  json.Key("ops_by_name").BeginArray();
  for (const auto& [name, count] : stats.TopNames()) {
    json.BeginObject().Key("name").String(name).Key("count").Uint(count).EndObject();
  }
  json.EndArray();
  json.Key("record_bytes").Uint(stats.record_bytes);
  json.Key("records_payload_bytes").Uint(stats.records_payload_bytes);
  json.Key("records_chunk_bytes").Uint(stats.records_chunk_bytes);
  json.Key("compression_ratio").Double(stats.compression_ratio());
  json.Key("bytes_per_op").Double(stats.bytes_per_op());
  json.Key("record_bytes_per_op").Double(stats.record_bytes_per_op());
  json.Key("duration_ns").Uint(stats.duration_ns());
  json.Key("dropped_records").Uint(stats.dropped_records);
  json.Key("damage").Uint(reader.damage().size());
  json.EndObject();
  text.push_back('\n');
  return text;
}

int RunStats(const StatsOptions& options) {
  std::unique_ptr<format::TraceReader> reader = OpenTraceOrReport(options.trace);
  if (reader == nullptr) return kExitUsage;
  TraceStats stats;
  CountChunks(reader->chunks(), &stats);
  reader->ReadAhead(true);
  format::Record record;
  while (reader->Next(&record)) Count(record, &stats);

  StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Open("");
  if (!out.ok()) {
    PrintError(out.status().message());
    return kExitUsage;
  }
  if (options.json) {
    (*out)->Write(StatsJson(options.trace, *reader, stats));
  } else {
    (*out)->Write(StatsText(options.trace, *reader, stats));
  }
  if (Status closed = (*out)->Close(); !closed.ok()) {
    PrintError(closed.message());
    return kExitUsage;
  }
  return ReportTraceState(options.trace, *reader);
}

}  // namespace

Command AddStatsCommand(CLI::App& parent) {
  auto options = std::make_shared<StatsOptions>();
  CLI::App* stats = parent.add_subcommand(
      "stats", "Count a trace's ops, records and chunks, and measure its compression.");
  stats->add_option("TRACE", options->trace, "Trace file to read")->required();
  stats->add_flag("--json", options->json, "One JSON object instead of text");
  stats->footer(kExitCodesHelp);
  return {stats, [options] { return RunStats(*options); }};
}

}  // namespace ndt::tools
