// What the standalone op replayers (op_replay_*.cc) share: the driver reached as the libraries
// reach it (dlopen libcuda.so.1 + cuGetProcAddress_v2), device buffers, the captured bytes of
// an op, and the harness that runs one candidate (the recorded algorithm or an alternative) K
// times and compares its outputs. Internal to replayer/; needs the CUDA headers.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/records.h"
#include "formats/status.h"
#include "formats/trace_reader.h"
#include "replayer/op_compare.h"
#include "replayer/op_replay.h"

namespace ndt::replay::internal {

// ---- the op's arguments -------------------------------------------------------------------

// FindArgument, TextOf and ParseBlobId: replayer/op_compare.h.

// The captured bytes of `role` ("blob:<direction>:<role>", direction "in" or "out"): nullopt
// when the op has no such argument or the tracer could not store it ("missing: ..."); an error
// when the blob cannot be read or does not hold `bytes` bytes. An input the current
// ReplayContext's input source gives comes from there instead.
StatusOr<std::optional<std::string>> ReadCaptured(format::TraceReader& reader,
                                                  const format::OpRecord& op, const char* direction,
                                                  const std::string& role, uint64_t bytes);

// What ReplayOp was asked beyond the repeat count, for the shared helpers below: set by
// ReplayOp for the duration of one replay (one replay at a time per process).
struct ReplayContext {
  const InputSource* input_source = nullptr;
  bool keep_first_output = false;
};
ReplayContext& CurrentReplayContext();

// ---- the driver -----------------------------------------------------------------------------

struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*driver_version)(int*) = nullptr;
  CUresult (*device_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_name)(char*, int, CUdevice) = nullptr;
  CUresult (*device_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*primary_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*copy_to_device)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*copy_to_host)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*synchronize)(CUcontext) = nullptr;  // cuCtxSynchronize at CUDA 13: cuCtxSynchronize_v2
  CUresult (*error_string)(CUresult, const char**) = nullptr;
  // For what else a replayer needs (cuModuleLoadData, cuMemAddressReserve...).
  CUresult (*get_proc_address)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*) = nullptr;

  // "api: <the driver's text> (<code>)".
  std::string Error(const char* api, CUresult result) const;
  // The driver function `name` (CUDA 13 ABI), or null.
  void* Resolve(const char* name) const;
};

// Loads and initialises the driver once per process; fails saying why.
StatusOr<const Driver*> LoadDriver();

// dlopens `soname` (RTLD_LOCAL) once per `Library` type and lets `fill(handle, &library,
// &missing)` resolve its functions (with Resolve); fails naming the library or the missing
// functions, on this call and every later one.
template <typename Library, typename Fill>
StatusOr<const Library*> LoadOnce(const char* soname, Fill fill) {
  static Library library;
  static std::string failure;
  static bool loaded = false;
  if (loaded) {
    if (!failure.empty()) return Status::Error(failure);
    return &library;
  }
  loaded = true;
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    failure = fmt::format("cannot load {}: {}", soname, why != nullptr ? why : "not found");
    return Status::Error(failure);
  }
  std::string missing;
  fill(handle, &library, &missing);
  if (!missing.empty()) {
    failure = fmt::format("{} lacks {}", soname, missing);
    return Status::Error(failure);
  }
  return &library;
}

// `*slot` = the function `name` of `library`; a name not found is added to `missing`.
template <typename Slot>
void Resolve(void* library, const char* name, Slot* slot, std::string* missing) {
  *slot = reinterpret_cast<Slot>(dlsym(library, name));
  if (*slot == nullptr) *missing += fmt::format("{}{}", missing->empty() ? "" : ", ", name);
}

// Makes device `ordinal`'s primary context current on this thread.
Status UseDevice(const Driver& driver, uint32_t ordinal);

// A device allocation, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(const Driver& driver, CUdeviceptr address, size_t bytes)
      : driver_(&driver), address_(address), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : driver_(other.driver_), address_(std::exchange(other.address_, 0)), bytes_(other.bytes_) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (address_ != 0) driver_->mem_free(address_);
  }
  CUdeviceptr address() const { return address_; }
  void* pointer() const { return reinterpret_cast<void*>(address_); }
  size_t bytes() const { return bytes_; }

 private:
  const Driver* driver_;
  CUdeviceptr address_;
  size_t bytes_;
};

// `bytes` (at least 1) of device memory.
StatusOr<DeviceBuffer> Allocate(const Driver& driver, size_t bytes);

// ---- running a candidate K times ----------------------------------------------------------

// The device memory one execution of the op works on.
struct ReplayBuffers {
  struct Buffer {
    CUdeviceptr address = 0;
    std::string initial;  // uploaded before every run (the captured input, or zeros)
  };
  std::vector<Buffer> buffers;
  size_t output = 0;          // the buffer compared between runs
  uint64_t output_bytes = 0;  // its size
  std::string output_dtype;   // "f32" / "f64": element differences are measured too
  std::optional<std::string> recorded_output;  // the captured output, when there is one
  // Further buffers compared with `output` (a raw kernel may write several): (buffer index,
  // bytes), read back after it in this order. Digests and differences are then of all of them
  // end to end, and `recorded_output` holds them all, in the same order.
  std::vector<std::pair<size_t, uint64_t>> more_outputs;
};

// One execution of the op with one candidate: nullopt when it ran, otherwise why it could not
// (an unsupported algorithm, a library error).
using RunOnce = std::function<std::optional<std::string>()>;

// Runs `run` `repeat` (>= 1) times, each time uploading every buffer's initial bytes first and
// timing the call with a context synchronisation, and fills `candidate` (its algo, name,
// determinism and recorded fields set by the caller) with the runs, distinct output digests,
// value differences and matches with the recorded output. A failing `run` fails the recorded
// candidate and skips an alternative (`skipped` says why); driver errors always fail.
StatusOr<AlgorithmRuns> RunCandidate(const Driver& driver, const ReplayBuffers& buffers,
                                     AlgorithmRuns candidate, int repeat, const RunOnce& run);

// ---- the replayers --------------------------------------------------------------------------

// One library (or kernel) family standalone replay knows how to re-execute.
struct Replayer {
  bool (*handles)(const format::OpRecord& op);
  StatusOr<OpReplayReport> (*replay)(format::TraceReader& reader, const format::OpRecord& op,
                                     const OpReplayOptions& options);
};

// op_replay_cudnn_legacy.cc: cudnnConvolution{Forward,BackwardData,BackwardFilter}.
extern const Replayer kCudnnLegacyReplayer;
// op_replay_cublas.cc: cublasSgemm_v2 and cublasGemmEx.
extern const Replayer kCublasReplayer;
// op_replay_cublas.cc: cublasLtMatmul.
extern const Replayer kCublasLtReplayer;
// op_replay_curand.cc: curandGenerate, curandGenerateUniform, curandGenerateNormal.
extern const Replayer kCurandReplayer;
// op_replay_kernel.cc: raw kernel launches, at the recorded device addresses.
extern const Replayer kKernelReplayer;

// op_replay_cudnn_backend.cc: cudnnBackendExecute of a graph of convolutions.
extern const Replayer kCudnnBackendReplayer;
// op_replay_cudnn_rnn.cc: cudnnRNNForward, cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8.
extern const Replayer kCudnnRnnReplayer;

}  // namespace ndt::replay::internal
