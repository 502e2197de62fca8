#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <type_traits>
#include <variant>

#include "kernels/digest_v1.h"
#include "replayer/op_replay/op_replay_internal.h"

namespace ndt::replay::internal {

ReplayContext& CurrentReplayContext() {
  static ReplayContext context;
  return context;
}

StatusOr<std::optional<std::string>> ReadCaptured(format::TraceReader& reader,
                                                  const format::OpRecord& op, const char* direction,
                                                  const std::string& role, uint64_t bytes) {
  const ReplayContext& context = CurrentReplayContext();
  if (context.input_source != nullptr && *context.input_source &&
      std::strcmp(direction, "in") == 0) {
    std::optional<std::string> given = (*context.input_source)(op, role, bytes);
    if (given && given->size() != bytes) {
      return Status::Error(fmt::format("input {} of op {}: {} bytes given, {} described", role,
                                       op.sequence, given->size(), bytes));
    }
    if (given) return given;
  }
  const std::string* text = TextOf(op, fmt::format("blob:{}:{}", direction, role));
  if (text == nullptr) return std::optional<std::string>();
  const std::optional<format::BlobId> id = ParseBlobId(*text);
  if (!id) return std::optional<std::string>();  // "missing: ...": the tracer could not store it
  StatusOr<std::string> read = reader.ReadBlob(*id, uint64_t{1} << 32);
  if (!read.ok()) {
    return Status::Error(
        fmt::format("captured {} of op {}: {}", role, op.sequence, read.status().message()));
  }
  if (read->size() != bytes) {
    return Status::Error(
        fmt::format("captured {} of op {} holds {} bytes, its descriptors describe {}", role,
                    op.sequence, read->size(), bytes));
  }
  return std::optional<std::string>(std::move(*read));
}

std::string Driver::Error(const char* api, CUresult result) const {
  const char* text = nullptr;
  if (error_string == nullptr || error_string(result, &text) != CUDA_SUCCESS || text == nullptr) {
    text = "unknown error";
  }
  return fmt::format("{}: {} ({})", api, text, static_cast<int>(result));
}

void* Driver::Resolve(const char* name) const {
  void* function = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get_proc_address == nullptr ||
      get_proc_address(name, &function, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found) !=
          CUDA_SUCCESS ||
      found != CU_GET_PROC_ADDRESS_SUCCESS) {
    return nullptr;
  }
  return function;
}

StatusOr<const Driver*> LoadDriver() {
  static Driver driver;
  static std::string failure;
  static bool loaded = false;
  if (loaded) {
    if (!failure.empty()) return Status::Error(failure);
    return &driver;
  }
  loaded = true;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    failure = fmt::format("cannot load the CUDA driver libcuda.so.1: {}",
                          why != nullptr ? why : "not found");
    return Status::Error(failure);
  }
  driver.get_proc_address =
      reinterpret_cast<decltype(driver.get_proc_address)>(dlsym(library, "cuGetProcAddress_v2"));
  if (driver.get_proc_address == nullptr) {
    failure = "the CUDA driver libcuda.so.1 has no cuGetProcAddress_v2 (driver older than 12.0)";
    return Status::Error(failure);
  }
  std::string missing;
  const auto resolve = [&](const char* name, auto* slot) {
    if (void* function = driver.Resolve(name); function != nullptr) {
      *slot = reinterpret_cast<std::remove_reference_t<decltype(*slot)>>(function);
    } else {
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
    }
  };
  resolve("cuInit", &driver.init);
  resolve("cuDriverGetVersion", &driver.driver_version);
  resolve("cuDeviceGetCount", &driver.device_count);
  resolve("cuDeviceGet", &driver.device_get);
  resolve("cuDeviceGetName", &driver.device_name);
  resolve("cuDeviceGetAttribute", &driver.device_attribute);
  resolve("cuDevicePrimaryCtxRetain", &driver.primary_retain);
  resolve("cuCtxSetCurrent", &driver.set_current);
  resolve("cuMemAlloc", &driver.mem_alloc);
  resolve("cuMemFree", &driver.mem_free);
  resolve("cuMemcpyHtoD", &driver.copy_to_device);
  resolve("cuMemcpyDtoH", &driver.copy_to_host);
  resolve("cuCtxSynchronize", &driver.synchronize);
  resolve("cuGetErrorString", &driver.error_string);
  if (!missing.empty()) {
    failure = "the CUDA driver lacks " + missing;
    return Status::Error(failure);
  }
  if (const CUresult result = driver.init(0); result != CUDA_SUCCESS) {
    failure = driver.Error("cuInit", result);
    return Status::Error(failure);
  }
  return &driver;
}

Status UseDevice(const Driver& driver, uint32_t ordinal) {
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (const CUresult result = driver.device_get(&device, static_cast<int>(ordinal));
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDeviceGet", result));
  }
  if (const CUresult result = driver.primary_retain(&context, device); result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuDevicePrimaryCtxRetain", result));
  }
  if (const CUresult result = driver.set_current(context); result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuCtxSetCurrent", result));
  }
  return Status::Ok();
}

StatusOr<DeviceBuffer> Allocate(const Driver& driver, size_t bytes) {
  CUdeviceptr address = 0;
  if (const CUresult result = driver.mem_alloc(&address, std::max<size_t>(bytes, 1));
      result != CUDA_SUCCESS) {
    return Status::Error(driver.Error("cuMemAlloc", result) + fmt::format(" ({} bytes)", bytes));
  }
  return DeviceBuffer(driver, address, bytes);
}

namespace {

// Largest absolute and relative element differences between two outputs of `dtype` (f32 and f64
// only: other types are compared bitwise).
void CompareValues(const std::string& dtype, const std::string& a, const std::string& b,
                   AlgorithmRuns* runs) {
  const auto compare = [&](auto zero) {
    using T = decltype(zero);
    const size_t count = std::min(a.size(), b.size()) / sizeof(T);
    for (size_t i = 0; i < count; ++i) {
      T u, v;
      std::memcpy(&u, a.data() + i * sizeof(T), sizeof(T));
      std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
      const double x = static_cast<double>(u), y = static_cast<double>(v);
      if (std::isnan(x) || std::isnan(y)) continue;
      const double diff = std::fabs(x - y);
      const double scale = std::max(std::fabs(x), std::fabs(y));
      runs->max_abs_diff = std::max(runs->max_abs_diff, diff);
      if (scale > 0) runs->max_rel_diff = std::max(runs->max_rel_diff, diff / scale);
    }
    runs->compared_values = true;
  };
  if (dtype == "f32") compare(0.0f);
  if (dtype == "f64") compare(0.0);
}

}  // namespace

StatusOr<AlgorithmRuns> RunCandidate(const Driver& driver, const ReplayBuffers& buffers,
                                     AlgorithmRuns runs, int repeat, const RunOnce& run) {
  std::set<std::pair<uint64_t, uint64_t>> distinct;
  uint64_t compared_bytes = buffers.output_bytes;
  for (const auto& [index, bytes] : buffers.more_outputs) compared_bytes += bytes;
  std::string first, output(compared_bytes, '\0');
  std::optional<kernels::Digest128> recorded_digest;
  if (buffers.recorded_output) {
    recorded_digest =
        kernels::DigestV1(buffers.recorded_output->data(), buffers.recorded_output->size());
    runs.runs_matching_recorded = 0;
  }
  double total_ms = 0;
  for (int attempt = 0; attempt < std::max(1, repeat); ++attempt) {
    for (const ReplayBuffers::Buffer& buffer : buffers.buffers) {
      if (buffer.initial.empty()) continue;
      if (const CUresult result =
              driver.copy_to_device(buffer.address, buffer.initial.data(), buffer.initial.size());
          result != CUDA_SUCCESS) {
        return Status::Error(driver.Error("cuMemcpyHtoD", result));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const std::optional<std::string> failure = run();
    const CUresult synchronized = driver.synchronize(nullptr);
    total_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (failure) {
      if (runs.recorded) return Status::Error(*failure);
      runs.skipped = *failure;
      return runs;
    }
    if (synchronized != CUDA_SUCCESS) {
      return Status::Error(driver.Error("cuCtxSynchronize", synchronized));
    }
    if (const CUresult result = driver.copy_to_host(
            output.data(), buffers.buffers[buffers.output].address, buffers.output_bytes);
        result != CUDA_SUCCESS) {
      return Status::Error(driver.Error("cuMemcpyDtoH", result));
    }
    uint64_t at = buffers.output_bytes;
    for (const auto& [index, bytes] : buffers.more_outputs) {
      if (const CUresult result =
              driver.copy_to_host(output.data() + at, buffers.buffers[index].address, bytes);
          result != CUDA_SUCCESS) {
        return Status::Error(driver.Error("cuMemcpyDtoH", result));
      }
      at += bytes;
    }
    const kernels::Digest128 digest = kernels::DigestV1(output.data(), output.size());
    distinct.insert({digest.lo, digest.hi});
    if (recorded_digest && digest == *recorded_digest) ++runs.runs_matching_recorded;
    if (attempt == 0) {
      first = output;
      runs.first_output = digest;
      if (CurrentReplayContext().keep_first_output) runs.first_output_bytes = output;
    } else {
      CompareValues(buffers.output_dtype, first, output, &runs);
    }
    ++runs.runs;
  }
  if (runs.runs == 1) CompareValues(buffers.output_dtype, first, first, &runs);
  runs.distinct_outputs = static_cast<int>(distinct.size());
  runs.ms_per_call = total_ms / runs.runs;
  return runs;
}

}  // namespace ndt::replay::internal
