#include "tracer/capture.h"

#include <cuda.h>
#include <fnmatch.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "tracer/driver_table.h"

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

// The bytes of one extent as a blob id, or why not.
std::string CaptureOne(Session& session, const Extent& extent) {
  using CopyFn = CUresult (*)(void*, CUdeviceptr, size_t);
  const auto copy = reinterpret_cast<CopyFn>(RealDriverFunction(Hook::k_cuMemcpyDtoH_v2));
  if (copy == nullptr) return "missing: no cuMemcpyDtoH_v2";
  if (extent.bytes == 0) return "missing: extent of unknown size";
  if (extent.bytes > kMaxCaptureBytes) return "missing: larger than 1 GiB";
  std::vector<std::byte> bytes(extent.bytes);
  if (copy(bytes.data(), extent.address, extent.bytes) != CUDA_SUCCESS) {
    return "missing: the device memory could not be read";
  }
  StatusOr<format::BlobId> id = session.writer().PutBlob(std::span(bytes));
  if (!id.ok()) return "missing: " + id.status().message();
  return Hex(*id);
}

}  // namespace

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
    using SynchronizeFn = CUresult (*)(CUstream);
    const auto synchronize =
        reinterpret_cast<SynchronizeFn>(RealDriverFunction(Hook::k_cuStreamSynchronize));
    if (synchronize == nullptr ||
        synchronize(reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
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

}  // namespace ndt::tracer
