#include "formats/records.h"

#include <cstdio>
#include <iterator>
#include <string_view>
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
    case OpKind::kFrameworkOp:
      return "framework_op";
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
                                           "dropped",    "state_digest",    "python_stack",
                                           "gpu_activity"};
  static_assert(std::size(kNames) == std::variant_size_v<Record>);
  return record.valueless_by_exception() ? "unknown" : kNames[record.index()];
}

const char* PythonStackStatusName(PythonStackStatus status) {
  switch (status) {
    case PythonStackStatus::kCaptured:
      return "captured";
    case PythonStackStatus::kNoPython:
      return "no_python";
    case PythonStackStatus::kNotRunning:
      return "not_running";
    case PythonStackStatus::kNativeThread:
      return "native_thread";
    case PythonStackStatus::kNoFrames:
      return "no_frames";
    case PythonStackStatus::kGilUnavailable:
      return "gil_unavailable";
    case PythonStackStatus::kUnsupported:
      return "unsupported";
    case PythonStackStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

bool IsLibraryPythonFile(std::string_view file) {
  if (file.empty() || file.front() == '<') return true;
  if (file.find("/site-packages/") != std::string_view::npos ||
      file.find("/dist-packages/") != std::string_view::npos) {
    return true;
  }
  // lib/python3.11/..., lib64/python3.11/...
  for (size_t at = file.find("/python"); at != std::string_view::npos;
       at = file.find("/python", at + 1)) {
    const std::string_view before = file.substr(0, at);
    const bool in_lib = before.ends_with("/lib") || before.ends_with("/lib64");
    const std::string_view rest = file.substr(at + 7);
    if (in_lib && !rest.empty() && rest.front() >= '0' && rest.front() <= '9') return true;
  }
  return false;
}

const PythonFrame* UserPythonFrame(const PythonStackRecord& stack) {
  for (const PythonFrame& frame : stack.frames) {
    if (!IsLibraryPythonFile(frame.file)) return &frame;
  }
  return stack.frames.empty() ? nullptr : &stack.frames.front();
}

std::string PythonFrameText(const PythonFrame& frame) {
  std::string text = frame.file;
  if (frame.line >= 0) text += ":" + std::to_string(frame.line);
  return text + " in " + frame.function;
}

std::string PythonStackSummary(const PythonStackRecord& stack) {
  if (stack.status == PythonStackStatus::kCaptured) {
    if (const PythonFrame* frame = UserPythonFrame(stack)) return PythonFrameText(*frame);
  }
  std::string text = "no Python stack";
  if (!stack.detail.empty()) text += ": " + stack.detail;
  return text;
}

bool IsLifecycleOp(const OpRecord& op) {
  if (op.kind != OpKind::kOther) return false;
  const std::string_view name = op.name;
  return name == "cuEventCreate" || name == "cuEventDestroy_v2" || name == "cuStreamCreate" ||
         name == "cuStreamCreateWithPriority" || name == "cuStreamDestroy_v2";
}

}  // namespace ndt::format
