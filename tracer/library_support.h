// What every library hook (cuDNN, cuBLAS/cuBLASLt, cuRAND, NCCL) shares: finding the real
// function, the hook's shape, library ops and the digests of their exact extents.
//
// A library hook is an exported function with the library's exact name and signature
// (`cudnnConvolutionForward`); programs and frameworks linked against the library bind to it
// because libndtrace.so is first in the global scope. It forwards to the real function, found
// in the already loaded library by its soname (never through our own exports).
//
// Unlike a driver hook, a library hook lifts the re-entrancy guard around the real call
// (RealCall::Run): the driver calls the library makes (its kernel launches, allocations,
// copies) are recorded as ops of their own, after the library op that caused them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/records.h"
#include "tracer/gpu_time.h"
#include "tracer/recorder.h"

namespace ndt::tracer {

// The sonames the library hooks find the real functions in (the CUDA 13 toolkit's).
inline constexpr const char* kCudnnSoname = "libcudnn.so.9";
inline constexpr const char* kCublasSoname = "libcublas.so.13";
inline constexpr const char* kCublasLtSoname = "libcublasLt.so.13";
inline constexpr const char* kCurandSoname = "libcurand.so.10";
inline constexpr const char* kNcclSoname = "libnccl.so.2";

// The soname the library hook named `name` calls into (`cublasLt*` -> libcublasLt.so.13, ...);
// null when `name` belongs to no hooked library.
const char* LibrarySonameFor(const char* name) noexcept;

// The real `name` in the loaded library `soname` (dlopen RTLD_NOLOAD + the real dlsym), or
// null when that library is not loaded or lacks it.
void* RealLibraryFunction(const char* soname, const char* name) noexcept;

// The real function `real_name` of `soname` as a `Type`, cached per call site once found.
#define NDT_REAL_LIBRARY_TYPED(soname, Type, real_name)                                  \
  ([]() noexcept {                                                                       \
    static std::atomic<void*> slot{nullptr};                                             \
    void* found = slot.load(std::memory_order_acquire);                                  \
    if (found == nullptr) {                                                              \
      found = ::ndt::tracer::RealLibraryFunction(soname, real_name);                     \
      slot.store(found, std::memory_order_release);                                      \
    }                                                                                    \
    return reinterpret_cast<Type>(found);                                                \
  }())
// The real function `name` of `soname`, typed as `name` is declared (not for names C++
// overloads: use NDT_REAL_LIBRARY_TYPED). NDT_REAL_LIBRARY_AS looks up `real_name` instead
// (NCCL: ncclX -> pncclX).
#define NDT_REAL_LIBRARY_AS(soname, name, real_name) \
  NDT_REAL_LIBRARY_TYPED(soname, decltype(&::name), real_name)
#define NDT_REAL_LIBRARY(soname, name) NDT_REAL_LIBRARY_AS(soname, name, #name)

// The real call of a library hook, made at most once, with the re-entrancy guard lifted.
template <typename Result>
class RealCall {
 public:
  explicit RealCall(HookScope& scope) : scope_(scope) {}
  // The GPU work the call starts is the op's that is open on this thread (gpu_time.h).
  template <typename Call>
  Result Run(Call&& call) {
    const std::optional<uint64_t> op = Session::OpenOp();
    scope_.Lift();
    {
      gpu_time::LibraryScope gpu(op);
      result_ = call();
    }
    scope_.Restore();
    done_ = true;
    return result_;
  }
  bool done() const { return done_; }
  Result result() const { return result_; }

 private:
  HookScope& scope_;
  Result result_{};
  bool done_ = false;
};

// Runs a library hook. `unavailable` is returned when the real function is missing (the
// library is not loaded) or, under NDTRACE_STRICT=1, when recording has failed. `pass()` makes
// the real call unrecorded; `record(session, call)` records around it, making the real call
// through `call.Run(...)`. An exception from recording is reported once (recording stops) and
// the real call is still made exactly once.
template <typename Result, typename Pass, typename Record>
Result RunLibraryHook(const char* name, bool have_real, Result unavailable, Pass pass,
                      Record record) noexcept {
  if (!have_real) return unavailable;
  HookScope scope;
  if (scope.fail_closed()) return unavailable;
  if (scope.session() == nullptr) return pass();
  RealCall<Result> call(scope);
  try {
    return record(*scope.session(), call);
  } catch (...) {
    ReportHookFailure(name);
    if (call.done()) return call.result();
    scope.Lift();
    return pass();
  }
}

// A device extent a library op reads or writes, exactly as its descriptors give it.
struct Extent {
  std::string role;  // "x", "w", "y", "A", "C", "sendbuff", ...
  uint64_t address = 0;
  uint64_t bytes = 0;
  format::DType dtype = format::DType::kUnknown;
};

// The digests of `extents` once `stream` (a CUstream / cudaStream_t handle, 0 = legacy default)
// has finished its work so far: on the GPU, enqueued on `stream` (Session::DigestInStreamOrder),
// else synchronising it through the real driver and copying. Empty when library digests are off
// (NDTRACE_LIBRARY_DIGESTS=0) or a stream captures; an extent that cannot be read is left out.
// f32 extents up to kSummaryMaxBytes also get a numeric summary (count, min, max, sum, NaN and
// Inf counts), from which diff reports the size of a divergence (on the GPU path, when the
// staging area had room for their bytes).
std::vector<format::BufferDigest> DigestExtents(Session& session, uint64_t stream,
                                                const std::vector<Extent>& extents);

// Whether a library op records no digest and nothing captured, so that its hook may take the
// raw path (RawOp::SetFacts: the record is built from the call's facts off the calling thread).
bool LibraryOpOffThread(const Session& session);

// Largest f32 extent summarised (min, max, sum, NaN and Inf counts) besides its digest: the
// summary needs the values on the host (a second copy, or bytes staged by the GPU path).
inline constexpr uint64_t kSummaryMaxBytes = uint64_t{64} << 20;

// The numeric summary of `size` bytes of f32 values (size / 4 of them, any alignment).
format::NumericSummary SummarizeF32Values(const unsigned char* bytes, uint64_t size);

// Argument builders.
// Runs `update` (descriptor shadow-keeping, which hooks do whether or not a session records)
// so that nothing escapes into the host: a failure is reported once as `what` (recording stops).
template <typename Update>
void ShadowSafely(const char* what, Update update) noexcept {
  try {
    update();
  } catch (...) {
    ReportHookFailure(what);
  }
}

// Appends argument `name` = `value` to `op`, built in place (no temporary Argument): the hot
// way to add many (a GEMM has twenty-odd).
template <typename Value>
void AddArgument(format::OpRecord& op, const char* name, Value&& value) {
  format::Argument& argument = op.args.emplace_back();
  argument.name = name;
  argument.value = std::forward<Value>(value);
}

// Appends `value` in decimal to `out` (fingerprints, built without temporary strings).
void AppendDecimal(std::string& out, int64_t value);

format::Argument TextArgument(std::string name, std::string value);
format::Argument UnsignedArgument(std::string name, uint64_t value);
format::Argument SignedArgument(std::string name, int64_t value);
format::Argument DoubleArgument(std::string name, double value);
format::Argument DimsArgument(std::string name, std::vector<int64_t> dims);
format::Argument PointerArgument(Session& session, std::string name, uint64_t address);

}  // namespace ndt::tracer
