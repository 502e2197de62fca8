#include "formats/container.h"

#include <xxhash.h>

#include <cstring>

#include "formats/byte_order.h"

namespace ndt::format {

const char* ChunkKindName(ChunkKind kind) {
  switch (kind) {
    case ChunkKind::kHeader: return "header";
    case ChunkKind::kRecords: return "records";
    case ChunkKind::kBlob: return "blob";
    case ChunkKind::kIndex: return "index";
  }
  return "unknown";
}

namespace container {
namespace {

// Bytes of the chunk header covered by its hash: everything before the hash field.
constexpr size_t kHashedHeaderBytes = 48;

uint64_t ChunkHash(const char* header_bytes, std::string_view payload) {
  const uint64_t seed = XXH3_64bits(header_bytes, kHashedHeaderBytes);
  return XXH3_64bits_withSeed(payload.data(), payload.size(), seed);
}

}  // namespace

void EncodePreamble(char out[kPreambleBytes]) {
  std::memcpy(out, kFileMagic, sizeof kFileMagic);
  StoreLe32(out + 8, kFormatVersion);
  StoreLe32(out + 12, 0);
}

Status CheckPreamble(std::string_view bytes) {
  if (bytes.size() < kPreambleBytes) {
    return Status::Error("file is too short to be a trace (" + std::to_string(bytes.size()) +
                         " bytes)");
  }
  if (std::memcmp(bytes.data(), kFileMagic, sizeof kFileMagic) != 0) {
    return Status::Error("not an ndtrace trace (bad magic at byte 0)");
  }
  const uint32_t version = LoadLe32(bytes.data() + 8);
  if (version == 0 || version > kFormatVersion) {
    return Status::Error("unsupported trace format version " + std::to_string(version) +
                         " (this ndtrace reads versions 1.." + std::to_string(kFormatVersion) +
                         ")");
  }
  if (const uint32_t flags = LoadLe32(bytes.data() + 12); flags != 0) {
    return Status::Error("unknown trace flags " + std::to_string(flags) + " at byte 12");
  }
  return Status::Ok();
}

void EncodeChunkHeader(const ChunkHeader& header, std::string_view payload,
                       char out[kChunkHeaderBytes]) {
  std::memcpy(out, kChunkMagic, sizeof kChunkMagic);
  out[4] = static_cast<char>(header.kind);
  out[5] = static_cast<char>(header.codec);
  StoreLe16(out + 6, static_cast<uint16_t>(kChunkHeaderBytes));
  StoreLe32(out + 8, header.writer_id);
  StoreLe32(out + 12, header.count);
  StoreLe64(out + 16, header.sequence);
  StoreLe32(out + 24, header.uncompressed_size);
  StoreLe32(out + 28, header.compressed_size);
  StoreLe64(out + 32, header.tag0);
  StoreLe64(out + 40, header.tag1);
  StoreLe64(out + 48, ChunkHash(out, payload));
}

StatusOr<ChunkHeader> DecodeChunkHeader(std::string_view bytes) {
  if (bytes.size() < kChunkHeaderBytes) return Status::Error("chunk header cut short");
  const char* p = bytes.data();
  if (std::memcmp(p, kChunkMagic, sizeof kChunkMagic) != 0) {
    return Status::Error("no chunk magic");
  }
  ChunkHeader header;
  const auto kind = static_cast<uint8_t>(p[4]);
  if (kind < 1 || kind > 4) return Status::Error("unknown chunk kind " + std::to_string(kind));
  header.kind = static_cast<ChunkKind>(kind);
  header.codec = static_cast<uint8_t>(p[5]);
  if (header.codec != kCodecZstd) {
    return Status::Error("unknown chunk codec " + std::to_string(header.codec));
  }
  if (LoadLe16(p + 6) != kChunkHeaderBytes) {
    return Status::Error("unexpected chunk header size " + std::to_string(LoadLe16(p + 6)));
  }
  header.writer_id = LoadLe32(p + 8);
  header.count = LoadLe32(p + 12);
  header.sequence = LoadLe64(p + 16);
  header.uncompressed_size = LoadLe32(p + 24);
  header.compressed_size = LoadLe32(p + 28);
  header.tag0 = LoadLe64(p + 32);
  header.tag1 = LoadLe64(p + 40);
  header.hash = LoadLe64(p + 48);
  const uint32_t limit =
      header.kind == ChunkKind::kIndex ? kMaxIndexPayloadBytes : kMaxPayloadBytes;
  if (header.uncompressed_size > limit || header.compressed_size > limit) {
    return Status::Error("chunk declares " + std::to_string(header.uncompressed_size) + " (" +
                         std::to_string(header.compressed_size) +
                         " compressed) bytes, above the limit of " + std::to_string(limit));
  }
  if (header.compressed_size == 0) return Status::Error("chunk has an empty payload");
  return header;
}

bool ChunkHashMatches(std::string_view header_bytes, std::string_view payload) {
  if (header_bytes.size() < kChunkHeaderBytes) return false;
  return ChunkHash(header_bytes.data(), payload) == LoadLe64(header_bytes.data() + 48);
}

void EncodeFooter(uint64_t index_offset, char out[kFooterBytes]) {
  std::memcpy(out, kFooterMagic, sizeof kFooterMagic);
  StoreLe64(out + 8, index_offset);
  StoreLe64(out + 16, XXH3_64bits(out, 16));
}

std::optional<uint64_t> DecodeFooter(std::string_view bytes) {
  if (bytes.size() != kFooterBytes) return std::nullopt;
  if (std::memcmp(bytes.data(), kFooterMagic, sizeof kFooterMagic) != 0) return std::nullopt;
  if (XXH3_64bits(bytes.data(), 16) != LoadLe64(bytes.data() + 16)) return std::nullopt;
  return LoadLe64(bytes.data() + 8);
}

}  // namespace container
}  // namespace ndt::format
