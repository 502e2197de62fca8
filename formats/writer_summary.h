// WriterSummary: what a TraceWriter counted as it wrote a trace (trace.capnp WriterSummary),
// stored in the trace at Close so a reader has a closed trace's totals without reading its
// records (formats/README.md, "Writer summary").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"

namespace ndt::format {

struct WriterSummary {
  uint64_t records = 0;  // records in records chunks
  uint64_t ops = 0;      // of which op records
  std::vector<uint64_t> records_by_type;  // by Record alternative index
  std::vector<uint64_t> ops_by_kind;      // by OpKind
  uint64_t chunks = 0;   // records and blob chunks
  uint64_t uncompressed_bytes = 0;
  uint64_t dropped_records = 0;
  uint64_t dropped_bytes = 0;
  uint64_t oversized_records = 0;
  uint64_t stall_ns = 0;  // time appending threads waited for room (FullPolicy::kStall)
  uint64_t stalls = 0;
  uint64_t blobs = 0;
  bool operator==(const WriterSummary&) const = default;
};

// The summary of the closed trace at `path`, reading only its header, its footer, its index
// chunk's header and the summary's chunk: it costs the same whatever the trace's length (the
// index's payload and the records are neither read nor checked). Fails as
// TraceReader::ReadHeader does (no trace, no whole header); nullopt when the trace was not
// closed, was written before traces kept a summary, or its summary is damaged. TraceReader::Open
// checks the summary's chunk with the rest (damage() lists it) and leaves it out of chunks().
StatusOr<std::optional<WriterSummary>> ReadWriterSummary(const std::string& path);

}  // namespace ndt::format
