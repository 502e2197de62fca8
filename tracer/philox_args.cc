#include "tracer/philox_args.h"

#include <cuda.h>

#include <cstring>

#include "tracer/driver_table.h"
#include "tracer/gpu_time.h"

namespace ndt::tracer {
namespace {

constexpr uint64_t kPhiloxStateBytes = 24;
constexpr std::string_view kPhiloxType = "at::PhiloxCudaState";

std::string_view Trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// A parameter written as `at::PhiloxCudaState` (by value; `const` allowed).
bool IsPhiloxType(std::string_view type) {
  type = Trim(type);
  if (type.substr(0, 6) == "const ") type = Trim(type.substr(6));
  if (type.size() > 6 && type.substr(type.size() - 6) == " const") {
    type = Trim(type.substr(0, type.size() - 6));
  }
  return type == kPhiloxType;
}

uint64_t Word64(const std::string& bytes, size_t at) {
  uint64_t value = 0;
  std::memcpy(&value, bytes.data() + at, sizeof(value));
  return value;
}

}  // namespace

std::vector<std::string> DemangledParameterTypes(std::string_view demangled) {
  // The last top-level '(' ... ')' group: scan back from the last ')' matching nesting.
  const size_t close = demangled.rfind(')');
  if (close == std::string_view::npos) return {};
  int depth = 0;
  size_t open = std::string_view::npos;
  for (size_t i = close + 1; i-- > 0;) {
    const char c = demangled[i];
    if (c == ')' || c == '>' || c == ']') ++depth;
    if (c == '(' || c == '<' || c == '[') --depth;
    if (depth == 0 && c == '(') {
      open = i;
      break;
    }
  }
  if (open == std::string_view::npos) return {};
  std::vector<std::string> types;
  const std::string_view list = demangled.substr(open + 1, close - open - 1);
  depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '(' || c == '<' || c == '[') ++depth;
    if (c == ')' || c == '>' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      const std::string_view type = Trim(list.substr(start, i - start));
      if (!type.empty()) types.emplace_back(type);
      start = i + 1;
    }
  }
  if (types.size() == 1 && types[0] == "void") types.clear();
  return types;
}

std::optional<PhiloxArgument> FindPhiloxArgument(
    std::string_view demangled_name, const std::vector<std::pair<uint64_t, uint64_t>>& layout,
    const std::vector<std::string>& bytes, const DeviceWordReader& read) {
  if (demangled_name.find(kPhiloxType) == std::string_view::npos) return std::nullopt;
  try {
    const std::vector<std::string> types = DemangledParameterTypes(demangled_name);
    for (size_t i = 0; i < types.size() && i < layout.size() && i < bytes.size(); ++i) {
      if (!IsPhiloxType(types[i])) continue;
      if (layout[i].second != kPhiloxStateBytes || bytes[i].size() != kPhiloxStateBytes) {
        continue;
      }
      PhiloxArgument found;
      found.index = i;
      uint32_t intragraph = 0;
      std::memcpy(&intragraph, bytes[i].data() + 16, sizeof(intragraph));
      found.offset_intragraph = intragraph;
      found.captured = bytes[i][20] != 0;
      found.state.generator = "philox";
      if (!found.captured) {
        found.state.seed = Word64(bytes[i], 0);
        found.state.offset = Word64(bytes[i], 8);
        return found;
      }
      found.seed_address = Word64(bytes[i], 0);
      found.offset_address = Word64(bytes[i], 8);
      if (auto state = ReadPhiloxWords(found.seed_address, found.offset_address, read)) {
        found.state = std::move(*state);
        found.state.offset += intragraph;
      } else {
        found.resolved = false;
        found.state.generator = "philox:captured";
        found.state.offset = intragraph;
      }
      return found;
    }
  } catch (...) {  // allocation failure: nothing found, never into the host
  }
  return std::nullopt;
}

std::optional<format::RngState> ReadPhiloxWords(uint64_t seed_address, uint64_t offset_address,
                                                const DeviceWordReader& read) {
  if (!read) return std::nullopt;
  const std::optional<int64_t> seed = read(seed_address);
  const std::optional<int64_t> offset = seed ? read(offset_address) : std::nullopt;
  if (!offset) return std::nullopt;
  format::RngState state;
  state.generator = "philox";
  state.seed = static_cast<uint64_t>(*seed);
  state.offset = static_cast<uint64_t>(*offset);
  return state;
}

std::string IntragraphOffsetsText(const std::vector<uint32_t>& offsets) {
  constexpr size_t kListed = 8;
  std::string text;
  for (size_t i = 0; i < offsets.size() && i < kListed; ++i) {
    text += (i == 0 ? "" : ",") + std::to_string(offsets[i]);
  }
  if (offsets.size() > kListed) text += ",... (" + std::to_string(offsets.size()) + " launches)";
  return text;
}

DeviceWordReader RealDriverWordReader(uint64_t stream) {
  return [stream](uint64_t address) -> std::optional<int64_t> {
    using SynchronizeFn = CUresult (*)(CUstream);
    using CopyFn = CUresult (*)(void*, CUdeviceptr, size_t);
    const auto synchronize =
        reinterpret_cast<SynchronizeFn>(RealDriverFunction(Hook::k_cuStreamSynchronize));
    const auto copy = reinterpret_cast<CopyFn>(RealDriverFunction(Hook::k_cuMemcpyDtoH_v2));
    if (synchronize == nullptr || copy == nullptr || address == 0) return std::nullopt;
    if (synchronize(reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) return std::nullopt;
    const gpu_time::OwnWork own(gpu_time::OwnWork::Work::kHostCopies);
    int64_t value = 0;
    if (copy(&value, static_cast<CUdeviceptr>(address), sizeof(value)) != CUDA_SUCCESS) {
      return std::nullopt;
    }
    return value;
  };
}

}  // namespace ndt::tracer
