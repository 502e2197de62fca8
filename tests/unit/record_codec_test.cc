#include "formats/record_codec.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/records.h"

namespace ndt::format::codec {
namespace {

using namespace std::string_literals;

std::vector<uint64_t> ToWords(const std::string& bytes) {
  REQUIRE(bytes.size() % 8 == 0);
  std::vector<uint64_t> words(bytes.size() / 8);
  if (!words.empty()) std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

std::vector<uint64_t> EncodeRecord(const Record& record) {
  std::string out;
  REQUIRE(AppendRecord(record, &out));
  return ToWords(out);
}

std::vector<uint64_t> EncodeHeader(const TraceHeader& header) {
  std::string out;
  REQUIRE(AppendHeader(header, &out));
  return ToWords(out);
}

uint32_t PayloadWords(const std::vector<uint64_t>& frame) {
  return static_cast<uint32_t>(frame.at(0) & 0xFFFFFFFF);
}

void SetRecordType(std::vector<uint64_t>* frame, uint32_t record_type) {
  (*frame)[0] = ((*frame)[0] & 0xFFFFFFFF) | uint64_t{record_type} << 32;
}

AlgorithmChoice FullChoice() {
  AlgorithmChoice c;
  c.library = "cudnn";
  c.id = 7;
  c.name = "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1";
  c.knobs = {{1, 2}, {-3, -4}, {INT64_MAX, INT64_MIN}};
  c.opaque = "\x01\x00\x02\x00\xff"s;
  c.determinism = Determinism::kNondeterministic;
  c.source = ChoiceSource::kPinned;
  return c;
}

BufferDigest FullBufferDigest(const std::string& role) {
  BufferDigest d;
  d.role = role;
  d.pointer = {3, 128, 0x7f0000001000};
  d.bytes = 4096;
  d.digest = {0x0123456789abcdef, 0xfedcba9876543210};
  d.dtype = DType::kBF16;
  d.summary = {1024, -2.5, 3.75, 12.0625, 2, 1};
  return d;
}

OpRecord FullOp() {
  OpRecord op;
  op.sequence = 42;
  op.thread_id = 3;
  op.stream_id = 5;
  op.kind = OpKind::kCudnnBackendExecute;
  op.name = "cudnnBackendExecute";
  Argument none{"not_captured", std::monostate{}};
  Argument u{"count", uint64_t{UINT64_MAX}};
  Argument s{"delta", int64_t{-9}};
  Argument r{"alpha", 0.5};
  Argument t{"mode", "NCHW\0x"s};
  Argument b{"params", Argument::Bytes{"\x00\x01\x00\x02"s}};
  Argument p{"x", DevicePointer{9, 16, 0xdead0000}};
  Argument dims{"shape", Argument::Dims{1, -2, 3, INT64_MAX}};
  op.args = {none, u, s, r, t, b, p, dims, Argument{}};
  op.algorithm = FullChoice();
  op.rng = RngState{"curand:PHILOX4_32_10", 1234, 56, 7, "PSEUDO_DEFAULT", true};
  op.inputs = {FullBufferDigest("x"), FullBufferDigest("w")};
  op.outputs = {FullBufferDigest("y")};
  op.status = -1;
  op.start_ns = 1000;
  op.end_ns = 2000;
  op.module_id = 4;
  op.device_ordinal = 1;
  op.nvtx_range_id = (2ull << 32) | 7;
  return op;
}

// Every record type with every field away from its default, plus variants that leave the
// optional fields unset.
std::vector<Record> SampleRecords() {
  std::vector<Record> records;
  records.push_back(FullOp());
  OpRecord bare = FullOp();
  bare.algorithm.reset();
  bare.rng.reset();
  bare.inputs[0].summary = {};
  records.push_back(bare);
  records.push_back(OpRecord{});
  records.push_back(AllocationRecord{11, AllocationEvent::kFree, 1 << 20, "cuMemFreeAsync", 2,
                                     0x7f00deadbeef, 99, 6});
  records.push_back(ModuleLoadRecord{
      2, "cuLibraryLoadData", 65536, {17, 18}, {"kernel_a(float*)", "", "kernel_b<int>(int)"}});
  records.push_back(
      NvtxRangeRecord{4, false, "", 7, 8, NvtxEvent::kPop, (4ull << 32) | 3, 0, "", 0});
  records.push_back(NvtxRangeRecord{4, true, "minilib::scale", 9, 10, NvtxEvent::kPush,
                                    (4ull << 32) | 5, (4ull << 32) | 4, "minilib", 2});
  records.push_back(PolicyDecisionRecord{12, "cudnn", "replaced bwd-filter algo 0 by 1",
                                         FullChoice(), std::nullopt, false});
  records.push_back(
      PolicyDecisionRecord{13, "cublasLt", "pinned", std::nullopt, FullChoice(), true});
  records.push_back(TracerNote{Severity::kError, "disabled: disk full", 100, 200});
  records.push_back(DroppedRecords{3, 17, 4096, "buffers full"});
  records.push_back(StateDigestRecord{
      77, "synchronize", {FullBufferDigest("alloc1"), FullBufferDigest("alloc2")}, 555});
  records.push_back(PythonStackRecord{
      41,
      0x0102,
      1,
      3,
      PythonStackStatus::kCaptured,
      {{"train.py", 42, "forward"}, {"/usr/lib/python3.11/threading.py", -1, "run"}},
      "",
      "3.11.2"});
  records.push_back(PythonStackRecord{
      9, 0x80001234, 0, 0, PythonStackStatus::kNativeThread, {}, "issued by a native thread", ""});
  records.push_back(GpuActivityRecord{GpuActivityKind::kMemset, 12, 11, 1000, 2500, 7});
  records.push_back(GpuActivityRecord{GpuActivityKind::kKernel, std::nullopt, std::nullopt, 5, 9, 0});
  return records;
}

TraceHeader FullHeader() {
  TraceHeader h;
  h.format_version = 3;
  h.tool_version = "0.1.0";
  h.command_line = {"python", "train.py", "--lr=0.1", ""};
  h.host = "node17";
  h.pid = 4321;
  h.rank = 2;
  h.start_unix_ns = 1700000000000000000;
  const std::string uuid = "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff"s;
  GpuInfo gpu{0, "NVIDIA H200", uuid, 9, 0, 132, 150000000000, false};
  GpuInfo stand_in{1, "ndtrace stand-in", "", 8, 6, 4, 1 << 30, true};
  h.gpus = {gpu, stand_in};
  h.versions = {13000, 12080, 91000, 120800, 22703, 10300};
  h.environment = {{"CUBLAS_WORKSPACE_CONFIG", ":4096:8"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  h.policy = Policy::kReplayForce;
  h.pinned_from = "/traces/run1.ndt";
  h.notes = {"note one", "note two"};
  h.python = "3.11.2";
  return h;
}

// Encodes two variants of a record that differ in one field and returns the byte offsets at
// which their frames differ, so a test can rewrite that field without knowing the layout.
std::vector<size_t> DifferingBytes(const Record& a, const Record& b) {
  std::string ea, eb;
  REQUIRE(AppendRecord(a, &ea));
  REQUIRE(AppendRecord(b, &eb));
  REQUIRE(ea.size() == eb.size());
  std::vector<size_t> offsets;
  for (size_t i = 0; i < ea.size(); ++i) {
    if (ea[i] != eb[i]) offsets.push_back(i);
  }
  return offsets;
}

// Rewrites the u16 enum field at byte `offset` of `frame` to `value`.
void PokeU16(std::vector<uint64_t>* frame, size_t offset, uint16_t value) {
  auto* bytes = reinterpret_cast<unsigned char*>(frame->data());
  bytes[offset] = static_cast<unsigned char>(value & 0xFF);
  bytes[offset + 1] = static_cast<unsigned char>(value >> 8);
}

// A hand-built op frame whose `args` list is an inline-composite list of `count` zero-sized
// structs: it costs 7 words on the wire whatever `count` says.
std::vector<uint64_t> ZeroSizedArgsFrame(uint64_t count) {
  return {
      uint64_t{7},         // prefix: 7 payload words, record type 0 (op)
      uint64_t{6} << 32,   // segment table: 1 segment of 6 words
      0x0001000100000000,  // root: struct pointer, 1 data word, 1 pointer
      0,                   // Record data: union tag 0 (op)
      0x0002000000000000,  // Record.op: struct pointer, 0 data words, 2 pointers
      0,                   // OpRecord.name: null
      0x0000000700000001,  // OpRecord.args: list pointer, inline composite, 0 words
      count << 2,          // list tag: `count` elements of 0 data words, 0 pointers
  };
}

TEST_CASE("every record type survives an encode/decode round trip", "[formats]") {
  for (const Record& record : SampleRecords()) {
    INFO("record type " << RecordTypeName(record));
    std::vector<uint64_t> frame = EncodeRecord(record);
    REQUIRE(PayloadWords(frame) + 1 == frame.size());
    CHECK((frame[0] >> 32) == record.index());
    Record decoded;
    size_t consumed = 0;
    Status status = DecodeRecord(frame.data(), frame.size(), &decoded, &consumed);
    REQUIRE(status.ok());
    CHECK(consumed == frame.size());
    CHECK(decoded == record);
  }
}

TEST_CASE("every argument alternative and optional field keeps its identity", "[formats]") {
  std::vector<uint64_t> frame = EncodeRecord(FullOp());
  Record decoded;
  size_t consumed = 0;
  REQUIRE(DecodeRecord(frame.data(), frame.size(), &decoded, &consumed).ok());
  const auto& op = std::get<OpRecord>(decoded);
  REQUIRE(op.args.size() == 9);
  for (size_t i = 0; i < 8; ++i) CHECK(op.args[i].value.index() == i);
  CHECK(std::get<std::string>(op.args[4].value) == "NCHW\0x"s);
  CHECK(std::get<Argument::Bytes>(op.args[5].value).data == "\x00\x01\x00\x02"s);
  CHECK(op.algorithm.has_value());
  CHECK(op.algorithm->opaque == "\x01\x00\x02\x00\xff"s);
  CHECK(op.rng.has_value());

  OpRecord bare = FullOp();
  bare.algorithm.reset();
  bare.rng.reset();
  frame = EncodeRecord(bare);
  REQUIRE(DecodeRecord(frame.data(), frame.size(), &decoded, &consumed).ok());
  CHECK_FALSE(std::get<OpRecord>(decoded).algorithm.has_value());
  CHECK_FALSE(std::get<OpRecord>(decoded).rng.has_value());
}

TEST_CASE("an op view encodes to the bytes of the op record of its fields", "[formats]") {
  const unsigned char bytes[] = {0x21, 0, 0, 0, 0xfe, 0xff};
  const OpView::Arg args[] = {
      {"grid", 2, 1, 1, OpView::Arg::Type::kDims},
      {"sharedMemBytes", 48, 0, 0, OpView::Arg::Type::kUnsigned},
      {"offset", static_cast<uint64_t>(int64_t{-9}), 0, 0, OpView::Arg::Type::kSigned},
      {"", 5, 0, 0, OpView::Arg::Type::kUnsigned},
      {"arg0", 7, 64, 0x7000040, OpView::Arg::Type::kPointer},
      {"arg1", 0, 4, 0, OpView::Arg::Type::kBytes},
      {"arg2", 4, 0, 0, OpView::Arg::Type::kBytes},
      {"arg3", 4, 2, 0, OpView::Arg::Type::kBytes},
  };
  OpView view;
  view.name = "VectorAdd(float const*, float const*, float*, int)";
  view.sequence = 77;
  view.thread_id = 3;
  view.stream_id = 2;
  view.kind = OpKind::kKernelLaunch;
  view.args = args;
  view.bytes = bytes;
  view.status = -1;
  view.start_ns = 1000;
  view.end_ns = 1500;
  view.module_id = 4;
  view.nvtx_range_id = 12;
  OpRecord op;
  op.sequence = 77;
  op.thread_id = 3;
  op.stream_id = 2;
  op.kind = OpKind::kKernelLaunch;
  op.name = view.name;
  op.status = -1;
  op.start_ns = 1000;
  op.end_ns = 1500;
  op.module_id = 4;
  op.nvtx_range_id = 12;
  const auto same = [&] {
    std::string from_view, from_record;
    REQUIRE(AppendRecord(view, &from_view));
    REQUIRE(AppendRecord(op, &from_record));
    CHECK(from_view == from_record);
  };
  same();            // no argument
  view.inside = 70;  // an op made inside another: its one argument
  op.args.push_back({"insideOp", uint64_t{70}});
  same();
  view.arg_count = std::size(args);
  op.args.insert(op.args.begin(), {{"grid", Argument::Dims{2, 1, 1}},
                                   {"sharedMemBytes", uint64_t{48}},
                                   {"offset", int64_t{-9}},
                                   {"", uint64_t{5}},
                                   {"arg0", DevicePointer{7, 64, 0x7000040}},
                                   {"arg1", Argument::Bytes{std::string("\x21\0\0\0", 4)}},
                                   {"arg2", Argument::Bytes{}},
                                   {"arg3", Argument::Bytes{std::string("\xfe\xff", 2)}}});
  same();
  view.inside = 0;
  op.args.pop_back();
  view.name = "";
  op.name.clear();
  same();
}

TEST_CASE("a full trace header survives an encode/decode round trip", "[formats]") {
  for (const TraceHeader& header : {FullHeader(), TraceHeader{}}) {
    std::vector<uint64_t> frame = EncodeHeader(header);
    CHECK((frame[0] >> 32) == kHeaderRecordType);
    TraceHeader decoded;
    size_t consumed = 0;
    Status status = DecodeHeader(frame.data(), frame.size(), &decoded, &consumed);
    REQUIRE(status.ok());
    CHECK(consumed == frame.size());
    CHECK(decoded == header);
  }
}

TEST_CASE("frames appended back to back decode one after another", "[formats]") {
  std::string out;
  REQUIRE(AppendHeader(FullHeader(), &out));
  const std::vector<Record> records = SampleRecords();
  for (const Record& record : records) REQUIRE(AppendRecord(record, &out));
  std::vector<uint64_t> words = ToWords(out);

  size_t at = 0;
  size_t consumed = 0;
  TraceHeader header;
  REQUIRE(DecodeHeader(words.data(), words.size(), &header, &consumed).ok());
  CHECK(header == FullHeader());
  CHECK(consumed == PayloadWords(words) + 1);
  at += consumed;
  for (const Record& expected : records) {
    REQUIRE(at < words.size());
    Record decoded;
    Status status = DecodeRecord(words.data() + at, words.size() - at, &decoded, &consumed);
    REQUIRE(status.ok());
    CHECK(consumed == PayloadWords({words[at]}) + 1);
    CHECK(decoded == expected);
    at += consumed;
  }
  CHECK(at == words.size());
}

TEST_CASE("the same record encodes to the same bytes after a large one", "[formats]") {
  OpRecord large = FullOp();
  large.name.assign(64 * 1024, 'k');  // spills past the per-thread scratch segment
  OpRecord small = FullOp();
  std::string first, second;
  REQUIRE(AppendRecord(small, &first));
  REQUIRE(AppendRecord(large, &second));
  second.clear();
  REQUIRE(AppendRecord(small, &second));
  CHECK(first == second);
}

TEST_CASE("threads encode concurrently without sharing state", "[formats]") {
  const std::vector<Record> records = SampleRecords();
  std::vector<std::string> outputs(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < outputs.size(); ++t) {
    threads.emplace_back([&records, &out = outputs[t]] {
      for (int i = 0; i < 200; ++i) {
        for (const Record& record : records) {
          if (!AppendRecord(record, &out)) out = "failed";
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::string expected;
  for (int i = 0; i < 200; ++i) {
    for (const Record& record : records) REQUIRE(AppendRecord(record, &expected));
  }
  for (const std::string& out : outputs) CHECK(out == expected);
}

TEST_CASE("an oversized record is refused and leaves the output unchanged", "[formats]") {
  std::string out = "existing frames";
  OpRecord op;
  op.name.assign(2 << 20, 'x');
  CHECK_FALSE(AppendRecord(op, &out));
  CHECK(out == "existing frames");

  TraceHeader header;
  header.notes = {std::string(2 << 20, 'n')};
  CHECK_FALSE(AppendHeader(header, &out));
  CHECK(out == "existing frames");

  // Just under the limit is still accepted.
  out.clear();
  op.name.assign((1 << 20) - 1024, 'x');
  REQUIRE(AppendRecord(op, &out));
  std::vector<uint64_t> words = ToWords(out);
  CHECK(PayloadWords(words) <= kMaxRecordWords);
  CHECK((words[1] & 0xFFFFFFFF) >= 1);  // more than one segment: the framing of several
  Record decoded;
  size_t consumed = 0;
  REQUIRE(DecodeRecord(words.data(), words.size(), &decoded, &consumed).ok());
  CHECK(decoded == Record{op});
}

TEST_CASE("every truncation of a valid frame fails cleanly", "[formats]") {
  std::vector<uint64_t> frame = EncodeRecord(FullOp());
  for (size_t n = 0; n < frame.size(); ++n) {
    INFO("word count " << n);
    Record decoded = TracerNote{Severity::kInfo, "untouched", 0, 0};
    size_t consumed = 12345;
    Status status = DecodeRecord(frame.data(), n, &decoded, &consumed);
    CHECK_FALSE(status.ok());
    CHECK(status.message().rfind("record: ", 0) == 0);
    CHECK(consumed == 12345);
    CHECK(std::get<TracerNote>(decoded).text == "untouched");
  }
  // A prefix that under-states the payload is refused even when the words are there.
  for (uint32_t p = 0; p < PayloadWords(frame); ++p) {
    std::vector<uint64_t> shrunk = frame;
    shrunk[0] = (shrunk[0] & ~uint64_t{0xFFFFFFFF}) | p;
    Record decoded;
    size_t consumed = 0;
    CHECK_FALSE(DecodeRecord(shrunk.data(), shrunk.size(), &decoded, &consumed).ok());
  }
  std::vector<uint64_t> header = EncodeHeader(FullHeader());
  for (size_t n = 0; n < header.size(); ++n) {
    TraceHeader decoded;
    size_t consumed = 0;
    CHECK_FALSE(DecodeHeader(header.data(), n, &decoded, &consumed).ok());
  }
}

TEST_CASE("random garbage and bit flips never crash the decoder", "[formats]") {
  std::mt19937_64 rng(20240601);
  const std::vector<uint64_t> valid = EncodeRecord(FullOp());
  size_t decoded_ok = 0;
  // Whatever decodes must re-encode to a frame that decodes to the same bytes again.
  auto check_decoded = [&decoded_ok](const std::vector<uint64_t>& words) {
    Record decoded;
    size_t consumed = 0;
    if (!DecodeRecord(words.data(), words.size(), &decoded, &consumed).ok()) return;
    ++decoded_ok;
    REQUIRE(consumed >= 1);
    REQUIRE(consumed <= words.size());
    std::string once, twice;
    REQUIRE(AppendRecord(decoded, &once));
    std::vector<uint64_t> reencoded = ToWords(once);
    Record again;
    REQUIRE(DecodeRecord(reencoded.data(), reencoded.size(), &again, &consumed).ok());
    REQUIRE(AppendRecord(again, &twice));
    REQUIRE(once == twice);
  };
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint64_t> words = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t bit = rng() % (words.size() * 64 - 64) + 64;  // keep the prefix intact
      words[bit / 64] ^= uint64_t{1} << (bit % 64);
    }
    check_decoded(words);
  }
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint64_t> words(rng() % 48);
    for (uint64_t& w : words) w = rng();
    if (!words.empty() && i % 2 == 0) {
      // Make the prefix and the segment table plausible so decoding reaches the reader.
      words[0] = (words.size() - 1) | (rng() % 9) << 32;
      if (words.size() > 1) words[1] = (words.size() - 2) << 32;
    }
    check_decoded(words);
    TraceHeader header;
    size_t consumed = 0;
    (void)DecodeHeader(words.data(), words.size(), &header, &consumed);
  }
  CHECK(decoded_ok > 0);  // the mutations reach the full decoding path
}

TEST_CASE("a frame declaring 2^31 segments is refused before any reader exists", "[formats]") {
  for (uint32_t segments_minus_one : {0x7FFFFFFFu, 0xFFFFFFFFu, kMaxSegments}) {
    std::vector<uint64_t> frame = EncodeRecord(FullOp());
    frame[1] = (frame[1] & ~uint64_t{0xFFFFFFFF}) | segments_minus_one;
    Record decoded;
    size_t consumed = 0;
    Status status = DecodeRecord(frame.data(), frame.size(), &decoded, &consumed);
    REQUIRE_FALSE(status.ok());
    CHECK_THAT(status.message(), Catch::Contains("segments, more than the limit"));
  }
}

TEST_CASE("a payload longer than the record limit is refused", "[formats]") {
  std::vector<uint64_t> frame(kMaxRecordWords + 2, 0);
  frame[0] = kMaxRecordWords + 1;
  Record decoded;
  size_t consumed = 0;
  Status status = DecodeRecord(frame.data(), frame.size(), &decoded, &consumed);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("exceeds the limit"));
}

TEST_CASE("a message whose union member disagrees with the frame's record type is refused",
          "[formats]") {
  std::vector<uint64_t> frame = EncodeRecord(FullOp());
  for (uint32_t type = 1; type < 8; ++type) {
    SetRecordType(&frame, type);
    Record decoded;
    size_t consumed = 0;
    Status status = DecodeRecord(frame.data(), frame.size(), &decoded, &consumed);
    REQUIRE_FALSE(status.ok());
    CHECK_THAT(status.message(), Catch::Contains("union member 0"));
  }
  SetRecordType(&frame, 8);
  Record decoded;
  size_t consumed = 0;
  CHECK_FALSE(DecodeRecord(frame.data(), frame.size(), &decoded, &consumed).ok());
}

TEST_CASE("header and record frames are not accepted in each other's place", "[formats]") {
  std::vector<uint64_t> header = EncodeHeader(FullHeader());
  Record record;
  size_t consumed = 0;
  Status status = DecodeRecord(header.data(), header.size(), &record, &consumed);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("record type 65535"));

  std::vector<uint64_t> op = EncodeRecord(FullOp());
  TraceHeader decoded;
  status = DecodeHeader(op.data(), op.size(), &decoded, &consumed);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("the header was expected"));
}

TEST_CASE("a list of zero-sized elements claiming 2^29 entries hits the traversal limit",
          "[formats]") {
  // The same frame with a small count is valid, so the refusal is the amplification check.
  std::vector<uint64_t> small = ZeroSizedArgsFrame(3);
  Record decoded;
  size_t consumed = 0;
  Status status = DecodeRecord(small.data(), small.size(), &decoded, &consumed);
  REQUIRE(status.ok());
  CHECK(consumed == small.size());
  CHECK(std::get<OpRecord>(decoded).args == std::vector<Argument>(3));

  std::vector<uint64_t> amplified = ZeroSizedArgsFrame((uint64_t{1} << 29) - 1);
  status = DecodeRecord(amplified.data(), amplified.size(), &decoded, &consumed);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::StartsWith("record: "));
  CHECK_THAT(status.message(), Catch::Contains("traversal limit"));
}

TEST_CASE("enum values from a newer writer decode to unknown or are refused", "[formats]") {
  OpRecord a = FullOp();
  OpRecord b = FullOp();
  b.kind = OpKind::kOther;
  std::vector<size_t> at = DifferingBytes(a, b);
  REQUIRE(at.size() == 1);
  std::vector<uint64_t> frame = EncodeRecord(a);
  PokeU16(&frame, at[0], 999);
  Record decoded;
  size_t consumed = 0;
  REQUIRE(DecodeRecord(frame.data(), frame.size(), &decoded, &consumed).ok());
  CHECK(std::get<OpRecord>(decoded).kind == OpKind::kOther);

  b = FullOp();
  b.inputs[0].dtype = DType::kUnknown;
  at = DifferingBytes(a, b);
  REQUIRE(at.size() == 1);
  frame = EncodeRecord(a);
  PokeU16(&frame, at[0], 999);
  REQUIRE(DecodeRecord(frame.data(), frame.size(), &decoded, &consumed).ok());
  CHECK(std::get<OpRecord>(decoded).inputs[0].dtype == DType::kUnknown);
  CHECK(std::get<OpRecord>(decoded).inputs[1].dtype == DType::kBF16);

  // Allocation events and note severities have no "unknown" member: guessing would change
  // what the record means, so the record is refused.
  AllocationRecord alloc{1, AllocationEvent::kFree, 8, "cuMemFree", 0, 0, 0, 0};
  AllocationRecord alloc_b = alloc;
  alloc_b.event = AllocationEvent::kAllocate;
  at = DifferingBytes(alloc, alloc_b);
  REQUIRE(at.size() == 1);
  frame = EncodeRecord(alloc);
  PokeU16(&frame, at[0], 2);
  Status status = DecodeRecord(frame.data(), frame.size(), &decoded, &consumed);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("allocation event 2 is unknown"));
}

TEST_CASE("names are the snake_case forms of the schema enumerants", "[formats]") {
  CHECK(std::string(OpKindName(OpKind::kKernelLaunch)) == "kernel_launch");
  CHECK(std::string(OpKindName(OpKind::kCudnnBackendExecute)) == "cudnn_backend_execute");
  CHECK(std::string(OpKindName(OpKind::kCublasLtMatmul)) == "cublas_lt_matmul");
  CHECK(std::string(OpKindName(static_cast<OpKind>(999))) == "unknown");
  CHECK(std::string(DTypeName(DType::kBF16)) == "bf16");
  CHECK(std::string(DTypeName(DType::kF8E4M3)) == "f8e4m3");
  for (uint16_t value = 1; value <= static_cast<uint16_t>(DType::kBool); ++value) {
    const auto dtype = static_cast<DType>(value);
    CHECK(ParseDType(DTypeName(dtype)) == dtype);
    CHECK(DTypeBytes(dtype) >= 1);
  }
  CHECK_FALSE(ParseDType("unknown"));
  CHECK_FALSE(ParseDType("float"));
  CHECK(DTypeBytes(DType::kBF16) == 2);
  CHECK(DTypeBytes(DType::kI64) == 8);
  CHECK(DTypeBytes(DType::kUnknown) == 0);
  CHECK(std::string(PolicyName(Policy::kReplayForce)) == "replay_force");
  const char* expected[] = {"op",   "allocation", "module_load",  "nvtx_range",  "policy_decision",
                            "note", "dropped",    "state_digest", "python_stack", "gpu_activity"};
  const Record records[] = {OpRecord{},        AllocationRecord{},     ModuleLoadRecord{},
                            NvtxRangeRecord{}, PolicyDecisionRecord{}, TracerNote{},
                            DroppedRecords{},  StateDigestRecord{},    PythonStackRecord{},
                            GpuActivityRecord{}};
  for (size_t i = 0; i < std::size(records); ++i) {
    CHECK(std::string(RecordTypeName(records[i])) == expected[i]);
  }
}

}  // namespace
}  // namespace ndt::format::codec
