// The container around records: file preamble, chunk header, footer and the index entry,
// exactly as formats/README.md ("Container") specifies them. Internal to formats/: the
// writer and the reader share these definitions so they cannot drift.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "formats/status.h"

namespace ndt::format {

inline constexpr uint32_t kFormatVersion = 2;

enum class ChunkKind : uint8_t { kHeader = 1, kRecords = 2, kBlob = 3, kIndex = 4 };
const char* ChunkKindName(ChunkKind kind);

namespace container {

inline constexpr char kFileMagic[8] = {'\x89', 'N', 'D', 'T', '\r', '\n', '\x1a', '\n'};
inline constexpr size_t kPreambleBytes = 16;  // magic, u32 version, u32 flags
inline constexpr char kChunkMagic[4] = {'N', 'D', 'C', '1'};
inline constexpr size_t kChunkHeaderBytes = 56;
inline constexpr char kFooterMagic[8] = {'N', 'D', 'T', 'F', 'O', 'O', 'T', '1'};
inline constexpr size_t kFooterBytes = 24;
inline constexpr size_t kIndexEntryBytes = 64;
inline constexpr uint8_t kCodecZstd = 1;

// Limits the reader enforces on every chunk (the writer stays inside them).
inline constexpr uint32_t kMaxPayloadBytes = 16u << 20;       // header, records, blob
inline constexpr uint32_t kMaxIndexPayloadBytes = 64u << 20;  // index chunk
inline constexpr int kZstdWindowLogMax = 23;                  // 8 MiB: writer's window
inline constexpr uint32_t kBlobPartBytes = 4u << 20;          // blob bytes per chunk
inline constexpr size_t kBlobPartPrefixBytes = 16;            // u64 total size, u64 part offset

// A chunk header in host form. Field meanings: formats/README.md.
struct ChunkHeader {
  ChunkKind kind = ChunkKind::kRecords;
  uint8_t codec = kCodecZstd;
  uint32_t writer_id = 0;
  uint32_t count = 0;
  uint64_t sequence = 0;
  uint32_t uncompressed_size = 0;
  uint32_t compressed_size = 0;
  uint64_t tag0 = 0;
  uint64_t tag1 = 0;
  uint64_t hash = 0;
};

void EncodePreamble(char out[kPreambleBytes]);
// Checks magic and version; the error says what was found instead.
Status CheckPreamble(std::string_view bytes);

// Encodes `header` with its hash computed over the encoded fields and `payload`.
void EncodeChunkHeader(const ChunkHeader& header, std::string_view payload,
                       char out[kChunkHeaderBytes]);
// Decodes a chunk header without checking its hash; fails when the magic, kind, codec or
// sizes are impossible (sizes above the limits above included).
StatusOr<ChunkHeader> DecodeChunkHeader(std::string_view bytes);
// True when `payload` is the payload the header's hash was computed with.
bool ChunkHashMatches(std::string_view header_bytes, std::string_view payload);

void EncodeFooter(uint64_t index_offset, char out[kFooterBytes]);
// The index chunk's offset, or nullopt when the bytes are not an intact footer.
std::optional<uint64_t> DecodeFooter(std::string_view bytes);

}  // namespace container
}  // namespace ndt::format
