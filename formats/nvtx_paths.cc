#include "formats/nvtx_paths.h"

#include <variant>

namespace ndt::format {

void NvtxPaths::Observe(const Record& record) {
  if (const auto* range = std::get_if<NvtxRangeRecord>(&record)) Observe(*range);
}

void NvtxPaths::Observe(const NvtxRangeRecord& range) {
  if (range.range_id == 0) return;
  if (range.kind == NvtxEvent::kPush) {
    ranges_[range.range_id] = Range{range.domain, range.name, range.parent_id};
  } else if (range.kind == NvtxEvent::kPop) {
    if (ranges_.find(range.range_id) == ranges_.end()) return;
    closed_.push_back(range.range_id);
    while (closed_.size() > kClosedKept) {
      ranges_.erase(closed_.front());
      closed_.pop_front();
    }
  }
}

namespace {

// A range's name in a path: PyTorch's domains go without saying (the names say what they are).
std::string PathLabel(const std::string& domain, const std::string& name) {
  if (domain.empty() || domain == kModuleDomain || domain == kOpDomain) return name;
  return domain + ": " + name;
}

}  // namespace

std::string NvtxPaths::Label(const NvtxRangeRecord& range) {
  return range.domain.empty() ? range.name : range.domain + ": " + range.name;
}

std::string NvtxPaths::FrameworkOp(const std::string& domain, const std::string& name) {
  const size_t comma = name.find(", seq = ");
  const bool emit_nvtx_shape = comma != std::string::npos && name.find("::") < comma;
  if (domain == kOpDomain ||
      (domain.empty() && (emit_nvtx_shape || name.rfind("aten::", 0) == 0))) {
    return name.substr(0, name.find(','));
  }
  return "";
}

RangeContext NvtxPaths::Resolve(uint64_t id) const {
  RangeContext context;
  std::vector<const Range*> chain;
  for (size_t depth = 0; id != 0 && depth < kMaxDepth; ++depth) {
    const auto it = ranges_.find(id);
    if (it == ranges_.end()) break;
    chain.push_back(&it->second);
    id = it->second.parent;
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Range& range = **it;
    context.path.push_back(PathLabel(range.domain, range.name));
  }
  for (const Range* range : chain) {  // innermost first
    if (context.framework_op.empty())
      context.framework_op = FrameworkOp(range->domain, range->name);
    if (context.module.empty() && range->domain == kModuleDomain) context.module = range->name;
  }
  return context;
}

std::string JoinPath(const std::vector<std::string>& path) {
  std::string joined;
  for (const std::string& name : path) {
    if (!joined.empty()) joined += " > ";
    joined += name;
  }
  return joined;
}

}  // namespace ndt::format
