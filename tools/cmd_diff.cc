// `ndtrace diff A B [--json] [--force] [--allow-damage] [-o OUT]`: names the first op where two
// traces of the same program stop being bitwise identical, and why (replayer/trace_diff.h);
// runs of several processes are compared rank by rank (replayer/run_set.h). Traces of another
// program, command line or input file are not compared op by op without --force (exit 2), nor
// damaged traces without --allow-damage (exit 2; the damage is printed on stderr, never in the
// report).
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "replayer/diff_html.h"
#include "replayer/run_set.h"
#include "tools/cli_support.h"
#include "tools/ndtrace_commands.h"
#include "tools/traced_run.h"

namespace ndt::tools {

Command AddDiffCommand(CLI::App& parent) {
  struct Options {
    std::string a;
    std::string b;
    bool json = false;
    bool force = false;
    bool allow_damage = false;
    std::string output;
    std::string html;
  };
  auto options = std::make_shared<Options>();
  CLI::App* app = parent.add_subcommand(
      "diff",
      "Compare two traces: the first divergent op, its class, the evidence and a fix. "
      "Exit 0 identical, 1 diverged, 2 error (including runs of another program, "
      "command line or input file, unless --force, and damaged traces, unless "
      "--allow-damage).");
  app->add_option("A", options->a,
                  "the reference run: a trace (with its per-process companions A.rank<R>, "
                  "A.<pid>), or a directory of traces")
      ->required();
  app->add_option("B", options->b, "the run to compare with it, process by process")
      ->required();
  app->add_flag("--json", options->json, "print the ndtrace.diff/2 JSON document");
  app->add_option("-o,--output", options->output, "write the report here instead of stdout");
  app->add_option("--html", options->html,
                  "also write the report as one self-contained HTML page (tools/README.md)");
  app->add_flag("--force", options->force,
                "compare op by op even when the runs are of another program, command line or "
                "input file");
  app->add_flag("--allow-damage", options->allow_damage,
                "compare what is intact in a damaged trace (its damage is printed as warnings) "
                "instead of refusing it with exit 2");
  return {app, [options] {
            replay::DiffOptions diff;
            diff.force = options->force;
            auto report = replay::DiffRuns(options->a, options->b, diff);
            if (!report.ok()) {
              PrintError(report.status().message());
              return kExitUsage;
            }
            // Damage goes to stderr before anything else, never into the report; unless told
            // otherwise, a damaged run is not compared (exit 2).
            if (ReportRunDamage(*report, options->allow_damage) != kExitOk) {
              PrintError("diff: a trace is damaged; not compared (--allow-damage compares what "
                         "is intact)");
              return kExitUsage;
            }
            auto out = OutputFile::Open(options->output);
            if (!out.ok()) {
              PrintError(out.status().message());
              return kExitUsage;
            }
            const bool color = options->output.empty() && ::isatty(STDOUT_FILENO);
            (*out)->Write(options->json ? replay::RenderRunDiffJson(*report) + "\n"
                                        : replay::RenderRunDiffText(*report, color));
            if (Status closed = (*out)->Close(); !closed.ok()) {
              PrintError(closed.message());
              return kExitUsage;
            }
            if (!options->html.empty()) {
              const auto* shown = report->first_diverged();
              replay::PageText text;
              text.title = "ndtrace diff " + options->a + " " + options->b;
              text.verdict = report->identical() ? "identical: every compared op was bitwise identical"
                             : shown != nullptr && shown->second.first_divergence
                                 ? "diverged: " + shown->second.first_divergence->what
                                 : std::string("diverged");
              if (Status written = WritePage(options->html, replay::RunDiffPage(*report, text));
                  !written.ok()) {
                PrintError("diff: " + written.message());
                return kExitUsage;
              }
            }
            for (const auto& [process, single] : report->processes) {
              if (!single.refused) continue;
              std::string fields;
              for (const std::string& field : single.other_program) {
                fields += (fields.empty() ? "" : ", ") + field;
              }
              PrintError("diff: " + (report->single() ? std::string() : process + ": ") +
                         "the runs are not of the same program and input (" + fields +
                         " differ); not compared op by op (--force compares them anyway)");
              return kExitUsage;
            }
            return report->identical() ? kExitOk : kExitFinding;
          }};
}

}  // namespace ndt::tools
