// `ndtrace diff A B [--json] [-o OUT]`: names the first op where two traces of the same
// program stop being bitwise identical, and why (replayer/trace_diff.h).
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "replayer/diff_report.h"
#include "replayer/trace_diff.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"

namespace ndt::tools {

Command AddDiffCommand(CLI::App& parent) {
  struct Options {
    std::string a;
    std::string b;
    bool json = false;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  CLI::App* app = parent.add_subcommand(
      "diff", "Compare two traces: the first divergent op, its class, the evidence and a fix. "
              "Exit 0 identical, 1 diverged, 2 error.");
  app->add_option("A", options->a, "the reference trace")->required();
  app->add_option("B", options->b, "the trace to compare with it")->required();
  app->add_flag("--json", options->json, "print the ndtrace.diff/1 JSON document");
  app->add_option("-o,--output", options->output, "write the report here instead of stdout");
  return {app, [options] {
            auto report = replay::DiffTraces(options->a, options->b);
            if (!report.ok()) {
              PrintError(report.status().message());
              return kExitUsage;
            }
            auto out = OutputFile::Open(options->output);
            if (!out.ok()) {
              PrintError(out.status().message());
              return kExitUsage;
            }
            const bool color = options->output.empty() && ::isatty(STDOUT_FILENO);
            (*out)->Write(options->json ? replay::RenderDiffJson(*report) + "\n"
                                        : replay::RenderDiffText(*report, color));
            if (Status closed = (*out)->Close(); !closed.ok()) {
              PrintError(closed.message());
              return kExitUsage;
            }
            return report->identical() ? kExitOk : kExitFinding;
          }};
}

}  // namespace ndt::tools
