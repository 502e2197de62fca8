// libFuzzer target for the record codec's decoders (formats/record_codec.h), the entry points
// every trace reader funnels untrusted bytes through. The input is copied into a word-aligned
// buffer, as the reader does with a decompressed chunk, and decoded as a record and as a
// header. Whatever decodes must re-encode and decode again to the same frame bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "formats/record_codec.h"
#include "formats/records.h"

namespace {

namespace codec = ::ndt::format::codec;

std::vector<uint64_t> ToWords(const std::string& bytes) {
  std::vector<uint64_t> words(bytes.size() / 8);
  if (!words.empty()) std::memcpy(words.data(), bytes.data(), words.size() * 8);
  return words;
}

// A decoded record must survive a second trip unchanged (byte for byte: a NaN in a double
// would defeat operator==).
void CheckStable(const ndt::format::Record& record) {
  std::string once;
  if (!codec::AppendRecord(record, &once)) return;  // decoded text may grow past the limit
  const std::vector<uint64_t> words = ToWords(once);
  ndt::format::Record again;
  size_t consumed = 0;
  if (!codec::DecodeRecord(words.data(), words.size(), &again, &consumed).ok()) std::abort();
  std::string twice;
  if (!codec::AppendRecord(again, &twice) || once != twice) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint64_t> words((size + 7) / 8);
  if (size > 0) std::memcpy(words.data(), data, size);

  ndt::format::Record record;
  size_t consumed = 0;
  if (codec::DecodeRecord(words.data(), words.size(), &record, &consumed).ok()) {
    if (consumed < 1 || consumed > words.size()) std::abort();
    CheckStable(record);
  }

  ndt::format::TraceHeader header;
  consumed = 0;
  if (codec::DecodeHeader(words.data(), words.size(), &header, &consumed).ok()) {
    if (consumed < 1 || consumed > words.size()) std::abort();
  }
  return 0;
}
