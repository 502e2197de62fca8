// TraceWriter: appends records to a trace file from many threads at once.
//
// Each appending thread fills its own buffer; a full buffer (or one whose first record is
// half a flush interval old) is sealed and handed to a background thread that compresses it
// into a chunk and writes it (WriterOptions::compressor_threads of them; one thread's chunks
// always go to the same one, so they reach the file in order). Memory is bounded by
// WriterOptions::max_buffered_bytes plus a few buffers per appending thread. When the bound is
// reached the writer drops the sealed buffer and counts what it dropped (FullPolicy::kDrop,
// the default: the program is never slowed, and an appending thread never waits for another)
// or makes the appending thread wait for room, at most 10 s (FullPolicy::kStall). Dropped
// counts are written into the trace as DroppedRecords records; at Close the writer's totals
// go into the trace's WriterSummary (writer_summary.h).
//
// Failures (unwritable file, full disk) never throw: the writer remembers the first one,
// stops writing, counts what it could not write, and reports it from status() and Close().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "formats/op_view.h"
#include "formats/records.h"
#include "formats/status.h"

namespace ndt::format {

enum class FullPolicy { kDrop, kStall };

struct WriterOptions {
  size_t chunk_bytes = 256 << 10;         // seal a thread's buffer once it holds this much
  size_t max_buffered_bytes = 64 << 20;   // sealed, not yet written bytes at most
  std::chrono::milliseconds flush_interval{100};  // a record waits at most about this long
  FullPolicy when_full = FullPolicy::kDrop;
  // zstd level. -1 (`zstd --fast=1`): about 30 % more records per second than level 1 on the
  // 2-core build VM for 3 % larger traces (bench_trace_io, bench/README.md).
  int compression_level = -1;
  int compressor_threads = 2;             // background threads that compress and write
};

struct WriterStats {
  uint64_t records_appended = 0;   // accepted into a buffer
  uint64_t records_dropped = 0;    // lost to a full buffer, a failed write or a closed writer
  uint64_t bytes_dropped = 0;      // serialised bytes of the dropped records
  uint64_t records_oversized = 0;  // refused because one record exceeded the 1 MiB limit
  uint64_t uncompressed_bytes = 0; // record bytes written (frames included)
  uint64_t file_bytes = 0;         // bytes in the file so far
  uint64_t chunks = 0;             // chunks written
  uint64_t blobs = 0;              // distinct blobs stored
  uint64_t stall_ns = 0;           // total time appending threads waited (kStall)
};

class TraceWriter {
 public:
  // Creates (replaces) `path` with the preamble and `header` (its format_version is set by the
  // writer), written under the name `<path>.tmp-<pid>` first and then renamed, so that `path`
  // never exists without a whole header. Fails if the file cannot be created or written.
  static StatusOr<std::unique_ptr<TraceWriter>> Create(const std::string& path,
                                                       const TraceHeader& header,
                                                       const WriterOptions& options = {});
  ~TraceWriter();  // Close()s if needed; its Status is then only in status().
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Appends a record. Any thread may call it, concurrently. Records appended by one thread
  // are read back in the order that thread appended them; no order between threads is
  // promised. Returns false when the record was dropped (see FullPolicy) or refused.
  bool Append(const Record& record);
  // The same for an op record held outside a Record (no copy into one).
  bool Append(const OpRecord& op);
  // The same, into the sequence of `origin` (an id the caller chooses, e.g. the thread the
  // record is about) instead of the calling thread's: records appended for one origin are read
  // back in the order they were appended, whichever threads appended them (one after another).
  // The tracer writes records it held back for their GPU digests this way, from whichever
  // thread finds them ready.
  bool Append(const Record& record, uint64_t origin);
  bool Append(const OpRecord& op, uint64_t origin);
  // An op that owns nothing (op_view.h): the record the OpRecord of its fields would be.
  bool Append(const OpView& op, uint64_t origin);

  // Stores `bytes` in the blob stream and returns their content address. Storing the same
  // bytes again returns the same id and writes nothing. Thread-safe; compresses on the
  // calling thread (capturing buffers is a debugging mode, not the hot path).
  StatusOr<BlobId> PutBlob(std::span<const std::byte> bytes);

  // Seals every buffer and waits until all records appended before the call are written.
  Status Flush();

  // Flushes, writes the index and the footer, and closes the file. Idempotent. Later
  // Append calls are dropped and counted.
  Status Close();

  // The first failure, or ok.
  Status status() const;
  // True once the writer has failed (a write error: EFBIG, ENOSPC, EIO...; out of memory):
  // status() says why. One atomic load.
  bool failed() const;
  WriterStats stats() const;
  const std::string& path() const;

  class Impl;

 private:
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ndt::format
