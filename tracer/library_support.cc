#include "tracer/library_support.h"

#include <cuda.h>
#include <dlfcn.h>

#include <charconv>
#include <cstring>

#include "tracer/capture.h"
#include "tracer/driver_table.h"
#include "tracer/gpu_digests.h"
#include "tracer/gpu_time.h"
#include "tracer/real_dl.h"

namespace ndt::tracer {

void* RealLibraryFunction(const char* soname, const char* name) noexcept {
  const DlsymFn real_dlsym = RealDlsym();
  if (real_dlsym == nullptr) return nullptr;
  void* library = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  if (library == nullptr) return nullptr;
  // A handle's lookup searches that library and its dependencies, never libndtrace.so.
  void* found = real_dlsym(library, name);
  dlclose(library);
  return found;
}

format::NumericSummary SummarizeF32Values(const unsigned char* bytes, uint64_t size) {
  // As the GPU digest kernel defines it, added up in element order.
  auto summary = kernels::digest_v1::F32Summary::Empty();
  const uint64_t count = size / sizeof(float);
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, bytes + i * sizeof(float), sizeof(bits));
    summary.Add(bits);
  }
  return NumericSummaryOf(summary, count);
}

const char* LibrarySonameFor(const char* name) noexcept {
  if (std::strncmp(name, "cublasLt", 8) == 0) return kCublasLtSoname;
  if (std::strncmp(name, "cublas", 6) == 0) return kCublasSoname;
  if (std::strncmp(name, "cudnn", 5) == 0) return kCudnnSoname;
  if (std::strncmp(name, "curand", 6) == 0) return kCurandSoname;
  if (std::strncmp(name, "nccl", 4) == 0) return kNcclSoname;
  return nullptr;
}

namespace {

// The numeric summary of the f32 extent at `address` (synchronised by the caller), read through
// the real driver; count 0 when it cannot be read.
format::NumericSummary SummarizeF32(uint64_t address, uint64_t bytes) {
  using CopyFn = CUresult (*)(void*, CUdeviceptr, size_t);
  const auto copy = reinterpret_cast<CopyFn>(RealDriverFunction(Hook::k_cuMemcpyDtoH_v2));
  const uint64_t count = bytes / sizeof(float);
  if (copy == nullptr || count == 0 || bytes > kSummaryMaxBytes) return {};
  std::vector<unsigned char> values(count * sizeof(float));
  const gpu_time::OwnWork own(gpu_time::OwnWork::Work::kHostCopies);
  if (copy(values.data(), address, values.size()) != CUDA_SUCCESS) return {};
  return SummarizeF32Values(values.data(), values.size());
}

}  // namespace

bool LibraryOpOffThread(const Session& session) {
  return !session.policy().library_digests && !CaptureAny();
}

std::vector<format::BufferDigest> DigestExtents(Session& session, uint64_t stream,
                                                const std::vector<Extent>& extents) {
  // No synchronisation while a stream captures: it would invalidate the capture.
  if (!session.policy().library_digests || extents.empty() || session.objects().AnyCapture()) {
    return {};
  }
  using SynchronizeFn = CUresult (*)(CUstream);
  const auto synchronize =
      reinterpret_cast<SynchronizeFn>(RealDriverFunction(Hook::k_cuStreamSynchronize));
  const DigestStream ordered{stream, [&] {
                               return synchronize != nullptr &&
                                      synchronize(reinterpret_cast<CUstream>(stream)) ==
                                          CUDA_SUCCESS;
                             }};
  int synced = 0;
  std::vector<format::BufferDigest> digests;
  digests.reserve(extents.size());
  for (const Extent& extent : extents) {
    bool on_gpu = false;
    // On the GPU an f32 extent's bytes are staged for its summary, made when the digest arrives.
    const bool summarize = extent.dtype == format::DType::kF32 && extent.bytes <= kSummaryMaxBytes;
    std::optional<format::Digest> value = session.DigestInStreamOrder(
        extent.address, extent.bytes, ordered, &synced, &on_gpu, summarize);
    if (!value) continue;
    format::BufferDigest digest;
    digest.role = extent.role;
    digest.pointer = session.Canonical(extent.address);
    digest.bytes = extent.bytes;
    digest.digest = *value;
    digest.dtype = extent.dtype;
    if (summarize && !on_gpu) {
      digest.summary = SummarizeF32(extent.address, extent.bytes);
    }
    digests.push_back(std::move(digest));
  }
  return digests;
}

void AppendDecimal(std::string& out, int64_t value) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out.append(digits, end);
}

format::Argument TextArgument(std::string name, std::string value) {
  format::Argument argument;
  argument.name = std::move(name);
  argument.value = std::move(value);
  return argument;
}

format::Argument UnsignedArgument(std::string name, uint64_t value) {
  format::Argument argument;
  argument.name = std::move(name);
  argument.value = value;
  return argument;
}

format::Argument SignedArgument(std::string name, int64_t value) {
  format::Argument argument;
  argument.name = std::move(name);
  argument.value = value;
  return argument;
}

format::Argument DoubleArgument(std::string name, double value) {
  format::Argument argument;
  argument.name = std::move(name);
  argument.value = value;
  return argument;
}

format::Argument DimsArgument(std::string name, std::vector<int64_t> dims) {
  format::Argument argument;
  argument.name = std::move(name);
  argument.value = format::Argument::Dims(std::move(dims));
  return argument;
}

format::Argument PointerArgument(Session& session, std::string name, uint64_t address) {
  format::Argument argument;
  argument.name = std::move(name);
  argument.value = session.Canonical(address);
  return argument;
}

}  // namespace ndt::tracer
