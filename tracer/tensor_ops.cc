// Framework ops with exact tensor digests: what ndtrace's Python shim says of a PyTorch op's
// tensors (`--tensor-digests`, tools/python/sitecustomize.py), as an op record of its own.
//
// A raw kernel's outputs are known to the tracer only as whole allocations, and a caching
// allocator keeps many tensors in one allocation (a segment): a digest of the segment takes in
// neighbouring tensors that another stream, thread or the next batch wrote. The shim knows each
// aten op's tensors, so it tells the tracer their extents (first to last element):
//   ndtrace_tensor_op_begin  as the op starts: its input tensors, digested in stream order;
//   ndtrace_tensor_op_end    as it returns: its name and output tensors (the same call
//                            digests them) — one OpKind::kFrameworkOp record with both.
// The GPU work the op issued in between is recorded as ops of their own, before this one, and
// the record names the op's innermost NVTX range (the shim's aten op range, still open).
//
// A tensor in a device allocation the tracer knows is digested as a library op's extent is
// (DigestExtents: on the GPU in stream order, or by a copy). A tensor the shim says lives in
// host memory is digested on the host: a CPU tensor passed to a GPU op (a scalar), and every
// tensor of a CPU op, which is recorded as well (on stream 0's lane of its thread), so that a
// program whose PyTorch work runs on the CPU (no GPU, a CPU-only build, its data pipeline) is
// compared op by op too. Any other tensor (a device address the tracer does not know) is left
// out, and the record says so (`tensorsLeftOut`). Begin/end pairs nest per thread.
//
// These are no CUDA calls: they never fail the program (a failure is said once and recording
// stops, as in a hook) and return 0, or -1 when nothing was recorded for the call.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/records.h"
#include "kernels/digest_v1.h"
#include "tracer/library_support.h"
#include "tracer/recorder.h"

namespace ndt::tracer {
namespace {

// One tensor as the shim passes it.
struct Tensor {
  std::string role;
  uint64_t address;
  uint64_t bytes;
  int32_t dtype;  // format::DType
  bool host;      // the shim says it is host memory
};

// An op's tensors on one side (inputs or outputs), digested.
struct Digested {
  std::vector<format::BufferDigest> digests;
  uint64_t left_out = 0;
};

// Begun ops of this thread, innermost last.
thread_local std::vector<Digested> t_pending;

format::DType DTypeOf(int32_t code) {
  return code > 0 && code <= static_cast<int32_t>(format::DType::kBool)
             ? static_cast<format::DType>(code)
             : format::DType::kUnknown;
}

format::BufferDigest HostDigest(const Tensor& tensor) {
  format::BufferDigest digest;
  digest.role = tensor.role;
  digest.pointer = {0, tensor.address, tensor.address};
  digest.bytes = tensor.bytes;
  const kernels::Digest128 value =
      kernels::DigestV1(reinterpret_cast<const void*>(tensor.address), tensor.bytes);
  digest.digest = {value.lo, value.hi};
  digest.dtype = DTypeOf(tensor.dtype);
  if (digest.dtype == format::DType::kF32 && tensor.bytes <= kSummaryMaxBytes) {
    digest.summary =
        SummarizeF32Values(reinterpret_cast<const unsigned char*>(tensor.address), tensor.bytes);
  }
  return digest;
}

// Digests the host tensors of `tensors` now and the device ones in the order of `stream`.
Digested DigestTensors(Session& session, uint64_t stream, const std::vector<Tensor>& tensors) {
  Digested result;
  std::vector<Extent> device;
  for (const Tensor& tensor : tensors) {
    if (tensor.bytes == 0) continue;
    const std::optional<Allocation> allocation = session.FindAllocation(tensor.address);
    if (allocation && tensor.bytes <= allocation->bytes - (tensor.address - allocation->base)) {
      device.push_back({tensor.role, tensor.address, tensor.bytes, DTypeOf(tensor.dtype)});
    } else if (tensor.host) {
      result.digests.push_back(HostDigest(tensor));
    } else {
      ++result.left_out;
    }
  }
  if (!device.empty()) {
    std::vector<format::BufferDigest> digests = DigestExtents(session, stream, device);
    result.left_out += device.size() - digests.size();
    for (format::BufferDigest& digest : digests) result.digests.push_back(std::move(digest));
  }
  return result;
}

// The tensors as the shim packs them: `count` roles, NUL-separated, in the `roles_bytes` bytes
// at `roles`; `count` triples of little-endian 64-bit words at `packed` (any alignment): the
// tensor's address, its extent in bytes, and dtype | host << 16 (dtype: a format::DType code;
// host: 1 when the tensor is host memory). A role missing from `roles` is empty.
std::vector<Tensor> TensorsOf(int count, const char* roles, size_t roles_bytes,
                              const void* packed) {
  std::vector<Tensor> tensors;
  if (count <= 0 || count > 4096 || packed == nullptr) return tensors;
  tensors.reserve(static_cast<size_t>(count));
  size_t at = 0;
  for (int i = 0; i < count; ++i) {
    uint64_t words[3];
    std::memcpy(words, static_cast<const unsigned char*>(packed) + 24 * i, sizeof(words));
    Tensor tensor;
    if (roles != nullptr && at < roles_bytes) {
      const char* role = roles + at;
      const size_t length = strnlen(role, roles_bytes - at);
      tensor.role.assign(role, length);
      at += length + 1;
    }
    tensor.address = words[0];
    tensor.bytes = words[1];
    tensor.dtype = static_cast<int32_t>(words[2] & 0xFFFF);
    tensor.host = ((words[2] >> 16) & 1) != 0;
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

}  // namespace
}  // namespace ndt::tracer

using namespace ndt::tracer;

// As a framework op starts: its input tensors (`count` of them, packed as TensorsOf reads
// them), digested in the order of `stream` (a CUstream handle, 0 = the legacy stream). Pairs
// with ndtrace_tensor_op_end.
extern "C" __attribute__((visibility("default"))) int ndtrace_tensor_op_begin(
    uint64_t stream, int count, const char* roles, size_t roles_bytes, const void* packed) {
  try {
    t_pending.emplace_back();
    HookScope scope;
    if (scope.session() == nullptr) return -1;
    t_pending.back() =
        DigestTensors(*scope.session(), stream, TensorsOf(count, roles, roles_bytes, packed));
    return 0;
  } catch (...) {
    ReportHookFailure("ndtrace_tensor_op_begin");
    return -1;
  }
}

// As the framework op `name` returns: its output tensors, as for ndtrace_tensor_op_begin.
// Records the op (inputs from the matching begin). A null `name` ends the innermost begun op
// without a record (the op raised).
extern "C" __attribute__((visibility("default"))) int ndtrace_tensor_op_end(
    const char* name, uint64_t stream, int count, const char* roles, size_t roles_bytes,
    const void* packed) {
  try {
    if (t_pending.empty()) return -1;  // an end without its begin
    Digested inputs = std::move(t_pending.back());
    t_pending.pop_back();
    if (name == nullptr) return -1;  // the op failed: nothing to record
    HookScope scope;
    Session* session = scope.session();
    if (session == nullptr) return -1;
    Digested outputs =
        DigestTensors(*session, stream, TensorsOf(count, roles, roles_bytes, packed));
    ndt::format::OpRecord op =
        session->BeginOp(ndt::format::OpKind::kFrameworkOp, name, session->StreamId(stream, false));
    op.inputs = std::move(inputs.digests);
    op.outputs = std::move(outputs.digests);
    if (inputs.left_out + outputs.left_out != 0) {
      op.args.push_back(UnsignedArgument("tensorsLeftOut", inputs.left_out + outputs.left_out));
    }
    session->EndOp(op, 0);
    return 0;
  } catch (...) {
    ReportHookFailure("ndtrace_tensor_op_end");
    return -1;
  }
}
