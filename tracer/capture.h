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
// Covered: the cuDNN legacy convolutions (hooks_cudnn.cc), cuDNN backend executes
// (hooks_cudnn_backend.cc). Every function is thread-safe and
// never throws.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/records.h"
#include "tracer/library_support.h"
#include "tracer/recorder.h"

namespace ndt::tracer {

// Whether NDTRACE_CAPTURE selects `op` (its sequence, kind and name are set). The variable is
// read once; tokens that mean nothing are said once on stderr and ignored.
bool CaptureWanted(const format::OpRecord& op) noexcept;

// Stores the bytes of `extents` once `stream` (a CUstream handle, 0 = legacy default) has
// finished its work so far, and adds their "blob:<direction>:<role>" arguments to `op`;
// `direction` is "in" (before the real call) or "out" (after it). Call inside the hook's scope
// (the driver calls it makes are not recorded).
void CaptureExtents(Session& session, uint64_t stream, const std::vector<Extent>& extents,
                    const char* direction, format::OpRecord* op) noexcept;

}  // namespace ndt::tracer
