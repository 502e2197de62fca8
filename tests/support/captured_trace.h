// Traces recorded with `ndtrace record --capture`: their blobs, edited copies of them, and
// `ndtrace replay TRACE --op N` run on them. What the op replay tests in tests/tracer/ share.
//
// Compiled into a test with NDT_STANDIN_DIR and NDTRACE_BIN defined, like traced_program.h.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "support/traced_program.h"

namespace ndt::test {

// `ndtrace replay TRACE --op OP OPTIONS`, with the stand-in libraries.
inline RunResult Replay(const std::string& trace, uint64_t op, const std::string& options = "") {
  return Run(std::string("'" NDTRACE_BIN "' replay '") + trace + "' --op " + std::to_string(op) +
             " " + options);
}

// The text argument `name` of `op` ("blob:in:x", "graph", ...); nullopt when absent or not text.
inline std::optional<std::string> Text(const format::OpRecord& op, const std::string& name) {
  for (const format::Argument& argument : op.args) {
    if (argument.name != name) continue;
    if (const auto* text = std::get_if<std::string>(&argument.value)) return *text;
  }
  return std::nullopt;
}

// The blob id a "blob:..." argument names: 32 hex digits, `lo` then `hi`.
inline format::BlobId ParseId(const std::string& hex) {
  REQUIRE(hex.size() == 32);
  return format::BlobId{std::stoull(hex.substr(0, 16), nullptr, 16),
                        std::stoull(hex.substr(16), nullptr, 16)};
}

// The bytes of the blob `hex` names in `trace`.
inline std::string BlobBytes(const std::string& trace, const std::string& hex) {
  auto reader = format::TraceReader::Open(trace);
  REQUIRE(reader.ok());
  auto bytes = (*reader)->ReadBlob(ParseId(hex));
  REQUIRE(bytes.ok());
  return *bytes;
}

// Writes to `to` a copy of `from`, blobs included, whose header `edit_header` changed and whose
// op records `edit_op` changed (it sees every op: it picks the ones to change). Either may be
// empty. An op's blobs are copied before `edit_op` sees it, so an edit may drop or rename blob
// arguments and the blobs stay in the copy.
inline void RewriteTrace(const std::string& from, const std::string& to,
                         const std::function<void(format::TraceHeader*)>& edit_header,
                         const std::function<void(OpRecord*)>& edit_op) {
  auto reader = format::TraceReader::Open(from);
  REQUIRE(reader.ok());
  format::TraceHeader header = (*reader)->header();
  if (edit_header) edit_header(&header);
  auto writer = format::TraceWriter::Create(to, header);
  REQUIRE(writer.ok());
  Record record;
  while ((*reader)->Next(&record)) {
    if (auto* op = std::get_if<OpRecord>(&record)) {
      for (const Argument& argument : op->args) {
        const auto* text = std::get_if<std::string>(&argument.value);
        if (argument.name.rfind("blob:", 0) != 0 || text == nullptr || text->size() != 32) continue;
        auto bytes = (*reader)->ReadBlob(ParseId(*text));
        REQUIRE(bytes.ok());
        auto id = (*writer)->PutBlob(std::as_bytes(std::span(bytes->data(), bytes->size())));
        REQUIRE(id.ok());
        REQUIRE(*id == ParseId(*text));
      }
      if (edit_op) edit_op(op);
    }
    REQUIRE((*writer)->Append(record));
  }
  REQUIRE((*writer)->Close().ok());
}

}  // namespace ndt::test
