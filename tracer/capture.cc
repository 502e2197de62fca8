#include "tracer/capture.h"

#include <cuda.h>
#include <elf.h>
#include <fnmatch.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "kernels/digest_v1.h"
#include "tracer/driver_table.h"
#include "tracer/gpu_time.h"
#include "tracer/library_support.h"

namespace ndt::tracer {
namespace {

// Extents larger than this are not captured (the blob stream is for replaying one op).
constexpr uint64_t kMaxCaptureBytes = uint64_t{1} << 30;

// The parsed NDTRACE_CAPTURE.
struct CaptureSet {
  struct Range {
    uint64_t first = 0;
    uint64_t last = 0;
  };
  std::vector<Range> ranges;
  std::vector<std::string> kernel_globs;
  std::vector<std::string> names;  // op kinds or API names
  bool any = false;
};

bool ParseNumber(const std::string& text, uint64_t* value) {
  if (text.empty() || text.size() > 19) return false;
  uint64_t result = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    result = result * 10 + static_cast<uint64_t>(c - '0');
  }
  *value = result;
  return true;
}

bool IsIdentifier(const std::string& text) {
  if (text.empty()) return false;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

CaptureSet ParseCaptureSet(const char* text) {
  CaptureSet set;
  if (text == nullptr || *text == '\0') return set;
  std::vector<std::string> ignored;
  std::string all(text);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    std::string token = all.substr(start, end - start);
    start = end + 1;
    while (!token.empty() && token.front() == ' ') token.erase(token.begin());
    while (!token.empty() && token.back() == ' ') token.pop_back();
    if (token.empty()) continue;
    uint64_t first = 0, last = 0;
    const size_t dash = token.find('-');
    if (ParseNumber(token, &first)) {
      set.ranges.push_back({first, first});
    } else if (dash != std::string::npos && ParseNumber(token.substr(0, dash), &first) &&
               ParseNumber(token.substr(dash + 1), &last) && first <= last) {
      set.ranges.push_back({first, last});
    } else if (token.rfind("kernel:", 0) == 0 && token.size() > 7) {
      set.kernel_globs.push_back(token.substr(7));
    } else if (IsIdentifier(token)) {
      set.names.push_back(token);
    } else {
      ignored.push_back(token);
    }
  }
  set.any = !set.ranges.empty() || !set.kernel_globs.empty() || !set.names.empty();
  const char* quiet = std::getenv("NDTRACE_QUIET");
  if (!ignored.empty() && (quiet == nullptr || std::string(quiet) != "1")) {
    std::string list;
    for (const std::string& token : ignored) list += (list.empty() ? "'" : ", '") + token + "'";
    std::fprintf(stderr,
                 "ndtrace: NDTRACE_CAPTURE: ignoring %s (expected N, A-B, kernel:GLOB or an op "
                 "kind or API name)\n",
                 list.c_str());
  }
  return set;
}

// Read once; never destroyed (hooks may run during exit).
const CaptureSet& Selection() {
  static const CaptureSet* set = new CaptureSet(ParseCaptureSet(std::getenv("NDTRACE_CAPTURE")));
  return *set;
}

std::string Hex(const format::BlobId& id) {
  char text[33];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(id.lo),
                static_cast<unsigned long long>(id.hi));
  return text;
}

// The bytes of one extent, or (error set) why they could not be read.
std::vector<std::byte> ReadExtent(const Extent& extent, std::string* error) {
  using CopyFn = CUresult (*)(void*, CUdeviceptr, size_t);
  const auto copy = reinterpret_cast<CopyFn>(RealDriverFunction(Hook::k_cuMemcpyDtoH_v2));
  if (copy == nullptr) {
    *error = "missing: no cuMemcpyDtoH_v2";
  } else if (extent.bytes == 0) {
    *error = "missing: extent of unknown size";
  } else if (extent.bytes > kMaxCaptureBytes) {
    *error = "missing: larger than 1 GiB";
  } else {
    std::vector<std::byte> bytes(extent.bytes);
    const gpu_time::OwnWork own(gpu_time::OwnWork::Work::kHostCopies);
    if (copy(bytes.data(), extent.address, extent.bytes) == CUDA_SUCCESS) return bytes;
    *error = "missing: the device memory could not be read";
  }
  return {};
}

// `bytes` stored as a blob: its id, or why not.
std::string Store(Session& session, std::span<const std::byte> bytes) {
  StatusOr<format::BlobId> id = session.writer().PutBlob(bytes);
  if (!id.ok()) return "missing: " + id.status().message();
  return Hex(*id);
}

// The bytes of one extent as a blob id, or why not.
std::string CaptureOne(Session& session, const Extent& extent) {
  std::string error;
  const std::vector<std::byte> bytes = ReadExtent(extent, &error);
  return error.empty() ? Store(session, bytes) : error;
}

// Synchronises `stream` through the real driver.
bool Synchronize(uint64_t stream) {
  using SynchronizeFn = CUresult (*)(CUstream);
  const auto synchronize =
      reinterpret_cast<SynchronizeFn>(RealDriverFunction(Hook::k_cuStreamSynchronize));
  return synchronize != nullptr && synchronize(reinterpret_cast<CUstream>(stream)) == CUDA_SUCCESS;
}

// ---- kernel launches ------------------------------------------------------------------------

// Where a loaded module's image is, and its blob once a captured launch has stored it.
struct ModuleImage {
  const void* image = nullptr;
  uint64_t bytes = 0;
  kernels::Digest128 digest;
  std::string blob;  // blob id or "missing: ..."; empty until first needed
};

struct ModuleImages {
  std::mutex mutex;
  std::unordered_map<uint64_t, ModuleImage> by_module;
};

// Never destroyed (hooks may run during exit).
ModuleImages& Images() {
  static ModuleImages* images = new ModuleImages;
  return *images;
}

// `bytes` of host memory at `host`, read through process_vm_readv, which fails instead of
// faulting when the program has unmapped it since loading the module.
bool ReadHostSafely(const void* host, std::vector<std::byte>* bytes) {
  iovec local{bytes->data(), bytes->size()};
  iovec remote{const_cast<void*>(host), bytes->size()};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) ==
         static_cast<ssize_t>(bytes->size());
}

// The blob of module `module_id`'s image, stored on first use, or why there is none.
std::string ModuleBlob(Session& session, uint64_t module_id) {
  ModuleImages& images = Images();
  std::lock_guard lock(images.mutex);
  const auto it = images.by_module.find(module_id);
  if (it == images.by_module.end()) {
    return "missing: the module was not loaded through a hooked function while recording";
  }
  ModuleImage& module = it->second;
  if (!module.blob.empty()) return module.blob;
  if (module.bytes == 0 || module.bytes > kMaxCaptureBytes) {
    module.blob = "missing: the module image is of unknown size or larger than 1 GiB";
    return module.blob;
  }
  std::vector<std::byte> bytes(module.bytes);
  if (!ReadHostSafely(module.image, &bytes) ||
      kernels::DigestV1(bytes.data(), bytes.size()) != module.digest) {
    // Not cached: the bytes may be readable again at a later launch only by chance.
    return "missing: the program released or changed the module image after loading it";
  }
  module.blob = Store(session, bytes);
  return module.blob;
}

// The mangled name of the launched handle, through the real driver; empty when it cannot say.
std::string MangledName(const KernelInfo& kernel, const void* function) {
  using NameFn = CUresult (*)(const char**, const void*);
  const auto name = reinterpret_cast<NameFn>(
      DriverProc(kernel.is_kernel ? "cuKernelGetName" : "cuFuncGetName", 12030));
  const char* text = nullptr;
  if (name == nullptr || name(&text, function) != CUDA_SUCCESS || text == nullptr) return {};
  return text;
}

// Allocations captured for one launch at most, and the largest one scanned for pointers.
constexpr size_t kMaxLaunchAllocations = 256;
constexpr uint64_t kMaxPointerScanBytes = uint64_t{64} << 20;

// Appends to `out` every 8-byte-aligned word of `bytes` (which start at alignment `start`)
// that is a device address.
void FindPointers(Session& session, const char* bytes, size_t size, uint64_t start,
                  std::vector<uint64_t>* out) {
  for (size_t at = (8 - start % 8) % 8; at + 8 <= size; at += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + at, 8);
    if (word != 0 && session.IsDevice(word)) out->push_back(word);
  }
}

}  // namespace

bool CaptureAny() noexcept {
  try {
    return Selection().any;
  } catch (const std::exception&) {
    return false;
  }
}

bool CaptureWanted(const format::OpRecord& op) noexcept {
  try {
    const CaptureSet& set = Selection();
    if (!set.any) return false;
    for (const CaptureSet::Range& range : set.ranges) {
      if (op.sequence >= range.first && op.sequence <= range.last) return true;
    }
    if (op.kind == format::OpKind::kKernelLaunch) {
      for (const std::string& glob : set.kernel_globs) {
        if (fnmatch(glob.c_str(), op.name.c_str(), 0) == 0) return true;
      }
    }
    for (const std::string& name : set.names) {
      if (name == format::OpKindName(op.kind) || name == op.name) return true;
    }
  } catch (const std::exception&) {
  }
  return false;
}

void CaptureExtents(Session& session, uint64_t stream, const std::vector<Extent>& extents,
                    const char* direction, format::OpRecord* op) noexcept {
  if (extents.empty()) return;
  try {
    const std::string prefix = std::string("blob:") + direction + ":";
    if (!Synchronize(stream)) {
      for (const Extent& extent : extents) {
        op->args.push_back(
            TextArgument(prefix + extent.role, "missing: the stream could not synchronise"));
      }
      return;
    }
    for (const Extent& extent : extents) {
      op->args.push_back(TextArgument(prefix + extent.role, CaptureOne(session, extent)));
    }
  } catch (const std::exception&) {
    // Out of memory for a large extent: the op stays recorded without its capture.
  }
}

uint64_t ModuleImageBytes(const void** image) noexcept {
  constexpr uint32_t kFatbinMagic = 0xBA55ED50;         // a fat binary
  constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;  // nvcc's __fatBinC_Wrapper_t
  const auto* bytes = static_cast<const unsigned char*>(*image);
  uint32_t magic;
  std::memcpy(&magic, bytes, sizeof(magic));
  if (magic == kFatbinWrapperMagic) {
    const void* data;  // int magic; int version; const unsigned long long* data; ...
    std::memcpy(&data, bytes + 8, sizeof(data));
    if (data == nullptr) return 0;
    *image = data;
    bytes = static_cast<const unsigned char*>(data);
    std::memcpy(&magic, bytes, sizeof(magic));
  }
  if (magic == kFatbinMagic) {  // u32 magic; u16 version; u16 header size; u64 payload size
    uint16_t header_size;
    uint64_t payload_size;
    std::memcpy(&header_size, bytes + 6, sizeof(header_size));
    std::memcpy(&payload_size, bytes + 8, sizeof(payload_size));
    return uint64_t{header_size} + payload_size;
  }
  if (std::memcmp(bytes, ELFMAG, SELFMAG) == 0 && bytes[EI_CLASS] == ELFCLASS64) {
    Elf64_Ehdr header;
    std::memcpy(&header, bytes, sizeof(header));
    const uint64_t sections = header.e_shoff + uint64_t{header.e_shnum} * header.e_shentsize;
    const uint64_t segments = header.e_phoff + uint64_t{header.e_phnum} * header.e_phentsize;
    return std::max({sections, segments, uint64_t{sizeof(header)}});
  }
  if (bytes[0] == '/' || bytes[0] == '.' || bytes[0] == '\n' || bytes[0] == ' ' ||
      bytes[0] == '\t') {
    return std::strlen(reinterpret_cast<const char*>(bytes)) + 1;
  }
  return 0;
}

void CaptureModuleLoaded(uint64_t module_id, const void* image) noexcept {
  try {
    if (module_id == 0 || image == nullptr || !Selection().any) return;
    ModuleImage module;
    module.bytes = ModuleImageBytes(&image);
    module.image = image;
    module.digest = kernels::DigestV1(module.bytes == 0 ? nullptr : image, module.bytes);
    ModuleImages& images = Images();
    std::lock_guard lock(images.mutex);
    images.by_module[module_id] = module;
  } catch (const std::exception&) {
  }
}

void CaptureLaunchInputs(Session& session, const KernelInfo& kernel, const void* function,
                         uint64_t stream, format::OpRecord* op) noexcept {
  try {
    const std::string mangled = MangledName(kernel, function);
    op->args.push_back(TextArgument("mangledName", mangled.empty() ? kernel.name : mangled));
    op->args.push_back(TextArgument("blob:module", ModuleBlob(session, op->module_id)));

    // The pointers in the argument bytes ("arg<i>", at the kernel's parameter offsets).
    std::vector<uint64_t> pointers;
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      const std::string name = "arg" + std::to_string(i);
      for (const format::Argument& argument : op->args) {
        if (argument.name != name) continue;
        if (const auto* pointer = std::get_if<format::DevicePointer>(&argument.value)) {
          pointers.push_back(pointer->raw_address);
        } else if (const auto* bytes = std::get_if<format::Argument::Bytes>(&argument.value)) {
          FindPointers(session, bytes->data.data(), bytes->data.size(), kernel.params[i].first,
                       &pointers);
        }
      }
    }
    if (!Synchronize(stream)) {
      op->args.push_back(
          TextArgument("blob:in:allocations", "missing: the stream could not synchronise"));
      return;
    }
    // Their allocations, whole, and the allocations the pointers inside those bytes name.
    std::vector<uint64_t> seen;
    for (size_t next = 0; next < pointers.size() && seen.size() < kMaxLaunchAllocations; ++next) {
      const std::optional<Allocation> allocation = session.FindAllocation(pointers[next]);
      if (!allocation || std::find(seen.begin(), seen.end(), allocation->id) != seen.end()) {
        continue;
      }
      seen.push_back(allocation->id);
      Extent extent;
      extent.role = "alloc" + std::to_string(allocation->id);
      extent.address = allocation->base;
      extent.bytes = allocation->bytes;
      format::Argument base;
      base.name = extent.role;
      base.value = format::DevicePointer{allocation->id, 0, allocation->base};
      op->args.push_back(std::move(base));
      format::Argument size;
      size.name = extent.role + ".bytes";
      size.value = allocation->bytes;
      op->args.push_back(std::move(size));
      std::string error;
      const std::vector<std::byte> bytes = ReadExtent(extent, &error);
      op->args.push_back(
          TextArgument("blob:in:" + extent.role, error.empty() ? Store(session, bytes) : error));
      if (error.empty() && bytes.size() <= kMaxPointerScanBytes) {
        FindPointers(session, reinterpret_cast<const char*>(bytes.data()), bytes.size(), 0,
                     &pointers);
      }
    }
  } catch (const std::exception&) {
    // Out of memory for a large allocation: the launch stays recorded without its capture.
  }
}

void CaptureCopySource(Session& session, uint64_t stream, bool src_device, uint64_t src,
                       uint64_t bytes, format::OpRecord* op) noexcept {
  try {
    if (src_device) {
      Extent extent;
      extent.role = "src";
      extent.address = src;
      extent.bytes = bytes;
      CaptureExtents(session, stream, {extent}, "in", op);
      return;
    }
    std::string blob;
    if (bytes == 0 || bytes > kMaxCaptureBytes) {
      blob = "missing: empty or larger than 1 GiB";
    } else {
      std::vector<std::byte> host(bytes);
      blob = ReadHostSafely(reinterpret_cast<const void*>(src), &host)
                 ? Store(session, host)
                 : "missing: the host memory could not be read";
    }
    op->args.push_back(TextArgument("blob:in:src", blob));
  } catch (const std::exception&) {
  }
}

void CaptureLaunchOutputs(Session& session, uint64_t stream, format::OpRecord* op) noexcept {
  try {
    std::vector<Extent> extents;
    for (const format::Argument& argument : op->args) {
      const auto* base = std::get_if<format::DevicePointer>(&argument.value);
      if (base == nullptr || argument.name.rfind("alloc", 0) != 0) continue;
      for (const format::Argument& size : op->args) {
        const auto* bytes = std::get_if<uint64_t>(&size.value);
        if (bytes == nullptr || size.name != argument.name + ".bytes") continue;
        Extent extent;
        extent.role = argument.name;
        extent.address = base->raw_address;
        extent.bytes = *bytes;
        extents.push_back(std::move(extent));
      }
    }
    CaptureExtents(session, stream, extents, "out", op);
  } catch (const std::exception&) {
  }
}

}  // namespace ndt::tracer
