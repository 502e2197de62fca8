#include "replayer/op_replay.h"

#include <fmt/format.h>

#include <string>
#include <variant>

#if NDT_OP_REPLAY_HAS_CUDA
#include "replayer/op_replay/op_replay_internal.h"
#endif

namespace ndt::replay {
namespace {

#if NDT_OP_REPLAY_HAS_CUDA
// Every family standalone replay re-executes.
const internal::Replayer* const kReplayers[] = {
    &internal::kCudnnLegacyReplayer, &internal::kCudnnBackendReplayer,
    &internal::kCublasReplayer,      &internal::kCublasLtReplayer,
    &internal::kCurandReplayer,      &internal::kKernelReplayer,
    &internal::kCudnnRnnReplayer,
};

const internal::Replayer* ReplayerFor(const format::OpRecord& op) {
  for (const internal::Replayer* replayer : kReplayers) {
    if (replayer->handles(op)) return replayer;
  }
  return nullptr;
}
#endif

bool IsBlobId(const std::string& text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

Status CheckCaptured(const format::OpRecord& op) {
  std::string missing;
  bool any = false;
  for (const format::Argument& argument : op.args) {
    // An op that reads no buffer (cuRAND generation) is captured by its output alone.
    const bool input = argument.name.rfind("blob:in:", 0) == 0;
    if (!input && argument.name.rfind("blob:out:", 0) != 0) continue;
    any = true;
    if (!input) continue;
    const auto* text = std::get_if<std::string>(&argument.value);
    if (text == nullptr || !IsBlobId(*text)) {
      missing += fmt::format("{}{} ({})", missing.empty() ? "" : ", ", argument.name.substr(8),
                             text == nullptr ? "not text" : *text);
    }
  }
  if (!any) {
    return Status::Error(fmt::format(
        "op {} ({}) was not captured: record it with `ndtrace record --capture {} -- ...`",
        op.sequence, op.name, op.sequence));
  }
  if (!missing.empty()) {
    return Status::Error(fmt::format("op {} ({}) was captured without some inputs: {}", op.sequence,
                                     op.name, missing));
  }
  return Status::Ok();
}

Status CheckReplayable(const format::OpRecord& op) {
#if NDT_OP_REPLAY_HAS_CUDA
  if (ReplayerFor(op) != nullptr) return Status::Ok();
#endif
  return Status::Error(fmt::format(
      "op {} ({}, kind {}) cannot be replayed alone: standalone replay re-executes cuDNN "
      "legacy convolutions and backend plans, cuDNN RNN calls, cuBLAS GEMMs, cuBLASLt matmuls, cuRAND "
      "generation and kernel launches only",
      op.sequence, op.name, format::OpKindName(op.kind)));
}

std::vector<std::string> MachineMismatches(const format::TraceHeader& header, uint32_t ordinal,
                                           const MachineFacts& machine) {
  std::vector<std::string> mismatches;
  const format::GpuInfo* recorded = nullptr;
  for (const format::GpuInfo& gpu : header.gpus) {
    if (gpu.ordinal == ordinal) recorded = &gpu;
  }
  if (recorded == nullptr) {
    mismatches.push_back(
        fmt::format("the trace does not say which GPU its device {} was", ordinal));
  } else {
    if (recorded->name != machine.gpu_name) {
      mismatches.push_back(
          fmt::format("GPU '{}' in the trace, '{}' here", recorded->name, machine.gpu_name));
    }
    if (recorded->cc_major != machine.cc_major || recorded->cc_minor != machine.cc_minor) {
      mismatches.push_back(fmt::format("compute capability {}.{} in the trace, {}.{} here",
                                       recorded->cc_major, recorded->cc_minor, machine.cc_major,
                                       machine.cc_minor));
    }
  }
  if (header.versions.driver != machine.driver) {
    mismatches.push_back(
        fmt::format("driver {} in the trace, {} here", header.versions.driver, machine.driver));
  }
  return mismatches;
}

#if NDT_OP_REPLAY_HAS_CUDA

StatusOr<MachineFacts> QueryMachine(uint32_t ordinal) {
  StatusOr<const internal::Driver*> loaded = internal::LoadDriver();
  if (!loaded.ok()) return loaded.status();
  const internal::Driver& driver = **loaded;
  int count = 0;
  if (const CUresult result = driver.device_count(&count); result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGetCount", result));
  }
  if (static_cast<int64_t>(ordinal) >= count) {
    return Status::Error(fmt::format("this machine has {} GPU{}, not a device {}", count,
                                     count == 1 ? "" : "s", ordinal));
  }
  CUdevice device = 0;
  if (const CUresult result = driver.device_get(&device, static_cast<int>(ordinal));
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGet", result));
  }
  MachineFacts facts;
  char name[256] = {};
  if (const CUresult result = driver.device_name(name, sizeof(name) - 1, device);
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGetName", result));
  }
  facts.gpu_name = name;
  int value = 0;
  if (driver.device_attribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) ==
      CUDA_SUCCESS) {
    facts.cc_major = static_cast<uint32_t>(value);
  }
  if (driver.device_attribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) ==
      CUDA_SUCCESS) {
    facts.cc_minor = static_cast<uint32_t>(value);
  }
  int version = 0;
  if (driver.driver_version(&version) == CUDA_SUCCESS)
    facts.driver = static_cast<uint32_t>(version);
  return facts;
}

StatusOr<OpReplayReport> ReplayOp(format::TraceReader& reader, const format::OpRecord& op,
                                  const OpReplayOptions& options) {
  if (Status status = CheckReplayable(op); !status.ok()) return status;
  // With an input source, the caller (window replay) has checked where each input comes from.
  if (!options.input_source) {
    if (Status status = CheckCaptured(op); !status.ok()) return status;
  }
  internal::ReplayContext& context = internal::CurrentReplayContext();
  context.input_source = &options.input_source;
  context.keep_first_output = options.keep_first_output;
  StatusOr<OpReplayReport> report = ReplayerFor(op)->replay(reader, op, options);
  context = internal::ReplayContext();
  return report;
}

#else  // no CUDA headers at build time

StatusOr<MachineFacts> QueryMachine(uint32_t) {
  return Status::Error("this ndtrace was built without the CUDA headers: it cannot replay ops");
}

StatusOr<OpReplayReport> ReplayOp(format::TraceReader&, const format::OpRecord&,
                                  const OpReplayOptions&) {
  return Status::Error("this ndtrace was built without the CUDA headers: it cannot replay ops");
}

#endif

}  // namespace ndt::replay
