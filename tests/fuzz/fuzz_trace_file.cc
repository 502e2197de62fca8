// libFuzzer target: chunk framing. The input is a whole trace file: preamble, chunk
// headers, hashes, payloads, index and footer, exactly as the reader meets them on disk.
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ndt::fuzz::ReadEverything(data, size);
  return 0;
}
