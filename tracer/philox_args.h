// Finding PyTorch's Philox RNG state among a kernel launch's arguments.
//
// PyTorch's CUDA random ops (dropout, rand*, bernoulli, fused attention...) pass their RNG state
// by value as a kernel parameter of type at::PhiloxCudaState
// (ATen/cuda/detail/PhiloxCudaStateRaw.cuh; research/cuda-interposition.md §5):
//
//   struct PhiloxCudaState {                 // 24 bytes, 8-byte aligned
//     union { uint64_t val; int64_t* ptr; } seed_;     // offset 0
//     union { uint64_t val; int64_t* ptr; } offset_;   // offset 8
//     uint32_t offset_intragraph_;                     // offset 16
//     bool captured_;                                  // offset 20
//   };
//
// Not captured: the seed and offset are the values. Captured in a CUDA graph: seed_ and offset_
// point at device int64s the graph's replay prologue fills, and the kernel uses
// (*seed_.ptr, *offset_.ptr + offset_intragraph_).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/records.h"

namespace ndt::tracer {

// Reads the int64 at a device address, or nullopt. Called only for the graph-captured form.
using DeviceWordReader = std::function<std::optional<int64_t>(uint64_t address)>;

struct PhiloxArgument {
  size_t index = 0;               // which kernel parameter
  format::RngState state;         // generator "philox"; seed and offset as the kernel uses them
  bool captured = false;          // graph-captured form: seed/offset read through pointers
  bool resolved = true;           // false: captured, and the pointers could not be read
  uint64_t seed_address = 0;      // captured: where the seed lives
  uint64_t offset_address = 0;    // captured: where the offset lives
  uint32_t offset_intragraph = 0;
};

// The parameter types of a demangled function name, as written ("long", "at::PhiloxCudaState",
// "float*"...): the top-level comma-separated list of its last top-level parenthesised group.
// Empty when the name has no parameter list (a plain C name).
std::vector<std::string> DemangledParameterTypes(std::string_view demangled);

// The first parameter of type at::PhiloxCudaState of a launch, decoded. `layout` is the kernel's
// (offset, size) per parameter and `bytes` each parameter's bytes as launched (same length;
// an entry with the wrong size is skipped). `read` resolves the graph-captured form; with a
// null `read`, or when it fails, the state is returned unresolved (seed 0, offset =
// offset_intragraph, generator "philox:captured") with the addresses. Nullopt when the kernel
// takes no PhiloxCudaState. Never throws; thread-safe.
std::optional<PhiloxArgument> FindPhiloxArgument(
    std::string_view demangled_name, const std::vector<std::pair<uint64_t, uint64_t>>& layout,
    const std::vector<std::string>& bytes, const DeviceWordReader& read);

// The seed and base offset in PyTorch's graph-captured state words (device int64s at
// `seed_address` and `offset_address`), as RngState {"philox", seed, offset}; nullopt when
// `read` is null or fails. A launch reading them adds its offset_intragraph_ to the offset.
std::optional<format::RngState> ReadPhiloxWords(uint64_t seed_address, uint64_t offset_address,
                                                const DeviceWordReader& read);

// The offset_intragraph_ values of a graph's launches reading one pair of state words, as text
// for a graph launch's argument: "0,4096"; past 8 values, the first 8 and ",... (N launches)".
std::string IntragraphOffsetsText(const std::vector<uint32_t>& offsets);

// A DeviceWordReader through the real driver (never our hooks): synchronises `stream` (a
// CUstream handle) and copies the 8 bytes with the real cuMemcpyDtoH_v2. Call inside a hook's
// scope (the guard held), so that these calls are not recorded.
DeviceWordReader RealDriverWordReader(uint64_t stream);

}  // namespace ndt::tracer
