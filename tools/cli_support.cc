#include "tools/cli_support.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>

namespace ndt::tools {

const char* const kExitCodesHelp =
    "Exit status: 0 ok; 1 a finding (divergence); 2 usage error, unreadable or damaged\n"
    "input; 3 internal error; 4 (check) the program failed in every run.";

CLI::Validator WholeNumber(uint64_t min, uint64_t max) {
  const std::string range = max == UINT64_MAX ? std::to_string(min) + " or more"
                                              : std::to_string(min) + ".." + std::to_string(max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || error != std::errc() || stop != end || value < min || value > max) {
          return "must be a whole number, " + range + " (got '" + text + "')";
        }
        return std::string();
      },
      "N in " + range, "WholeNumber");
}

void PrintError(std::string_view message) {
  std::fflush(stdout);  // keep what was printed before the error in front of it
  fmt::print(stderr, "error: {}\n", message);
  std::fflush(stderr);
}

void PrintWarning(std::string_view message) {
  std::fflush(stdout);
  fmt::print(stderr, "warning: {}\n", message);
  std::fflush(stderr);
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& success) {  // --help, --help-all, --version
    return app.exit(success) == 0 ? kExitOk : kExitUsage;
  } catch (const CLI::ParseError& error) {
    PrintError(error.what());
    fmt::print(stderr, "Run '{} --help' for usage.\n", app.get_name());
    return kExitUsage;
  }
}

int RunGuarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& exception) {
    PrintError(std::string("internal: ") + exception.what());
    return kExitInternal;
  }
}

std::unique_ptr<format::TraceReader> OpenTraceOrReport(const std::string& path) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (reader.ok()) return std::move(reader).value();
  const std::string message = reader.status().message();
  // The reader's messages usually start with the path; make sure every one names it.
  if (message.rfind(path, 0) == 0) {
    PrintError(message);
  } else {
    PrintError(path + ": " + message);
  }
  return nullptr;
}

std::string IncompleteText(const format::TraceReader& reader) {
  return IncompleteText(reader.truncated_tail_bytes());
}

std::string IncompleteText(uint64_t truncated_tail_bytes) {
  return fmt::format("it was never closed ({} bytes at the end form no whole chunk)",
                     truncated_tail_bytes);
}

int ReportTraceState(const std::string& path, const format::TraceReader& reader) {
  if (!reader.complete()) {
    PrintWarning(fmt::format("{} is incomplete: {}", path, IncompleteText(reader)));
  }
  return ReportDamage(path, reader.damage());
}

void ReadWholeTrace(format::TraceReader& reader) {
  reader.Rewind();
  format::Record record;
  while (reader.Next(&record)) {
  }
  reader.Rewind();
}

int ReportDamage(const std::string& path, const std::vector<format::TraceDamage>& damage,
                 bool allow_damage) {
  for (const format::TraceDamage& range : damage) {
    const std::string line =
        fmt::format("{}: {} (bytes {}..{})", path, range.what, range.begin, range.end);
    allow_damage ? PrintWarning(line) : PrintError(line);
  }
  if (damage.empty()) return kExitOk;
  if (!allow_damage) return kExitUsage;
  PrintWarning(path + ": damaged; only its intact chunks were compared (--allow-damage)");
  return kExitOk;
}

StatusOr<std::unique_ptr<OutputFile>> OutputFile::Open(const std::string& path) {
  if (path.empty() || path == "-") {
    return std::unique_ptr<OutputFile>(new OutputFile(stdout, "standard output", false));
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return Status::Error(path + ": cannot create: " + std::strerror(errno));
  }
  return std::unique_ptr<OutputFile>(new OutputFile(file, path, true));
}

OutputFile::OutputFile(std::FILE* file, std::string name, bool owned)
    : file_(file), name_(std::move(name)), owned_(owned) {}

OutputFile::~OutputFile() {
  (void)Close();
}

void OutputFile::Write(std::string_view bytes) {
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), file_);
}

Status OutputFile::Close() {
  if (closed_) return Status::Ok();
  closed_ = true;
  bool failed = std::fflush(file_) != 0 || std::ferror(file_) != 0;
  const int error = errno;
  if (owned_ && std::fclose(file_) != 0) failed = true;
  if (failed) return Status::Error(name_ + ": write failed: " + std::strerror(error));
  return Status::Ok();
}

Status WritePage(const std::string& path, const StatusOr<std::string>& page) {
  if (!page.ok()) return Status::Error("no HTML page: " + page.status().message());
  StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Open(path);
  if (!out.ok()) return out.status();
  (*out)->Write(*page);
  return (*out)->Close();
}

}  // namespace ndt::tools
