// The names of the knobs an algorithm choice carries (format::AlgorithmChoice::knobs, each a
// {type, value} pair), by library, as the libraries' headers name the types: cuDNN's
// cudnnBackendKnobType_t (CUDNN_KNOB_TYPE_*), cuBLASLt's cublasLtMatmulAlgoConfigAttributes_t
// (CUBLASLT_ALGO_CONFIG_*), and the NCCL knobs the tracer records (tracer/hooks/hooks_nccl.cc).
// Lower case without the prefix: "split_k_slc", "tile_id", "protocol". Needs no CUDA header.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace ndt::libfacts {

// The name of knob `type` of `library` ("cudnn", "cublasLt", "nccl"); null when unknown.
inline const char* KnobName(std::string_view library, int64_t type) {
  static constexpr const char* kCudnn[] = {
      "split_k",       "swizzle",       "tile_size",    "use_tex",        "edge",
      "kblock",        "ldga",          "ldgb",         "chunk_k",        "split_h",
      "wino_tile",     "multiply",      "split_k_buf",  "tilek",          "stages",
      "reduction_mode", "cta_split_k_mode", "split_k_slc", "idx_mode",    "sliced",
      "split_rs",      "singlebuffer",  "ldgc",         "specfilt",       "kernel_cfg",
      "workspace",     "tile_cga",      "tile_cga_m",   "tile_cga_n",     "block_size",
      "occupancy",     "array_size_per_thread", "num_c_per_block", "split_cols", "tile_rows",
      "tile_cols",     "load_size",     "cta_count",    "stream_k",       "split_p_slc",
      "tile_m",        "tile_n",        "warp_spec_cfg", "swap_ab"};
  static constexpr const char* kCublasLt[] = {"algo_id",     "tile_id",       "splitk_num",
                                              "reduction_scheme", "cta_swizzling", "custom_option",
                                              "stages_id",   "inner_shape_id", "cluster_shape_id"};
  static constexpr const char* kNccl[] = {nullptr, "protocol", "min_channels", "max_channels"};
  const auto pick = [type](const auto& table) -> const char* {
    return type >= 0 && static_cast<size_t>(type) < std::size(table) ? table[type] : nullptr;
  };
  if (library == "cudnn") return pick(kCudnn);
  if (library == "cublasLt") return pick(kCublasLt);
  if (library == "nccl") return pick(kNccl);
  return nullptr;
}

// "split_k_slc=4", or "17=4" for a type without a name.
inline std::string KnobText(std::string_view library, int64_t type, int64_t value) {
  const char* name = KnobName(library, type);
  return (name != nullptr ? std::string(name) : std::to_string(type)) + "=" +
         std::to_string(value);
}

}  // namespace ndt::libfacts
