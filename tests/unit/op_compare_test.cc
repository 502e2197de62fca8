// What diff and live verify compare two runs' records of an op on: arguments without blob
// references, and captured buffers element by element in their dtype.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "replayer/op_compare.h"

namespace ndt::replay {
namespace {

using format::DType;

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST_CASE("a kernel's pointer parameter types give the dtype of the buffers it points to",
          "[replayer]") {
  const char* racy_sum = "RacySum(float const*, float*, int, int)";
  CHECK(PointerParameterDType(racy_sum, 0) == DType::kF32);
  CHECK(PointerParameterDType(racy_sum, 1) == DType::kF32);
  CHECK(PointerParameterDType(racy_sum, 2) == DType::kUnknown);  // not a pointer
  CHECK(PointerParameterDType(racy_sum, 4) == DType::kUnknown);  // no such parameter
  const char* templated =
      "void scale<__half, std::pair<int, int> >(__half const* __restrict__, "
      "std::pair<int, int>, __nv_bfloat16*, long*, unsigned char const*, Foo*)";
  CHECK(PointerParameterDType(templated, 0) == DType::kF16);
  CHECK(PointerParameterDType(templated, 1) == DType::kUnknown);
  CHECK(PointerParameterDType(templated, 2) == DType::kBF16);
  CHECK(PointerParameterDType(templated, 3) == DType::kI64);
  CHECK(PointerParameterDType(templated, 4) == DType::kU8);
  CHECK(PointerParameterDType(templated, 5) == DType::kUnknown);
  CHECK(PointerParameterDType("kernel_without_parameter_list", 0) == DType::kUnknown);
  CHECK(PointerParameterDType("", 0) == DType::kUnknown);
}

TEST_CASE("captured buffers are compared element by element in their dtype", "[replayer]") {
  SECTION("f64") {
    const auto d = CompareBuffers(Bytes<double>({1, 2, 3}), Bytes<double>({1, 2, 3.5}), DType::kF64);
    CHECK(d.elements == 3);
    CHECK(d.differing == 1);
    CHECK(d.first_index == 2);
    CHECK(d.max_abs_diff == 0.5);
    // 0.5 lies in [1e-1, 1e0): bucket -1 - kHistogramLowest.
    CHECK(d.histogram[-1 - ExactDifference::kHistogramLowest] == 1);
    CHECK(d.non_finite == 0);
  }
  SECTION("the spread of |a - b|: open-ended first and last buckets, non-finite apart") {
    const double inf = std::numeric_limits<double>::infinity();
    const auto d = CompareBuffers(Bytes<double>({1, 1, 1, 1, 0, 5}),
                                  Bytes<double>({1 + 3e-16, 1.25, 1e12, 1, inf, 5}), DType::kF64);
    CHECK(d.differing == 4);
    CHECK(d.histogram.front() == 1);  // 2.2e-16: below 1e-12
    CHECK(d.histogram[-1 - ExactDifference::kHistogramLowest] == 1);  // 0.25
    CHECK(d.histogram.back() == 1);   // 1e12: above 1e8
    CHECK(d.non_finite == 1);
  }
  SECTION("f16: 1.0 is 0x3c00, 1.5 is 0x3e00, -2 is 0xc000, 2^-24 is the smallest subnormal") {
    const auto d = CompareBuffers(Bytes<uint16_t>({0x3c00, 0xc000, 0x0001}),
                                  Bytes<uint16_t>({0x3e00, 0xc000, 0x0002}), DType::kF16);
    CHECK(d.differing == 2);
    CHECK(d.first_a == 1.0);
    CHECK(d.first_b == 1.5);
    CHECK(d.max_abs_diff == 0.5);
    CHECK(d.max_rel_diff == 0.5);  // the subnormals: 2^-24 against 2^-23
  }
  SECTION("bf16: the high half of an f32") {
    const auto d = CompareBuffers(Bytes<uint16_t>({0x3f80}), Bytes<uint16_t>({0x4000}),
                                  DType::kBF16);
    CHECK(d.first_a == 1.0);
    CHECK(d.first_b == 2.0);
  }
  SECTION("i32") {
    const auto d = CompareBuffers(Bytes<int32_t>({-5, 7}), Bytes<int32_t>({5, 7}), DType::kI32);
    CHECK(d.differing == 1);
    CHECK(d.max_abs_diff == 10);
  }
  SECTION("an unknown dtype is compared byte by byte, and a length difference is kept") {
    const auto d = CompareBuffers(std::string("abcd"), std::string("abXdZ"), DType::kUnknown);
    CHECK(d.elements == 4);
    CHECK(d.differing == 1);
    CHECK(d.first_index == 2);
    CHECK(d.bytes_a == 4);
    CHECK(d.bytes_b == 5);
  }
  SECTION("NaNs count as differing bits but not in the largest difference") {
    const auto d = CompareBuffers(Bytes<float>({1.0f, 1.0f}),
                                  Bytes<float>({std::nanf(""), 1.25f}), DType::kF32);
    CHECK(d.differing == 2);
    CHECK(d.max_abs_diff == 0.25);
    CHECK(d.max_abs_index == 1);
  }
}

TEST_CASE("where memory lies is not compared: pointers and pooled events are placement",
          "[replayer]") {
  format::Argument a{"dst", format::DevicePointer{3, 4096, 0x7000}};
  format::Argument b{"dst", format::DevicePointer{5, 0, 0x9000}};
  CHECK(SameArgument(a, b));
  CHECK(SameArgument({"event", uint64_t{16}}, {"event", uint64_t{21}}));
  // A pointer and a value of another kind, or another argument, still differ.
  CHECK_FALSE(SameArgument(a, {"dst", uint64_t{0x7000}}));
  CHECK_FALSE(SameArgument(a, {"src", format::DevicePointer{3, 4096, 0x7000}}));
  CHECK_FALSE(SameArgument({"count", uint64_t{16}}, {"count", uint64_t{21}}));
}

TEST_CASE("a kernel's closure parameter is compared through the data, its scalars as bytes",
          "[replayer]") {
  // As PyTorch 2.11 launches `x.pow(2)` (seen on an H100 and an H200): the lambda's bytes are
  // not initialised by the program, and differed between two runs.
  const std::string lambda =
      "at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>"
      "(at::TensorIteratorBase&, float)::{lambda(float)#1}";
  format::OpRecord a;
  a.kind = format::OpKind::kKernelLaunch;
  a.name = "void at::native::vectorized_elementwise_kernel<4, " + lambda +
           ", std::array<char*, 2ul> >(int, " + lambda + ", std::array<char*, 2ul>)";
  const auto bytes = [](std::string data) {
    return decltype(format::Argument::value)(format::Argument::Bytes{std::move(data)});
  };
  a.args = {{"arg0", bytes(std::string("\x10\0\0\0", 4))},
            {"arg1", bytes(std::string("\0\0\0\x40\x7f\0\0\x11", 8))}};
  format::OpRecord b = a;
  b.args[1].value = bytes(std::string("\0\0\0\x40\0\0\0\0", 8));
  CHECK_FALSE(FirstDifferentArgument(a, b));
  a.args[1].value = bytes(std::string(1, '\x5a'));  // an empty lambda: one byte
  b.args[1].value = bytes(std::string(1, '\0'));
  CHECK_FALSE(FirstDifferentArgument(a, b));
  // The element count, an int, is still compared as bytes.
  b.args[0].value = bytes(std::string("\x11\0\0\0", 4));
  const auto mismatch = FirstDifferentArgument(a, b);
  REQUIRE(mismatch);
  CHECK(mismatch->a == 0);
  // So is a scalar passed by value that is no closure.
  format::OpRecord c;
  c.kind = format::OpKind::kKernelLaunch;
  c.name = "Scale(float*, double)";
  c.args = {{"arg0", format::DevicePointer{1, 0, 0x1000}}, {"arg1", bytes(std::string(8, '\1'))}};
  format::OpRecord d = c;
  d.args[1].value = bytes(std::string(8, '\2'));
  CHECK(FirstDifferentArgument(c, d));
}

TEST_CASE("blob references are left out of the argument comparison", "[replayer]") {
  format::OpRecord a;
  a.args = {{"n", uint64_t{4}}, {"blob:in:x", std::string("00")}, {"m", uint64_t{2}}};
  format::OpRecord b;
  b.args = {{"n", uint64_t{4}}, {"m", uint64_t{2}}, {"blob:out:y", std::string("11")}};
  CHECK_FALSE(FirstDifferentArgument(a, b));
  b.args[1].value = uint64_t{3};
  const auto mismatch = FirstDifferentArgument(a, b);
  REQUIRE(mismatch);
  CHECK(mismatch->a == 2);
  CHECK(mismatch->b == 1);
  b.args.pop_back();
  b.args.pop_back();
  const auto shorter = FirstDifferentArgument(a, b);
  REQUIRE(shorter);
  CHECK(shorter->b == b.args.size());
}

TEST_CASE("a blob reference holds an id only when it is 32 lowercase hex digits", "[replayer]") {
  format::OpRecord op;
  op.args = {{"blob:out:y", std::string("0123456789abcdef00000000000000ff")},
             {"blob:out:z", std::string("missing: larger than 1 GiB")}};
  const auto id = CapturedBlob(op, "blob:out:y");
  REQUIRE(id);
  CHECK(id->lo == 0x0123456789abcdefu);
  CHECK(id->hi == 0xffu);
  CHECK_FALSE(CapturedBlob(op, "blob:out:z"));
  CHECK_FALSE(CapturedBlob(op, "blob:out:w"));
  CHECK_FALSE(ParseBlobId("0123456789ABCDEF00000000000000ff"));
}

}  // namespace
}  // namespace ndt::replay
