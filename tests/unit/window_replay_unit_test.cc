// What window replay decides without a GPU: the device image that carries memory from op to op
// (bytes written, bytes first read from the trace) and CheckWindow's refusals of windows whose
// inputs the trace did not keep.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "formats/records.h"
#include "replayer/window_replay.h"

namespace {

using ndt::format::Argument;
using ndt::format::BufferDigest;
using ndt::format::DevicePointer;
using ndt::format::OpKind;
using ndt::format::OpRecord;
using ndt::replay::DeviceImage;

TEST_CASE("the device image keeps the newest bytes of every address and reads over a fallback",
          "[replayer][window_replay]") {
  DeviceImage image;
  image.Write(100, "abcdefgh");
  image.Write(104, "XY");   // inside
  image.Write(96, "1234");  // touching on the left
  CHECK(image.Covers(96, 12));
  CHECK_FALSE(image.Covers(95, 2));
  CHECK_FALSE(image.Covers(107, 2));
  CHECK(*image.Read(96, 12) == "1234abcdXYgh");
  CHECK_FALSE(image.Read(90, 8));
  CHECK(image.known_bytes() == 12);

  // Unknown bytes come from the fallback (the trace) and are known afterwards.
  uint64_t from_fallback = 0;
  CHECK(image.ReadOver(106, "......!!", &from_fallback) == "gh....!!");
  CHECK(from_fallback == 6);
  CHECK(image.Covers(96, 18));
  CHECK(*image.Read(104, 10) == "XYgh....!!");

  // Overwriting across several segments.
  image.Write(98, std::string(10, '='));
  CHECK(*image.Read(96, 18) == "12==========....!!");
  CHECK(image.known_bytes() == 18);

  // Forgetting a range in the middle of several segments.
  image.Erase(100, 10);
  CHECK(*image.Read(96, 4) == "12==");
  CHECK_FALSE(image.Covers(100, 1));
  CHECK_FALSE(image.Covers(109, 1));
  CHECK(*image.Read(110, 4) == "..!!");
  CHECK(image.known_bytes() == 8);
}

Argument Text(const std::string& name, const std::string& value) {
  Argument argument;
  argument.name = name;
  argument.value = value;
  return argument;
}

constexpr const char* kBlob = "0123456789abcdef0123456789abcdef";

// A captured GEMM reading A and B, writing C.
OpRecord Gemm(uint64_t sequence, uint64_t a, uint64_t b, uint64_t c, const std::string& a_blob) {
  OpRecord op;
  op.sequence = sequence;
  op.kind = OpKind::kCublasGemm;
  op.name = "cublasSgemm_v2";
  for (auto [role, address] : {std::pair<const char*, uint64_t>{"A", a}, {"B", b}}) {
    BufferDigest digest;
    digest.role = role;
    digest.pointer = DevicePointer{1, 0, address};
    digest.bytes = 64;
    op.inputs.push_back(digest);
  }
  BufferDigest out;
  out.role = "C";
  out.pointer = DevicePointer{2, 0, c};
  out.bytes = 64;
  op.outputs.push_back(out);
  op.args.push_back(Text("blob:in:A", a_blob));
  op.args.push_back(Text("blob:in:B", kBlob));
  op.args.push_back(Text("blob:out:C", kBlob));
  return op;
}

TEST_CASE("a window whose op reads memory neither captured nor written in the window is refused",
          "[replayer][window_replay]") {
  ndt::replay::WindowOps window;
  window.captured_first = 10;
  window.captured_last = 11;
  // Op 11 reads A at 0x1000, not captured: written by op 10 in the window, so fine.
  window.ops = {Gemm(10, 0x2000, 0x3000, 0x1000, kBlob),
                Gemm(11, 0x1000, 0x3000, 0x4000, "missing: the device memory could not be read")};
  CHECK(ndt::replay::CheckWindow(window).ok());

  // Op 11 reads A at 0x5000, which nothing in the window wrote.
  window.ops[1] = Gemm(11, 0x5000, 0x3000, 0x4000, "missing: the device memory could not be read");
  const ndt::Status refused = ndt::replay::CheckWindow(window);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message() ==
        "op 11 (cublasSgemm_v2) reads A, which the trace did not keep (missing: the device memory "
        "could not be read); the trace captured ops 10..11");

  // An op recorded without capture.
  OpRecord plain = Gemm(12, 0x2000, 0x3000, 0x1000, kBlob);
  plain.args.clear();
  window.ops = {plain};
  const ndt::Status uncaptured = ndt::replay::CheckWindow(window);
  REQUIRE_FALSE(uncaptured.ok());
  CHECK(uncaptured.message().find("op 12 (cublasSgemm_v2) reads its inputs, which the trace did "
                                  "not keep (not captured)") == 0);

  // A collective cannot be replayed alone.
  OpRecord collective;
  collective.sequence = 13;
  collective.kind = OpKind::kNcclCollective;
  collective.name = "ncclAllReduce";
  window.ops = {collective};
  const ndt::Status nccl = ndt::replay::CheckWindow(window);
  REQUIRE_FALSE(nccl.ok());
  CHECK(nccl.message().find("op 13 (ncclAllReduce) cannot be replayed in a window") == 0);
}

}  // namespace
