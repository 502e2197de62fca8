// `ndtrace`: the command line. Parses with CLI11, then runs the one subcommand named.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <vector>

#include "formats/container.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"

int main(int argc, char** argv) {
  using namespace ndt::tools;
  return RunGuarded([&] {
    CLI::App app("ndtrace finds where a GPU program stops being reproducible.", "ndtrace");
    app.set_version_flag("--version", fmt::format("ndtrace {} (trace format {})", NDT_VERSION,
                                                  ndt::format::kFormatVersion));
    app.footer(kExitCodesHelp);
    app.require_subcommand(1);
    const std::vector<Command> commands = {
        AddShowCommand(app),
        AddStatsCommand(app),
        AddExportCommand(app),
        AddRecordCommand(app),
        AddDiffCommand(app),
        AddCheckCommand(app),
        AddRunCommand(app),
        AddReplayCommand(app),
        AddBisectCommand(app),
    };
    if (std::optional<int> exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
    PrintError("internal: no command was selected");
    return kExitInternal;
  });
}
