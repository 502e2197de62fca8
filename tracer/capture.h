// Capturing ops for standalone replay (`ndtrace record --capture OPSET`, NDTRACE_CAPTURE).
//
// NDTRACE_CAPTURE=OPSET selects ops whose full input and output bytes go into the trace's blob
// stream, so that `ndtrace replay TRACE --op N` can re-execute them alone. OPSET is a comma
// list of
//   N          op sequence N                    (`812`)
//   A-B        op sequences A to B, inclusive   (`100-200`)
//   kernel:G   kernel launches whose kernel name matches the glob G (`kernel:*Racy*`)
//   KIND       ops of a kind, as `ndtrace show` names it (`cudnn_convolution`, `cublas_gemm`)
//   NAME       ops whose API name is NAME (`cudnnConvolutionBackwardFilter`)
//
// A captured extent is stored as one blob (content-addressed: equal bytes are stored once) and
// referenced from the op record by a text argument "blob:in:<role>" (bytes before the call) or
// "blob:out:<role>" (bytes after it) whose value is the blob id as 32 hex digits, low 64 bits
// first. An extent that cannot be read or stored is left out and its argument
// "blob:in:<role>" / "blob:out:<role>" then holds "missing: <why>" instead.
//
// A kernel launch (hooks_driver.cc) is captured with what re-running it alone needs: its
// mangled name ("mangledName"), the image of its module ("blob:module", stored once per module:
// a blob id or "missing: <why>"), and every allocation it references — through a pointer in its
// argument bytes, or in the bytes of an allocation so referenced — as "alloc<id>" (a device
// pointer: the allocation id and its recorded base address), "alloc<id>.bytes" (its size) and
// its whole bytes before and after the launch ("blob:in:alloc<id>", "blob:out:alloc<id>").
//
// Covered: the cuDNN legacy convolutions (hooks_cudnn.cc), RNN calls (hooks_cudnn_rnn.cc) and
// backend executes (hooks_cudnn_backend.cc), cuBLAS GEMMs and cuBLASLt matmuls (hooks_cublas.cc),
// cuRAND generates (hooks_curand.cc), kernel launches, and the source of copies into device memory
// (hooks_driver.cc: "blob:in:src", for window replay). Every function is thread-safe and never
// throws.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/records.h"
#include "tracer/recorder.h"

namespace ndt::tracer {

struct Extent;  // library_support.h

// Whether NDTRACE_CAPTURE selects `op` (its sequence, kind and name are set). The variable is
// read once; tokens that mean nothing are said once on stderr and ignored.
bool CaptureWanted(const format::OpRecord& op) noexcept;
// Whether NDTRACE_CAPTURE selects any op at all.
bool CaptureAny() noexcept;

// Stores the bytes of `extents` once `stream` (a CUstream handle, 0 = legacy default) has
// finished its work so far, and adds their "blob:<direction>:<role>" arguments to `op`;
// `direction` is "in" (before the real call) or "out" (after it). Call inside the hook's scope
// (the driver calls it makes are not recorded).
void CaptureExtents(Session& session, uint64_t stream, const std::vector<Extent>& extents,
                    const char* direction, format::OpRecord* op) noexcept;

// The bytes of a loadable module image: a fat binary (bare, or behind nvcc's wrapper: then
// `image` is moved to the fat binary), an ELF cubin, or NUL-terminated PTX. 0 when unrecognised.
uint64_t ModuleImageBytes(const void** image) noexcept;

// Module `module_id` was loaded from `image` (the pointer the program passed, may be null).
// When NDTRACE_CAPTURE is set, remembers where the image is, its size and digest, so that a
// captured launch of one of its kernels can store it; otherwise does nothing.
void CaptureModuleLoaded(uint64_t module_id, const void* image) noexcept;

// Before the real call of a launch CaptureWanted selected (its "arg<i>" arguments recorded):
// adds the kernel's mangled name and module image to `op`, then the allocations it references
// (through device addresses in its argument bytes, and transitively in those allocations'
// bytes; at most 256) with their bytes once `stream` has finished its work so far. `function` is
// the launched handle (a CUkernel when `kernel.is_kernel`). Call inside the hook's scope.
void CaptureLaunchInputs(Session& session, const KernelInfo& kernel, const void* function,
                         uint64_t stream, format::OpRecord* op) noexcept;

// Before the real call of a copy into device memory that CaptureWanted selected: stores its
// source as "blob:in:src" — device bytes once `stream` has finished its work so far, or the
// host bytes as the program hands them over. Call inside the hook's scope.
void CaptureCopySource(Session& session, uint64_t stream, bool src_device, uint64_t src,
                       uint64_t bytes, format::OpRecord* op) noexcept;

// After the real call of a launch captured by CaptureLaunchInputs: the bytes of the same
// allocations once `stream` has run it ("blob:out:alloc<id>").
void CaptureLaunchOutputs(Session& session, uint64_t stream, format::OpRecord* op) noexcept;

}  // namespace ndt::tracer
