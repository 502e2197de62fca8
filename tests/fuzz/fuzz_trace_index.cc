// libFuzzer target: the seek index. The input is the decompressed payload of an index
// chunk (64-byte entries); the target wraps it in an intact index chunk and footer behind a
// valid trace prefix, so the fuzzer spends its time inside index validation rather than
// against the chunk hash.
#include <zstd.h>

#include <cstring>
#include <string>

#include "formats/byte_order.h"
#include "formats/container.h"
#include "formats/record_codec.h"
#include "fuzz_support.h"

namespace {

using namespace ndt::format;

void AppendChunk(std::string* file, ChunkKind kind, uint32_t count, const std::string& payload) {
  std::string compressed(ZSTD_compressBound(payload.size()), '\0');
  compressed.resize(
      ZSTD_compress(compressed.data(), compressed.size(), payload.data(), payload.size(), 1));
  container::ChunkHeader header;
  header.kind = kind;
  header.writer_id = 0xFFFFFFFF;
  header.count = count;
  header.uncompressed_size = static_cast<uint32_t>(payload.size());
  header.compressed_size = static_cast<uint32_t>(compressed.size());
  char bytes[container::kChunkHeaderBytes];
  container::EncodeChunkHeader(header, compressed, bytes);
  file->append(bytes, sizeof bytes);
  file->append(compressed);
}

const std::string& Prefix() {
  static const std::string prefix = [] {
    std::string file(container::kPreambleBytes, '\0');
    container::EncodePreamble(file.data());
    std::string frame;
    TraceHeader header;
    header.format_version = kFormatVersion;
    codec::AppendHeader(header, &frame);
    AppendChunk(&file, ChunkKind::kHeader, 1, frame);
    return file;
  }();
  return prefix;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;
  std::string file = Prefix();
  const uint64_t index_offset = file.size();
  const std::string entries(reinterpret_cast<const char*>(data), size);
  AppendChunk(&file, ChunkKind::kIndex,
              static_cast<uint32_t>(size / container::kIndexEntryBytes), entries);
  char footer[container::kFooterBytes];
  container::EncodeFooter(index_offset, footer);
  file.append(footer, sizeof footer);
  ndt::fuzz::ReadEverything(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  return 0;
}
