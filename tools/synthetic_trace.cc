#include "tools/synthetic_trace.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ndt::tools {
namespace {

using format::AlgorithmChoice;
using format::Argument;
using format::BufferDigest;
using format::DType;
using format::OpKind;
using format::OpRecord;

constexpr int kMaxThreads = 256;
constexpr int kMaxStreams = 64;
constexpr uint64_t kMaxSteps = uint64_t{1} << 40;

// Ops one thread issues per step; EmitStep checks it issued exactly this many.
constexpr uint64_t kOpsPerStep = 23;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t state = a * 0x9e3779b97f4a7c15ull + b;
  return SplitMix64(state);
}

// A seeded splitmix64 stream.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return SplitMix64(state_); }
  // Uniform in [lo, hi].
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  format::Digest NextDigest() {
    format::Digest digest;
    digest.lo = Next();
    digest.hi = Next();
    return digest;
  }

 private:
  uint64_t state_;
};

// The device buffers each thread works on: a tiny CNN classifier's tensors.
enum Buffer : int {
  kBatch,      // input images, 256x3x32x32 f32
  kLabels,     // 256 i64
  kConvW,      // 64x3x3x3 f32
  kAct1,       // 256x64x32x32 f32
  kAct2,       // 256x64x32x32 f32
  kMask,       // dropout mask, 256x64x32x32 bool
  kFcW,        // 10x65536 f32
  kLogits,     // 256x10 f32
  kGrad,       // activation gradients (+ weight gradients at an offset)
  kWorkspace,  // library workspace and small scratch
  kBufferCount,
};

struct BufferInfo {
  const char* role;
  uint64_t bytes;
  DType dtype;
};

constexpr uint64_t kActBytes = uint64_t{256} * 64 * 32 * 32 * 4;
constexpr std::array<BufferInfo, kBufferCount> kBuffers = {{
    {"x", uint64_t{256} * 3 * 32 * 32 * 4, DType::kF32},
    {"labels", 256 * 8, DType::kI64},
    {"w", 64 * 3 * 3 * 3 * 4, DType::kF32},
    {"act", kActBytes, DType::kF32},
    {"act", kActBytes, DType::kF32},
    {"mask", kActBytes / 4, DType::kBool},
    {"fc_w", uint64_t{10} * 65536 * 4, DType::kF32},
    {"logits", 256 * 10 * 4, DType::kF32},
    {"grad", kActBytes + (uint64_t{4} << 20), DType::kF32},
    {"workspace", uint64_t{32} << 20, DType::kU8},
}};
// Weight gradients live in kGrad at this offset.
constexpr uint64_t kWeightGradOffset = kActBytes;
constexpr uint64_t kRawBase = 0x7f3a00000000ull;

uint64_t AllocationId(int thread, int buffer) {
  return 1 + static_cast<uint64_t>(thread) * kBufferCount + buffer;
}

// Allocations are laid out back to back, 2 MiB aligned, as a caching allocator would.
uint64_t RawAddress(int thread, int buffer) {
  uint64_t address = kRawBase;
  for (int t = 0; t <= thread; ++t) {
    for (int b = 0; b < kBufferCount && (t < thread || b < buffer); ++b) {
      address += (kBuffers[b].bytes + (uint64_t{2} << 20) - 1) & ~((uint64_t{2} << 20) - 1);
    }
  }
  return address;
}

constexpr const char* kFill =
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)";
constexpr const char* kBnStats =
    "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, "
    "float, int>(at::GenericPackedTensorAccessor<float const, 3, at::RestrictPtrTraits, int>, "
    "float, float, at::GenericPackedTensorAccessor<float, 1, at::RestrictPtrTraits, int>, "
    "at::GenericPackedTensorAccessor<float, 1, at::RestrictPtrTraits, int>)";
constexpr const char* kBnTransform =
    "void at::native::batch_norm_transform_input_kernel<float, float, float, true, int>("
    "at::GenericPackedTensorAccessor<float const, 3, at::RestrictPtrTraits, int>, "
    "at::GenericPackedTensorAccessor<float, 3, at::RestrictPtrTraits, int>, "
    "at::GenericPackedTensorAccessor<float const, 1, at::RestrictPtrTraits, int>, "
    "at::GenericPackedTensorAccessor<float const, 1, at::RestrictPtrTraits, int>, float)";
constexpr const char* kRelu =
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::"
    "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::"
    "clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}::"
    "operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
    "at::detail::Array<char*, 2>)";
constexpr const char* kDropout =
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned "
    "int, 1, 4, bool>(at::cuda::detail::TensorInfo<float const, unsigned int>, "
    "at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<bool, "
    "unsigned int>, unsigned int, float, at::PhiloxCudaState)";
constexpr const char* kSoftmax =
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)";
constexpr const char* kNll =
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
    "float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, "
    "long, long)";
constexpr const char* kNllBackward =
    "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, "
    "long>(float*, float const*, long const*, float const*, float const*, bool, int, int, "
    "long, long)";
constexpr const char* kSoftmaxBackward =
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, "
    "float const*, int)";
constexpr const char* kMaskedScale =
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "masked_scale_kernel<bool, float, float>(at::Tensor&, at::Tensor const&, at::Tensor "
    "const&, float)::{lambda(float, bool)#1}, at::detail::Array<char*, 3> >(int, "
    "at::native::(anonymous namespace)::masked_scale_kernel<bool, float, float>(at::Tensor&, "
    "at::Tensor const&, at::Tensor const&, float)::{lambda(float, bool)#1}, "
    "at::detail::Array<char*, 3>)";
constexpr const char* kThresholdBackward =
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, "
    "float)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::"
    "threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, "
    "float)#1}, at::detail::Array<char*, 3>)";
constexpr const char* kReduceSum =
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::"
    "operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >("
    "at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<"
    "float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
    "unsigned int, float, 4>)";
constexpr const char* kAdam =
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
    "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)0, false>, double*, double, "
    "double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
    "(at::native::ADAM_MODE)0, false>, double*, double, double, double, double, double, bool, "
    "float*, float*)";

constexpr std::array<const char*, 13> kKernelNames = {
    kFill, kBnStats,     kBnTransform,     kRelu,        kDropout,           kSoftmax,
    kNll,  kNllBackward, kSoftmaxBackward, kMaskedScale, kThresholdBackward, kReduceSum,
    kAdam};

constexpr uint64_t kModuleId = 1;

Argument Dims(const char* name, std::vector<int64_t> dims) {
  Argument argument;
  argument.name = name;
  argument.value = std::move(dims);
  return argument;
}

Argument Unsigned(const char* name, uint64_t value) {
  Argument argument;
  argument.name = name;
  argument.value = value;
  return argument;
}

Argument Signed(const char* name, int64_t value) {
  Argument argument;
  argument.name = name;
  argument.value = value;
  return argument;
}

Argument Real(const char* name, double value) {
  Argument argument;
  argument.name = name;
  argument.value = value;
  return argument;
}

Argument Text(const char* name, std::string value) {
  Argument argument;
  argument.name = name;
  argument.value = std::move(value);
  return argument;
}

format::DevicePointer Pointer(int thread, int buffer, uint64_t offset = 0) {
  format::DevicePointer pointer;
  pointer.allocation_id = AllocationId(thread, buffer);
  pointer.offset = offset;
  pointer.raw_address = RawAddress(thread, buffer) + offset;
  return pointer;
}

// cuDNN backend engine ids as the engine heuristics report them; engine 0 of a wgrad
// graph uses atomics (CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC), engine 1 does not.
AlgorithmChoice CudnnEngine(int64_t engine, std::vector<format::Knob> knobs,
                            format::Determinism determinism, format::ChoiceSource source) {
  AlgorithmChoice choice;
  choice.library = "cudnn";
  choice.id = engine;
  choice.name = "engine " + std::to_string(engine);
  choice.knobs = std::move(knobs);
  choice.determinism = determinism;
  choice.source = source;
  return choice;
}

// A byte range of one of a thread's buffers, as an op reads or writes it. bytes = 0 means
// to the end of the buffer.
struct Extent {
  const char* role;
  int buffer;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The digest of the last write to a part of a buffer.
struct Part {
  uint64_t offset;
  uint64_t bytes;
  format::Digest digest;
};

// Appends the records of one thread. Not shared between threads.
class ThreadEmitter {
 public:
  ThreadEmitter(format::TraceWriter& writer, const SyntheticOptions& options, int thread,
                std::atomic<uint64_t>& next_sequence, std::chrono::steady_clock::time_point start)
      : writer_(writer),
        options_(options),
        thread_(thread),
        next_sequence_(next_sequence),
        start_(start),
        time_rng_(Mix(options.seed, 0x71e5ull + thread)) {
    for (int b = 0; b < kBufferCount; ++b) {
      current_[b] = Rng(Mix(options.seed, AllocationId(thread, b))).NextDigest();
    }
    const uint64_t base = 1 + static_cast<uint64_t>(thread) * options.streams;
    compute_stream_ = static_cast<uint32_t>(base);
    copy_stream_ = static_cast<uint32_t>(base + options.streams - 1);
    side_streams_ = options.streams > 2 ? options.streams - 2 : 0;
    philox_seed_ = Mix(options.seed, 0x9b1f0000ull + thread) >> 16;
    curand_seed_ = Mix(options.seed, 0xc0a40000ull + thread) >> 16;
  }

  Status Run() {
    for (uint64_t step = 0; step < options_.steps; ++step) {
      EmitStep(step);
      if (!writer_.status().ok()) return writer_.status();
    }
    return Status::Ok();
  }

 private:
  uint64_t Elapsed() const {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - start_)
                                     .count());
  }

  // Host time moves on by `gap_ns` of simulated work, or to real time if that is later.
  uint64_t Advance(uint64_t gap_ns) {
    clock_ns_ = std::max(clock_ns_ + gap_ns, Elapsed());
    return clock_ns_;
  }

  uint32_t SideStream(int k) const {
    if (side_streams_ == 0) return compute_stream_;
    return compute_stream_ + 1 + static_cast<uint32_t>(k % side_streams_);
  }

  void Nvtx(bool push, std::string name) {
    format::NvtxRangeRecord range;
    range.thread_id = static_cast<uint32_t>(thread_);
    range.push = push;
    range.kind = push ? format::NvtxEvent::kPush : format::NvtxEvent::kPop;
    range.name = std::move(name);
    range.before_op = next_sequence_.load(std::memory_order_relaxed);
    range.time_ns = Advance(200);
    writer_.Append(range);
  }

  OpRecord NewOp(OpKind kind, std::string name, uint32_t stream) {
    OpRecord op;
    op.kind = kind;
    op.name = std::move(name);
    op.stream_id = stream;
    op.thread_id = static_cast<uint32_t>(thread_);
    return op;
  }

  // The digest a read of `extent` sees: the last write of exactly that extent, else one
  // derived from the buffer's current content.
  BufferDigest Read(const Extent& extent) {
    BufferDigest digest = Describe(extent);
    const int b = extent.buffer;
    if (IsWhole(extent)) {
      digest.digest = current_[b];
    } else if (auto part = FindPart(extent); part != parts_[b].end()) {
      digest.digest = part->digest;
    } else {
      digest.digest = {Mix(current_[b].lo, extent.offset * 31 + digest.bytes),
                       Mix(current_[b].hi, extent.offset * 31 + digest.bytes)};
    }
    return digest;
  }

  // A write gives the extent fresh content: a fresh digest and, for f32 tensors, a numeric
  // summary of plausible activations.
  BufferDigest Write(const Extent& extent) {
    BufferDigest digest = Describe(extent);
    const int b = extent.buffer;
    digest.digest = rng_.NextDigest();
    if (IsWhole(extent)) {
      current_[b] = digest.digest;
      parts_[b].clear();
    } else {
      const uint64_t end = extent.offset + digest.bytes;
      std::erase_if(parts_[b], [&](const Part& part) {
        return part.offset < end && extent.offset < part.offset + part.bytes;
      });
      parts_[b].push_back({extent.offset, digest.bytes, digest.digest});
      current_[b].lo ^= digest.digest.lo;  // a partial write changes the whole buffer
      current_[b].hi += digest.digest.hi;
    }
    if (digest.dtype == DType::kF32) {
      const uint64_t count = digest.bytes / 4;
      const double spread = 0.5 + 4.0 * rng_.Unit();
      digest.summary.count = count;
      digest.summary.min = -spread * (0.5 + rng_.Unit());
      digest.summary.max = spread * (0.5 + rng_.Unit());
      digest.summary.sum = (rng_.Unit() - 0.5) * spread * 1e-3 * static_cast<double>(count);
    }
    return digest;
  }

  BufferDigest Describe(const Extent& extent) const {
    BufferDigest digest;
    digest.role = extent.role;
    digest.pointer = Pointer(thread_, extent.buffer, extent.offset);
    digest.bytes = extent.bytes != 0 ? extent.bytes : kBuffers[extent.buffer].bytes - extent.offset;
    digest.dtype = kBuffers[extent.buffer].dtype;
    return digest;
  }

  static bool IsWhole(const Extent& extent) {
    return extent.offset == 0 &&
           (extent.bytes == 0 || extent.bytes == kBuffers[extent.buffer].bytes);
  }

  std::vector<Part>::const_iterator FindPart(const Extent& extent) const {
    const std::vector<Part>& parts = parts_[extent.buffer];
    return std::find_if(parts.begin(), parts.end(), [&](const Part& part) {
      return part.offset == extent.offset && part.bytes == Describe(extent).bytes;
    });
  }

  // Digests the inputs (before the op ran), then the outputs, stamps sequence and times,
  // and appends the op. Without `record_digests` the buffers' contents still change but the
  // op carries no digests (a raw kernel outside a bisect window).
  void Issue(OpRecord& op, const std::vector<Extent>& inputs, const std::vector<Extent>& outputs,
             uint64_t host_ns, bool record_digests = true) {
    for (const Extent& extent : inputs) {
      BufferDigest digest = Read(extent);
      if (record_digests) op.inputs.push_back(std::move(digest));
    }
    for (const Extent& extent : outputs) {
      BufferDigest digest = Write(extent);
      if (record_digests) op.outputs.push_back(std::move(digest));
    }
    op.sequence = next_sequence_.fetch_add(1, std::memory_order_relaxed);
    op.start_ns = Advance(time_rng_.Between(300, 1500));
    op.end_ns = op.start_ns + host_ns + time_rng_.Between(0, host_ns / 4);
    clock_ns_ = op.end_ns;
    last_sequence_ = op.sequence;
    ++issued_in_step_;
    writer_.Append(op);
    // Its GPU time, as CUPTI reports it after the call returned.
    const auto gpu_kind = op.kind == OpKind::kKernelLaunch ? format::GpuActivityKind::kKernel
                          : op.kind == OpKind::kMemcpy     ? format::GpuActivityKind::kMemcpy
                          : op.kind == OpKind::kMemset     ? format::GpuActivityKind::kMemset
                                                           : std::optional<format::GpuActivityKind>{};
    if (gpu_kind) {
      format::GpuActivityRecord activity;
      activity.kind = *gpu_kind;
      activity.op_sequence = op.sequence;
      activity.start_ns = op.end_ns + time_rng_.Between(1000, 5000);
      activity.end_ns = activity.start_ns + host_ns;
      activity.device_stream = op.stream_id;
      writer_.Append(activity);
    }
  }

  void Kernel(const char* name, std::vector<int64_t> grid, std::vector<int64_t> block,
              std::vector<Argument> params, const std::vector<Extent>& inputs,
              const std::vector<Extent>& outputs, uint32_t stream = 0,
              std::optional<format::RngState> rng = std::nullopt) {
    OpRecord op = NewOp(OpKind::kKernelLaunch, name, stream != 0 ? stream : compute_stream_);
    op.args.push_back(Dims("grid", std::move(grid)));
    op.args.push_back(Dims("block", std::move(block)));
    op.args.push_back(Unsigned("sharedMemBytes", 0));
    for (Argument& param : params) op.args.push_back(std::move(param));
    op.rng = std::move(rng);
    op.module_id = kModuleId;
    Issue(op, inputs, outputs, 3500, options_.kernel_digests);
  }

  Argument Param(int index, int buffer, uint64_t offset = 0) const {
    return PointerArg("arg" + std::to_string(index), buffer, offset);
  }

  Argument PointerArg(std::string name, int buffer, uint64_t offset = 0) const {
    Argument argument;
    argument.name = std::move(name);
    argument.value = Pointer(thread_, buffer, offset);
    return argument;
  }

  void CudnnExecute(const char* what, uint64_t plan, AlgorithmChoice choice,
                    const std::vector<Extent>& inputs, const std::vector<Extent>& outputs,
                    uint32_t stream) {
    OpRecord op = NewOp(OpKind::kCudnnBackendExecute, "cudnnBackendExecute", stream);
    op.args.push_back(Text("graph", what));
    op.args.push_back(Unsigned("executionPlan", plan));
    op.args.push_back(Signed("workspaceSize", 8 << 20));
    op.args.push_back(PointerArg("workspace", kWorkspace));
    op.algorithm = std::move(choice);
    Issue(op, inputs, outputs, 9000);
  }

  void LtMatmul(int64_t m, int64_t n, int64_t k, const char* transa, const char* transb,
                int64_t algo_id, const std::vector<Extent>& inputs,
                const std::vector<Extent>& outputs, uint32_t stream) {
    OpRecord op = NewOp(OpKind::kCublasLtMatmul, "cublasLtMatmul", stream);
    op.args.push_back(Text("transa", transa));
    op.args.push_back(Text("transb", transb));
    op.args.push_back(Signed("m", m));
    op.args.push_back(Signed("n", n));
    op.args.push_back(Signed("k", k));
    op.args.push_back(Text("computeType", "CUBLAS_COMPUTE_32F"));
    op.args.push_back(Real("alpha", 1.0));
    op.args.push_back(Real("beta", 0.0));
    op.args.push_back(Unsigned("workspaceSizeInBytes", 4 << 20));
    AlgorithmChoice choice;
    choice.library = "cublasLt";
    choice.id = algo_id;
    choice.name = "algo " + std::to_string(algo_id);
    // The 64-byte cublasLtMatmulAlgo_t: the same shape gets the same algo every step.
    Rng algo_rng(Mix(options_.seed, static_cast<uint64_t>(algo_id * 131 + m + n + k)));
    choice.opaque.resize(64);
    for (size_t i = 0; i < choice.opaque.size(); i += 8) {
      const uint64_t word = algo_rng.Next() & 0x000000ff000f00ffull;
      for (size_t j = 0; j < 8; ++j) choice.opaque[i + j] = static_cast<char>(word >> (8 * j));
    }
    choice.determinism = format::Determinism::kDeterministic;
    choice.source = format::ChoiceSource::kHeuristic;
    op.algorithm = std::move(choice);
    Issue(op, inputs, outputs, 7000);
  }

  void EmitStep(uint64_t step) {
    rng_ = Rng(Mix(Mix(options_.seed, static_cast<uint64_t>(thread_)), step));
    issued_in_step_ = 0;
    const int64_t act_elems = static_cast<int64_t>(kActBytes / 4);
    const uint64_t fc_in_bytes = uint64_t{256} * 65536 * 4;  // kAct2 seen as 256x65536
    const uint64_t conv_dw_offset = kWeightGradOffset + kBuffers[kFcW].bytes;
    constexpr uint64_t kNoiseCount = 65536;

    Nvtx(true, "step " + std::to_string(step));
    if (thread_ == 0 && step == 0) {
      format::TracerNote note;
      note.severity = format::Severity::kWarning;
      note.text =
          "synthetic note: CUPTI is held by another subscriber; recording from ndtrace's own "
          "hooks only";
      note.before_op = next_sequence_.load(std::memory_order_relaxed);
      note.time_ns = Advance(100);
      writer_.Append(note);
    }

    // Host-to-device copies of the batch.
    for (int buffer : {kBatch, kLabels}) {
      OpRecord copy = NewOp(OpKind::kMemcpy, "cuMemcpyHtoDAsync_v2", copy_stream_);
      copy.args = {PointerArg("dstDevice", buffer), Unsigned("ByteCount", kBuffers[buffer].bytes)};
      Issue(copy, {}, {{kBuffers[buffer].role, buffer}}, 4000);
    }

    Nvtx(true, "forward");
    Kernel(kFill, {65535, 1, 1}, {128, 1, 1}, {Signed("arg0", act_elems), Param(1, kGrad)}, {},
           {{"out", kGrad}});
    CudnnExecute("conv_fprop", 1,
                 CudnnEngine(3, {{0, 2}, {3, 1}, {13, 1}}, format::Determinism::kDeterministic,
                             format::ChoiceSource::kHeuristic),
                 {{"x", kBatch}, {"w", kConvW}}, {{"y", kAct1}}, compute_stream_);
    Kernel(kBnStats, {64, 1, 1}, {32, 16, 1}, {Param(0, kAct1), Real("arg1", 1e-5)},
           {{"input", kAct1}}, {{"save_mean", kWorkspace, 0, 512}});
    Kernel(kBnTransform, {64, 16, 1}, {32, 16, 1},
           {Param(0, kAct1), Param(1, kAct2), Param(2, kWorkspace)},
           {{"input", kAct1}, {"save_mean", kWorkspace, 0, 512}}, {{"output", kAct2}});
    Kernel(kRelu, {65535, 1, 1}, {128, 1, 1}, {Signed("arg0", act_elems)}, {{"self", kAct2}},
           {{"out", kAct1}});
    format::RngState philox;
    philox.generator = "philox";
    philox.seed = philox_seed_;
    philox.offset = step * 16;  // PyTorch advances the offset in multiples of 4
    Kernel(kDropout, {1056, 1, 1}, {256, 1, 1},
           {Param(0, kAct1), Param(1, kAct2), Param(2, kMask),
            Unsigned("arg3", static_cast<uint64_t>(act_elems)), Real("arg4", 0.9)},
           {{"self", kAct1}}, {{"out", kAct2}, {"mask", kMask}}, compute_stream_, philox);
    LtMatmul(10, 256, 65536, "T", "N", 21, {{"A", kFcW}, {"B", kAct2, 0, fc_in_bytes}},
             {{"D", kLogits}}, compute_stream_);
    Kernel(kSoftmax, {256, 1, 1}, {32, 1, 1}, {Param(0, kLogits), Signed("arg1", 10)},
           {{"input", kLogits}}, {{"output", kLogits}});
    Kernel(kNll, {1, 1, 1}, {32, 1, 1},
           {Param(0, kWorkspace, 1024), Param(1, kLogits), Param(2, kLabels)},
           {{"input", kLogits}, {"target", kLabels}}, {{"loss", kWorkspace, 1024, 4}});
    Nvtx(false, "");

    Nvtx(true, "backward");
    Kernel(kNllBackward, {1, 1, 1}, {32, 1, 1}, {Param(0, kLogits), Param(1, kLabels)},
           {{"target", kLabels}}, {{"grad_input", kLogits}});
    Kernel(kSoftmaxBackward, {256, 1, 1}, {32, 1, 1}, {Param(0, kLogits), Signed("arg1", 10)},
           {{"grad_output", kLogits}}, {{"grad_input", kLogits}});
    LtMatmul(65536, 256, 10, "N", "N", 6, {{"A", kFcW}, {"B", kLogits}},
             {{"D", kGrad, 0, fc_in_bytes}}, compute_stream_);
    LtMatmul(65536, 10, 256, "N", "T", 11, {{"A", kAct2, 0, fc_in_bytes}, {"B", kLogits}},
             {{"D", kGrad, kWeightGradOffset, kBuffers[kFcW].bytes}}, SideStream(0));
    Kernel(kMaskedScale, {65535, 1, 1}, {128, 1, 1},
           {Signed("arg0", act_elems), Param(1, kGrad), Param(2, kMask)},
           {{"grad", kGrad, 0, kActBytes}, {"mask", kMask}}, {{"out", kGrad, 0, kActBytes}});
    Kernel(kThresholdBackward, {65535, 1, 1}, {128, 1, 1},
           {Signed("arg0", act_elems), Param(1, kGrad), Param(2, kAct1)},
           {{"grad", kGrad, 0, kActBytes}, {"self", kAct1}}, {{"out", kGrad, 0, kActBytes}});
    CudnnExecute("conv_wgrad", 2,
                 CudnnEngine(0, {{0, 0}, {5, 4}}, format::Determinism::kNondeterministic,
                             format::ChoiceSource::kBenchmark),
                 {{"x", kBatch}, {"dy", kGrad, 0, kActBytes}},
                 {{"dw", kGrad, conv_dw_offset, kBuffers[kConvW].bytes}}, SideStream(1));
    if (thread_ == 0 && step == 0) {
      format::PolicyDecisionRecord decision;
      decision.op_sequence = last_sequence_;
      decision.library = "cudnn";
      decision.action =
          "kept nondeterministic engine 0 (policy observe); --deterministic would use engine 1";
      decision.from_choice =
          CudnnEngine(0, {{0, 0}, {5, 4}}, format::Determinism::kNondeterministic,
                      format::ChoiceSource::kBenchmark);
      decision.to_choice = CudnnEngine(1, {{0, 0}}, format::Determinism::kDeterministic,
                                       format::ChoiceSource::kEnforced);
      decision.applied = false;
      writer_.Append(decision);
    }
    Kernel(kReduceSum, {64, 1, 1}, {32, 16, 1}, {Param(0, kGrad), Param(1, kWorkspace, 2048)},
           {{"self", kGrad, 0, kActBytes}}, {{"result", kWorkspace, 2048, 256}}, SideStream(2));
    Nvtx(false, "");

    Nvtx(true, "optimizer");
    OpRecord noise = NewOp(OpKind::kCurandGenerate, "curandGenerateNormal", compute_stream_);
    noise.args = {PointerArg("outputPtr", kWorkspace, 4096), Unsigned("n", kNoiseCount),
                  Real("mean", 0.0), Real("stddev", 1e-3)};
    format::RngState curand;
    curand.generator = "curand:PHILOX4_32_10";
    curand.seed = curand_seed_;
    curand.offset = step * kNoiseCount;
    curand.ordering = "PSEUDO_DEFAULT";
    noise.rng = curand;
    Issue(noise, {}, {{"outputPtr", kWorkspace, 4096, kNoiseCount * 4}}, 5000);
    Kernel(kAdam, {2, 1, 1}, {512, 1, 1},
           {Param(0, kConvW), Param(1, kFcW), Param(2, kGrad, kWeightGradOffset),
            Real("arg3", 1e-3), Real("arg4", 0.9), Real("arg5", 0.999)},
           {{"fc_grad", kGrad, kWeightGradOffset, kBuffers[kFcW].bytes},
            {"conv_grad", kGrad, conv_dw_offset, kBuffers[kConvW].bytes},
            {"noise", kWorkspace, 4096, kNoiseCount * 4}},
           {{"params", kConvW}, {"params", kFcW}});
    OpRecord clear = NewOp(OpKind::kMemset, "cuMemsetD32Async", compute_stream_);
    clear.args = {PointerArg("dstDevice", kWorkspace), Unsigned("ui", 0), Unsigned("N", 1024)};
    Issue(clear, {}, {{"dstDevice", kWorkspace, 0, 4096}}, 2500);
    OpRecord sync = NewOp(OpKind::kSynchronize, "cuStreamSynchronize", compute_stream_);
    Issue(sync, {}, {}, 15000);
    Nvtx(false, "");
    Nvtx(false, "");

    format::StateDigestRecord state;
    state.after_op = last_sequence_;
    state.reason = "every step";
    for (int b = 0; b < kBufferCount; ++b) {
      BufferDigest digest = Describe({"", b});
      digest.digest = current_[b];
      state.allocations.push_back(digest);
    }
    state.time_ns = Advance(500);
    writer_.Append(state);
    NDT_CHECK(issued_in_step_ == kOpsPerStep) << "issued " << issued_in_step_;
  }

  format::TraceWriter& writer_;
  const SyntheticOptions& options_;
  const int thread_;
  std::atomic<uint64_t>& next_sequence_;
  const std::chrono::steady_clock::time_point start_;
  Rng rng_{0};
  Rng time_rng_;
  std::array<format::Digest, kBufferCount> current_;
  std::array<std::vector<Part>, kBufferCount> parts_;  // last writes of partial extents
  uint32_t compute_stream_ = 0;
  uint32_t copy_stream_ = 0;
  int side_streams_ = 0;
  uint64_t philox_seed_ = 0;
  uint64_t curand_seed_ = 0;
  uint64_t clock_ns_ = 0;
  uint64_t last_sequence_ = 0;
  uint64_t issued_in_step_ = 0;
};

}  // namespace

Status ValidateSyntheticOptions(const SyntheticOptions& options) {
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return Status::Error("--threads must be between 1 and " + std::to_string(kMaxThreads) +
                         ", not " + std::to_string(options.threads));
  }
  if (options.streams < 1 || options.streams > kMaxStreams) {
    return Status::Error("--streams must be between 1 and " + std::to_string(kMaxStreams) +
                         ", not " + std::to_string(options.streams));
  }
  if (options.steps > kMaxSteps) {
    return Status::Error("--steps must be at most " + std::to_string(kMaxSteps));
  }
  return Status::Ok();
}

format::TraceHeader SyntheticHeader(const SyntheticOptions& options) {
  format::TraceHeader header;
  header.tool_version = NDT_VERSION;
  header.command_line = {"ndtrace-synth",
                         "--steps",
                         std::to_string(options.steps),
                         "--threads",
                         std::to_string(options.threads),
                         "--streams",
                         std::to_string(options.streams),
                         "--seed",
                         std::to_string(options.seed)};
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) header.host = host;
  header.pid = static_cast<uint32_t>(getpid());
  header.rank = -1;
  header.start_unix_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  format::GpuInfo gpu;
  gpu.ordinal = 0;
  gpu.name = "synthetic (no device)";
  gpu.simulated = true;
  header.gpus.push_back(gpu);
  header.versions.driver = 13000;
  header.versions.runtime = 13000;
  header.versions.cudnn = 91000;
  header.versions.cublas = 130000;
  header.versions.curand = 10400;
  header.environment = {{"CUBLAS_WORKSPACE_CONFIG", ":4096:8"},
                        {"CUDA_LAUNCH_BLOCKING", "0"},
                        {"NVIDIA_TF32_OVERRIDE", "0"}};
  header.policy = format::Policy::kObserve;
  header.notes = {"synthetic trace written through the writer API; no GPU was involved"};
  return header;
}

uint64_t SyntheticOpCount(const SyntheticOptions& options) {
  return options.steps * static_cast<uint64_t>(std::max(options.threads, 0)) * kOpsPerStep;
}

Status WriteSyntheticTrace(format::TraceWriter& writer, const SyntheticOptions& options) {
  NDT_RETURN_IF_ERROR(ValidateSyntheticOptions(options));
  const auto start = std::chrono::steady_clock::now();

  for (int t = 0; t < options.threads; ++t) {
    for (int b = 0; b < kBufferCount; ++b) {
      format::AllocationRecord allocation;
      allocation.allocation_id = AllocationId(t, b);
      allocation.event = format::AllocationEvent::kAllocate;
      allocation.bytes = kBuffers[b].bytes;
      allocation.api = "cuMemAlloc_v2";
      allocation.raw_address = RawAddress(t, b);
      allocation.before_op = 0;
      writer.Append(allocation);
    }
  }
  format::ModuleLoadRecord module;
  module.module_id = kModuleId;
  module.api = "cuLibraryLoadData";
  module.image_bytes = 7u << 20;
  Rng module_rng(Mix(options.seed, 0x6d6f64756c65ull));
  module.digest = module_rng.NextDigest();
  module.kernels.assign(kKernelNames.begin(), kKernelNames.end());
  writer.Append(module);

  std::atomic<uint64_t> next_sequence{0};
  std::vector<Status> results(static_cast<size_t>(options.threads));
  if (options.threads == 1) {
    results[0] = ThreadEmitter(writer, options, 0, next_sequence, start).Run();
  } else {
    std::vector<std::thread> threads;
    threads.reserve(results.size());
    for (int t = 0; t < options.threads; ++t) {
      threads.emplace_back(
          [&, t] { results[t] = ThreadEmitter(writer, options, t, next_sequence, start).Run(); });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (const Status& result : results) NDT_RETURN_IF_ERROR(result);

  const uint64_t end_op = next_sequence.load();
  for (int t = 0; t < options.threads; ++t) {
    for (int b = kBufferCount - 1; b >= 0; --b) {
      format::AllocationRecord release;
      release.allocation_id = AllocationId(t, b);
      release.event = format::AllocationEvent::kFree;
      release.bytes = kBuffers[b].bytes;
      release.api = "cuMemFree_v2";
      release.raw_address = RawAddress(t, b);
      release.before_op = end_op;
      writer.Append(release);
    }
  }
  return writer.status();
}

}  // namespace ndt::tools
