// What every ndtrace command-line program shares: the exit codes, the `error:` and
// `warning:` lines, command-line parsing with CLI11 mapped onto those exit codes, opening a
// trace, reporting what the reader found wrong with it, and the output file.
//
// Everything here runs on the program's main thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/trace_reader.h"

namespace CLI {
class App;
class Validator;
}

namespace ndt::tools {

// Exit codes of every ndtrace program (tools/README.md, "Exit codes").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFinding = 1;   // a divergence was found (reserved)
inline constexpr int kExitUsage = 2;     // usage error, unreadable input, damaged trace
inline constexpr int kExitInternal = 3;  // a bug in ndtrace
inline constexpr int kExitProgramFailed = 4;  // check: the program failed in every run

// The --help footer that lists the exit codes.
extern const char* const kExitCodesHelp;

// Prints "error: <message>" / "warning: <message>" as one line on stderr.
void PrintError(std::string_view message);
void PrintWarning(std::string_view message);

// Parses argv into `app`. Returns nullopt when the program should go on, or the exit code
// to return now: 0 after printing --help or --version, kExitUsage after printing an
// `error:` line for any parse error (CLI11's own exit codes are never used).
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

// A check for a whole-number option: decimal digits only (no sign, no blank, no exponent)
// whose value lies in [min, max], so `--from -1` and `--limit 99999999999999999999` are
// errors naming the option's range instead of a value wrapped around. Attach it with
// `->check(WholeNumber(min, max))`.
CLI::Validator WholeNumber(uint64_t min, uint64_t max = UINT64_MAX);

// Runs `body` and returns its exit code; a std::exception escaping it becomes
// "error: internal: <what>" and kExitInternal.
int RunGuarded(const std::function<int()>& body);

// Opens the trace at `path`. On failure prints an `error:` line that names the path and
// returns nullptr (the caller exits with kExitUsage).
std::unique_ptr<format::TraceReader> OpenTraceOrReport(const std::string& path);

// Call after reading `reader` (the trace at `path`) as far as the command needed. Prints
// the incomplete-trace warning if the writer never closed it and one
// "error: PATH: <what> (bytes B..E)" line per damaged range; returns kExitUsage when there
// was damage, else kExitOk.
int ReportTraceState(const std::string& path, const format::TraceReader& reader);

// Prints the damaged ranges of the trace at `path`, one "error: PATH: <what> (bytes B..E)"
// line each on stderr, and returns kExitUsage when there are any. With `allow_damage`
// (`diff`/`check --allow-damage`) the lines are `warning:` lines, followed by one saying that
// only the intact parts were used, and it returns kExitOk.
int ReportDamage(const std::string& path, const std::vector<format::TraceDamage>& damage,
                 bool allow_damage = false);

// Reads `reader` from its first record to its end, so that damage() lists every damaged range
// of the file (record and blob chunks alike), and rewinds it. For commands that need only part
// of a trace but refuse a damaged one (replay, --pin).
void ReadWholeTrace(format::TraceReader& reader);

// The one-line description of an incomplete trace used by the warning and by show, from the
// trace or from the bytes at its end that form no whole chunk.
std::string IncompleteText(const format::TraceReader& reader);
std::string IncompleteText(uint64_t truncated_tail_bytes);

// Where a command writes its output: stdout, or a file it creates. Buffered; Close()
// reports a failed write (full disk, closed pipe) as a Status.
class OutputFile {
 public:
  // `path` empty or "-" means stdout.
  static StatusOr<std::unique_ptr<OutputFile>> Open(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void Write(std::string_view bytes);
  std::FILE* file() { return file_; }
  // Flushes and, for a file, closes it. Idempotent.
  Status Close();

 private:
  OutputFile(std::FILE* file, std::string name, bool owned);
  std::FILE* file_;
  std::string name_;
  bool owned_;
  bool closed_ = false;
};

// Writes a page (`--html FILE`) made by `page`; the error of either, as a Status.
Status WritePage(const std::string& path, const StatusOr<std::string>& page);

}  // namespace ndt::tools
