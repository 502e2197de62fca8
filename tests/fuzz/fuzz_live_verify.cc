// libFuzzer target: the reference as live verify (`ndtrace replay TRACE -- CMD`) reads it: the
// recorded digest options (FindRecordedDigests), the header's program (CheckSameProgram), and
// a LiveVerifier following a fixed, valid new trace against the fuzzed reference, polled and
// reported as tools/ does. Any exception Cap'n Proto would throw fails the run (abort).
#include <kj/exception.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "formats/trace_writer.h"
#include "fuzz_support.h"
#include "replayer/live_verify.h"
#include "tools/synthetic_trace.h"

namespace {

class AbortOnThrow final : public kj::ExceptionCallback {
 public:
  void onRecoverableException(kj::Exception&&) override { std::abort(); }
  void onFatalException(kj::Exception&&) override { std::abort(); }
};

// A small valid trace, written once: the run being followed.
const std::string& NewTrace() {
  static const std::string* path = [] {
    auto* name = new std::string("/tmp/ndt-fuzz-live-" + std::to_string(getpid()) + ".ndt");
    ndt::tools::SyntheticOptions options;
    options.steps = 2;
    auto writer = ndt::format::TraceWriter::Create(*name, ndt::tools::SyntheticHeader(options));
    if (writer.ok()) {
      (void)ndt::tools::WriteSyntheticTrace(**writer, options);
      (void)(*writer)->Close();
    }
    std::atexit([] { ::unlink(NewTrace().c_str()); });
    return name;
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& new_trace = NewTrace();
  AbortOnThrow abort_on_throw;
  ndt::fuzz::MemoryFile file(data, size);
  if (!file.ok()) return 0;
  (void)ndt::replay::FindRecordedDigests(file.path());
  if (auto header = ndt::format::TraceReader::ReadHeader(file.path()); header.ok()) {
    std::string warning;
    (void)ndt::replay::CheckSameProgram(*header, {"ndtrace-synth", "--steps", "2"}, &warning);
  }
  auto verifier = ndt::replay::LiveVerifier::Open(file.path(), new_trace);
  if (verifier.ok()) {
    (*verifier)->Poll();
    (*verifier)->Poll();
    (void)(*verifier)->Report(/*finished=*/true);
  }
  return 0;
}
