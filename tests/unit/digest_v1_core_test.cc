// kernels/digest_v1_core.h, the per-block functions the GPU kernel is built from, against the
// CPU reference: the kernel's decomposition (any grid, any block size, whole-word loads where
// aligned, byte loads elsewhere) replayed on the host must give DigestV1's bits.
#include "kernels/digest_v1_core.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/digest_v1.h"

namespace {

namespace core = ndt::kernels::digest_v1;

// What ndt_digest_v1 computes for the digest, thread by thread.
ndt::kernels::Digest128 KernelOnHost(const unsigned char* data, uint64_t bytes, uint64_t grid,
                                     uint64_t block) {
  const uint64_t blocks = (bytes + 15) / 16;
  const bool aligned = (reinterpret_cast<uintptr_t>(data) & 7) == 0;
  uint64_t sum0 = 0, sum1 = 0;
  for (uint64_t thread = 0; thread < grid * block; ++thread) {
    uint64_t acc0 = 0, acc1 = 0;
    for (uint64_t j = thread; j < blocks; j += grid * block) {
      uint64_t a = 0, b = 0;
      if (aligned && j < bytes / 16) {
        std::memcpy(&a, data + 16 * j, 8);
        std::memcpy(&b, data + 16 * j + 8, 8);
      } else {
        core::LoadBlockBytes(data, bytes, j, &a, &b);
      }
      acc0 += core::Term(0, a, b, j);
      acc1 += core::Term(1, a, b, j);
    }
    sum0 += acc0;
    sum1 += acc1;
  }
  return {core::Finish(0, sum0, bytes), core::Finish(1, sum1, bytes)};
}

}  // namespace

TEST_CASE("the GPU kernel's decomposition gives the CPU reference's digest", "[digest]") {
  std::mt19937_64 random(7);
  std::vector<unsigned char> buffer((1 << 16) + 64);
  for (auto& byte : buffer) byte = static_cast<unsigned char>(random());
  for (size_t size : {0, 1, 3, 15, 16, 17, 255, 256, 4097, 1 << 16}) {
    for (size_t offset : {0, 1, 8}) {
      const unsigned char* data = buffer.data() + offset;
      const ndt::kernels::Digest128 expected = ndt::kernels::DigestV1(data, size);
      for (auto [grid, block] : {std::pair{1, 1}, std::pair{1, 32}, std::pair{7, 96},
                                 std::pair{132, 256}}) {
        INFO("size " << size << ", offset " << offset << ", grid " << grid << "x" << block);
        CHECK(KernelOnHost(data, size, grid, block) == expected);
      }
    }
  }
}

TEST_CASE("the core's finish of no blocks is the digest of nothing", "[digest]") {
  CHECK(ndt::kernels::ToHex({core::Finish(0, 0, 0), core::Finish(1, 0, 0)}) ==
        "f5904f05c9828dd6bfebaecae09cff49");
}
