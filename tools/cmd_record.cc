// `ndtrace record [-o PATH] [--quiet] -- CMD...`: runs CMD with libndtrace.so preloaded, so
// that it writes a trace of its GPU work to PATH, and returns CMD's exit status.
#include <fmt/format.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"

extern char** environ;

namespace ndt::tools {
namespace {

struct RecordOptions {
  std::string output;
  bool quiet = false;
  std::vector<std::string> command;
};

// Whether our own command line has a `--` after the `record` word (CLI11 accepts a command
// without it, but an option of CMD would then be taken for one of ours).
bool HasSeparator() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bool after_record = false;
  for (size_t start = 0; start < all.size();) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    const std::string_view arg(all.data() + start, end - start);
    if (after_record && arg == "--") return true;
    if (arg == "record") after_record = true;
    start = end + 1;
  }
  return false;
}

// libndtrace.so next to this executable (an installed or bundled layout), else the one this
// binary was built with.
std::string TracerLibrary() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path beside = self.parent_path() / "libndtrace.so";
    if (std::filesystem::exists(beside, error)) return beside.string();
  }
  return NDT_TRACER_LIBRARY;
}

int RunRecord(const RecordOptions& options) {
  if (!HasSeparator()) {
    PrintError("record: put `--` before the command to run: ndtrace record [-o PATH] -- CMD...");
    return kExitUsage;
  }
  const std::string library = TracerLibrary();
  if (library.empty() || access(library.c_str(), R_OK) != 0) {
    PrintError(fmt::format("record: cannot find libndtrace.so (looked for {})",
                           library.empty() ? "it beside ndtrace" : library));
    return kExitUsage;
  }

  std::vector<std::string> environment;
  std::string preload = library;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    if (text.rfind("LD_PRELOAD=", 0) == 0) {
      if (text.size() > 11) preload += ":" + std::string(text.substr(11));
    } else if (text.rfind("NDTRACE_OUTPUT=", 0) != 0) {
      environment.emplace_back(text);
    }
  }
  environment.push_back("LD_PRELOAD=" + preload);
  // An absolute path, so that a program that changes directory still writes it here.
  std::string output_absolute;
  if (!options.output.empty()) {
    std::error_code error;
    output_absolute = std::filesystem::absolute(options.output, error).string();
    if (error) output_absolute = options.output;
    environment.push_back("NDTRACE_OUTPUT=" + output_absolute);
  }
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.command;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  pid_t child = 0;
  const int spawn_error = posix_spawnp(&child, argv[0], nullptr, nullptr, argv.data(), envp.data());
  if (spawn_error != 0) {
    PrintError(fmt::format("record: cannot run {}: {}", args[0], std::strerror(spawn_error)));
    return kExitUsage;
  }
  int wait_status = 0;
  while (waitpid(child, &wait_status, 0) < 0) {
    if (errno != EINTR) {
      PrintError(fmt::format("internal: waitpid: {}", std::strerror(errno)));
      return kExitInternal;
    }
  }
  const int exit_code = WIFEXITED(wait_status)     ? WEXITSTATUS(wait_status)
                        : WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status)
                                                   : kExitInternal;

  const std::string shown = options.output.empty()
                                ? fmt::format("ndtrace-{}.ndt", static_cast<long>(child))
                                : options.output;
  const std::string path = options.output.empty() ? shown : output_absolute;
  struct stat file_status;
  if (stat(path.c_str(), &file_status) != 0) {
    // An unwritable path has been reported by the tracer inside the program already.
    const std::filesystem::path directory = std::filesystem::path(path).parent_path();
    const bool writable = access(directory.empty() ? "." : directory.c_str(), W_OK) == 0;
    if (writable && !options.quiet) {
      fmt::print(stderr, "ndtrace: no trace was written to {}: the program made no CUDA call\n",
                 shown);
    }
    return exit_code;
  }
  if (options.quiet) return exit_code;
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) {
    fmt::print(stderr, "ndtrace: trace {} is unreadable: {}\n", shown, reader.status().message());
    return exit_code;
  }
  uint64_t ops = 0, records = 0;
  format::Record record;
  while ((*reader)->Next(&record)) {
    ++records;
    if (std::holds_alternative<format::OpRecord>(record)) ++ops;
  }
  fmt::print(stderr, "ndtrace: trace written to {} ({} ops, {} records, {} bytes){}\n", shown, ops,
             records, (*reader)->file_bytes(),
             (*reader)->complete() ? "" : " (incomplete: the program did not exit normally)");
  return exit_code;
}

}  // namespace

Command AddRecordCommand(CLI::App& parent) {
  auto options = std::make_shared<RecordOptions>();
  CLI::App* app = parent.add_subcommand(
      "record", "Run CMD with the tracer preloaded and write a trace of its GPU work.");
  app->add_option("-o,--output", options->output,
                  "Trace path (default: ndtrace-<pid>.ndt in the program's directory)");
  app->add_flag("--quiet", options->quiet, "Do not print the summary line");
  app->add_option("command", options->command, "The program and its arguments, after --")
      ->required();
  return {app, [options] { return RunRecord(*options); }};
}

}  // namespace ndt::tools
