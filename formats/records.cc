#include "formats/records.h"

#include <cstdio>
#include <iterator>
#include <variant>

namespace ndt::format {

std::string ThreadLabel(uint32_t thread_id) {
  char buffer[24];
  if ((thread_id & 0x80000000u) != 0) {
    std::snprintf(buffer, sizeof(buffer), "#%08x", thread_id & 0x7fffffffu);
    return buffer;
  }
  if ((thread_id & 0x40000000u) != 0) return "?" + std::to_string(thread_id & 0x3fffffffu);
  if (thread_id == 0) return "0";
  std::string label;
  for (uint32_t rest = thread_id; rest != 0; rest >>= 8) {
    if (!label.empty()) label += '.';
    label += std::to_string(rest & 0xffu);
  }
  return label;
}

std::string StreamLabel(uint32_t stream_id) {
  if ((stream_id & 0x80000000u) != 0) {
    char buffer[24];
    std::snprintf(buffer, sizeof(buffer), "#%08x", stream_id & 0x7fffffffu);
    return buffer;
  }
  if ((stream_id & 0x40000000u) != 0) return ThreadLabel(stream_id & 0x3fffffffu) + ":default";
  if (stream_id >= 0x01000000u && stream_id < 0x02000000u) {
    return ThreadLabel((stream_id >> 8) & 0xffffu) + ":" + std::to_string(stream_id & 0xffu);
  }
  return std::to_string(stream_id);
}

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kOther:
      return "other";
    case OpKind::kKernelLaunch:
      return "kernel_launch";
    case OpKind::kMemcpy:
      return "memcpy";
    case OpKind::kMemset:
      return "memset";
    case OpKind::kGraphLaunch:
      return "graph_launch";
    case OpKind::kCudnnConvolution:
      return "cudnn_convolution";
    case OpKind::kCudnnBackendExecute:
      return "cudnn_backend_execute";
    case OpKind::kCublasGemm:
      return "cublas_gemm";
    case OpKind::kCublasLtMatmul:
      return "cublas_lt_matmul";
    case OpKind::kCurandGenerate:
      return "curand_generate";
    case OpKind::kNcclCollective:
      return "nccl_collective";
    case OpKind::kSynchronize:
      return "synchronize";
  }
  return "unknown";
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUnknown:
      return "unknown";
    case DType::kF64:
      return "f64";
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF8E4M3:
      return "f8e4m3";
    case DType::kF8E5M2:
      return "f8e5m2";
    case DType::kI64:
      return "i64";
    case DType::kI32:
      return "i32";
    case DType::kI16:
      return "i16";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kBool:
      return "bool";
  }
  return "unknown";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (uint16_t value = 1; value <= static_cast<uint16_t>(DType::kBool); ++value) {
    const auto dtype = static_cast<DType>(value);
    if (name == DTypeName(dtype)) return dtype;
  }
  return std::nullopt;
}

uint64_t DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
    case DType::kUnknown:
      break;
  }
  return 0;
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kObserve:
      return "observe";
    case Policy::kEnforce:
      return "enforce";
    case Policy::kPin:
      return "pin";
    case Policy::kReplayForce:
      return "replay_force";
  }
  return "unknown";
}

const char* GpuActivityKindName(GpuActivityKind kind) {
  switch (kind) {
    case GpuActivityKind::kKernel: return "kernel";
    case GpuActivityKind::kMemcpy: return "memcpy";
    case GpuActivityKind::kMemset: return "memset";
  }
  return "unknown";
}

const char* RecordTypeName(const Record& record) {
  static constexpr const char* kNames[] = {"op",         "allocation",      "module_load",
                                           "nvtx_range", "policy_decision", "note",
                                           "dropped",    "state_digest",    "gpu_activity"};
  static_assert(std::size(kNames) == std::variant_size_v<Record>);
  return record.valueless_by_exception() ? "unknown" : kNames[record.index()];
}

}  // namespace ndt::format
