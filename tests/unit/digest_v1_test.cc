// Digest v1: pinned test vectors, fast paths against the slow reference, the partial/finish
// contract, and sensitivity to the changes a digest exists to detect.
#include "kernels/digest_v1.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace Catch {
template <>
struct StringMaker<ndt::kernels::Digest128> {
  static std::string convert(const ndt::kernels::Digest128& d) { return ndt::kernels::ToHex(d); }
};
}  // namespace Catch

namespace {

using ndt::kernels::Digest128;
using ndt::kernels::DigestV1;
using ndt::kernels::DigestV1Accumulator;
using ndt::kernels::DigestV1Add;
using ndt::kernels::DigestV1Finish;
using ndt::kernels::DigestV1Partial;
using ndt::kernels::ToHex;
namespace internal = ndt::kernels::internal;

std::vector<unsigned char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The 1 MiB vector's pattern: byte i is bits 24..31 of i * 2654435761 computed in 64 bits.
std::vector<unsigned char> KnuthPattern(size_t n) {
  std::vector<unsigned char> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>((i * 2654435761u) >> 24);
  return out;
}

std::vector<unsigned char> RandomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<unsigned char> out(n);
  for (unsigned char& c : out) c = static_cast<unsigned char>(rng());
  return out;
}

std::vector<internal::DigestV1Path> AvailablePaths() {
  std::vector<internal::DigestV1Path> paths;
  for (auto path : {internal::DigestV1Path::kPortable, internal::DigestV1Path::kAvx2,
                    internal::DigestV1Path::kAvx512}) {
    if (internal::DigestV1PathAvailable(path)) paths.push_back(path);
  }
  return paths;
}

const char* PathName(internal::DigestV1Path path) {
  switch (path) {
    case internal::DigestV1Path::kAvx2:
      return "avx2";
    case internal::DigestV1Path::kAvx512:
      return "avx512";
    case internal::DigestV1Path::kPortable:
      break;
  }
  return "portable";
}

Digest128 DigestOn(internal::DigestV1Path path, const void* data, size_t n) {
  return DigestV1Finish(internal::DigestV1PartialOn(path, data, n, 0), n);
}

}  // namespace

TEST_CASE("digest v1 reproduces the pinned test vectors", "[kernels]") {
  // Computed with the slow reference and with an independent Python transcription of the
  // definition; formats/README.md lists the same table.
  struct Vector {
    const char* what;
    std::vector<unsigned char> bytes;
    const char* hex;
  };
  std::vector<unsigned char> counting(256);
  for (int i = 0; i < 256; ++i) counting[i] = static_cast<unsigned char>(i);
  const Vector vectors[] = {
      {"empty input", {}, "f5904f05c9828dd6bfebaecae09cff49"},
      {"\"abc\"", Bytes("abc"), "dce73048450f754f16c09fd06ebeb943"},
      {"16 zero bytes", std::vector<unsigned char>(16), "df7313ec2da2996f53157954efd72420"},
      {"17 zero bytes", std::vector<unsigned char>(17), "db639809bcb9d6a84ec566ab69243795"},
      {"bytes 0..255", counting, "b3eb2fbaf5cac0fa49bc269c80f56f3c"},
      {"1 MiB Knuth pattern", KnuthPattern(size_t{1} << 20), "60e62044210a7b7a5fbbf53f8bd78ae2"},
  };
  for (const Vector& v : vectors) {
    INFO(v.what);
    CHECK(ToHex(internal::DigestV1Slow(v.bytes.data(), v.bytes.size())) == v.hex);
    CHECK(ToHex(DigestV1(v.bytes.data(), v.bytes.size())) == v.hex);
    for (auto path : AvailablePaths()) {
      INFO(PathName(path));
      CHECK(ToHex(DigestOn(path, v.bytes.data(), v.bytes.size())) == v.hex);
    }
  }
}

TEST_CASE("digest text form is lo then hi as 32 lowercase hex digits", "[kernels]") {
  CHECK(ToHex({0x0123456789abcdef, 0xfedcba9876543210}) == "0123456789abcdeffedcba9876543210");
  CHECK(ToHex({0, 1}) == "00000000000000000000000000000001");
}

TEST_CASE("digest fast paths equal the slow reference for every length up to 300", "[kernels]") {
  std::mt19937_64 rng(1);
  const std::vector<unsigned char> data = RandomBytes(300 + 32, rng);
  for (size_t offset : {0, 1, 7, 8, 13}) {
    for (size_t n = 0; n <= 300; ++n) {
      INFO("offset " << offset << " length " << n);
      const Digest128 want = internal::DigestV1Slow(data.data() + offset, n);
      REQUIRE(DigestV1(data.data() + offset, n) == want);
      for (auto path : AvailablePaths()) {
        INFO(PathName(path));
        REQUIRE(DigestOn(path, data.data() + offset, n) == want);
      }
    }
  }
}

TEST_CASE("digest fast paths equal the slow reference at random lengths and offsets", "[kernels]") {
  std::mt19937_64 rng(2);
  const size_t max_n = size_t{1} << 20;
  const std::vector<unsigned char> data = RandomBytes(max_n + 64, rng);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t offset = rng() % 64;
    const size_t n = trial == 0 ? max_n : rng() % (max_n + 1);
    INFO("offset " << offset << " length " << n);
    const Digest128 want = internal::DigestV1Slow(data.data() + offset, n);
    REQUIRE(DigestV1(data.data() + offset, n) == want);
    for (auto path : AvailablePaths()) {
      INFO(PathName(path));
      REQUIRE(DigestOn(path, data.data() + offset, n) == want);
    }
  }
}

TEST_CASE("partial digests over any split add up to the one-shot digest in any order",
          "[kernels]") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = rng() % 5000;
    const std::vector<unsigned char> data = RandomBytes(n, rng);
    const Digest128 want = DigestV1(data.data(), n);

    // Cut points at multiples of 16 (empty parts allowed); the last part takes the tail.
    std::vector<size_t> cuts = {0, n};
    const int parts = static_cast<int>(rng() % 8);
    for (int i = 0; i < parts; ++i) cuts.push_back(std::min(n, (rng() % (n / 16 + 1)) * 16));
    std::sort(cuts.begin(), cuts.end());
    INFO("length " << n << ", " << cuts.size() - 1 << " parts");

    std::vector<DigestV1Accumulator> partials;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      partials.push_back(
          DigestV1Partial(data.data() + cuts[i], cuts[i + 1] - cuts[i], cuts[i] / 16));
    }
    for (int order = 0; order < 3; ++order) {
      std::shuffle(partials.begin(), partials.end(), rng);
      DigestV1Accumulator total;
      for (const DigestV1Accumulator& p : partials) total = DigestV1Add(total, p);
      REQUIRE(DigestV1Finish(total, n) == want);
    }
    for (auto path : AvailablePaths()) {
      INFO(PathName(path));
      DigestV1Accumulator total;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        total =
            DigestV1Add(total, internal::DigestV1PartialOn(path, data.data() + cuts[i],
                                                           cuts[i + 1] - cuts[i], cuts[i] / 16));
      }
      REQUIRE(DigestV1Finish(total, n) == want);
    }
  }
}

TEST_CASE("a part hashed at the wrong block index gives a different digest", "[kernels]") {
  std::mt19937_64 rng(4);
  const std::vector<unsigned char> data = RandomBytes(64, rng);
  const DigestV1Accumulator right =
      DigestV1Add(DigestV1Partial(data.data(), 32, 0), DigestV1Partial(data.data() + 32, 32, 2));
  const DigestV1Accumulator wrong =
      DigestV1Add(DigestV1Partial(data.data(), 32, 0), DigestV1Partial(data.data() + 32, 32, 0));
  CHECK(DigestV1Finish(right, 64) == DigestV1(data.data(), 64));
  CHECK_FALSE(DigestV1Finish(wrong, 64) == DigestV1(data.data(), 64));
}

TEST_CASE("flipping any single bit of a 4 KiB buffer changes the digest", "[kernels]") {
  std::mt19937_64 rng(5);
  std::vector<unsigned char> data = RandomBytes(4096, rng);
  const Digest128 original = DigestV1(data.data(), data.size());
  std::vector<Digest128> seen;
  for (size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    const Digest128 flipped = DigestV1(data.data(), data.size());
    data[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    INFO("bit " << bit);
    REQUIRE(flipped.lo != original.lo);
    REQUIRE(flipped.hi != original.hi);
    seen.push_back(flipped);
  }
  // Every flip also lands on its own digest.
  std::sort(seen.begin(), seen.end(), [](const Digest128& x, const Digest128& y) {
    return std::pair(x.lo, x.hi) < std::pair(y.lo, y.hi);
  });
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
}

TEST_CASE("swapping two distinct 16-byte blocks changes the digest", "[kernels]") {
  std::mt19937_64 rng(6);
  std::vector<unsigned char> data = RandomBytes(4096, rng);
  const Digest128 original = DigestV1(data.data(), data.size());
  for (int trial = 0; trial < 500; ++trial) {
    const size_t i = rng() % 256, j = rng() % 256;
    if (std::memcmp(&data[16 * i], &data[16 * j], 16) == 0) continue;
    std::swap_ranges(&data[16 * i], &data[16 * i + 16], &data[16 * j]);
    const Digest128 swapped = DigestV1(data.data(), data.size());
    std::swap_ranges(&data[16 * i], &data[16 * i + 16], &data[16 * j]);
    INFO("blocks " << i << " and " << j);
    REQUIRE_FALSE(swapped == original);
  }
}

TEST_CASE("buffers of -0.0f and +0.0f have different digests", "[kernels]") {
  const std::vector<float> plus(1024, 0.0f), minus(1024, -0.0f);
  REQUIRE(plus == minus);  // Equal as floats, which is exactly why bytes must be compared.
  CHECK_FALSE(DigestV1(plus.data(), plus.size() * sizeof(float)) ==
              DigestV1(minus.data(), minus.size() * sizeof(float)));
}

TEST_CASE("inputs that differ only in trailing zero bytes have different digests", "[kernels]") {
  const std::vector<unsigned char> zeros(64);
  for (size_t n = 0; n < 64; ++n) {
    INFO("length " << n);
    CHECK_FALSE(DigestV1(zeros.data(), n) == DigestV1(zeros.data(), n + 1));
  }
}
