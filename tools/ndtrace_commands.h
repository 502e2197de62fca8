// The command table of the `ndtrace` executable: each command adds its CLI11 subcommand to
// the top-level app before parsing and is run after a successful parse. One file per
// command (cmd_<name>.cc); ndtrace_main.cc lists them.
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace ndt::tools {

// A subcommand of ndtrace.
struct Command {
  CLI::App* app = nullptr;   // the subcommand; owned by the top-level app
  std::function<int()> run;  // runs it after parsing; returns the exit code (cli_support.h)
};

// `ndtrace show TRACE [--json] [--stable] [--from OP] [--limit N]`
Command AddShowCommand(CLI::App& parent);
// `ndtrace stats TRACE [--json]`
Command AddStatsCommand(CLI::App& parent);
// `ndtrace export TRACE --format json|perfetto [--stable] [-o OUT]`
Command AddExportCommand(CLI::App& parent);
// `ndtrace record [-o PATH] [--quiet] [--deterministic | --pin TRACE] -- CMD...`
Command AddRecordCommand(CLI::App& parent);
// `ndtrace diff A B [--json] [-o OUT]`
Command AddDiffCommand(CLI::App& parent);
// `ndtrace check [-n RUNS] [-o DIR] [--deterministic | --pin TRACE] -- CMD...`
Command AddCheckCommand(CLI::App& parent);
// `ndtrace run (--deterministic | --pin TRACE) -- CMD...`
Command AddRunCommand(CLI::App& parent);
// `ndtrace replay TRACE [--stop] -- CMD...` (live verify) or `replay TRACE --op N ...`
Command AddReplayCommand(CLI::App& parent);
// `ndtrace bisect [-n RUNS] [--max-runs M] [-o DIR] -- CMD...`
Command AddBisectCommand(CLI::App& parent);

}  // namespace ndt::tools
