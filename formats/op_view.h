// OpView: an op record that owns nothing, for a writer whose ops are plain structs of words and
// pointers (the tracer's hot path, tracer/raw_op.h). Appending one writes the bytes the
// OpRecord with the same fields would (codec::AppendRecord), without building that OpRecord's
// strings, argument vector and variants first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/records.h"

namespace ndt::format {

struct OpView {
  struct Arg {
    enum class Type : uint8_t { kUnsigned, kSigned, kPointer, kDims, kBytes };
    const char* name;  // NUL-terminated; "" is an unnamed argument
    uint64_t a, b, c;  // kUnsigned, kSigned (two's complement): a. kPointer: allocation id,
                       // offset, raw address. kDims: x, y, z. kBytes: offset and size in
                       // `bytes`.
    Type type;
  };

  const char* name = "";  // NUL-terminated
  uint64_t sequence = 0;
  uint32_t thread_id = 0;
  uint32_t stream_id = 0;
  OpKind kind = OpKind::kOther;
  const Arg* args = nullptr;
  size_t arg_count = 0;
  const unsigned char* bytes = nullptr;  // the kBytes arguments' bytes
  // Not 0: one more argument after `args`, "insideOp", unsigned (the op this one began in).
  uint64_t inside = 0;
  int32_t status = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t module_id = 0;
  uint64_t nvtx_range_id = 0;
};

}  // namespace ndt::format
