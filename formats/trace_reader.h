// TraceReader: reads a trace written by TraceWriter, treating every byte as hostile.
//
// Open() reads the preamble, the header chunk and, if the trace was closed, the index at
// its end; otherwise (a trace cut by a crash or SIGKILL, or one whose index is damaged) it
// rebuilds the index by scanning, keeping every whole chunk. Records then stream out in
// file order, one chunk in memory at a time. Damage (a chunk whose hash does not match, an
// undecodable record, bytes that are no chunk) never stops the reader: it is listed in
// damage() with its byte range and the reader moves on to the next intact chunk.
//
// Limits: a chunk holds at most 16 MiB (the index 64 MiB), a record 1 MiB; a chunk is
// decompressed into a buffer of exactly its declared size. Memory use is bounded by those
// limits, not by the file.
// Not thread-safe: use one reader per thread (its read-ahead thread, when on, is its own).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/container.h"
#include "formats/records.h"
#include "formats/status.h"

namespace ndt::format {

// One chunk as the index describes it.
struct ChunkInfo {
  uint64_t offset = 0;  // of the chunk header in the file
  ChunkKind kind = ChunkKind::kRecords;
  uint32_t writer_id = 0;
  uint64_t sequence = 0;           // per writer
  uint32_t count = 0;              // records (kRecords), part index (kBlob)
  uint32_t compressed_size = 0;    // payload bytes in the file
  uint32_t uncompressed_size = 0;  // payload bytes once decompressed
  uint64_t first_op = 0;           // kRecords: smallest op sequence; UINT64_MAX if no op
  uint64_t last_op = 0;            // kRecords: largest op sequence
  BlobId blob;                     // kBlob: the blob this part belongs to
  uint64_t end() const;            // offset of the byte after the chunk
};

// A byte range [begin, end) of the file the reader could not use, and why.
struct TraceDamage {
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string what;
};

class TraceReader {
 public:
  // Fails with a clear message when the file cannot be read, is not a trace, has an
  // unsupported version, or ends (or is damaged) before its header is whole.
  static StatusOr<std::unique_ptr<TraceReader>> Open(const std::string& path);
  // Only the header of the trace at `path`: reads the preamble and the header chunk, never the
  // index or the body (cheap whatever the trace's length, complete or not). Fails as Open does
  // when the file is no trace or its header is not whole.
  static StatusOr<TraceHeader> ReadHeader(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  const TraceHeader& header() const;
  // True when the writer closed the trace: footer and index intact.
  bool complete() const;
  // Bytes at the end of the file that form no whole chunk (the tail a crash cut off).
  uint64_t truncated_tail_bytes() const;
  uint64_t file_bytes() const;
  // Every intact body chunk (records and blobs), in file order, from the index or the scan.
  // The header and index chunks are not listed, nor the writer summary's (writer_summary.h).
  const std::vector<ChunkInfo>& chunks() const;
  // Damage found so far: at Open, and by every Next/FindOp/ReadBlob since.
  const std::vector<TraceDamage>& damage() const;

  // Stores the next record in file order and returns true, or returns false at the end.
  bool Next(Record* record);
  // Restarts iteration at the first record.
  void Rewind();
  // From now on Next passes over records of these types (a mask of RecordTypeBit<T>()) without
  // decoding them: a reader that has no use for a type saves its decoding. Such a record is
  // looked at no further than its frame's prefix, so damage inside it goes unreported (the
  // chunk's hash is still checked). 0, the default, decodes every record.
  void PassOver(uint32_t record_types);
  // On: Next reads, checks and decompresses the chunks ahead of the one it decodes on a thread
  // of the reader's own (at most two chunks ahead), so that a reader on a machine with a spare
  // core decodes while the next chunks load. What Next returns and the damage it finds are the
  // same either way. Off (the default): no thread. Rewind and SeekToOp restart it.
  void ReadAhead(bool on);
  // Restarts iteration at the first chunk that may hold op `sequence`; from there Next
  // skips op records with a smaller sequence (metadata records are still returned).
  void SeekToOp(uint64_t sequence);
  // Op `sequence` through the index, or nullopt if no intact chunk holds it.
  std::optional<OpRecord> FindOp(uint64_t sequence);
  // The bytes of blob `id`, verified against the id. Fails if the blob is absent, damaged
  // or larger than `max_bytes`.
  StatusOr<std::string> ReadBlob(const BlobId& id, uint64_t max_bytes = uint64_t{1} << 32);

  class Impl;

 private:
  explicit TraceReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndt::format
