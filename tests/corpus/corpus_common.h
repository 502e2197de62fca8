// What the corpus programs share: error checks, the --plant switch, a blocking queue between
// threads, and a caching allocator
// shaped like PyTorch's (c10/cuda/CUDACachingAllocator.cpp): one segment per stream from
// cudaMalloc (or, "expandable", a reserved virtual range grown chunk by chunk with the VMM API,
// as PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True does), tensors as sub-ranges, freed blocks
// back on the stream's free list and handed out again first-fit in the order they were freed, so
// a tensor's address depends on which thread freed what first.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "program_checksum.h"

namespace corpus {

inline void Check(cudaError_t error, const char* what, int line) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s (line %d) failed: %s\n", what, line, cudaGetErrorString(error));
    std::exit(2);
  }
}

#define CORPUS_CHECK(call) ::corpus::Check((call), #call, __LINE__)

// A blocking queue between threads (a data loader's, an autograd engine's).
template <typename T>
class Queue {
 public:
  void Push(T item) {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(item));
    ready_.notify_all();
  }
  T Pop() {
    std::unique_lock lock(mu_);
    ready_.wait(lock, [&] { return !items_.empty(); });
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<T> items_;
};

// The number of devices, when there are at least `wanted`; else says so and exits 2.
inline int RequireDevices(int wanted, const char* program) {
  int count = 0;
  Check(cudaGetDeviceCount(&count), "cudaGetDeviceCount(&count)", __LINE__);
  if (count < wanted) {
    std::fprintf(stderr, "%s needs %d GPUs; this machine has %d\n", program, wanted, count);
    std::exit(2);
  }
  return count;
}

// True when the command line has `flag` (e.g. "--plant").
inline bool HasFlag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

// A driver function through the runtime, as PyTorch reaches the VMM API.
template <typename Fn>
Fn DriverFunction(const char* name) {
  void* pfn = nullptr;
  cudaDriverEntryPointQueryResult status;
  CORPUS_CHECK(cudaGetDriverEntryPointByVersion(name, &pfn, 12000, cudaEnableDefault, &status));
  if (pfn == nullptr || status != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "driver function %s not found\n", name);
    std::exit(2);
  }
  return reinterpret_cast<Fn>(pfn);
}

// Thread-safe. Blocks are 512-byte aligned sub-ranges of per-stream segments; Free returns a
// block to its stream's free list (no event: the program frees only what its stream is done
// with, or what it has synchronised).
class CachingAllocator {
 public:
  static constexpr size_t kSegmentBytes = size_t{1} << 20;  // a small segment per stream
  static constexpr size_t kChunkBytes = size_t{2} << 20;    // expandable: the VMM granularity

  explicit CachingAllocator(bool expandable = false) : expandable_(expandable) {}

  void* Allocate(size_t bytes, cudaStream_t stream) {
    const size_t rounded = (bytes + 511) / 512 * 512;
    std::lock_guard lock(mu_);
    Pool& pool = pools_[stream];
    for (size_t i = 0; i < pool.free.size(); ++i) {  // first fit, in the order blocks came back
      Block& block = pool.free[i];
      if (block.bytes >= rounded) {
        char* p = block.base;
        if (block.bytes == rounded) {
          pool.free.erase(pool.free.begin() + static_cast<long>(i));
        } else {
          block.base += rounded;
          block.bytes -= rounded;
        }
        sizes_[p] = {stream, rounded};
        return p;
      }
    }
    if (pool.top == nullptr || pool.top + rounded > pool.end) Grow(pool, rounded);
    char* p = pool.top;
    pool.top += rounded;
    sizes_[p] = {stream, rounded};
    return p;
  }

  void Free(void* pointer) {
    if (pointer == nullptr) return;
    std::lock_guard lock(mu_);
    const auto it = sizes_.find(static_cast<char*>(pointer));
    if (it == sizes_.end()) {
      std::fprintf(stderr, "CachingAllocator: freeing an unknown block\n");
      std::exit(2);
    }
    pools_[it->second.stream].free.push_back({it->first, it->second.bytes});
    sizes_.erase(it);
  }

 private:
  struct Block {
    char* base;
    size_t bytes;
  };
  struct Owner {
    cudaStream_t stream;
    size_t bytes;
  };
  struct Pool {
    char* top = nullptr;
    char* end = nullptr;
    CUdeviceptr reserved = 0;  // expandable: the reserved range, grown from its start
    size_t mapped = 0;
    std::vector<Block> free;
  };

  void Grow(Pool& pool, size_t bytes) {
    if (!expandable_) {
      const size_t size = bytes > kSegmentBytes ? bytes : kSegmentBytes;
      void* segment = nullptr;
      CORPUS_CHECK(cudaMalloc(&segment, size));
      pool.top = static_cast<char*>(segment);
      pool.end = pool.top + size;
      return;
    }
    using ReserveFn = CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
    using CreateFn = CUresult (*)(CUmemGenericAllocationHandle*, size_t,
                                  const CUmemAllocationProp*, unsigned long long);
    using MapFn = CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                               unsigned long long);
    using AccessFn = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
    using ReleaseFn = CUresult (*)(CUmemGenericAllocationHandle);
    static const auto reserve = DriverFunction<ReserveFn>("cuMemAddressReserve");
    static const auto create = DriverFunction<CreateFn>("cuMemCreate");
    static const auto map = DriverFunction<MapFn>("cuMemMap");
    static const auto access = DriverFunction<AccessFn>("cuMemSetAccess");
    static const auto release = DriverFunction<ReleaseFn>("cuMemRelease");
    constexpr size_t kReserveBytes = size_t{64} << 20;
    const auto ok = [](CUresult r, const char* what) {
      if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "%s failed: %d\n", what, static_cast<int>(r));
        std::exit(2);
      }
    };
    if (pool.reserved == 0) {
      ok(reserve(&pool.reserved, kReserveBytes, 0, 0, 0), "cuMemAddressReserve");
      pool.top = pool.end = reinterpret_cast<char*>(pool.reserved);
    }
    // Map chunks after the last one until the block fits: the segment grows in place.
    while (pool.top + bytes > pool.end) {
      if (pool.mapped + kChunkBytes > kReserveBytes) {
        std::fprintf(stderr, "expandable segment exhausted\n");
        std::exit(2);
      }
      CUmemAllocationProp prop = {};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = 0;
      CUmemGenericAllocationHandle handle = 0;
      ok(create(&handle, kChunkBytes, &prop, 0), "cuMemCreate");
      const CUdeviceptr at = pool.reserved + pool.mapped;
      ok(map(at, kChunkBytes, 0, handle, 0), "cuMemMap");
      CUmemAccessDesc desc = {};
      desc.location = prop.location;
      desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      ok(access(at, kChunkBytes, &desc, 1), "cuMemSetAccess");
      ok(release(handle), "cuMemRelease");  // the mapping keeps it alive
      pool.mapped += kChunkBytes;
      pool.end = reinterpret_cast<char*>(pool.reserved + pool.mapped);
    }
  }

  bool expandable_;
  std::mutex mu_;
  std::map<cudaStream_t, Pool> pools_;
  std::map<char*, Owner> sizes_;
};

// Small deterministic inputs: values of mixed magnitude so that the order of float additions
// shows in the bits.
inline std::vector<float> MixedValues(size_t n, unsigned seed) {
  std::vector<float> v(n);
  unsigned x = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float unit = static_cast<float>((x >> 8) & 0xffff) / 65536.0f - 0.5f;
    const int scale = static_cast<int>((x >> 24) % 7);
    v[i] = unit * static_cast<float>(1 << (scale * 3));
  }
  return v;
}

// MixedValues scaled by 2^-16 (exactly), no larger than 2 in magnitude: inputs and parameters
// that a few steps of training keep finite.
inline std::vector<float> SmallMixedValues(size_t n, unsigned seed) {
  std::vector<float> v = MixedValues(n, seed);
  for (float& value : v) value /= 65536.0f;
  return v;
}

// The launch geometry the programs use: a few blocks of 128 threads.
inline dim3 Blocks(int n) { return dim3(static_cast<unsigned>(n < 512 ? (n + 127) / 128 : 4)); }
constexpr unsigned kThreads = 128;

}  // namespace corpus
