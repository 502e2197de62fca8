// Conversion between the plain structs of records.h and their Cap'n Proto wire form, and
// the framing of records inside a records chunk. Internal to formats/: the writer and the
// reader are its only users (and formats' own tests and fuzz targets).
//
// Frame (formats/README.md, "Records chunk payload"): one 8-byte word
//   u32 payload_words | u32 record_type (the schema union ordinal, or kHeaderRecordType)
// followed by payload_words words of a flat Cap'n Proto message (segment table, segments).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/op_view.h"
#include "formats/records.h"
#include "formats/status.h"
#include "formats/writer_summary.h"

namespace ndt::format::codec {

inline constexpr uint32_t kHeaderRecordType = 0xFFFF;
// The writer's summary (WriterSummary), stored as a blob's content, never in a records chunk.
inline constexpr uint32_t kSummaryRecordType = 0xFFFE;
// Index chunk header tag1 when its tag0 is the offset of the writer summary's chunk.
inline constexpr uint64_t kSummaryIndexMarker = 0x314D4D5553544E44;  // "NDTSUMM1", LE
// Largest frame payload the writer produces and the reader accepts.
inline constexpr size_t kMaxRecordWords = (1u << 20) / 8;  // 1 MiB
// Most segments a record's message may declare; checked before anything is allocated.
inline constexpr uint32_t kMaxSegments = 64;
// Cap'n Proto nesting limit used when decoding.
inline constexpr int kNestingLimit = 16;

// Appends the frame of `record` to `out` (a whole number of words). Returns false, leaving
// `out` unchanged, if the record would exceed kMaxRecordWords.
bool AppendRecord(const Record& record, std::string* out);
// The same for an op record held outside a Record (the tracer's hot path: no copy into one).
bool AppendRecord(const OpRecord& op, std::string* out);
// The same for an op that owns nothing (the same bytes as the OpRecord of its fields).
bool AppendRecord(const OpView& op, std::string* out);
bool AppendHeader(const TraceHeader& header, std::string* out);
bool AppendSummary(const WriterSummary& summary, std::string* out);

// Decodes the frame at words[0..word_count). On success stores the record and the frame's
// length in words (prefix included) in *consumed; on failure *record is valid but
// unspecified. Reuses *record's storage when it already holds the same record type.
// `words` holds untrusted bytes: every failure is a Status naming what is wrong; traversal
// is limited to 8x the frame's size.
Status DecodeRecord(const uint64_t* words, size_t word_count, Record* record, size_t* consumed);
// The record type of the frame at words[0..word_count) and its length in words (prefix
// included), from its prefix alone: for passing over records without decoding them. Fails as
// DecodeRecord does when the prefix is out of bounds or names no record type; the message
// itself is not looked at.
Status PeekRecordType(const uint64_t* words, size_t word_count, uint32_t* record_type,
                      size_t* consumed);
Status DecodeHeader(const uint64_t* words, size_t word_count, TraceHeader* header,
                    size_t* consumed);
Status DecodeSummary(const uint64_t* words, size_t word_count, WriterSummary* summary,
                     size_t* consumed);

}  // namespace ndt::format::codec
