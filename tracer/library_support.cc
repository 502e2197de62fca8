#include "tracer/library_support.h"

#include <cuda.h>
#include <dlfcn.h>

#include "tracer/driver_table.h"
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

std::vector<format::BufferDigest> DigestExtents(Session& session, uint64_t stream,
                                                const std::vector<Extent>& extents) {
  if (!session.policy().library_digests || extents.empty()) return {};
  using SynchronizeFn = CUresult (*)(CUstream);
  const auto synchronize =
      reinterpret_cast<SynchronizeFn>(RealDriverFunction(Hook::k_cuStreamSynchronize));
  if (synchronize == nullptr ||
      synchronize(reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
    return {};
  }
  std::vector<format::BufferDigest> digests;
  digests.reserve(extents.size());
  for (const Extent& extent : extents) {
    std::optional<format::Digest> value = session.DigestDevice(extent.address, extent.bytes);
    if (!value) continue;
    format::BufferDigest digest;
    digest.role = extent.role;
    digest.pointer = session.Canonical(extent.address);
    digest.bytes = extent.bytes;
    digest.digest = *value;
    digest.dtype = extent.dtype;
    digests.push_back(std::move(digest));
  }
  return digests;
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
