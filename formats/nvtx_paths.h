// The NVTX ranges enclosing an op, for readers (show, diff, export): a trace holds each op's
// innermost range id (OpRecord.nvtx_range_id) and the push/pop records of the ranges
// (formats/README.md, "NVTX ranges"); this turns the id into the path of range names.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/records.h"

namespace ndt::format {

// What an op's ranges say in the user's terms.
struct RangeContext {
  std::vector<std::string> path;  // outermost first, as "name" or "domain: name" (PyTorch's
                                  // domains left out)
  std::string framework_op;       // innermost PyTorch op range ("aten::index_add_"), if any
  std::string module;             // innermost PyTorch module range ("model.layer1.0"), if any
  bool empty() const { return path.empty(); }
};

// The domains ndtrace's Python shim uses (tools/python/sitecustomize.py).
inline constexpr const char* kModuleDomain = "pytorch.module";
inline constexpr const char* kOpDomain = "pytorch.op";

// Follows the NVTX records of one trace, read in order, and resolves range ids. Memory is
// bounded: the open ranges, and the last kClosedKept closed ones (an op read a little while
// before its ranges closed, as a diff's lanes hold them, still resolves).
class NvtxPaths {
 public:
  static constexpr size_t kClosedKept = 1 << 16;
  static constexpr size_t kMaxDepth = 256;  // path length cap (a cycle in hostile input)

  // Takes a record of the trace, in file order; only NVTX records matter.
  void Observe(const Record& record);
  void Observe(const NvtxRangeRecord& range);

  // The context of range `id` (an op's nvtx_range_id); empty when 0 or unknown.
  RangeContext Resolve(uint64_t id) const;

  // The name a range record shows ("name" or "domain: name"), PyTorch's ", seq = N" kept.
  static std::string Label(const NvtxRangeRecord& range);
  // "aten::index_add_" from "aten::index_add_, seq = 12, sizes = [...]"; empty when `name` is
  // not a PyTorch op range (emit_nvtx's shape, or the shim's kOpDomain).
  static std::string FrameworkOp(const std::string& domain, const std::string& name);

 private:
  struct Range {
    std::string domain;
    std::string name;
    uint64_t parent = 0;
  };
  std::unordered_map<uint64_t, Range> ranges_;
  std::deque<uint64_t> closed_;  // oldest first
};

// "a > b > c".
std::string JoinPath(const std::vector<std::string>& path);

}  // namespace ndt::format
