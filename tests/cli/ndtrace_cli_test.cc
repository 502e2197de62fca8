// The `ndtrace` command line as a user meets it: run as a child process on synthetic traces
// (written here through the writer API), asserting exit codes, stdout and stderr.
//
// NDT_UPDATE_GOLDEN=1 rewrites tests/data/golden/*.txt instead of comparing with them.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "tools/synthetic_trace.h"
#include "support/temp_dir.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using ndt::format::TraceReader;
using ndt::format::TraceWriter;
using ndt::format::WriterOptions;
using ndt::tools::SyntheticOptions;

using ndt::testing::TempDir;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `program args...` with stdout and stderr captured to files in `dir`.
RunResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                     const TempDir& dir) {
  const std::string out_path = (dir / "stdout.txt").string();
  const std::string err_path = (dir / "stderr.txt").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<std::string> words = {program};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(spawned == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  RunResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  return result;
}

RunResult Ndtrace(const std::vector<std::string>& args, const TempDir& dir) {
  return RunProgram(NDTRACE_BIN, args, dir);
}

// Writes a closed synthetic trace. tool_version is fixed so golden files survive releases.
void WriteTrace(const fs::path& path, const SyntheticOptions& options,
                WriterOptions writer_options = {}) {
  ndt::format::TraceHeader header = ndt::tools::SyntheticHeader(options);
  header.tool_version = "0.0.0-test";
  writer_options.when_full = ndt::format::FullPolicy::kStall;
  auto writer = TraceWriter::Create(path.string(), header, writer_options);
  REQUIRE(writer.ok());
  REQUIRE(ndt::tools::WriteSyntheticTrace(**writer, options).ok());
  REQUIRE((*writer)->Close().ok());
}

SyntheticOptions GoldenOptions() {
  SyntheticOptions options;
  options.steps = 2;
  options.threads = 1;
  options.streams = 2;
  options.seed = 7;
  return options;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Op lines of `show` text, with or without the time column.
size_t CountOpLines(const std::string& show_output) {
  static const std::regex op_line(R"(^( +[0-9]+\.[0-9]+s )?op [0-9]+ .*)");
  size_t ops = 0;
  for (const std::string& line : Lines(show_output)) {
    if (std::regex_match(line, op_line)) ++ops;
  }
  return ops;
}

uint64_t CountRecords(const fs::path& path) {
  auto reader = TraceReader::Open(path.string());
  REQUIRE(reader.ok());
  uint64_t records = 0;
  ndt::format::Record record;
  while ((*reader)->Next(&record)) ++records;
  return records;
}

}  // namespace

TEST_CASE("ndtrace --version prints the tool and trace format versions", "[cli]") {
  TempDir dir;
  const RunResult result = Ndtrace({"--version"}, dir);
  CHECK(result.exit_code == 0);
  CHECK(result.out == std::string("ndtrace ") + NDT_VERSION + " (trace format 2)\n");
  CHECK(result.err.empty());
}

TEST_CASE("ndtrace --help lists the commands and the exit codes", "[cli]") {
  TempDir dir;
  const RunResult result = Ndtrace({"--help"}, dir);
  CHECK(result.exit_code == 0);
  for (const char* word : {"show", "stats", "export", "Exit status", "3 internal error"}) {
    CHECK_THAT(result.out, Catch::Contains(word));
  }
  const RunResult show_help = Ndtrace({"show", "--help"}, dir);
  CHECK(show_help.exit_code == 0);
  CHECK_THAT(show_help.out, Catch::Contains("--stable"));
}

TEST_CASE("ndtrace rejects an unknown subcommand or a missing argument with exit 2", "[cli]") {
  TempDir dir;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"frobnicate"},
                                             {},
                                             {"show"},
                                             {"export", "x.ndt"},
                                             {"export", "x.ndt", "--format", "xml"},
                                             {"show", "x.ndt", "--limit", "many"}}) {
    INFO("args: " << args.size());
    const RunResult result = Ndtrace(args, dir);
    CHECK(result.exit_code == 2);
    CHECK(result.out.empty());
    CHECK(result.err.rfind("error: ", 0) == 0);
  }
}

TEST_CASE("ndtrace names a missing trace file and exits 2", "[cli]") {
  TempDir dir;
  const std::string missing = (dir / "no_such_trace.ndt").string();
  for (const char* command : {"show", "stats"}) {
    const RunResult result = Ndtrace({command, missing}, dir);
    CHECK(result.exit_code == 2);
    CHECK(result.err.rfind("error: " + missing, 0) == 0);
  }
}

TEST_CASE("ndtrace refuses a file that is not a trace with exit 2", "[cli]") {
  TempDir dir;
  const fs::path text = dir / "notes.txt";
  WriteFile(text, "this is not a trace, just some text that is long enough to be read\n");
  const RunResult result = Ndtrace({"show", text.string()}, dir);
  CHECK(result.exit_code == 2);
  CHECK(result.out.empty());
  CHECK(result.err.rfind("error: " + text.string(), 0) == 0);
}

TEST_CASE("show lists ops in op order however threads interleave in the file", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "threads.ndt";
  SyntheticOptions options = GoldenOptions();
  options.threads = 3;  // three threads' chunks interleave in the file
  WriteTrace(trace, options);
  const RunResult result = Ndtrace({"show", "--stable", trace.string()}, dir);
  REQUIRE(result.exit_code == 0);
  std::vector<uint64_t> sequences;
  for (const std::string& line : Lines(result.out)) {
    if (line.rfind("op ", 0) == 0) sequences.push_back(std::stoull(line.substr(3)));
  }
  CHECK(sequences.size() == ndt::tools::SyntheticOpCount(options));
  CHECK(std::is_sorted(sequences.begin(), sequences.end()));
}

TEST_CASE("show cuts lines to the terminal's width, and --wide prints them whole", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  WriteTrace(trace, GoldenOptions());
  // On a terminal 60 columns wide (`script` gives the command one, `stty` sets its width).
  const auto on_terminal = [&](const std::string& flags) {
    const fs::path out = dir / "terminal.txt";
    const std::string command = "script -qec \"stty cols 60; '" NDTRACE_BIN "' show " + flags +
                                " '" + trace.string() + "'\" /dev/null > '" + out.string() + "'";
    REQUIRE(std::system(command.c_str()) == 0);
    std::string text = ReadFile(out);
    text.erase(std::remove(text.begin(), text.end(), '\r'), text.end());
    return Lines(text);
  };
  const auto columns = [](const std::string& line) {
    return static_cast<size_t>(std::count_if(line.begin(), line.end(), [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }));
  };
  size_t cut = 0, longest = 0;
  for (const std::string& line : on_terminal("")) {
    longest = std::max(longest, columns(line));
    if (line.size() >= 3 && line.compare(line.size() - 3, 3, "…") == 0) ++cut;
  }
  CHECK(longest <= 60);
  CHECK(cut > 10);
  longest = 0;
  for (const std::string& line : on_terminal("--wide")) longest = std::max(longest, columns(line));
  CHECK(longest > 60);
  // Piped, lines are whole without --wide.
  const RunResult piped = Ndtrace({"show", trace.string()}, dir);
  longest = 0;
  for (const std::string& line : Lines(piped.out)) longest = std::max(longest, columns(line));
  CHECK(longest > 60);
}

TEST_CASE("show --stable of a synthetic trace matches the golden file", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  WriteTrace(trace, GoldenOptions());
  const RunResult result = Ndtrace({"show", "--stable", trace.string()}, dir);
  REQUIRE(result.exit_code == 0);
  CHECK(result.err.empty());

  const fs::path golden = fs::path(NDT_TEST_DATA_DIR) / "golden" / "show_synthetic_stable.txt";
  const char* update = std::getenv("NDT_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    fs::create_directories(golden.parent_path());
    WriteFile(golden, result.out);
    WARN("rewrote " << golden.string());
    return;
  }
  REQUIRE(fs::exists(golden));
  CHECK(result.out == ReadFile(golden));
}

TEST_CASE("show --stable prints the same text for two runs of the same program", "[cli]") {
  TempDir dir;
  WriteTrace(dir / "first.ndt", GoldenOptions());
  WriteTrace(dir / "second.ndt", GoldenOptions());
  fs::rename(dir / "second.ndt", dir / "second_renamed.ndt");
  const RunResult first = Ndtrace({"show", "--stable", (dir / "first.ndt").string()}, dir);
  const RunResult second =
      Ndtrace({"show", "--stable", (dir / "second_renamed.ndt").string()}, dir);
  REQUIRE(first.exit_code == 0);
  REQUIRE(second.exit_code == 0);
  // Only the "trace" line (the file name) may differ.
  std::vector<std::string> a = Lines(first.out);
  std::vector<std::string> b = Lines(second.out);
  REQUIRE(a.size() == b.size());
  CHECK(a.front() != b.front());
  a.erase(a.begin());
  b.erase(b.begin());
  CHECK(a == b);
  // Without --stable, times and raw addresses are there.
  const RunResult plain = Ndtrace({"show", (dir / "first.ndt").string()}, dir);
  CHECK_THAT(plain.out, Catch::Contains("0x7f"));
  CHECK_THAT(plain.out, Catch::Contains("pid       " + std::to_string(getpid())));
}

TEST_CASE("show --json prints the header, one object per record, then the end", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  WriteTrace(trace, GoldenOptions());
  const RunResult result = Ndtrace({"show", "--json", trace.string()}, dir);
  REQUIRE(result.exit_code == 0);
  const std::vector<std::string> lines = Lines(result.out);
  REQUIRE(lines.size() == CountRecords(trace) + 2);
  uint64_t ops = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json object = nlohmann::json::parse(lines[i]);  // throws if invalid
    const std::string type = object.at("type");
    if (i == 0) {
      CHECK(type == "header");
      CHECK(object.at("command_line").at(0) == "ndtrace-synth");
    } else if (i + 1 == lines.size()) {
      CHECK(type == "end");
      CHECK(object.at("complete") == true);
      CHECK(object.at("truncated_tail_bytes") == 0);
      CHECK(object.at("damage").empty());
    } else {
      CHECK(type != "header");
      CHECK(type != "end");
      if (type == "op") {
        CHECK(object.at("sequence") == ops);
        ++ops;
      }
    }
  }
  CHECK(ops == ndt::tools::SyntheticOpCount(GoldenOptions()));
}

TEST_CASE("show --from and --limit print a window of ops", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  WriteTrace(trace, GoldenOptions());
  const RunResult result =
      Ndtrace({"show", "--stable", trace.string(), "--from", "30", "--limit", "5"}, dir);
  REQUIRE(result.exit_code == 0);
  std::vector<std::string> ops;
  for (const std::string& line : Lines(result.out)) {
    if (line.rfind("op ", 0) == 0) ops.push_back(line.substr(0, 10));
  }
  CHECK(ops == std::vector<std::string>{"op 30     ", "op 31     ", "op 32     ", "op 33     ",
                                        "op 34     "});

  // With several threads the file interleaves their ops chunk by chunk; the window is still
  // exactly the ops asked for.
  const fs::path threaded = dir / "threaded.ndt";
  SyntheticOptions options = GoldenOptions();
  options.threads = 3;
  options.steps = 20;
  WriterOptions writer_options;
  writer_options.chunk_bytes = 4096;
  WriteTrace(threaded, options, writer_options);
  const RunResult window =
      Ndtrace({"show", "--json", threaded.string(), "--from", "700", "--limit", "40"}, dir);
  REQUIRE(window.exit_code == 0);
  std::set<uint64_t> sequences;
  for (const std::string& line : Lines(window.out)) {
    const nlohmann::json object = nlohmann::json::parse(line);
    if (object.at("type") == "op") sequences.insert(object.at("sequence").get<uint64_t>());
  }
  CHECK(sequences.size() == 40);
  CHECK(*sequences.begin() == 700);
  CHECK(*sequences.rbegin() == 739);
}

TEST_CASE("numeric options refuse signs, overflow and a zero that makes no sense", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  WriteTrace(trace, GoldenOptions());
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"show", trace.string(), "--from", "-1"}, "--from: must be a whole number, 0 or more"},
      {{"show", trace.string(), "--from", "18446744073709551616"},
       "--from: must be a whole number, 0 or more (got '18446744073709551616')"},
      {{"show", trace.string(), "--limit", "0"}, "--limit: must be a whole number, 1 or more"},
      {{"show", trace.string(), "--limit", "+5"}, "--limit: must be a whole number"},
      {{"replay", trace.string(), "--op", "-1"}, "--op: must be a whole number, 0 or more"},
      {{"replay", trace.string(), "--op", "1", "--repeat", "0"},
       "--repeat: must be a whole number, 1..100000"},
      {{"check", "--digest-every", "0", "--", "true"},
       "--digest-every: must be a whole number, 1 or more"},
      // CLI11 alone took hex (16 runs) and a window bound past 2^64 (read as 0).
      {{"check", "-n", "0x10", "--", "true"}, "--runs: must be a whole number, 2..100"},
      {{"check", "--narrow-runs", "0x5", "--", "true"},
       "--narrow-runs: must be a whole number, 0..100"},
      {{"check", "--progress-every", "-1", "--", "true"},
       "--progress-every: must be a whole number, 0..86400"},
      {{"bisect", "--confirm-runs", "0x3", "--", "true"},
       "--confirm-runs: must be a whole number, 0..1000"},
      {{"bisect", "-n", "1", "--", "true"}, "--runs: must be a whole number, 2..100"},
      {{"check", "--digest-window", "99999999999999999999:", "--", "true"},
       "check: --digest-window must be A:B or A: with A <= B"},
      // The tracer took a number past 2^64 for an API name and ignored a reversed range.
      {{"record", "--capture", "3,99999999999999999999", "--", "true"},
       "--capture: '99999999999999999999' is not an op number N, a range A-B"},
      {{"record", "--capture", "kernel:*Gemm*,5-3", "--", "true"},
       "--capture: '5-3' is not an op number N, a range A-B"},
  };
  for (const Case& c : cases) {
    const RunResult result = Ndtrace(c.args, dir);
    INFO(result.err);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::StartsWith("error: " + c.message));
  }
  for (const Case& c : std::vector<Case>{
           {{"--threads", "0x10"}, "--threads: must be a whole number, 1..256"},
           {{"--seed", "-1"}, "--seed: must be a whole number, 0 or more"},
           {{"--steps", "18446744073709551616"}, "--steps: must be a whole number"}}) {
    std::vector<std::string> args = {"-o", (dir / "synth.ndt").string()};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const RunResult result = RunProgram(NDTRACE_SYNTH_BIN, args, dir);
    INFO(result.err);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::StartsWith("error: " + c.message));
  }
  // The same options with sensible values are taken.
  CHECK(Ndtrace({"show", trace.string(), "--from", "3", "--limit", "2"}, dir).exit_code == 0);
}

TEST_CASE("stats counts what the generator wrote", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  SyntheticOptions options = GoldenOptions();
  options.steps = 5;
  options.threads = 2;
  WriteTrace(trace, options);
  const RunResult result = Ndtrace({"stats", "--json", trace.string()}, dir);
  REQUIRE(result.exit_code == 0);
  const nlohmann::json stats = nlohmann::json::parse(result.out);
  CHECK(stats.at("ops") == ndt::tools::SyntheticOpCount(options));
  CHECK(stats.at("records") == CountRecords(trace));
  CHECK(stats.at("complete") == true);
  CHECK(stats.at("damage") == 0);
  CHECK(stats.at("dropped_records") == 0);
  CHECK(stats.at("file_bytes") == fs::file_size(trace));
  CHECK(stats.at("ops_by_kind").at("cudnn_backend_execute") == 2 * 5 * 2);
  CHECK(stats.at("ops_by_name").size() == 19);
  CHECK(stats.at("compression_ratio").get<double>() > 1.0);
  CHECK(stats.at("duration_ns").get<uint64_t>() > 0);

  const RunResult text = Ndtrace({"stats", trace.string()}, dir);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out,
             Catch::Contains("ops               " +
                             std::to_string(ndt::tools::SyntheticOpCount(options)) + "\n"));
}

TEST_CASE("export --format perfetto writes trace events: one X per op, a track per stream",
          "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  SyntheticOptions options = GoldenOptions();
  options.streams = 4;
  WriteTrace(trace, options);
  const fs::path out = dir / "timeline.json";
  const RunResult result =
      Ndtrace({"export", trace.string(), "--format", "perfetto", "-o", out.string()}, dir);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.empty());
  const nlohmann::json timeline = nlohmann::json::parse(ReadFile(out));
  CHECK(timeline.at("displayTimeUnit") == "ns");
  uint64_t complete_events = 0, gpu_events = 0;
  std::set<uint64_t> op_streams, gpu_tracks;
  std::multiset<uint64_t> named_streams;
  bool process_named = false;
  for (const nlohmann::json& event : timeline.at("traceEvents")) {
    if (event.at("ph") == "X" && event.at("cat").get<std::string>().rfind("gpu_", 0) == 0) {
      ++gpu_events;  // a kernel, copy or memset's GPU time, on its stream's GPU track
      gpu_tracks.insert(event.at("tid").get<uint64_t>());
      CHECK(event.at("args").contains("op"));
    } else if (event.at("ph") == "X") {
      ++complete_events;
      op_streams.insert(event.at("tid").get<uint64_t>());
      CHECK(event.at("ts").is_number());
      CHECK(event.at("dur").get<double>() >= 0);
      CHECK(event.at("args").contains("sequence"));
    } else if (event.at("ph") == "M" && event.at("name") == "thread_name") {
      const std::string name = event.at("args").at("name");
      if (name.rfind("stream ", 0) == 0 && name.find(" · host call times") != std::string::npos) {
        named_streams.insert(event.at("tid").get<uint64_t>());
      }
    } else if (event.at("ph") == "M" && event.at("name") == "process_name") {
      process_named = true;
      CHECK(event.at("args").at("name") ==
            "ndtrace: ndtrace-synth --steps 2 --threads 1 --streams 4 --seed 7");
    }
  }
  CHECK(process_named);
  CHECK(complete_events == ndt::tools::SyntheticOpCount(options));
  CHECK(op_streams.size() == 4);
  CHECK(named_streams == std::multiset<uint64_t>(op_streams.begin(), op_streams.end()));
  CHECK(gpu_events > 0);  // the synthetic trace has GPU times for its kernels, copies, memsets
  CHECK(gpu_events < complete_events);
  CHECK_FALSE(gpu_tracks.empty());
}

TEST_CASE("export --format perfetto --diff puts both runs on one timeline and flags the "
          "first divergent op",
          "[cli]") {
  TempDir dir;
  const fs::path a = dir / "a.ndt";
  const fs::path b = dir / "b.ndt";
  SyntheticOptions options = GoldenOptions();
  WriteTrace(a, options);
  options.seed = 8;  // different host data from the first copy on
  WriteTrace(b, options);
  const RunResult result = Ndtrace(
      {"export", a.string(), "--format", "perfetto", "--diff", b.string()}, dir);
  REQUIRE(result.exit_code == 0);
  const nlohmann::json timeline = nlohmann::json::parse(result.out);
  std::set<uint64_t> processes;
  std::vector<uint64_t> flagged_sequences;
  uint64_t complete_events = 0;
  for (const nlohmann::json& event : timeline.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "process_name") {
      processes.insert(event.at("pid").get<uint64_t>());
    } else if (event.at("ph") == "X" && event.at("cat").get<std::string>().rfind("gpu_", 0) != 0) {
      ++complete_events;
      const std::string name = event.at("name");
      if (name.rfind("FIRST DIVERGENCE: ", 0) == 0) {
        flagged_sequences.push_back(event.at("args").at("sequence").get<uint64_t>());
        CHECK_THAT(event.at("args").at("divergence").get<std::string>(),
                   Catch::StartsWith("propagated"));
      }
    }
  }
  CHECK(processes == std::set<uint64_t>{1, 2});
  CHECK(complete_events == 2 * ndt::tools::SyntheticOpCount(options));
  CHECK(flagged_sequences == std::vector<uint64_t>{0, 0});
  CHECK(Ndtrace({"export", a.string(), "--format", "json", "--diff", b.string()}, dir).exit_code ==
        2);
}

TEST_CASE("export --format json writes one document with the header and every record", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "synthetic.ndt";
  WriteTrace(trace, GoldenOptions());
  const RunResult result = Ndtrace({"export", trace.string(), "--format", "json"}, dir);
  REQUIRE(result.exit_code == 0);
  const nlohmann::json document = nlohmann::json::parse(result.out);
  CHECK(document.at("header").at("tool_version") == "0.0.0-test");
  CHECK(document.at("records").size() == CountRecords(trace));
  CHECK(document.at("end").at("complete") == true);

  const RunResult refused =
      Ndtrace({"export", trace.string(), "--format", "perfetto", "--stable"}, dir);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.rfind("error: ", 0) == 0);
}

TEST_CASE("a trace with a flipped byte in a records chunk exits 2 naming the byte range", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "damaged.ndt";
  WriterOptions writer_options;
  writer_options.chunk_bytes = 4096;
  SyntheticOptions options = GoldenOptions();
  options.steps = 6;
  WriteTrace(trace, options, writer_options);

  uint64_t flipped = 0;
  {
    auto reader = TraceReader::Open(trace.string());
    REQUIRE(reader.ok());
    std::vector<ndt::format::ChunkInfo> records;
    for (const auto& chunk : (*reader)->chunks()) {
      if (chunk.kind == ndt::format::ChunkKind::kRecords) records.push_back(chunk);
    }
    REQUIRE(records.size() >= 3);
    const ndt::format::ChunkInfo& victim = records[1];
    flipped = victim.end() - victim.compressed_size / 2;
  }
  std::string bytes = ReadFile(trace);
  bytes[flipped] = static_cast<char>(bytes[flipped] ^ 0x40);
  WriteFile(trace, bytes);

  const RunResult result = Ndtrace({"show", trace.string()}, dir);
  CHECK(result.exit_code == 2);
  CHECK(CountOpLines(result.out) > 0);  // what is readable is still printed
  CHECK(CountOpLines(result.out) < ndt::tools::SyntheticOpCount(options));
  const std::regex damage_line("error: " + trace.string() + R"(: .* \(bytes (\d+)\.\.(\d+)\))");
  std::smatch match;
  REQUIRE(std::regex_search(result.err, match, damage_line));
  CHECK(std::stoull(match[1]) <= flipped);
  CHECK(flipped < std::stoull(match[2]));

  const RunResult stats = Ndtrace({"stats", "--json", trace.string()}, dir);
  CHECK(stats.exit_code == 2);
  CHECK(nlohmann::json::parse(stats.out).at("damage").get<int>() >= 1);
}

// A closed synthetic trace with a captured buffer (a blob of `blob_bytes` pseudo-random bytes)
// after its ops. Returns the file range of the blob's one chunk.
std::pair<uint64_t, uint64_t> WriteTraceWithBlob(const fs::path& path, size_t blob_bytes) {
  SyntheticOptions options = GoldenOptions();
  ndt::format::TraceHeader header = ndt::tools::SyntheticHeader(options);
  WriterOptions writer_options;
  writer_options.when_full = ndt::format::FullPolicy::kStall;
  auto writer = TraceWriter::Create(path.string(), header, writer_options);
  REQUIRE(writer.ok());
  REQUIRE(ndt::tools::WriteSyntheticTrace(**writer, options).ok());
  std::vector<std::byte> blob(blob_bytes);
  uint64_t state = 12345;
  for (std::byte& b : blob) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    b = static_cast<std::byte>(state >> 56);
  }
  REQUIRE((*writer)->PutBlob(blob).ok());
  REQUIRE((*writer)->Close().ok());
  auto reader = TraceReader::Open(path.string());
  REQUIRE(reader.ok());
  for (const auto& chunk : (*reader)->chunks()) {
    if (chunk.kind == ndt::format::ChunkKind::kBlob) return {chunk.offset, chunk.end()};
  }
  FAIL("no blob chunk");
  return {};
}

TEST_CASE("damage in a blob chunk is reported by every reader, on stderr, with exit 2", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "blob.ndt";
  const fs::path damaged = dir / "blob-damaged.ndt";
  const auto [begin, end] = WriteTraceWithBlob(trace, 4000);
  std::string bytes = ReadFile(trace);
  const uint64_t flipped = (begin + end) / 2;  // inside the compressed captured bytes
  bytes[flipped] = static_cast<char>(bytes[flipped] ^ 0x04);
  WriteFile(damaged, bytes);
  const std::regex damage_line("error: " + damaged.string() +
                               R"(: blob chunk: .* \(bytes (\d+)\.\.(\d+)\))");

  const std::vector<std::vector<std::string>> readers = {
      {"show", damaged.string()},
      {"show", "--json", damaged.string()},
      {"stats", damaged.string()},
      {"stats", "--json", damaged.string()},
      {"export", damaged.string(), "--format", "json"},
      {"export", damaged.string(), "--format", "perfetto"},
      {"export", trace.string(), "--format", "perfetto", "--diff", damaged.string()},
      {"diff", trace.string(), damaged.string()},
      {"diff", damaged.string(), trace.string()},
      {"diff", "--json", trace.string(), damaged.string()},
      {"run", "--pin", damaged.string(), "--", "/bin/true"},
  };
  for (const std::vector<std::string>& args : readers) {
    const RunResult result = Ndtrace(args, dir);
    INFO(args[0] << " " << args[1] << "\nstdout: " << result.out << "\nstderr: " << result.err);
    CHECK(result.exit_code == 2);
    std::smatch match;
    REQUIRE(std::regex_search(result.err, match, damage_line));
    CHECK(std::stoull(match[1]) <= flipped);
    CHECK(flipped < std::stoull(match[2]));
    CHECK(result.out.find("(bytes ") == std::string::npos);  // never inside the report
  }
  // The intact original is read without a word by the same readers.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"stats", trace.string()},
                                             {"diff", trace.string(), trace.string()}}) {
    const RunResult result = Ndtrace(args, dir);
    CHECK(result.exit_code == 0);
    CHECK(result.err.empty());
  }
}

TEST_CASE("diff refuses a damaged trace with exit 2 unless --allow-damage compares what is intact",
          "[cli]") {
  TempDir dir;
  const fs::path a = dir / "a.ndt";
  const fs::path b = dir / "b.ndt";
  WriterOptions writer_options;
  writer_options.chunk_bytes = 4096;
  SyntheticOptions options = GoldenOptions();
  options.steps = 6;
  WriteTrace(a, options, writer_options);
  WriteTrace(b, options, writer_options);
  uint64_t flipped = 0;
  {
    auto reader = TraceReader::Open(b.string());
    REQUIRE(reader.ok());
    std::vector<ndt::format::ChunkInfo> records;
    for (const auto& chunk : (*reader)->chunks()) {
      if (chunk.kind == ndt::format::ChunkKind::kRecords) records.push_back(chunk);
    }
    REQUIRE(records.size() >= 3);
    flipped = records[1].end() - records[1].compressed_size / 2;
  }
  std::string bytes = ReadFile(b);
  bytes[flipped] = static_cast<char>(bytes[flipped] ^ 0x40);
  WriteFile(b, bytes);

  const RunResult refused = Ndtrace({"diff", a.string(), b.string()}, dir);
  INFO(refused.out << refused.err);
  CHECK(refused.exit_code == 2);
  CHECK(refused.out.empty());  // no report of a comparison that was not made
  CHECK_THAT(refused.err, Catch::StartsWith("error: " + b.string() + ": records chunk"));
  CHECK_THAT(refused.err, Catch::Contains("--allow-damage"));

  const RunResult allowed = Ndtrace({"diff", "--allow-damage", a.string(), b.string()}, dir);
  INFO(allowed.out << allowed.err);
  CHECK(allowed.exit_code == 1);  // B lacks the ops of its damaged chunk
  CHECK_THAT(allowed.err, Catch::StartsWith("warning: " + b.string() + ": records chunk"));
  CHECK(allowed.err.find("error:") == std::string::npos);
  CHECK_THAT(allowed.out, Catch::Contains("structural differences"));
  CHECK(allowed.out.find("(bytes ") == std::string::npos);
}

TEST_CASE("an unreadable trace and an unwritable output say permission denied", "[cli]") {
  // Root reads and writes whatever the mode bits say: as root the commands run as `nobody`
  // (setpriv), which the modes below do deny.
  std::vector<std::string> as_user;
  if (::geteuid() == 0) {
    if (!fs::exists("/usr/bin/setpriv")) {
      WARN("skipped: running as root, and no /usr/bin/setpriv to run ndtrace unprivileged");
      return;
    }
    as_user = {"--reuid=65534", "--regid=65534", "--clear-groups", NDTRACE_BIN};
  }
  const auto run = [&](std::vector<std::string> args, const TempDir& dir) {
    if (as_user.empty()) return Ndtrace(args, dir);
    args.insert(args.begin(), as_user.begin(), as_user.end());
    return RunProgram("/usr/bin/setpriv", args, dir);
  };
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read |
                                  fs::perms::group_exec | fs::perms::others_read |
                                  fs::perms::others_exec);
  const fs::path readable = dir / "readable.ndt";
  const fs::path secret = dir / "secret.ndt";
  WriteTrace(readable, GoldenOptions());
  WriteTrace(secret, GoldenOptions());
  fs::permissions(readable, fs::perms::owner_read | fs::perms::owner_write |
                                fs::perms::group_read | fs::perms::others_read);
  fs::permissions(secret, fs::perms::owner_write);  // nobody may read it
  if (!as_user.empty()) {
    // The unprivileged user must reach the binary and the readable trace at all.
    const RunResult reachable = run({"stats", readable.string()}, dir);
    if (reachable.exit_code != 0) {
      WARN("skipped: the unprivileged user cannot run ndtrace here: " << reachable.err);
      return;
    }
  }
  const fs::path locked = dir / "locked";  // a directory no one but root may write in
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec |
                              fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
  const fs::path unwritable = locked / "out.json";
  const std::vector<std::vector<std::string>> unreadable_cases = {
      {"show", secret.string()},
      {"stats", secret.string()},
      {"export", secret.string(), "--format", "json"},
      {"diff", readable.string(), secret.string()},
      {"export", readable.string(), "--format", "perfetto", "--diff", secret.string()},
      {"replay", "--op", "1", secret.string()},
      {"run", "--pin", secret.string(), "--", "/bin/true"},
  };
  for (const auto& args : unreadable_cases) {
    const RunResult result = run(args, dir);
    INFO(args[0] << ": " << result.err);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains(secret.string()) &&
                               Catch::Contains("Permission denied"));
  }
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"export", readable.string(), "--format", "json", "-o", unwritable.string()},
           {"diff", readable.string(), readable.string(), "-o", unwritable.string()}}) {
    const RunResult result = run(args, dir);
    INFO(args[0] << ": " << result.err);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains(unwritable.string()) &&
                               Catch::Contains("Permission denied"));
  }
}

TEST_CASE("a trace cut short is shown with an incomplete warning and exit 0", "[cli]") {
  TempDir dir;
  const fs::path whole = dir / "whole.ndt";
  WriterOptions writer_options;
  writer_options.chunk_bytes = 4096;
  SyntheticOptions options = GoldenOptions();
  options.steps = 8;
  WriteTrace(whole, options, writer_options);
  const std::string bytes = ReadFile(whole);
  const fs::path cut = dir / "cut.ndt";
  WriteFile(cut, bytes.substr(0, bytes.size() * 6 / 10));

  const RunResult result = Ndtrace({"show", cut.string()}, dir);
  CHECK(result.exit_code == 0);
  const size_t ops = CountOpLines(result.out);
  CHECK(ops > 0);
  CHECK(ops < ndt::tools::SyntheticOpCount(options));
  const std::regex warning("warning: " + cut.string() +
                           R"( is incomplete: it was never closed \((\d+) bytes at the end )"
                           R"(form no whole chunk\)\n)");
  CHECK(std::regex_search(result.err, warning));
  CHECK(result.err.find("error:") == std::string::npos);
  CHECK_THAT(result.out, Catch::Contains("state     incomplete"));

  const RunResult json = Ndtrace({"show", "--json", cut.string()}, dir);
  CHECK(json.exit_code == 0);
  const nlohmann::json end = nlohmann::json::parse(Lines(json.out).back());
  CHECK(end.at("complete") == false);
}

TEST_CASE("show keeps one record per line whatever bytes a trace's strings hold", "[cli]") {
  TempDir dir;
  const fs::path trace = dir / "strings.ndt";
  {
    ndt::format::TraceHeader header = ndt::tools::SyntheticHeader(GoldenOptions());
    header.notes = {"line one\nline two"};
    auto writer = TraceWriter::Create(trace.string(), header);
    REQUIRE(writer.ok());
    ndt::format::OpRecord op;
    op.kind = ndt::format::OpKind::kKernelLaunch;
    op.name = "bad\x01name\xff\xfe \"quoted\" \\ tab\tend";
    ndt::format::Argument text;
    text.name = "arg\n0";
    text.value = std::string("\xc3\xa9t\xc3\xa9 \xed\xa0\x80");  // é, then a surrogate
    op.args.push_back(text);
    REQUIRE((*writer)->Append(op));
    REQUIRE((*writer)->Close().ok());
  }
  const RunResult text = Ndtrace({"show", "--stable", trace.string()}, dir);
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("note      line one\\nline two\n"));
  CHECK_THAT(text.out, Catch::Contains("bad\\x01name"));
  CHECK_THAT(text.out, Catch::Contains("arg\\n0=\""));
  CHECK(CountOpLines(text.out) == 1);

  const RunResult json = Ndtrace({"show", "--json", trace.string()}, dir);
  REQUIRE(json.exit_code == 0);
  const std::vector<std::string> lines = Lines(json.out);
  REQUIRE(lines.size() == 3);
  const nlohmann::json header = nlohmann::json::parse(lines[0]);
  CHECK(header.at("notes").at(0) == "line one\nline two");
  const nlohmann::json op = nlohmann::json::parse(lines[1]);
  CHECK(op.at("name") == "bad\x01name\xef\xbf\xbd\xef\xbf\xbd \"quoted\" \\ tab\tend");
  CHECK(op.at("args").at(0).at("text") == "\xc3\xa9t\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
}
