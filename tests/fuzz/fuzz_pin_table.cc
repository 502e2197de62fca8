// libFuzzer target: what the tracer reads inside the traced process from a `--pin` reference
// (NDTRACE_PIN=): its header at load (TraceReader::ReadHeader, before main) and its pin table
// when recording starts (PinTable::Load, tracer/policy.cc, compiled in here). Any exception
// Cap'n Proto would throw fails the run (abort): inside libndtrace.so it could not be caught
// and would end the traced program.
#include <kj/exception.h>

#include <cstdlib>

#include "fuzz_support.h"
#include "tracer/policy.h"

namespace {

class AbortOnThrow final : public kj::ExceptionCallback {
 public:
  void onRecoverableException(kj::Exception&&) override { std::abort(); }
  void onFatalException(kj::Exception&&) override { std::abort(); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  AbortOnThrow abort_on_throw;
  ndt::fuzz::MemoryFile file(data, size);
  if (!file.ok()) return 0;
  (void)ndt::format::TraceReader::ReadHeader(file.path());
  auto table = ndt::tracer::PinTable::Load(file.path());
  if (table.ok()) {
    (void)table->NondeterministicChoices();
    (void)table->Choice("m=64 n=64 k=64 f32");
    (void)table->Rng("curand philox 1024");
    ndt::format::TraceHeader current;
    for (const char* library : {"cudnn", "cublas", "curand", "nccl"}) {
      (void)table->Mismatch(current, library);
    }
  }
  return 0;
}
