// RawOp: an op record of fixed size, for the hooks' hot path (memsets, kernel launches).
//
// It has no heap member: a hook fills its thread's RawOp with plain stores (names are pointers
// to static or interned strings, values are words, a launch's parameter bytes are copied inline),
// the thread's record ring copies the header into a slot and the arguments and bytes in use into
// the ring's byte arena, and whoever encodes the ring hands them to the writer as they are (a
// format::OpView pointing into the arena: View). The trace is the same as if the hook had built
// the OpRecord itself (ToOpRecord builds it, for ops that need one); what no thread does any more
// is the building: strings, argument vectors and variants.
//
// A library op's many arguments (a GEMM has twenty-odd, text among them) take another way: the
// hook copies the call's facts, a plain struct, into the bytes and names the function that turns
// them into arguments and an algorithm (SetFacts); whoever encodes the op builds its OpRecord
// and calls it. The hook's own path calls the same function, so both ways give the same record.
//
// An op that does not fit (more than kMaxArgs arguments or kMaxBytes of parameter bytes), or
// that needs what only an OpRecord holds (digests, an RNG state, captured blobs), is recorded
// the usual way (Session::BeginOp/EndOp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "formats/op_view.h"
#include "formats/records.h"

namespace ndt::tracer {

struct RawOpHeader {
  // Adds the op's arguments (and algorithm) to `op` from the facts at `facts` (RawOp::SetFacts);
  // runs on whichever thread encodes the op. Null: the arguments are the raw op's own.
  using BuildFn = void (*)(const unsigned char* facts, format::OpRecord& op);

  const char* name;  // static storage or Session::InternName: lives as long as the process
  BuildFn build;
  uint64_t sequence;
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t module_id;
  uint64_t nvtx_range_id;
  uint64_t inside;  // the op open on this thread when this one began (a library call), or 0
  uint32_t thread_id;
  uint32_t stream_id;
  int32_t status;
  format::OpKind kind;
  uint16_t arg_count;
  uint16_t bytes_used;
};

struct RawOp : RawOpHeader {
  // A launch's fixed arguments and up to 35 parameters, 1 KiB of their bytes (a PyTorch
  // TensorIterator kernel's offset calculators take about 600): a thread's RawOp is part of the
  // static TLS of every thread of a preloaded process, so it stays small. Launches with more
  // take the OpRecord path.
  static constexpr size_t kMaxArgs = 40;
  static constexpr size_t kMaxBytes = 1024;

  // An argument as the writer takes it (its name in static storage or interned); kBytes:
  // offset and size in the op's bytes.
  using Arg = format::OpView::Arg;
  using Type = Arg::Type;

  Arg args[kMaxArgs];
  unsigned char bytes[kMaxBytes];

  // Each returns false, adding nothing, when the op is full.
  bool AddUnsigned(const char* arg_name, uint64_t value) {
    return Add(arg_name, Type::kUnsigned, value, 0, 0);
  }
  bool AddSigned(const char* arg_name, int64_t value) {
    return Add(arg_name, Type::kSigned, static_cast<uint64_t>(value), 0, 0);
  }
  bool AddPointer(const char* arg_name, const format::DevicePointer& pointer) {
    return Add(arg_name, Type::kPointer, pointer.allocation_id, pointer.offset,
               pointer.raw_address);
  }
  bool AddDims(const char* arg_name, unsigned x, unsigned y, unsigned z) {
    return Add(arg_name, Type::kDims, x, y, z);
  }
  bool AddBytes(const char* arg_name, const void* data, size_t size) {
    const size_t at = bytes_used;
    if (arg_count == kMaxArgs || at > kMaxBytes || size > kMaxBytes - at) return false;
    if (size != 0) std::memcpy(&bytes[at], data, size);
    args[arg_count++] = {arg_name, at, size, 0, Type::kBytes};
    bytes_used = static_cast<uint16_t>(at + size);
    return true;
  }

  // Makes `facts` the op's bytes, and its builder one that calls `Add(facts, op)`: the function
  // the hook's own path uses to add the same arguments. Call on an op with no argument or byte
  // yet (as BeginRawOp returns it), instead of adding any.
  template <auto Add, typename Facts>
  void SetFacts(const Facts& facts) {
    static_assert(std::is_trivially_copyable_v<Facts> && sizeof(Facts) <= kMaxBytes);
    arg_count = 0;
    std::memcpy(bytes, &facts, sizeof(Facts));
    bytes_used = sizeof(Facts);
    build = [](const unsigned char* stored, format::OpRecord& op) {
      Facts copy;  // the arena is 8-byte aligned; Facts may want more
      std::memcpy(&copy, stored, sizeof(Facts));
      Add(copy, op);
    };
  }

  // Bytes the arguments and parameter bytes in use take, packed (PackBody).
  size_t BodyBytes() const { return arg_count * sizeof(Arg) + bytes_used; }

 private:
  bool Add(const char* arg_name, Type type, uint64_t a, uint64_t b, uint64_t c) {
    if (arg_count == kMaxArgs) return false;
    args[arg_count++] = {arg_name, a, b, c, type};
    return true;
  }
};

// Starts `op` afresh (no argument, no byte).
void ResetRawOp(RawOp& op, format::OpKind kind, const char* name, uint32_t stream_id);

// Writes the arguments and bytes of `op` in use to `out` (BodyBytes() bytes, 8-byte aligned).
void PackBody(const RawOp& op, unsigned char* out);

// The op as the writer takes it, from a raw op's header and its body as PackBody wrote it (which
// it points into); for a header without `build` (SetFacts), whose arguments are all in the body.
format::OpView View(const RawOpHeader& header, const unsigned char* body);

// The op record of the same fields, into `op` (every field set; the capacity of its strings and
// vectors reused), from a raw op's header and its body as PackBody wrote it.
void ToOpRecord(const RawOpHeader& header, const unsigned char* body, format::OpRecord& op);
// The same from a whole RawOp.
void ToOpRecord(const RawOp& raw, format::OpRecord& op);

}  // namespace ndt::tracer
