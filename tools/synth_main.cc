// `ndtrace-synth`: writes a synthetic training-loop trace (tools/synthetic_trace.h) with no
// GPU, for demos, benchmarks and test inputs.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "formats/container.h"
#include "formats/trace_writer.h"
#include "tools/cli_support.h"
#include "tools/synthetic_trace.h"

namespace ndt::tools {
namespace {

int RunSynth(const std::string& path, const SyntheticOptions& options) {
  if (Status valid = ValidateSyntheticOptions(options); !valid.ok()) {
    PrintError(valid.message());
    return kExitUsage;
  }
  const auto start = std::chrono::steady_clock::now();
  format::WriterOptions writer_options;
  writer_options.when_full = format::FullPolicy::kStall;  // a test input must be whole
  StatusOr<std::unique_ptr<format::TraceWriter>> writer =
      format::TraceWriter::Create(path, SyntheticHeader(options), writer_options);
  if (!writer.ok()) {
    const std::string message = writer.status().message();
    PrintError(message.rfind(path, 0) == 0 ? message : path + ": " + message);
    return kExitUsage;
  }
  Status written = WriteSyntheticTrace(**writer, options);
  Status closed = (*writer)->Close();
  if (!written.ok() || !closed.ok()) {
    const std::string& message = (!written.ok() ? written : closed).message();
    PrintError(message.rfind(path, 0) == 0 ? message : path + ": " + message);
    return kExitUsage;
  }
  const format::WriterStats stats = (*writer)->stats();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t ops = SyntheticOpCount(options);
  fmt::print(stderr, "{}\n", path);
  fmt::print(stderr,
             "{} ops, {} records, {} chunks, {} bytes ({:.1f} B/op, {} B uncompressed) "
             "in {:.3f} s\n",
             ops, stats.records_appended, stats.chunks, stats.file_bytes,
             ops == 0 ? 0.0 : static_cast<double>(stats.file_bytes) / static_cast<double>(ops),
             stats.uncompressed_bytes, seconds);
  return kExitOk;
}

}  // namespace
}  // namespace ndt::tools

int main(int argc, char** argv) {
  using namespace ndt::tools;
  return RunGuarded([&] {
    CLI::App app("ndtrace-synth writes a synthetic training-loop trace; no GPU is involved.",
                 "ndtrace-synth");
    app.set_version_flag("--version", fmt::format("ndtrace-synth {} (trace format {})", NDT_VERSION,
                                                  ndt::format::kFormatVersion));
    app.footer(kExitCodesHelp);
    std::string path;
    SyntheticOptions options;
    app.add_option("-o,--output", path, "Trace file to write")->required()->type_name("PATH");
    app.add_option("--steps", options.steps, "Training steps per thread")
        ->check(WholeNumber(0, uint64_t{1} << 40))
        ->capture_default_str();
    app.add_option("--threads", options.threads, "Threads appending concurrently (1..256)")
        ->check(WholeNumber(1, 256))
        ->capture_default_str();
    app.add_option("--streams", options.streams, "CUDA streams per thread (1..64)")
        ->check(WholeNumber(1, 64))
        ->capture_default_str();
    app.add_option("--seed", options.seed, "Seed of every digest and RNG state")
        ->check(WholeNumber(0))
        ->capture_default_str();
    app.add_flag("--kernel-digests", options.kernel_digests,
                 "Digest raw kernels' buffers too, as inside a window being bisected");
    if (std::optional<int> exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;
    return RunSynth(path, options);
  });
}
