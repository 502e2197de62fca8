// The exported CUDA driver hooks: one function per hooked ABI variant (driver_table.h), each
// with the exact name and signature of the driver's export, forwarding to the real function
// of the same name.
//
// Every hook follows one shape (RunHook): with no real function (libcuda.so.1 not loaded) it
// fails with CUDA_ERROR_NOT_INITIALIZED; nested calls and calls while not recording pass
// straight through; otherwise it records around the real call. Nothing escapes: an exception
// from the recording code is caught here, reported once (recording stops), and the call
// still completes exactly once. No lock is held across the real call.
// Every driver function declared here is one libndtrace.so may export: default visibility
// (the build hides everything else; libndtrace.map picks the exports).
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/records.h"
#include "kernels/digest_v1.h"
#include "tracer/capture.h"
#include "tracer/driver_table.h"
#include "tracer/gpu_time.h"
#include "tracer/philox_args.h"
#include "tracer/recorder.h"

// Per-thread-default-stream variants, which cuda.h declares only under
// CUDA_API_PER_THREAD_DEFAULT_STREAM.
#pragma GCC visibility push(default)
extern "C" {
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                             unsigned block_x, unsigned block_y, unsigned block_z,
                             unsigned shared_bytes, CUstream stream, void** params, void** extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes);
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* copy);
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* copy);
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* copy, CUstream stream);
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                           CUcontext src_context, size_t bytes);
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,
                                CUcontext src_context, size_t bytes, CUstream stream);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t count);
CUresult cuMemsetD16_v2_ptds(CUdeviceptr dst, unsigned short value, size_t count);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int value, size_t count);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream);
CUresult cuMemsetD16Async_ptsz(CUdeviceptr dst, unsigned short value, size_t count,
                               CUstream stream);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream);
CUresult cuStreamSynchronize_ptsz(CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream stream);
CUresult cuEventRecord_ptsz(CUevent event, CUstream stream);
CUresult cuEventRecordWithFlags_ptsz(CUevent event, CUstream stream, unsigned flags);
CUresult cuStreamWaitEvent_ptsz(CUstream stream, CUevent event, unsigned flags);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph);
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream);
}
#pragma GCC visibility pop

namespace ndt::tracer {
namespace {

using format::Argument;
using format::BufferDigest;
using format::OpKind;
using format::OpRecord;

// The result of the real call, once it has been made.
struct RealCall {
  CUresult result = CUDA_SUCCESS;
  bool done = false;
  CUresult Set(CUresult value) {
    result = value;
    done = true;
    return value;
  }
};

template <typename Fn>
Fn Real(Hook hook) {
  return reinterpret_cast<Fn>(RealDriverFunction(hook));
}
#define NDT_REAL(name) ::ndt::tracer::Real<decltype(&::name)>(::ndt::tracer::Hook::k_##name)

// Runs a hook: `pass()` makes the real call unrecorded; `record(session, call)` records around
// it and makes the real call through `call`.
template <typename Pass, typename Record>
CUresult RunHook(const char* name, bool have_real, Pass pass, Record record) noexcept {
  if (!have_real) return CUDA_ERROR_NOT_INITIALIZED;
  HookScope scope;
  if (scope.fail_closed()) return CUDA_ERROR_UNKNOWN;
  if (scope.session() == nullptr) return pass();
  RealCall call;
  try {
    return record(*scope.session(), call);
  } catch (...) {
    ReportHookFailure(name);
    return call.done ? call.result : pass();
  }
}

uint64_t Handle(const void* handle) {
  return reinterpret_cast<uint64_t>(handle);
}

// Synchronises `stream` (of a per-thread-default-stream function when `per_thread`) through
// the real driver, never our hooks, before its memory is digested.
CUresult SyncStream(CUstream stream, bool per_thread) {
  const auto synchronize =
      per_thread ? NDT_REAL(cuStreamSynchronize_ptsz) : NDT_REAL(cuStreamSynchronize);
  return synchronize != nullptr ? synchronize(stream) : CUDA_ERROR_NOT_INITIALIZED;
}

// The handle that names `stream` of a per-thread-default-stream function when `per_thread` to
// the legacy-stream functions we call ourselves: the null stream is CU_STREAM_PER_THREAD there.
uint64_t SyncHandle(CUstream stream, bool per_thread) {
  return per_thread && stream == nullptr ? Handle(CU_STREAM_PER_THREAD) : Handle(stream);
}

// How digests reach `stream`'s work: on the GPU, or synchronising it for the CPU path. The GPU
// kernels go through the legacy-stream cuLaunchKernel: a per-thread function's null stream
// must be named explicitly.
DigestStream InStreamOrder(CUstream stream, bool per_thread) {
  return {SyncHandle(stream, per_thread),
          [stream, per_thread] { return SyncStream(stream, per_thread) == CUDA_SUCCESS; }};
}

// The digests of the whole allocations `buffers` (role, device address) reference, in
// `stream`'s order (a launch in the digest window; managed memory a launch is given).
std::vector<BufferDigest> WindowDigests(
    Session& session, CUstream stream, bool per_thread,
    const std::vector<std::pair<std::string, uint64_t>>& buffers) {
  if (buffers.empty()) return {};
  return session.DigestAllocations(buffers, InStreamOrder(stream, per_thread));
}

// What a copy or memset wrote, exactly: the `bytes` at `dst` (the rest of its allocation may be
// other tensors, written by other streams meanwhile).
std::vector<BufferDigest> WrittenDigest(Session& session, CUstream stream, bool per_thread,
                                        uint64_t dst, uint64_t bytes) {
  std::optional<BufferDigest> digest =
      session.DigestRange("dst", dst, bytes, InStreamOrder(stream, per_thread));
  if (!digest) return {};
  return {std::move(*digest)};
}

Argument Unsigned(const char* name, uint64_t value) { return Argument{name, value}; }

// The graph `stream_id` is capturing into (0: none), counting the op being recorded. An op
// recorded while its stream captures is not executed: it gets a "capturedInto" argument naming
// the graph, and no digests (its buffers are read and written when the graph launches).
uint64_t Captured(Session& session, OpRecord& op) {
  const uint64_t graph = session.objects().CaptureOf(op.stream_id, true);
  if (graph != 0) op.args.push_back(Unsigned("capturedInto", graph));
  return graph;
}

Argument Dims(const char* name, unsigned x, unsigned y, unsigned z) {
  return Argument{name, Argument::Dims{x, y, z}};
}

// The real call of `op` (an OpRecord or a RawOp), the GPU work it starts marked as the op's
// (gpu_time.h).
template <typename Op, typename Real>
CUresult CallAs(const Op& op, Real& real, bool to_host = false) {
  gpu_time::DriverScope gpu(op.sequence, op.kind, to_host);
  return real();
}

// The graph the stream of raw op `op` is capturing into, noted as its "capturedInto"
// argument; 0 when none (as Captured for an OpRecord).
uint64_t Captured(Session& session, RawOp& op) {
  const uint64_t graph = session.objects().CaptureOf(op.stream_id, true);
  if (graph != 0) op.AddUnsigned("capturedInto", graph);
  return graph;
}

// Makes the real call of raw op `op` and ends it.
template <typename Real>
CUresult CallAndEnd(Session& session, RealCall& call, RawOp& op, Real& real) {
  const CUresult result = call.Set(CallAs(op, real));
  session.EndRawOp(op, static_cast<int32_t>(result));
  return result;
}

// A copy endpoint: the canonical device pointer, or "host" (no value: host addresses differ
// between runs and are not recorded).
Argument Endpoint(const char* name, bool device, const format::DevicePointer& pointer) {
  Argument argument;
  argument.name = name;
  if (device) argument.value = pointer;
  return argument;
}

BufferDigest HostDigest(const char* role, const format::DevicePointer& pointer, const void* host,
                        uint64_t bytes) {
  BufferDigest digest;
  digest.role = role;
  digest.pointer = pointer;
  digest.bytes = bytes;
  const kernels::Digest128 value = kernels::DigestV1(bytes == 0 ? nullptr : host, bytes);
  digest.digest = {value.lo, value.hi};
  return digest;
}

// ---- recording bodies -------------------------------------------------------------------

enum class Direction { kHostToDevice, kDeviceToHost, kDeviceToDevice, kUnified };

// Any copy. `dst`/`src` are raw addresses (host or device); `Call` makes the real call.
template <typename Call>
CUresult RecordCopy(Session& session, RealCall& call, const char* name, Direction direction,
                    uint64_t dst, uint64_t src, size_t bytes, CUstream stream, bool per_thread,
                    bool async, Call real) {
  const uint32_t stream_id = async || per_thread ? session.StreamId(Handle(stream), per_thread)
                                                 : session.StreamId(0, per_thread);
  const bool dst_device = direction == Direction::kUnified ? session.IsDevice(dst)
                                                           : direction != Direction::kDeviceToHost;
  const bool src_device = direction == Direction::kUnified ? session.IsDevice(src)
                                                           : direction != Direction::kHostToDevice;
  const format::DevicePointer dst_pointer = session.Canonical(dst);
  const format::DevicePointer src_pointer = session.Canonical(src);
  if (dst_device && src_device && !session.digests().window && !CaptureAny()) {
    // Device to device outside the digest window: nothing but arguments, a raw op (raw_op.h).
    RawOp& op = session.BeginRawOp(OpKind::kMemcpy, name, stream_id);
    op.AddPointer("dst", dst_pointer);
    op.AddPointer("src", src_pointer);
    op.AddUnsigned("bytes", bytes);
    Captured(session, op);
    return CallAndEnd(session, call, op, real);
  }
  OpRecord op = session.BeginOp(OpKind::kMemcpy, name, stream_id);
  op.args.push_back(Endpoint("dst", dst_device, dst_pointer));
  op.args.push_back(Endpoint("src", src_device, src_pointer));
  op.args.push_back(Unsigned("bytes", bytes));
  const void* src_host = reinterpret_cast<const void*>(src);
  const void* dst_host = reinterpret_cast<const void*>(dst);
  if (Captured(session, op) != 0) {
    const CUresult captured = call.Set(CallAs(op, real, !dst_device));
    session.EndOp(op, static_cast<int32_t>(captured));
    return captured;
  }
  if (dst_device && !src_device) {
    // Bytes entering the GPU: digest the host source as the program handed it over.
    op.inputs.push_back(HostDigest("src", dst_pointer, src_host, bytes));
  }
  // NDTRACE_CAPTURE: what a copy into device memory reads, for window replay.
  if (dst_device && CaptureWanted(op)) {
    CaptureCopySource(session, SyncHandle(stream, per_thread), src_device, src, bytes, &op);
  }
  const CUresult result = call.Set(CallAs(op, real, !dst_device));
  if (result == CUDA_SUCCESS && src_device && dst_device &&
      session.digests().InWindow(op.sequence)) {
    op.outputs = WrittenDigest(session, stream, per_thread, dst, bytes);
  }
  if (result == CUDA_SUCCESS && src_device && !dst_device) {
    if (async) {
      // Its bytes are final only once the stream synchronises: digested then, attached to
      // that synchronize op as "dst of op N".
      session.AddPendingDigest({stream_id, op.sequence, src_pointer, dst_host, bytes});
    } else {
      op.outputs.push_back(HostDigest("dst", src_pointer, dst_host, bytes));
    }
  }
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

// Where a 2D copy's first row starts on one side, and whether that is device memory (an array:
// neither, and no address).
struct Side2D {
  uint64_t address = 0;
  bool device = false;
  bool array = false;
};

Side2D SideOf(Session& session, CUmemorytype type, const void* host, CUdeviceptr device, size_t x,
              size_t y, size_t pitch) {
  Side2D side;
  const uint64_t offset = uint64_t{x} + uint64_t{y} * pitch;
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      side.address = reinterpret_cast<uint64_t>(host) + offset;
      break;
    case CU_MEMORYTYPE_DEVICE:
      side.address = device + offset, side.device = true;
      break;
    case CU_MEMORYTYPE_UNIFIED:
      side.address = device + offset;
      side.device = session.IsDevice(side.address);
      break;
    default:
      side.array = true;
      break;
  }
  return side;
}

// The digest of `height` rows of `width` bytes, `pitch` apart in host memory, back to back; none
// when the rows cannot be gathered (memory).
std::optional<BufferDigest> HostRowsDigest(const char* role, const format::DevicePointer& pointer,
                                           uint64_t host, size_t width, size_t height,
                                           size_t pitch) {
  std::unique_ptr<unsigned char[]> rows(new (std::nothrow) unsigned char[width * height]);
  if (rows == nullptr) return std::nullopt;
  for (size_t row = 0; row < height; ++row) {
    std::memcpy(rows.get() + row * width, reinterpret_cast<const void*>(host + row * pitch), width);
  }
  return HostDigest(role, pointer, rows.get(), uint64_t{width} * height);
}

// A 2D copy (cudaMemcpy2D*, the pitched copies of extensions and image pipelines): a memcpy op
// with `bytes` (the rows' total), `width`, `height` and both pitches. The host rows entering the
// GPU are digested back to back, as are the host rows a synchronous copy leaves; a device
// destination in the digest window over the span from its first row's start to its last row's
// end (the padding between rows is memory the copy does not write). An asynchronous copy to host
// rows is digested when its stream is next synchronised, as a 1D one is: its rows back to back,
// never the padding (the program's memory, never written by the GPU). Arrays are not digested;
// window replay does not capture 2D copies.
template <typename Call>
CUresult RecordCopy2D(Session& session, RealCall& call, const char* name, const CUDA_MEMCPY2D& copy,
                      CUstream stream, bool per_thread, bool async, Call real) {
  const uint32_t stream_id = async || per_thread ? session.StreamId(Handle(stream), per_thread)
                                                 : session.StreamId(0, per_thread);
  const Side2D src = SideOf(session, copy.srcMemoryType, copy.srcHost, copy.srcDevice,
                            copy.srcXInBytes, copy.srcY, copy.srcPitch);
  const Side2D dst = SideOf(session, copy.dstMemoryType, copy.dstHost, copy.dstDevice,
                            copy.dstXInBytes, copy.dstY, copy.dstPitch);
  const size_t width = copy.WidthInBytes, height = copy.Height;
  const format::DevicePointer dst_pointer = session.Canonical(dst.address);
  const format::DevicePointer src_pointer = session.Canonical(src.address);
  OpRecord op = session.BeginOp(OpKind::kMemcpy, name, stream_id);
  op.args.push_back(Endpoint("dst", dst.device, dst_pointer));
  op.args.push_back(Endpoint("src", src.device, src_pointer));
  op.args.push_back(Unsigned("bytes", uint64_t{width} * height));
  op.args.push_back(Unsigned("width", width));
  op.args.push_back(Unsigned("height", height));
  op.args.push_back(Unsigned("dstPitch", copy.dstPitch));
  op.args.push_back(Unsigned("srcPitch", copy.srcPitch));
  size_t total = 0;  // rows the driver will refuse are not read here either
  const bool rows_valid = width > 0 && height > 0 &&
                          !__builtin_mul_overflow(width, height, &total) &&
                          (height == 1 || (copy.srcPitch >= width && copy.dstPitch >= width));
  if (Captured(session, op) != 0 || src.array || dst.array || !rows_valid) {
    const CUresult result = call.Set(CallAs(op, real, !dst.device));
    session.EndOp(op, static_cast<int32_t>(result));
    return result;
  }
  if (dst.device && !src.device) {
    if (auto digest =
            HostRowsDigest("src", dst_pointer, src.address, width, height, copy.srcPitch)) {
      op.inputs.push_back(std::move(*digest));
    }
  }
  const CUresult result = call.Set(CallAs(op, real, !dst.device));
  if (result == CUDA_SUCCESS && src.device && dst.device &&
      session.digests().InWindow(op.sequence)) {
    op.outputs = WrittenDigest(session, stream, per_thread, dst.address,
                               uint64_t{height - 1} * copy.dstPitch + width);
  }
  if (result == CUDA_SUCCESS && src.device && !dst.device) {
    if (!async) {
      if (auto digest =
              HostRowsDigest("dst", src_pointer, dst.address, width, height, copy.dstPitch)) {
        op.outputs.push_back(std::move(*digest));
      }
    } else {
      const bool rows = height > 1 && copy.dstPitch != width;
      session.AddPendingDigest(
          {stream_id, op.sequence, src_pointer, reinterpret_cast<const void*>(dst.address),
           uint64_t{width} * height, false, rows ? width : 0, rows ? copy.dstPitch : 0});
    }
  }
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

template <typename Call>
CUresult RecordMemset(Session& session, RealCall& call, const char* name, CUdeviceptr dst,
                      uint64_t value, size_t count, unsigned element_bytes, CUstream stream,
                      bool per_thread, Call real) {
  const uint32_t stream_id = session.StreamId(Handle(stream), per_thread);
  RawOp& op = session.BeginRawOp(OpKind::kMemset, name, stream_id);
  op.AddPointer("dst", session.Canonical(dst));
  op.AddUnsigned("value", value);
  op.AddUnsigned("count", count);
  op.AddUnsigned("elementBytes", element_bytes);
  const uint64_t graph = Captured(session, op);
  const CUresult result = call.Set(CallAs(op, real));
  std::vector<BufferDigest> outputs;
  if (result == CUDA_SUCCESS && graph == 0 && session.digests().InWindow(op.sequence)) {
    outputs = WrittenDigest(session, stream, per_thread, dst, uint64_t{count} * element_bytes);
  }
  session.EndRawOp(op, static_cast<int32_t>(result), std::move(outputs));
  return result;
}

// Where the `size` bytes of parameter `index` (at `offset`) of a launch are, or null.
const void* ParamAddress(void** params, void** extra, size_t index, uint64_t offset,
                         uint64_t size) {
  if (params != nullptr) return params[index];
  const char* buffer = nullptr;
  size_t buffer_bytes = 0;
  for (void** entry = extra; entry != nullptr && *entry != CU_LAUNCH_PARAM_END; entry += 2) {
    if (entry[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<const char*>(entry[1]);
    if (entry[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && entry[1] != nullptr) {
      buffer_bytes = *static_cast<const size_t*>(entry[1]);
    }
  }
  if (buffer == nullptr || offset + size > buffer_bytes) return nullptr;
  return buffer + offset;
}

// The bytes of parameter `index` of a launch, or empty.
std::string ParamBytes(void** params, void** extra, size_t index, uint64_t offset, uint64_t size) {
  const void* bytes = ParamAddress(params, extra, index, offset, size);
  return bytes != nullptr ? std::string(static_cast<const char*>(bytes), size) : std::string();
}

// "arg0".."arg63", the names of a launch's parameters (without formatting them per launch).
constexpr std::array<const char*, 64> kParamNames = [] {
  std::array<const char*, 64> names{};
  constexpr const char* kTable =
      "arg0\0arg1\0arg2\0arg3\0arg4\0arg5\0arg6\0arg7\0arg8\0arg9\0"
      "arg10\0arg11\0arg12\0arg13\0arg14\0arg15\0arg16\0arg17\0arg18\0arg19\0"
      "arg20\0arg21\0arg22\0arg23\0arg24\0arg25\0arg26\0arg27\0arg28\0arg29\0"
      "arg30\0arg31\0arg32\0arg33\0arg34\0arg35\0arg36\0arg37\0arg38\0arg39\0"
      "arg40\0arg41\0arg42\0arg43\0arg44\0arg45\0arg46\0arg47\0arg48\0arg49\0"
      "arg50\0arg51\0arg52\0arg53\0arg54\0arg55\0arg56\0arg57\0arg58\0arg59\0"
      "arg60\0arg61\0arg62\0arg63\0";
  const char* p = kTable;
  for (const char*& name : names) {
    name = p;
    while (*p != '\0') ++p;
    ++p;
  }
  return names;
}();

// Device pointers held in a launch's by-value struct parameters (PyTorch's TensorInfo and
// std::array<char*, N>, CUTLASS's Params): each 8-byte word of a parameter larger than 8 bytes
// that points into an allocation. Recorded as arguments of their own, "arg<i>@<byte offset>"
// after the parameter's bytes, so that diff compares where they point (allocation, offset), not
// the raw address, which differs from run to run (tracer/README.md, "Kernel launches").
constexpr size_t kMaxEmbeddedPointers = 24;  // per launch; more are left as bytes
constexpr size_t kEmbeddedWords = 128;       // words scanned per parameter (its first 1 KiB)

// "arg<param>@<offset>", interned once per (param, word).
const char* EmbeddedName(Session& session, size_t param, size_t word) {
  static std::array<std::atomic<const char*>, 64 * kEmbeddedWords> names{};
  std::atomic<const char*>& slot = names[param * kEmbeddedWords + word];
  const char* name = slot.load(std::memory_order_acquire);
  if (name == nullptr) {
    name = session.InternName("arg" + std::to_string(param) + "@" + std::to_string(word * 8));
    slot.store(name, std::memory_order_release);
  }
  return name;
}

// Calls `visit(name, pointer)` for each embedded pointer of parameter `index` (its bytes at
// `bytes`), while `*left` (the launch's allowance, kMaxEmbeddedPointers) lasts.
template <typename Visit>
void ForEachEmbeddedPointer(Session& session, size_t index, uint64_t offset, uint64_t size,
                            const void* bytes, size_t* left, Visit&& visit) {
  if (bytes == nullptr || size <= 8 || offset % 8 != 0 || index >= 64) return;
  const size_t words = std::min<size_t>(size / 8, kEmbeddedWords);
  for (size_t w = 0; w < words; ++w) {
    if (*left == 0) return;
    uint64_t word = 0;
    std::memcpy(&word, static_cast<const char*>(bytes) + w * 8, 8);
    if (word == 0 || !session.MayBeDevice(word)) continue;
    const format::DevicePointer pointer = session.Canonical(word);
    if (pointer.allocation_id == 0) continue;
    --*left;
    visit(EmbeddedName(session, index, w), pointer);
  }
}

// Whether a launch of `kernel` can be recorded as a RawOp: nothing in it needs an OpRecord (an
// RNG state, digests, captured blobs, a parameter layout to be described) and it fits.
bool RawLaunch(const Session& session, const KernelInfo& kernel) {
  if (!kernel.params_known || kernel.philox || session.digests().window || CaptureAny() ||
      session.HasManagedMemory()) {
    return false;
  }
  // With capturedInto, the fixed arguments and every parameter, the bytes of all of them.
  return kernel.params.size() + 5 <= RawOp::kMaxArgs && kernel.param_bytes <= RawOp::kMaxBytes;
}

// A launch on the hot path (RawLaunch): the same record RecordLaunch makes.
template <typename Call>
CUresult RecordRawLaunch(Session& session, RealCall& call, const KernelInfo& kernel,
                         const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
                         uint32_t stream_id, void** params, void** extra, unsigned attributes,
                         Call real) {
  RawOp& op = session.BeginRawOp(OpKind::kKernelLaunch, kernel.interned_name, stream_id);
  op.module_id = kernel.module_id;
  op.AddDims("grid", grid[0], grid[1], grid[2]);
  op.AddDims("block", block[0], block[1], block[2]);
  op.AddUnsigned("sharedMemBytes", shared_bytes);
  if (attributes != 0) op.AddUnsigned("launchAttributes", attributes);
  size_t embedded_left = kMaxEmbeddedPointers;
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const auto [offset, size] = kernel.params[i];
    const void* bytes = ParamAddress(params, extra, i, offset, size);
    uint64_t word = 0;
    if (bytes != nullptr && size == 8 && offset % 8 == 0) std::memcpy(&word, bytes, 8);
    if (word != 0) {
      const format::DevicePointer pointer = session.Canonical(word);
      if (pointer.allocation_id != 0) {
        op.AddPointer(kParamNames[i], pointer);
        continue;
      }
    }
    op.AddBytes(kParamNames[i], bytes, bytes != nullptr ? size : 0);
    ForEachEmbeddedPointer(session, i, offset, size, bytes, &embedded_left,
                           [&op](const char* name, const format::DevicePointer& pointer) {
                             op.AddPointer(name, pointer);
                           });
  }
  Captured(session, op);
  return CallAndEnd(session, call, op, real);
}

template <typename Call>
CUresult RecordLaunch(Session& session, RealCall& call, const char* api, CUfunction function,
                      const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
                      CUstream stream, bool per_thread, void** params, void** extra,
                      unsigned attributes, Call real) {
  const KernelInfo& kernel = session.Kernel(function);
  const uint32_t stream_id = session.StreamId(Handle(stream), per_thread);
  if (RawLaunch(session, kernel)) {
    return RecordRawLaunch(session, call, kernel, grid, block, shared_bytes, stream_id, params,
                           extra, attributes, real);
  }
  OpRecord op = session.BeginOp(OpKind::kKernelLaunch, kernel.name, stream_id);
  op.module_id = kernel.module_id;
  op.args.push_back(Dims("grid", grid[0], grid[1], grid[2]));
  op.args.push_back(Dims("block", block[0], block[1], block[2]));
  op.args.push_back(Unsigned("sharedMemBytes", shared_bytes));
  if (attributes != 0) op.args.push_back(Unsigned("launchAttributes", attributes));
  if (!kernel.params_known) {
    Argument unknown;
    unknown.name = std::string("params of ") + api;  // layout unknown: not captured
    op.args.push_back(std::move(unknown));
  }
  // PyTorch's random kernels take their RNG state as an at::PhiloxCudaState argument.
  const bool philox = kernel.philox;
  std::vector<std::string> raw;
  const size_t first_param = op.args.size();  // op.args index of parameter 0
  // Philox kernels: the op.args index of each parameter (embedded pointers lie between).
  std::vector<size_t> param_at;
  size_t embedded_left = kMaxEmbeddedPointers;
  std::vector<std::pair<const char*, format::DevicePointer>> embedded;  // one parameter's
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const auto [offset, size] = kernel.params[i];
    if (philox) param_at.push_back(op.args.size());
    Argument& argument = op.args.emplace_back();
    if (i < kParamNames.size()) {
      argument.name = kParamNames[i];
    } else {
      argument.name = "arg" + std::to_string(i);
    }
    std::string bytes = ParamBytes(params, extra, i, offset, size);
    if (philox) raw.push_back(bytes);
    uint64_t word = 0;
    if (bytes.size() == 8 && offset % 8 == 0) std::memcpy(&word, bytes.data(), 8);
    format::DevicePointer pointer;
    if (word != 0) pointer = session.Canonical(word);  // allocation id 0: in no allocation
    if (pointer.allocation_id != 0) {
      argument.value = pointer;
      continue;
    }
    embedded.clear();
    ForEachEmbeddedPointer(session, i, offset, bytes.size() == size ? size : 0, bytes.data(),
                           &embedded_left,
                           [&embedded](const char* name, const format::DevicePointer& inner) {
                             embedded.emplace_back(name, inner);
                           });
    argument.value = Argument::Bytes{std::move(bytes)};
    for (const auto& [name, inner_pointer] : embedded) {
      Argument& inner = op.args.emplace_back();
      inner.name = name;
      inner.value = inner_pointer;
    }
  }
  const uint64_t graph = Captured(session, op);
  const bool captured = graph != 0;
  const uint64_t sync_stream = SyncHandle(stream, per_thread);
  if (philox) {
    // A captured launch must not synchronise its stream (that would break the capture): its
    // graph-captured state keeps the pointers, unread; the graph remembers them, and each
    // launch of it reads the words (GraphPhiloxState).
    if (auto state =
            FindPhiloxArgument(kernel.name, kernel.params, raw,
                               captured ? DeviceWordReader() : RealDriverWordReader(sync_stream))) {
      // The state is the op's RNG state, compared as such; not its bytes as an argument.
      op.args[param_at[state->index]].value = std::string("at::PhiloxCudaState (see rng)");
      if (captured && state->captured) {
        session.objects().AddPhiloxWords(graph, state->seed_address, state->offset_address,
                                         state->offset_intragraph);
      }
      op.rng = std::move(state->state);
    }
  }
  // Inside the digest window: the referenced allocations before the launch (inputs) and after
  // it (outputs), so that diff can tell equal inputs with different outputs.
  const bool window = !captured && session.digests().InWindow(op.sequence);
  std::vector<std::pair<std::string, uint64_t>> referenced;  // pointer arguments (window only)
  if (window) {
    for (size_t i = first_param; i < op.args.size(); ++i) {
      if (const auto* pointer = std::get_if<format::DevicePointer>(&op.args[i].value)) {
        referenced.emplace_back(op.args[i].name, pointer->raw_address);
      }
    }
    op.inputs = WindowDigests(session, stream, per_thread, referenced);
  }
  // Managed memory (cuMemAllocManaged) the kernel is given: the host writes and reads it in
  // place, and no copy shows what it holds. Its bytes as the kernel finds them (in stream
  // order) are inputs; what the kernel leaves there is digested when the device next
  // synchronises, before the host can read it (TakePendingDigests).
  std::vector<std::pair<std::string, uint64_t>> managed_inputs;
  std::vector<Allocation> managed;
  if (!window && !captured && session.HasManagedMemory()) {
    for (size_t i = first_param; i < op.args.size(); ++i) {
      const auto* pointer = std::get_if<format::DevicePointer>(&op.args[i].value);
      if (pointer == nullptr) continue;
      if (std::optional<Allocation> found = session.FindManaged(pointer->raw_address)) {
        managed_inputs.emplace_back(op.args[i].name + " (managed memory)", pointer->raw_address);
        managed.push_back(*found);
      }
    }
    op.inputs = WindowDigests(session, stream, per_thread, managed_inputs);
  }
  // NDTRACE_CAPTURE: the module, arguments and referenced allocations, for standalone replay.
  const bool capture = !captured && CaptureWanted(op);
  if (capture) CaptureLaunchInputs(session, kernel, function, sync_stream, &op);
  const CUresult result = call.Set(CallAs(op, real));
  if (window && result == CUDA_SUCCESS) {
    op.outputs = WindowDigests(session, stream, per_thread, referenced);
  }
  if (capture && result == CUDA_SUCCESS) {
    CaptureLaunchOutputs(session, sync_stream, &op);
  }
  if (result == CUDA_SUCCESS) {
    for (const Allocation& allocation : managed) {
      session.AddPendingDigest({op.stream_id,
                                op.sequence,
                                {allocation.id, 0, allocation.base},
                                reinterpret_cast<const void*>(allocation.base),
                                allocation.bytes,
                                true});
    }
  }
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

template <typename Call>
CUresult RecordSynchronize(Session& session, RealCall& call, const char* name,
                           std::optional<uint32_t> stream_id, Call real) {
  OpRecord op = session.BeginOp(OpKind::kSynchronize, name, stream_id.value_or(0));
  const CUresult result = call.Set(real());
  if (result == CUDA_SUCCESS) op.outputs = session.TakePendingDigests(stream_id);
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

}  // namespace
}  // namespace ndt::tracer

using ndt::tracer::Direction;
using ndt::tracer::Hook;
using ndt::tracer::RealCall;
using ndt::tracer::Session;

// ---- allocation -------------------------------------------------------------------------

#define NDT_ALLOC_HOOK(NAME, PER_THREAD, ...)                                                \
  extern "C" CUresult NAME(CUdeviceptr* dptr, size_t bytes __VA_OPT__(, CUstream stream)) {  \
    auto real = NDT_REAL(NAME);                                                              \
    CUstream hstream = nullptr;                                                              \
    __VA_OPT__(hstream = stream;)                                                            \
    auto pass = [&] { return real(dptr, bytes __VA_OPT__(, stream)); };                      \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) { \
      const CUresult result = c.Set(pass());                                                 \
      if (result == CUDA_SUCCESS && dptr != nullptr) {                                       \
        const bool async = (__VA_OPT__(true ||) false);                                      \
        s.OnAllocate(*dptr, bytes, #NAME,                                                    \
                     async ? s.StreamId(ndt::tracer::Handle(hstream), PER_THREAD) : 0);      \
      }                                                                                      \
      return result;                                                                         \
    });                                                                                      \
  }
NDT_ALLOC_HOOK(cuMemAlloc_v2, false)
NDT_ALLOC_HOOK(cuMemAllocAsync, false, stream)
NDT_ALLOC_HOOK(cuMemAllocAsync_ptsz, true, stream)

#define NDT_FREE_HOOK(NAME, PER_THREAD, ...)                                                     \
  extern "C" CUresult NAME(CUdeviceptr dptr __VA_OPT__(, CUstream stream)) {                     \
    auto real = NDT_REAL(NAME);                                                                  \
    CUstream hstream = nullptr;                                                                  \
    __VA_OPT__(hstream = stream;)                                                                \
    auto pass = [&] { return real(dptr __VA_OPT__(, stream)); };                                 \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {     \
      const auto freeing = s.BeginFree(dptr);                                                    \
      const CUresult result = c.Set(pass());                                                     \
      const bool async = (__VA_OPT__(true ||) false);                                            \
      s.EndFree(freeing, result == CUDA_SUCCESS, #NAME,                                          \
                async ? s.StreamId(ndt::tracer::Handle(hstream), PER_THREAD) : 0);               \
      return result;                                                                             \
    });                                                                                          \
  }
NDT_FREE_HOOK(cuMemFree_v2, false)
NDT_FREE_HOOK(cuMemFreeAsync, false, stream)
NDT_FREE_HOOK(cuMemFreeAsync_ptsz, true, stream)

// ---- modules, libraries, kernels ----------------------------------------------------------

extern "C" CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  auto real = NDT_REAL(cuModuleLoadData);
  auto pass = [&] { return real(module, image); };
  return ndt::tracer::RunHook("cuModuleLoadData", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && module != nullptr) {
                                  s.OnModuleLoad(*module, "cuModuleLoadData", image);
                                  ndt::tracer::CaptureModuleLoaded(s.ModuleId(*module), image);
                                }
                                return result;
                              });
}

extern "C" CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned options,
                                       CUjit_option* option_keys, void** option_values) {
  auto real = NDT_REAL(cuModuleLoadDataEx);
  auto pass = [&] { return real(module, image, options, option_keys, option_values); };
  return ndt::tracer::RunHook("cuModuleLoadDataEx", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && module != nullptr) {
                                  s.OnModuleLoad(*module, "cuModuleLoadDataEx", image);
                                  ndt::tracer::CaptureModuleLoaded(s.ModuleId(*module), image);
                                }
                                return result;
                              });
}

extern "C" CUresult cuLibraryLoadData(CUlibrary* library, const void* code,
                                      CUjit_option* jit_options, void** jit_values,
                                      unsigned jit_count, CUlibraryOption* library_options,
                                      void** library_values, unsigned library_count) {
  auto real = NDT_REAL(cuLibraryLoadData);
  auto pass = [&] {
    return real(library, code, jit_options, jit_values, jit_count, library_options, library_values,
                library_count);
  };
  return ndt::tracer::RunHook("cuLibraryLoadData", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && library != nullptr) {
                                  s.OnModuleLoad(*library, "cuLibraryLoadData", code);
                                  ndt::tracer::CaptureModuleLoaded(s.ModuleId(*library), code);
                                }
                                return result;
                              });
}

extern "C" CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  auto real = NDT_REAL(cuModuleGetFunction);
  auto pass = [&] { return real(function, module, name); };
  return ndt::tracer::RunHook("cuModuleGetFunction", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && function != nullptr && name) {
                                  s.OnKernelHandle(*function, module, name, false);
                                }
                                return result;
                              });
}

extern "C" CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  auto real = NDT_REAL(cuLibraryGetKernel);
  auto pass = [&] { return real(kernel, library, name); };
  return ndt::tracer::RunHook("cuLibraryGetKernel", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && kernel != nullptr && name) {
                                  s.OnKernelHandle(*kernel, library, name, true);
                                }
                                return result;
                              });
}

extern "C" CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  auto real = NDT_REAL(cuKernelGetFunction);
  auto pass = [&] { return real(function, kernel); };
  return ndt::tracer::RunHook("cuKernelGetFunction", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && function != nullptr) {
                                  s.OnKernelFunction(*function, kernel);
                                }
                                return result;
                              });
}

// ---- launches -----------------------------------------------------------------------------

#define NDT_LAUNCH_HOOK(NAME, PER_THREAD)                                                         \
  extern "C" CUresult NAME(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,       \
                           unsigned block_x, unsigned block_y, unsigned block_z,                  \
                           unsigned shared_bytes, CUstream stream, void** params, void** extra) { \
    auto real = NDT_REAL(NAME);                                                                   \
    auto pass = [&] {                                                                             \
      return real(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,     \
                  params, extra);                                                                 \
    };                                                                                            \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {      \
      const unsigned grid[3] = {grid_x, grid_y, grid_z};                                          \
      const unsigned block[3] = {block_x, block_y, block_z};                                      \
      return ndt::tracer::RecordLaunch(s, c, #NAME, f, grid, block, shared_bytes, stream,         \
                                       PER_THREAD, params, extra, 0, pass);                       \
    });                                                                                           \
  }
NDT_LAUNCH_HOOK(cuLaunchKernel, false)
NDT_LAUNCH_HOOK(cuLaunchKernel_ptsz, true)

#define NDT_LAUNCH_EX_HOOK(NAME, PER_THREAD)                                                 \
  extern "C" CUresult NAME(const CUlaunchConfig* config, CUfunction f, void** params,        \
                           void** extra) {                                                   \
    auto real = NDT_REAL(NAME);                                                              \
    auto pass = [&] { return real(config, f, params, extra); };                              \
    if (config == nullptr) return real != nullptr ? pass() : CUDA_ERROR_NOT_INITIALIZED;     \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) { \
      const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};       \
      const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};   \
      return ndt::tracer::RecordLaunch(s, c, #NAME, f, grid, block, config->sharedMemBytes,  \
                                       config->hStream, PER_THREAD, params, extra,           \
                                       config->numAttrs, pass);                              \
    });                                                                                      \
  }
NDT_LAUNCH_EX_HOOK(cuLaunchKernelEx, false)
NDT_LAUNCH_EX_HOOK(cuLaunchKernelEx_ptsz, true)

// ---- copies ---------------------------------------------------------------------------------

#define NDT_COPY_HOOK(NAME, DST_T, SRC_T, DIRECTION, PER_THREAD, ASYNC, ...)                    \
  extern "C" CUresult NAME(DST_T dst, SRC_T src, size_t bytes __VA_OPT__(, CUstream stream)) {  \
    auto real = NDT_REAL(NAME);                                                                 \
    CUstream hstream = nullptr;                                                                 \
    __VA_OPT__(hstream = stream;)                                                               \
    auto pass = [&] { return real(dst, src, bytes __VA_OPT__(, stream)); };                     \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {    \
      return ndt::tracer::RecordCopy(s, c, #NAME, Direction::DIRECTION, (uint64_t)(dst),        \
                                     (uint64_t)(src), bytes, hstream, PER_THREAD, ASYNC, pass); \
    });                                                                                         \
  }
NDT_COPY_HOOK(cuMemcpyHtoD_v2, CUdeviceptr, const void*, kHostToDevice, false, false)
NDT_COPY_HOOK(cuMemcpyHtoD_v2_ptds, CUdeviceptr, const void*, kHostToDevice, true, false)
NDT_COPY_HOOK(cuMemcpyDtoH_v2, void*, CUdeviceptr, kDeviceToHost, false, false)
NDT_COPY_HOOK(cuMemcpyDtoH_v2_ptds, void*, CUdeviceptr, kDeviceToHost, true, false)
NDT_COPY_HOOK(cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr, kDeviceToDevice, false, false)
NDT_COPY_HOOK(cuMemcpyDtoD_v2_ptds, CUdeviceptr, CUdeviceptr, kDeviceToDevice, true, false)
NDT_COPY_HOOK(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void*, kHostToDevice, false, true, s)
NDT_COPY_HOOK(cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, const void*, kHostToDevice, true, true, s)
NDT_COPY_HOOK(cuMemcpyDtoHAsync_v2, void*, CUdeviceptr, kDeviceToHost, false, true, s)
NDT_COPY_HOOK(cuMemcpyDtoHAsync_v2_ptsz, void*, CUdeviceptr, kDeviceToHost, true, true, s)
NDT_COPY_HOOK(cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr, kDeviceToDevice, false, true, s)
NDT_COPY_HOOK(cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, CUdeviceptr, kDeviceToDevice, true, true, s)
NDT_COPY_HOOK(cuMemcpy, CUdeviceptr, CUdeviceptr, kUnified, false, false)
NDT_COPY_HOOK(cuMemcpy_ptds, CUdeviceptr, CUdeviceptr, kUnified, true, false)
NDT_COPY_HOOK(cuMemcpyAsync, CUdeviceptr, CUdeviceptr, kUnified, false, true, s)
NDT_COPY_HOOK(cuMemcpyAsync_ptsz, CUdeviceptr, CUdeviceptr, kUnified, true, true, s)

#define NDT_COPY_2D_HOOK(NAME, PER_THREAD, ASYNC, ...)                                        \
  extern "C" CUresult NAME(const CUDA_MEMCPY2D* copy __VA_OPT__(, CUstream stream)) {         \
    auto real = NDT_REAL(NAME);                                                               \
    CUstream hstream = nullptr;                                                               \
    __VA_OPT__(hstream = stream;)                                                             \
    auto pass = [&] { return real(copy __VA_OPT__(, stream)); };                              \
    if (copy == nullptr) return real != nullptr ? pass() : CUDA_ERROR_NOT_INITIALIZED;        \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {  \
      return ndt::tracer::RecordCopy2D(s, c, #NAME, *copy, hstream, PER_THREAD, ASYNC, pass); \
    });                                                                                       \
  }
NDT_COPY_2D_HOOK(cuMemcpy2D_v2, false, false)
NDT_COPY_2D_HOOK(cuMemcpy2D_v2_ptds, true, false)
NDT_COPY_2D_HOOK(cuMemcpy2DUnaligned_v2, false, false)
NDT_COPY_2D_HOOK(cuMemcpy2DUnaligned_v2_ptds, true, false)
NDT_COPY_2D_HOOK(cuMemcpy2DAsync_v2, false, true, s)
NDT_COPY_2D_HOOK(cuMemcpy2DAsync_v2_ptsz, true, true, s)

// Between two devices' memory (torch.nn.DataParallel's broadcast and gather, cudaMemcpyPeer*):
// recorded as a device-to-device copy; each pointer names its allocation whatever its device.
#define NDT_PEER_COPY_HOOK(NAME, PER_THREAD, ASYNC, ...)                                        \
  extern "C" CUresult NAME(CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src,             \
                           CUcontext src_context, size_t bytes __VA_OPT__(, CUstream stream)) { \
    auto real = NDT_REAL(NAME);                                                                 \
    CUstream hstream = nullptr;                                                                 \
    __VA_OPT__(hstream = stream;)                                                               \
    auto pass = [&] {                                                                           \
      return real(dst, dst_context, src, src_context, bytes __VA_OPT__(, stream));              \
    };                                                                                          \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {    \
      return ndt::tracer::RecordCopy(s, c, #NAME, Direction::kDeviceToDevice, dst, src, bytes,  \
                                     hstream, PER_THREAD, ASYNC, pass);                         \
    });                                                                                         \
  }
NDT_PEER_COPY_HOOK(cuMemcpyPeer, false, false)
NDT_PEER_COPY_HOOK(cuMemcpyPeer_ptds, true, false)
NDT_PEER_COPY_HOOK(cuMemcpyPeerAsync, false, true, s)
NDT_PEER_COPY_HOOK(cuMemcpyPeerAsync_ptsz, true, true, s)

// ---- memset ---------------------------------------------------------------------------------

#define NDT_MEMSET_HOOK(NAME, VALUE_T, PER_THREAD, ...)                                          \
  extern "C" CUresult NAME(CUdeviceptr dst, VALUE_T value,                                       \
                           size_t count __VA_OPT__(, CUstream stream)) {                         \
    auto real = NDT_REAL(NAME);                                                                  \
    CUstream hstream = nullptr;                                                                  \
    __VA_OPT__(hstream = stream;)                                                                \
    auto pass = [&] { return real(dst, value, count __VA_OPT__(, stream)); };                    \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {     \
      return ndt::tracer::RecordMemset(s, c, #NAME, dst, value, count, sizeof(VALUE_T), hstream, \
                                       PER_THREAD, pass);                                        \
    });                                                                                          \
  }
NDT_MEMSET_HOOK(cuMemsetD8_v2, unsigned char, false)
NDT_MEMSET_HOOK(cuMemsetD8_v2_ptds, unsigned char, true)
NDT_MEMSET_HOOK(cuMemsetD16_v2, unsigned short, false)
NDT_MEMSET_HOOK(cuMemsetD16_v2_ptds, unsigned short, true)
NDT_MEMSET_HOOK(cuMemsetD32_v2, unsigned int, false)
NDT_MEMSET_HOOK(cuMemsetD32_v2_ptds, unsigned int, true)
NDT_MEMSET_HOOK(cuMemsetD8Async, unsigned char, false, s)
NDT_MEMSET_HOOK(cuMemsetD8Async_ptsz, unsigned char, true, s)
NDT_MEMSET_HOOK(cuMemsetD16Async, unsigned short, false, s)
NDT_MEMSET_HOOK(cuMemsetD16Async_ptsz, unsigned short, true, s)
NDT_MEMSET_HOOK(cuMemsetD32Async, unsigned int, false, s)
NDT_MEMSET_HOOK(cuMemsetD32Async_ptsz, unsigned int, true, s)

// ---- synchronisation --------------------------------------------------------------------------

#define NDT_STREAM_SYNC_HOOK(NAME, PER_THREAD)                                               \
  extern "C" CUresult NAME(CUstream stream) {                                                \
    auto real = NDT_REAL(NAME);                                                              \
    auto pass = [&] { return real(stream); };                                                \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) { \
      return ndt::tracer::RecordSynchronize(                                                 \
          s, c, #NAME, s.StreamId(ndt::tracer::Handle(stream), PER_THREAD), pass);           \
    });                                                                                      \
  }
NDT_STREAM_SYNC_HOOK(cuStreamSynchronize, false)
NDT_STREAM_SYNC_HOOK(cuStreamSynchronize_ptsz, true)

extern "C" CUresult cuCtxSynchronize() {
  auto real = NDT_REAL(cuCtxSynchronize);
  auto pass = [&] { return real(); };
  return ndt::tracer::RunHook(
      "cuCtxSynchronize", real != nullptr, pass, [&](Session& s, RealCall& c) {
        return ndt::tracer::RecordSynchronize(s, c, "cuCtxSynchronize", std::nullopt, pass);
      });
}

extern "C" CUresult cuCtxSynchronize_v2(CUcontext context) {
  auto real = NDT_REAL(cuCtxSynchronize_v2);
  auto pass = [&] { return real(context); };
  return ndt::tracer::RunHook(
      "cuCtxSynchronize_v2", real != nullptr, pass, [&](Session& s, RealCall& c) {
        return ndt::tracer::RecordSynchronize(s, c, "cuCtxSynchronize_v2", std::nullopt, pass);
      });
}

// ---- more allocators: pools, managed, pitched, virtual memory mappings ---------------------------

#define NDT_POOL_ALLOC_HOOK(NAME, PER_THREAD)                                                      \
  extern "C" CUresult NAME(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) { \
    auto real = NDT_REAL(NAME);                                                                    \
    auto pass = [&] { return real(dptr, bytes, pool, stream); };                                   \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {       \
      const CUresult result = c.Set(pass());                                                       \
      if (result == CUDA_SUCCESS && dptr != nullptr) {                                             \
        s.OnAllocate(*dptr, bytes, #NAME, s.StreamId(ndt::tracer::Handle(stream), PER_THREAD));    \
      }                                                                                            \
      return result;                                                                               \
    });                                                                                            \
  }
NDT_POOL_ALLOC_HOOK(cuMemAllocFromPoolAsync, false)
NDT_POOL_ALLOC_HOOK(cuMemAllocFromPoolAsync_ptsz, true)

extern "C" CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned flags) {
  auto real = NDT_REAL(cuMemAllocManaged);
  auto pass = [&] { return real(dptr, bytes, flags); };
  return ndt::tracer::RunHook("cuMemAllocManaged", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && dptr != nullptr) {
                                  s.OnAllocate(*dptr, bytes, "cuMemAllocManaged", 0);
                                }
                                return result;
                              });
}

extern "C" CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes,
                                       size_t height, unsigned element_bytes) {
  auto real = NDT_REAL(cuMemAllocPitch_v2);
  auto pass = [&] { return real(dptr, pitch, width_bytes, height, element_bytes); };
  return ndt::tracer::RunHook("cuMemAllocPitch_v2", real != nullptr, pass,
                              [&](Session& s, RealCall& c) {
                                const CUresult result = c.Set(pass());
                                if (result == CUDA_SUCCESS && dptr != nullptr && pitch != nullptr) {
                                  s.OnAllocate(*dptr, *pitch * height, "cuMemAllocPitch_v2", 0);
                                }
                                return result;
                              });
}

// A mapped range of a virtual address reservation is an allocation from cuMemMap to cuMemUnmap.
extern "C" CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags) {
  auto real = NDT_REAL(cuMemMap);
  auto pass = [&] { return real(ptr, size, offset, handle, flags); };
  return ndt::tracer::RunHook("cuMemMap", real != nullptr, pass, [&](Session& s, RealCall& c) {
    const CUresult result = c.Set(pass());
    if (result == CUDA_SUCCESS) s.OnAllocate(ptr, size, "cuMemMap", 0);
    return result;
  });
}

extern "C" CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto real = NDT_REAL(cuMemUnmap);
  auto pass = [&] { return real(ptr, size); };
  return ndt::tracer::RunHook("cuMemUnmap", real != nullptr, pass, [&](Session& s, RealCall& c) {
    const auto unmapping = s.BeginFree(ptr);
    const CUresult result = c.Set(pass());
    s.EndFree(unmapping, result == CUDA_SUCCESS, "cuMemUnmap", 0);
    return result;
  });
}

// ---- streams and events -----------------------------------------------------------------------
//
// Creating and destroying streams and events, recording and waiting on events are ops (kOther)
// on their stream, naming events by id ("event"); cuEventSynchronize is a host synchronisation
// (kSynchronize) on the stream the event was last recorded on, taking the digests of the
// asynchronous copies issued there before that record.

namespace ndt::tracer {
namespace {

template <typename Call>
CUresult RecordStreamCreate(Session& session, RealCall& call, const char* name, CUstream* stream,
                            unsigned flags, int priority, Call real) {
  const CUresult result = call.Set(real());
  const uint32_t stream_id =
      result == CUDA_SUCCESS && stream != nullptr ? session.OnStreamCreated(Handle(*stream)) : 0;
  OpRecord op = session.BeginOp(OpKind::kOther, name, stream_id);
  op.args.push_back(Unsigned("flags", flags));
  Argument priority_argument;
  priority_argument.name = "priority";
  priority_argument.value = int64_t{priority};
  op.args.push_back(std::move(priority_argument));
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

// Event records and waits are raw ops (raw_op.h): a framework issues them around every
// cross-stream use of memory.
template <typename Call>
CUresult RecordEventRecord(Session& session, RealCall& call, const char* name, CUevent event,
                           CUstream stream, bool per_thread, std::optional<unsigned> flags,
                           Call real) {
  const uint32_t stream_id = session.StreamId(Handle(stream), per_thread);
  RawOp& op = session.BeginRawOp(OpKind::kOther, name, stream_id);
  op.AddUnsigned("event", session.objects().EventId(Handle(event)));
  if (flags) op.AddUnsigned("flags", *flags);
  const uint64_t graph = Captured(session, op);
  const CUresult result = call.Set(real());
  if (result == CUDA_SUCCESS) {
    session.objects().OnEventRecord(Handle(event), {true, stream_id, op.sequence, graph});
  }
  session.EndRawOp(op, static_cast<int32_t>(result));
  return result;
}

template <typename Call>
CUresult RecordStreamWaitEvent(Session& session, RealCall& call, const char* name,
                               CUstream stream, bool per_thread, CUevent event, unsigned flags,
                               Call real) {
  const uint32_t stream_id = session.StreamId(Handle(stream), per_thread);
  RawOp& op = session.BeginRawOp(OpKind::kOther, name, stream_id);
  op.AddUnsigned("event", session.objects().EventId(Handle(event)));
  const DriverObjects::EventRecord recorded = session.objects().LastRecord(Handle(event));
  if (recorded.recorded) op.AddUnsigned("eventStream", recorded.stream_id);
  op.AddUnsigned("flags", flags);
  // Waiting on an event recorded inside a capture forks this stream into it: the wait is the
  // first op captured here.
  if (recorded.graph != 0) session.objects().JoinCapture(stream_id, recorded.graph);
  Captured(session, op);
  const CUresult result = call.Set(real());
  session.EndRawOp(op, static_cast<int32_t>(result));
  return result;
}

}  // namespace
}  // namespace ndt::tracer

#define NDT_STREAM_CREATE_HOOK(NAME, PARAMS, FLAGS, PRIORITY, ...)                             \
  extern "C" CUresult NAME PARAMS {                                                            \
    auto real = NDT_REAL(NAME);                                                                \
    auto pass = [&] { return real(__VA_ARGS__); };                                             \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {   \
      return ndt::tracer::RecordStreamCreate(s, c, #NAME, stream, FLAGS, PRIORITY, pass);      \
    });                                                                                        \
  }
NDT_STREAM_CREATE_HOOK(cuStreamCreate, (CUstream * stream, unsigned flags), flags, 0, stream,
                       flags)
NDT_STREAM_CREATE_HOOK(cuStreamCreateWithPriority,
                       (CUstream * stream, unsigned flags, int priority), flags, priority, stream,
                       flags, priority)

extern "C" CUresult cuStreamDestroy_v2(CUstream stream) {
  auto real = NDT_REAL(cuStreamDestroy_v2);
  auto pass = [&] { return real(stream); };
  return ndt::tracer::RunHook(
      "cuStreamDestroy_v2", real != nullptr, pass, [&](Session& s, RealCall& c) {
        const uint64_t handle = ndt::tracer::Handle(stream);
        ndt::format::OpRecord op =
            s.BeginOp(ndt::format::OpKind::kOther, "cuStreamDestroy_v2", s.StreamId(handle, false));
        const CUresult result = c.Set(pass());
        // A later stream at the same handle is another stream; built-in handles are not destroyed.
        if (result == CUDA_SUCCESS && op.stream_id != 0) s.RetireStream(handle);
        s.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

extern "C" CUresult cuEventCreate(CUevent* event, unsigned flags) {
  auto real = NDT_REAL(cuEventCreate);
  auto pass = [&] { return real(event, flags); };
  return ndt::tracer::RunHook("cuEventCreate", real != nullptr, pass, [&](Session& s, RealCall& c) {
    const CUresult result = c.Set(pass());
    ndt::format::OpRecord op = s.BeginOp(ndt::format::OpKind::kOther, "cuEventCreate", 0);
    if (result == CUDA_SUCCESS && event != nullptr) {
      op.args.push_back(
          ndt::tracer::Unsigned("event", s.objects().EventId(ndt::tracer::Handle(*event))));
    }
    op.args.push_back(ndt::tracer::Unsigned("flags", flags));
    s.EndOp(op, static_cast<int32_t>(result));
    return result;
  });
}

extern "C" CUresult cuEventDestroy_v2(CUevent event) {
  auto real = NDT_REAL(cuEventDestroy_v2);
  auto pass = [&] { return real(event); };
  return ndt::tracer::RunHook(
      "cuEventDestroy_v2", real != nullptr, pass, [&](Session& s, RealCall& c) {
        const uint64_t handle = ndt::tracer::Handle(event);
        ndt::format::OpRecord op = s.BeginOp(ndt::format::OpKind::kOther, "cuEventDestroy_v2", 0);
        op.args.push_back(ndt::tracer::Unsigned("event", s.objects().EventId(handle)));
        const CUresult result = c.Set(pass());
        if (result == CUDA_SUCCESS) s.objects().RetireEvent(handle);
        s.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

#define NDT_EVENT_RECORD_HOOK(NAME, PER_THREAD)                                                \
  extern "C" CUresult NAME(CUevent event, CUstream stream) {                                   \
    auto real = NDT_REAL(NAME);                                                                \
    auto pass = [&] { return real(event, stream); };                                           \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {   \
      return ndt::tracer::RecordEventRecord(s, c, #NAME, event, stream, PER_THREAD,            \
                                            std::nullopt, pass);                               \
    });                                                                                        \
  }
NDT_EVENT_RECORD_HOOK(cuEventRecord, false)
NDT_EVENT_RECORD_HOOK(cuEventRecord_ptsz, true)

#define NDT_EVENT_RECORD_FLAGS_HOOK(NAME, PER_THREAD)                                              \
  extern "C" CUresult NAME(CUevent event, CUstream stream, unsigned flags) {                       \
    auto real = NDT_REAL(NAME);                                                                    \
    auto pass = [&] { return real(event, stream, flags); };                                        \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {       \
      return ndt::tracer::RecordEventRecord(s, c, #NAME, event, stream, PER_THREAD, flags, pass); \
    });                                                                                            \
  }
NDT_EVENT_RECORD_FLAGS_HOOK(cuEventRecordWithFlags, false)
NDT_EVENT_RECORD_FLAGS_HOOK(cuEventRecordWithFlags_ptsz, true)

#define NDT_STREAM_WAIT_EVENT_HOOK(NAME, PER_THREAD)                                             \
  extern "C" CUresult NAME(CUstream stream, CUevent event, unsigned flags) {                     \
    auto real = NDT_REAL(NAME);                                                                  \
    auto pass = [&] { return real(stream, event, flags); };                                      \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {     \
      return ndt::tracer::RecordStreamWaitEvent(s, c, #NAME, stream, PER_THREAD, event, flags,   \
                                                pass);                                           \
    });                                                                                          \
  }
NDT_STREAM_WAIT_EVENT_HOOK(cuStreamWaitEvent, false)
NDT_STREAM_WAIT_EVENT_HOOK(cuStreamWaitEvent_ptsz, true)

extern "C" CUresult cuEventSynchronize(CUevent event) {
  auto real = NDT_REAL(cuEventSynchronize);
  auto pass = [&] { return real(event); };
  return ndt::tracer::RunHook(
      "cuEventSynchronize", real != nullptr, pass, [&](Session& s, RealCall& c) {
        const uint64_t handle = ndt::tracer::Handle(event);
        const ndt::tracer::DriverObjects::EventRecord recorded = s.objects().LastRecord(handle);
        ndt::format::OpRecord op =
            s.BeginOp(ndt::format::OpKind::kSynchronize, "cuEventSynchronize", recorded.stream_id);
        op.args.push_back(ndt::tracer::Unsigned("event", s.objects().EventId(handle)));
        const CUresult result = c.Set(pass());
        if (result == CUDA_SUCCESS && recorded.recorded && recorded.graph == 0) {
          op.outputs = s.TakePendingDigests(recorded.stream_id, recorded.op_sequence);
        }
        s.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

// ---- graphs -------------------------------------------------------------------------------------
//
// A stream capture is bracketed by ops naming the graph it makes ("graph": its id); what is
// recorded in between on the capturing streams carries "capturedInto". Instantiation names the
// graph, the executable graph ("graphExec") and its node count (the driver's cuGraphGetNodes);
// each cuGraphLaunch is an op of kind kGraphLaunch with the three.

#define NDT_BEGIN_CAPTURE_HOOK(NAME, PER_THREAD)                                                 \
  extern "C" CUresult NAME(CUstream stream, CUstreamCaptureMode mode) {                          \
    auto real = NDT_REAL(NAME);                                                                  \
    auto pass = [&] { return real(stream, mode); };                                              \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {     \
      ndt::format::OpRecord op = s.BeginOp(ndt::format::OpKind::kOther, #NAME,                   \
                                           s.StreamId(ndt::tracer::Handle(stream), PER_THREAD)); \
      op.args.push_back(ndt::tracer::Unsigned("mode", static_cast<uint64_t>(mode)));             \
      const CUresult result = c.Set(pass());                                                     \
      if (result == CUDA_SUCCESS) {                                                              \
        op.args.push_back(                                                                       \
            ndt::tracer::Unsigned("graph", s.objects().BeginCapture(op.stream_id)));             \
      }                                                                                          \
      s.EndOp(op, static_cast<int32_t>(result));                                                 \
      return result;                                                                             \
    });                                                                                          \
  }
NDT_BEGIN_CAPTURE_HOOK(cuStreamBeginCapture_v2, false)
NDT_BEGIN_CAPTURE_HOOK(cuStreamBeginCapture_v2_ptsz, true)

#define NDT_END_CAPTURE_HOOK(NAME, PER_THREAD)                                                   \
  extern "C" CUresult NAME(CUstream stream, CUgraph* graph) {                                    \
    auto real = NDT_REAL(NAME);                                                                  \
    auto pass = [&] { return real(stream, graph); };                                             \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {     \
      ndt::format::OpRecord op = s.BeginOp(ndt::format::OpKind::kOther, #NAME,                   \
                                           s.StreamId(ndt::tracer::Handle(stream), PER_THREAD)); \
      const CUresult result = c.Set(pass());                                                     \
      const uint64_t handle =                                                                    \
          result == CUDA_SUCCESS && graph != nullptr ? ndt::tracer::Handle(*graph) : 0;          \
      uint64_t captured_ops = 0;                                                                 \
      const uint64_t id = s.objects().EndCapture(op.stream_id, handle, &captured_ops);           \
      if (id != 0) {                                                                             \
        op.args.push_back(ndt::tracer::Unsigned("graph", id));                                   \
        op.args.push_back(ndt::tracer::Unsigned("capturedOps", captured_ops));                   \
      }                                                                                          \
      s.EndOp(op, static_cast<int32_t>(result));                                                 \
      return result;                                                                             \
    });                                                                                          \
  }
NDT_END_CAPTURE_HOOK(cuStreamEndCapture, false)
NDT_END_CAPTURE_HOOK(cuStreamEndCapture_ptsz, true)

namespace ndt::tracer {
namespace {

// A launch of an executable graph whose launches read PyTorch's graph-captured Philox state
// from `words`: the seed and base offset the replay has written there (PyTorch fills them on
// this stream just before cuGraphLaunch), read through the real driver after synchronising
// `stream`, become the op's RNG state {"philox", seed, offset}; the launches' intragraph offsets
// are the argument "philoxIntragraph". Nothing is read while any stream captures (a
// synchronisation would invalidate the capture) nor when the copy fails: the state is then
// {"philox:captured", 0, 0}. Call inside the hook's scope.
void GraphPhiloxState(Session& session, const DriverObjects::PhiloxWords& words, CUstream stream,
                      bool per_thread, OpRecord& op) {
  Argument intragraph;
  intragraph.name = "philoxIntragraph";
  intragraph.value = IntragraphOffsetsText(words.offsets_intragraph);
  op.args.push_back(std::move(intragraph));
  std::optional<format::RngState> state;
  if (!session.objects().AnyCapture()) {
    state = ReadPhiloxWords(words.seed_address, words.offset_address,
                            RealDriverWordReader(SyncHandle(stream, per_thread)));
  }
  if (!state) {
    state.emplace();
    state->generator = "philox:captured";
  }
  op.rng = std::move(state);
}

// The number of nodes of `graph`, from the real driver; 0 when it cannot say.
uint64_t GraphNodeCount(CUgraph graph) {
  using GetNodesFn = CUresult (*)(CUgraph, CUgraphNode*, size_t*);
  const auto get_nodes = reinterpret_cast<GetNodesFn>(DriverProc("cuGraphGetNodes", 10000));
  size_t count = 0;
  if (get_nodes == nullptr || get_nodes(graph, nullptr, &count) != CUDA_SUCCESS) return 0;
  return count;
}

}  // namespace
}  // namespace ndt::tracer

extern "C" CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                unsigned long long flags) {
  auto real = NDT_REAL(cuGraphInstantiateWithFlags);
  auto pass = [&] { return real(exec, graph, flags); };
  return ndt::tracer::RunHook(
      "cuGraphInstantiateWithFlags", real != nullptr, pass, [&](Session& s, RealCall& c) {
        ndt::format::OpRecord op =
            s.BeginOp(ndt::format::OpKind::kOther, "cuGraphInstantiateWithFlags", 0);
        const uint64_t graph_id = s.objects().GraphId(ndt::tracer::Handle(graph));
        op.args.push_back(ndt::tracer::Unsigned("graph", graph_id));
        op.args.push_back(ndt::tracer::Unsigned("flags", flags));
        const CUresult result = c.Set(pass());
        if (result == CUDA_SUCCESS && exec != nullptr) {
          const uint64_t nodes = ndt::tracer::GraphNodeCount(graph);
          op.args.push_back(ndt::tracer::Unsigned(
              "graphExec", s.objects().OnInstantiate(ndt::tracer::Handle(*exec), graph_id, nodes)));
          op.args.push_back(ndt::tracer::Unsigned("nodes", nodes));
        }
        s.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

#define NDT_GRAPH_LAUNCH_HOOK(NAME, PER_THREAD)                                                  \
  extern "C" CUresult NAME(CUgraphExec exec, CUstream stream) {                                  \
    auto real = NDT_REAL(NAME);                                                                  \
    auto pass = [&] { return real(exec, stream); };                                              \
    return ndt::tracer::RunHook(#NAME, real != nullptr, pass, [&](Session& s, RealCall& c) {     \
      const ndt::tracer::DriverObjects::Exec info =                                              \
          s.objects().FindExec(ndt::tracer::Handle(exec));                                       \
      ndt::format::OpRecord op = s.BeginOp(ndt::format::OpKind::kGraphLaunch, #NAME,             \
                                           s.StreamId(ndt::tracer::Handle(stream), PER_THREAD)); \
      op.args.push_back(ndt::tracer::Unsigned("graphExec", info.id));                            \
      op.args.push_back(ndt::tracer::Unsigned("graph", info.graph));                             \
      op.args.push_back(ndt::tracer::Unsigned("nodes", info.nodes));                             \
      ndt::tracer::Captured(s, op);                                                              \
      if (!info.philox.empty()) {                                                                \
        ndt::tracer::GraphPhiloxState(s, info.philox.front(), stream, PER_THREAD, op);           \
      }                                                                                          \
      const CUresult result = c.Set(ndt::tracer::CallAs(op, pass));                              \
      s.EndOp(op, static_cast<int32_t>(result));                                                 \
      return result;                                                                             \
    });                                                                                          \
  }
NDT_GRAPH_LAUNCH_HOOK(cuGraphLaunch, false)
NDT_GRAPH_LAUNCH_HOOK(cuGraphLaunch_ptsz, true)

extern "C" CUresult cuGraphExecDestroy(CUgraphExec exec) {
  auto real = NDT_REAL(cuGraphExecDestroy);
  auto pass = [&] { return real(exec); };
  return ndt::tracer::RunHook(
      "cuGraphExecDestroy", real != nullptr, pass, [&](Session& s, RealCall& c) {
        const uint64_t handle = ndt::tracer::Handle(exec);
        ndt::format::OpRecord op = s.BeginOp(ndt::format::OpKind::kOther, "cuGraphExecDestroy", 0);
        op.args.push_back(ndt::tracer::Unsigned("graphExec", s.objects().FindExec(handle).id));
        const CUresult result = c.Set(pass());
        if (result == CUDA_SUCCESS) s.objects().RetireExec(handle);
        s.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

extern "C" CUresult cuGraphDestroy(CUgraph graph) {
  auto real = NDT_REAL(cuGraphDestroy);
  auto pass = [&] { return real(graph); };
  return ndt::tracer::RunHook("cuGraphDestroy", real != nullptr, pass, [&](Session& s, RealCall& c) {
    const uint64_t handle = ndt::tracer::Handle(graph);
    ndt::format::OpRecord op = s.BeginOp(ndt::format::OpKind::kOther, "cuGraphDestroy", 0);
    op.args.push_back(ndt::tracer::Unsigned("graph", s.objects().GraphId(handle)));
    const CUresult result = c.Set(pass());
    if (result == CUDA_SUCCESS) s.objects().RetireGraph(handle);
    s.EndOp(op, static_cast<int32_t>(result));
    return result;
  });
}

// ---- the table driver_table.cc maps real pointers with ----------------------------------------

namespace ndt::tracer {

const char* const kHookNames[kHookCount] = {
#define NDT_HOOK_NAME(name) #name,
    NDT_HOOKED_DRIVER_FUNCTIONS(NDT_HOOK_NAME)
#undef NDT_HOOK_NAME
};

void* const kHookWrappers[kHookCount] = {
#define NDT_HOOK_WRAPPER(name) reinterpret_cast<void*>(&::name),
    NDT_HOOKED_DRIVER_FUNCTIONS(NDT_HOOK_WRAPPER)
#undef NDT_HOOK_WRAPPER
};

}  // namespace ndt::tracer
