// The JSON form of a trace's header and records, shared by `show --json` (JSON Lines) and
// `export --format json` (one document), and the small streaming JSON writer every
// command's JSON output goes through.
//
// Keys are the snake_case names of records.h (which are the schema's names), in a fixed
// order. A record's object starts with "type" = RecordTypeName. Enums are their schema
// names; digests are 32 hex characters (lo then hi); byte strings (opaque algorithms, uuids,
// captured parameter bytes) are lowercase hex; raw addresses are "0x..." strings. An
// Argument is {"name": ..., "<kind>": value} where kind is the schema's union member (none,
// unsigned, signed, real, text, bytes, pointer, dims).
//
// With JsonOptions::stable the fields `show --stable` masks are left out: start_unix_ns,
// host, pid, every *_ns time and every raw_address.
//
// All functions are thread-safe; a JsonWriter is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/nvtx_paths.h"
#include "formats/records.h"
#include "formats/trace_reader.h"

namespace ndt::tools {

// Appends compact JSON to a string as it is called: no document is built in memory. Keys
// and values come in call order; the caller nests them correctly (checked). Text is
// escaped; invalid UTF-8 from a trace becomes U+FFFD; NaN and infinities become null.
class JsonWriter {
 public:
  explicit JsonWriter(std::string* out) : out_(out) {}

  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);

  JsonWriter& String(std::string_view text);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // A value that is already JSON text (e.g. an object rendered earlier).
  JsonWriter& Raw(std::string_view json);

  // True when every object and array begun has been ended.
  bool done() const { return open_.empty() && !after_key_; }

 private:
  void BeforeValue();
  std::string* out_;
  std::vector<bool> open_;  // per open container: true while it has no element yet
  bool after_key_ = false;
};

struct JsonOptions {
  bool stable = false;
};

// Each writes one JSON object. The header's starts with "type": "header" when `type` is set.
void WriteHeaderJson(const format::TraceHeader& header, const JsonOptions& options, bool type,
                     JsonWriter& json);
// With `context`, an op's object also says which NVTX ranges enclosed it: "nvtx_ranges"
// (outermost first) and, when known, "framework_op" and "module".
void WriteRecordJson(const format::Record& record, const JsonOptions& options, JsonWriter& json,
                     const format::RangeContext* context = nullptr);
// Those keys alone, into the object being written.
void WriteRangeContextJson(const format::RangeContext& context, JsonWriter& json);
// "push", "pop", "start", "end", "mark", "category_name".
const char* NvtxEventName(format::NvtxEvent kind);
void WriteAlgorithmJson(const format::AlgorithmChoice& algorithm, JsonWriter& json);
void WriteBufferDigestJson(const format::BufferDigest& buffer, const JsonOptions& options,
                           JsonWriter& json);
// {"complete": B, "truncated_tail_bytes": N, "damage": [{"begin", "end", "what"}, ...]},
// preceded by "type": "end" when `type` is set.
void WriteTraceEndJson(const format::TraceReader& reader, bool type, JsonWriter& json);

}  // namespace ndt::tools
