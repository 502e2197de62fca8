// Standalone replay of a raw kernel launch captured by `ndtrace record --capture` (tracer/
// capture.h): every allocation the launch references is re-created at its recorded device
// address, so that pointers held in the argument bytes and inside the buffers stay valid; the
// captured module image is loaded, the kernel found by its mangled name and launched with the
// recorded configuration and argument bytes.
//
// Re-creating an allocation at its address: the granule-aligned range around it is reserved with
// cuMemAddressReserve asking for that address (allocations sharing a granule share one range),
// backed by cuMemCreate and mapped with cuMemMap + cuMemSetAccess. The driver gives another
// range when the requested one is in use (a real driver shares the address space with the host,
// whose layout differs from process to process): the allocations there are then relocated, every
// 8-byte word of the arguments and of the captured inputs that held an address in a recorded
// range is moved by the same distance, and the report says so. This runs before the module is
// loaded, which takes device memory of its own.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "replayer/op_replay/op_replay_internal.h"

namespace ndt::replay::internal {
namespace {

// One allocation the launch references, as captured.
struct CapturedAllocation {
  std::string role;  // "alloc<id>"
  uint64_t base = 0;
  uint64_t bytes = 0;
  std::string before;
  std::optional<std::string> after;
};

// What the launch needs, from the op's arguments.
struct Launch {
  std::string mangled;
  format::BlobId module;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::vector<std::string> params;  // the bytes of each parameter, in order
  std::vector<CapturedAllocation> allocations;
};

bool Dims3(const format::OpRecord& op, const char* name, unsigned out[3]) {
  const format::Argument* argument = FindArgument(op, name);
  const auto* dims =
      argument == nullptr ? nullptr : std::get_if<format::Argument::Dims>(&argument->value);
  if (dims == nullptr || dims->size() != 3) return false;
  for (int i = 0; i < 3; ++i) {
    if ((*dims)[i] < 1 || (*dims)[i] > UINT32_MAX) return false;
    out[i] = static_cast<unsigned>((*dims)[i]);
  }
  return true;
}

StatusOr<Launch> DescribeLaunch(format::TraceReader& reader, const format::OpRecord& op) {
  Launch launch;
  const std::string* mangled = TextOf(op, "mangledName");
  const std::string* module = TextOf(op, "blob:module");
  if (mangled == nullptr || module == nullptr) {
    return Status::Error(
        fmt::format("op {} was recorded without its kernel's name or module", op.sequence));
  }
  launch.mangled = *mangled;
  const std::optional<format::BlobId> module_id = ParseBlobId(*module);
  if (!module_id) {
    return Status::Error(
        fmt::format("op {}'s module image was not captured ({})", op.sequence, *module));
  }
  launch.module = *module_id;
  const format::Argument* shared = FindArgument(op, "sharedMemBytes");
  if (!Dims3(op, "grid", launch.grid) || !Dims3(op, "block", launch.block) || shared == nullptr ||
      !std::holds_alternative<uint64_t>(shared->value) ||
      std::get<uint64_t>(shared->value) > UINT32_MAX) {
    return Status::Error(fmt::format("op {} lacks its launch configuration", op.sequence));
  }
  launch.shared_bytes = static_cast<unsigned>(std::get<uint64_t>(shared->value));

  for (const format::Argument& argument : op.args) {
    if (argument.name.rfind("params of ", 0) == 0) {
      return Status::Error(fmt::format(
          "op {}'s parameter layout was unknown to the driver: its arguments were not recorded",
          op.sequence));
    }
  }
  for (size_t i = 0;; ++i) {
    const format::Argument* argument = FindArgument(op, "arg" + std::to_string(i));
    if (argument == nullptr) break;
    if (const auto* bytes = std::get_if<format::Argument::Bytes>(&argument->value)) {
      if (bytes->data.empty()) {
        return Status::Error(
            fmt::format("op {}'s argument {} was not readable when recorded", op.sequence, i));
      }
      launch.params.push_back(bytes->data);
    } else if (const auto* pointer = std::get_if<format::DevicePointer>(&argument->value)) {
      launch.params.emplace_back(reinterpret_cast<const char*>(&pointer->raw_address), 8);
    } else {
      return Status::Error(fmt::format(
          "op {}'s argument {} was recorded as a summary, not as its bytes", op.sequence, i));
    }
  }

  for (const format::Argument& argument : op.args) {
    const auto* pointer = std::get_if<format::DevicePointer>(&argument.value);
    if (pointer == nullptr || argument.name.rfind("alloc", 0) != 0) continue;
    CapturedAllocation allocation;
    allocation.role = argument.name;
    allocation.base = pointer->raw_address;
    const format::Argument* bytes = FindArgument(op, argument.name + ".bytes");
    if (bytes == nullptr || !std::holds_alternative<uint64_t>(bytes->value) ||
        std::get<uint64_t>(bytes->value) == 0 ||
        allocation.base + std::get<uint64_t>(bytes->value) < allocation.base) {
      return Status::Error(fmt::format("op {} lacks the size of {}", op.sequence, argument.name));
    }
    allocation.bytes = std::get<uint64_t>(bytes->value);
    StatusOr<std::optional<std::string>> before =
        ReadCaptured(reader, op, "in", allocation.role, allocation.bytes);
    if (!before.ok()) return before.status();
    if (!*before) {
      return Status::Error(
          fmt::format("op {} was captured without its input {}", op.sequence, allocation.role));
    }
    allocation.before = std::move(**before);
    StatusOr<std::optional<std::string>> after =
        ReadCaptured(reader, op, "out", allocation.role, allocation.bytes);
    if (!after.ok()) return after.status();
    allocation.after = std::move(*after);
    launch.allocations.push_back(std::move(allocation));
  }
  if (launch.allocations.empty()) {
    return Status::Error(
        fmt::format("op {} references no device memory: there is nothing to compare", op.sequence));
  }
  return launch;
}

// The driver functions this replayer needs beyond `Driver`'s.
struct KernelDriver {
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*,
                          CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*module_load)(CUmodule*, const void*) = nullptr;
  CUresult (*module_unload)(CUmodule) = nullptr;
  CUresult (*get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void**, void**) = nullptr;
};

StatusOr<KernelDriver> ResolveKernelDriver(const Driver& driver) {
  KernelDriver k;
  std::string missing;
  const auto resolve = [&](const char* name, auto* slot) {
    if (void* function = driver.Resolve(name); function != nullptr) {
      *slot = reinterpret_cast<std::remove_reference_t<decltype(*slot)>>(function);
    } else {
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
    }
  };
  resolve("cuMemGetAllocationGranularity", &k.granularity);
  resolve("cuMemAddressReserve", &k.reserve);
  resolve("cuMemAddressFree", &k.address_free);
  resolve("cuMemCreate", &k.create);
  resolve("cuMemRelease", &k.release);
  resolve("cuMemMap", &k.map);
  resolve("cuMemUnmap", &k.unmap);
  resolve("cuMemSetAccess", &k.set_access);
  resolve("cuModuleLoadData", &k.module_load);
  resolve("cuModuleUnload", &k.module_unload);
  resolve("cuModuleGetFunction", &k.get_function);
  resolve("cuLaunchKernel", &k.launch);
  if (!missing.empty()) return Status::Error("the CUDA driver lacks " + missing);
  return k;
}

// Device memory mapped for the replay (at the recorded addresses when the driver gives them) and
// the loaded module, released in reverse on destruction.
class ReplayMemory {
 public:
  ReplayMemory(const Driver& driver, const KernelDriver& k) : driver_(driver), k_(k) {}
  ReplayMemory(const ReplayMemory&) = delete;
  ReplayMemory& operator=(const ReplayMemory&) = delete;
  ~ReplayMemory() {
    if (module_ != nullptr) k_.module_unload(module_);
    for (auto it = ranges_.rbegin(); it != ranges_.rend(); ++it) {
      if (it->mapped) k_.unmap(it->start, it->bytes);
      if (it->physical != 0) k_.release(it->physical);
      if (it->reserved) k_.address_free(it->start, it->bytes);
    }
  }

  // Maps `bytes` (granule-aligned) on device `ordinal` at `wanted` when that range is free, else
  // where the driver offers; returns the start.
  StatusOr<uint64_t> Map(uint64_t wanted, uint64_t bytes, int ordinal, const std::string& what) {
    ranges_.push_back({wanted, bytes});
    Range& range = ranges_.back();
    CUdeviceptr got = 0;
    if (const CUresult result = k_.reserve(&got, bytes, 0, wanted, 0); result != CUDA_SUCCESS) {
      return Status::Error(
          fmt::format("cannot re-create {}: {} bytes of address space cannot be reserved ({})",
                      what, bytes, driver_.Error("cuMemAddressReserve", result)));
    }
    const uint64_t start = got;
    range.start = start;
    range.reserved = true;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal;
    if (const CUresult result = k_.create(&range.physical, bytes, &prop, 0);
        result != CUDA_SUCCESS) {
      range.physical = 0;
      return Status::Error(driver_.Error("cuMemCreate", result) +
                           fmt::format(" ({} bytes for {})", bytes, what));
    }
    if (const CUresult result = k_.map(start, bytes, 0, range.physical, 0);
        result != CUDA_SUCCESS) {
      return Status::Error(driver_.Error("cuMemMap", result) + " (" + what + ")");
    }
    range.mapped = true;
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (const CUresult result = k_.set_access(start, bytes, &access, 1); result != CUDA_SUCCESS) {
      return Status::Error(driver_.Error("cuMemSetAccess", result) + " (" + what + ")");
    }
    return start;
  }

  StatusOr<CUfunction> Load(const std::string& image, const std::string& mangled) {
    if (const CUresult result = k_.module_load(&module_, image.data()); result != CUDA_SUCCESS) {
      module_ = nullptr;
      return Status::Error(driver_.Error("cuModuleLoadData", result) + " (the captured module)");
    }
    CUfunction function = nullptr;
    if (const CUresult result = k_.get_function(&function, module_, mangled.c_str());
        result != CUDA_SUCCESS) {
      return Status::Error(driver_.Error("cuModuleGetFunction", result) + " (" + mangled + ")");
    }
    return function;
  }

 private:
  struct Range {
    uint64_t start = 0;
    uint64_t bytes = 0;
    bool reserved = false;
    CUmemGenericAllocationHandle physical = 0;
    bool mapped = false;
  };
  const Driver& driver_;
  const KernelDriver& k_;
  std::vector<Range> ranges_;
  CUmodule module_ = nullptr;
};

// Where the recorded ranges were re-created: addresses in them move by their range's distance.
class Relocation {
 public:
  void Add(uint64_t start, uint64_t end, uint64_t placed, const std::string& what) {
    ranges_.push_back({start, end, placed});
    if (placed != start) {
      moves_ +=
          fmt::format("{}{} from {:#x} to {:#x}", moves_.empty() ? "" : ", ", what, start, placed);
    }
  }
  bool moved() const { return !moves_.empty(); }
  const std::string& Moves() const { return moves_; }

  uint64_t Address(uint64_t address) const {
    for (const Range& range : ranges_) {
      if (address >= range.start && address < range.end)
        return address - range.start + range.placed;
    }
    return address;
  }
  // Every 8-byte word of `bytes` (from its start) that is an address in a recorded range.
  void Words(std::string* bytes) const {
    for (size_t at = 0; at + 8 <= bytes->size(); at += 8) {
      uint64_t word = 0;
      std::memcpy(&word, bytes->data() + at, 8);
      const uint64_t moved = Address(word);
      if (moved != word) std::memcpy(bytes->data() + at, &moved, 8);
    }
  }

 private:
  struct Range {
    uint64_t start, end, placed;
  };
  std::vector<Range> ranges_;
  std::string moves_;
};

bool HandlesKernel(const format::OpRecord& op) {
  return op.kind == format::OpKind::kKernelLaunch;
}

StatusOr<OpReplayReport> ReplayKernel(format::TraceReader& reader, const format::OpRecord& op,
                                      const OpReplayOptions& options) {
  StatusOr<Launch> described = DescribeLaunch(reader, op);
  if (!described.ok()) return described.status();
  Launch& launch = *described;
  StatusOr<std::string> image = reader.ReadBlob(launch.module, uint64_t{1} << 32);
  if (!image.ok()) {
    return Status::Error(
        fmt::format("captured module of op {}: {}", op.sequence, image.status().message()));
  }
  image->push_back('\0');  // PTX text is loaded as a C string

  StatusOr<const Driver*> loaded = LoadDriver();
  if (!loaded.ok()) return loaded.status();
  const Driver& driver = **loaded;
  StatusOr<KernelDriver> resolved = ResolveKernelDriver(driver);
  if (!resolved.ok()) return resolved.status();
  const KernelDriver& k = *resolved;
  if (Status status = UseDevice(driver, op.device_ordinal); !status.ok()) return status;

  // The granule-aligned ranges around the allocations, merged where they touch.
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = static_cast<int>(op.device_ordinal);
  size_t granule = 0;
  if (const CUresult result = k.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      result != CUDA_SUCCESS || granule == 0) {
    return Status::Error(driver.Error("cuMemGetAllocationGranularity", result));
  }
  std::map<uint64_t, std::pair<uint64_t, std::string>> ranges;  // start -> (end, roles)
  for (const CapturedAllocation& allocation : launch.allocations) {
    if (allocation.base + allocation.bytes > UINT64_MAX - granule) {
      return Status::Error(fmt::format("op {}'s {} lies at an impossible address {:#x}",
                                       op.sequence, allocation.role, allocation.base));
    }
    const uint64_t start = allocation.base / granule * granule;
    const uint64_t end = (allocation.base + allocation.bytes + granule - 1) / granule * granule;
    ranges[start] = ranges.contains(start) ? std::pair{std::max(end, ranges[start].first),
                                                       ranges[start].second + "+" + allocation.role}
                                           : std::pair{end, allocation.role};
  }
  for (auto it = ranges.begin(); it != ranges.end() && std::next(it) != ranges.end();) {
    const auto next = std::next(it);
    if (next->first > it->second.first) {
      ++it;
      continue;
    }
    it->second.first = std::max(it->second.first, next->second.first);
    it->second.second += "+" + next->second.second;
    ranges.erase(next);
  }
  ReplayMemory memory(driver, k);
  Relocation relocation;
  for (const auto& [start, range] : ranges) {
    StatusOr<uint64_t> placed =
        memory.Map(start, range.first - start, static_cast<int>(op.device_ordinal), range.second);
    if (!placed.ok()) return placed.status().Prefixed(fmt::format("replaying op {}", op.sequence));
    relocation.Add(start, range.first, *placed, range.second);
  }
  if (relocation.moved()) {
    for (std::string& bytes : launch.params) relocation.Words(&bytes);
    for (CapturedAllocation& allocation : launch.allocations) {
      allocation.base = relocation.Address(allocation.base);
      relocation.Words(&allocation.before);
      if (allocation.after) relocation.Words(&*allocation.after);  // a table of pointers moves too
    }
  }
  StatusOr<CUfunction> function = memory.Load(*image, launch.mangled);
  if (!function.ok())
    return function.status().Prefixed(fmt::format("replaying op {}", op.sequence));

  // Every allocation is uploaded before each run; the outputs compared are those the recorded
  // launch changed (all of them when it changed none, or when none was captured after it).
  ReplayBuffers buffers;
  std::vector<size_t> outputs;
  for (size_t i = 0; i < launch.allocations.size(); ++i) {
    const CapturedAllocation& allocation = launch.allocations[i];
    buffers.buffers.push_back({allocation.base, allocation.before});
    if (allocation.after && *allocation.after != allocation.before) outputs.push_back(i);
  }
  if (outputs.empty()) {
    for (size_t i = 0; i < launch.allocations.size(); ++i) outputs.push_back(i);
  }
  bool all_recorded = true;
  std::string recorded, roles;
  for (size_t i : outputs) {
    const CapturedAllocation& allocation = launch.allocations[i];
    all_recorded = all_recorded && allocation.after.has_value();
    if (allocation.after) recorded += *allocation.after;
    roles += (roles.empty() ? "" : "+") + allocation.role;
    if (i == outputs.front()) {
      buffers.output = i;
      buffers.output_bytes = allocation.bytes;
    } else {
      buffers.more_outputs.emplace_back(i, allocation.bytes);
    }
  }
  if (all_recorded) buffers.recorded_output = std::move(recorded);

  std::vector<void*> params;
  for (std::string& bytes : launch.params) params.push_back(bytes.data());
  const auto run = [&]() -> std::optional<std::string> {
    const CUresult result =
        k.launch(*function, launch.grid[0], launch.grid[1], launch.grid[2], launch.block[0],
                 launch.block[1], launch.block[2], launch.shared_bytes, nullptr,
                 params.empty() ? nullptr : params.data(), nullptr);
    if (result == CUDA_SUCCESS) return std::nullopt;
    return driver.Error("cuLaunchKernel", result);
  };

  OpReplayReport report;
  std::string placed;
  for (const CapturedAllocation& allocation : launch.allocations) {
    placed += fmt::format("{}{} at {:#x} ({} bytes)", placed.empty() ? "" : ", ", allocation.role,
                          allocation.base, allocation.bytes);
  }
  report.problem = fmt::format(
      "kernel {} grid ({},{},{}) block ({},{},{}) shared {} bytes; allocations re-created {}: {}",
      launch.mangled, launch.grid[0], launch.grid[1], launch.grid[2], launch.block[0],
      launch.block[1], launch.block[2], launch.shared_bytes,
      relocation.moved() ? "elsewhere (" + relocation.Moves() +
                               "; the addresses in the arguments and inputs moved with them)"
                         : std::string("at their recorded addresses"),
      placed);
  report.output_role = roles;
  report.output_bytes = buffers.output_bytes;
  for (const auto& [index, bytes] : buffers.more_outputs) report.output_bytes += bytes;

  AlgorithmRuns candidate;
  candidate.algo = 0;
  candidate.name = op.name;
  candidate.recorded = true;
  StatusOr<AlgorithmRuns> runs =
      RunCandidate(driver, buffers, std::move(candidate), options.repeat, run);
  if (!runs.ok()) return runs.status().Prefixed(fmt::format("replaying op {}", op.sequence));
  report.algorithms.push_back(std::move(*runs));
  if (options.try_deterministic) {
    report.note =
        "a raw kernel has no deterministic alternative ndtrace can run in its place; the fix is "
        "in the program or its framework (e.g. a deterministic implementation of the op)";
  }
  return report;
}

}  // namespace

const Replayer kKernelReplayer = {HandlesKernel, ReplayKernel};

}  // namespace ndt::replay::internal
