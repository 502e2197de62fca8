#include "tracer/raw_op.h"

namespace ndt::tracer {

void ResetRawOp(RawOp& op, format::OpKind kind, const char* name, uint32_t stream_id) {
  RawOpHeader& header = op;
  header = RawOpHeader{};
  header.name = name;
  header.stream_id = stream_id;
  header.kind = kind;
}

void PackBody(const RawOp& op, unsigned char* out) {
  const size_t args = op.arg_count * sizeof(RawOp::Arg);
  std::memcpy(out, op.args, args);
  std::memcpy(out + args, op.bytes, op.bytes_used);
}

format::OpView View(const RawOpHeader& header, const unsigned char* body) {
  format::OpView view;
  view.name = header.name;
  view.sequence = header.sequence;
  view.thread_id = header.thread_id;
  view.stream_id = header.stream_id;
  view.kind = header.kind;
  view.args = reinterpret_cast<const RawOp::Arg*>(body);
  view.arg_count = header.arg_count;
  view.bytes = body + header.arg_count * sizeof(RawOp::Arg);
  view.inside = header.inside;
  view.status = header.status;
  view.start_ns = header.start_ns;
  view.end_ns = header.end_ns;
  view.module_id = header.module_id;
  view.nvtx_range_id = header.nvtx_range_id;
  return view;
}

void ToOpRecord(const RawOpHeader& header, const unsigned char* body, format::OpRecord& op) {
  using format::Argument;
  const format::OpView view = View(header, body);
  op.sequence = view.sequence;
  op.thread_id = view.thread_id;
  op.stream_id = view.stream_id;
  op.kind = view.kind;
  op.name.assign(view.name);
  op.args.resize(view.arg_count);
  for (size_t i = 0; i < view.arg_count; ++i) {
    const RawOp::Arg& from = view.args[i];
    Argument& to = op.args[i];
    to.name.assign(from.name);
    switch (from.type) {
      case RawOp::Type::kUnsigned:
        to.value = from.a;
        break;
      case RawOp::Type::kSigned:
        to.value = static_cast<int64_t>(from.a);
        break;
      case RawOp::Type::kPointer:
        to.value = format::DevicePointer{from.a, from.b, from.c};
        break;
      case RawOp::Type::kDims: {
        auto* dims = std::get_if<Argument::Dims>(&to.value);
        if (dims == nullptr) dims = &to.value.emplace<Argument::Dims>();
        dims->assign({static_cast<int64_t>(from.a), static_cast<int64_t>(from.b),
                      static_cast<int64_t>(from.c)});
        break;
      }
      case RawOp::Type::kBytes: {
        auto* data = std::get_if<Argument::Bytes>(&to.value);
        if (data == nullptr) data = &to.value.emplace<Argument::Bytes>();
        data->data.assign(reinterpret_cast<const char*>(view.bytes + from.a), from.b);
        break;
      }
    }
  }
  op.algorithm.reset();
  op.rng.reset();
  op.inputs.clear();
  op.outputs.clear();
  op.status = view.status;
  op.start_ns = view.start_ns;
  op.end_ns = view.end_ns;
  op.module_id = view.module_id;
  op.device_ordinal = 0;
  op.nvtx_range_id = view.nvtx_range_id;
  if (header.build != nullptr) header.build(view.bytes, op);
  if (view.inside != 0) {
    Argument& inside = op.args.emplace_back();
    inside.name.assign("insideOp");
    inside.value = view.inside;
  }
}

void ToOpRecord(const RawOp& raw, format::OpRecord& op) {
  // The body packed as a ring's arena holds it.
  alignas(RawOp::Arg) unsigned char body[sizeof(RawOp::args) + RawOp::kMaxBytes];
  PackBody(raw, body);
  ToOpRecord(static_cast<const RawOpHeader&>(raw), body, op);
}

}  // namespace ndt::tracer
