// TraceReader against cut, corrupted and hostile files, and its seeking.
#include <sys/resource.h>
#include <zstd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <tuple>

#include "formats/byte_order.h"
#include "formats/container.h"
#include "formats/record_codec.h"
#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "formats/writer_summary.h"
#include "support/sample_records.h"

namespace ndt::format {
namespace {

using testing::ReadAll;
using testing::ReadFile;
using testing::SampleHeader;
using testing::SampleOp;
using testing::TempPath;
using testing::WriteFile;

// A closed trace of `ops` ops in chunks of about `chunk_bytes`.
std::string WriteSmallTrace(const std::string& path, uint64_t ops, size_t chunk_bytes) {
  WriterOptions options;
  options.chunk_bytes = chunk_bytes;
  auto writer = TraceWriter::Create(path, SampleHeader(), options);
  REQUIRE(writer.ok());
  for (uint64_t i = 0; i < ops; ++i) (*writer)->Append(SampleOp(i));
  (*writer)->Append(TracerNote{Severity::kInfo, "end", ops, 0});
  REQUIRE((*writer)->Close().ok());
  return ReadFile(path);
}

TEST_CASE("a trace cut at any byte opens and yields exactly the records of its whole chunks",
          "[formats]") {
  TempPath path("cut-source.ndt");
  TempPath cut("cut.ndt");
  const std::string bytes = WriteSmallTrace(path.str(), 60, 1024);
  auto full_reader = TraceReader::Open(path.str());
  REQUIRE(full_reader.ok());
  const std::vector<ChunkInfo> chunks = (*full_reader)->chunks();
  const std::vector<Record> all = ReadAll(**full_reader);
  REQUIRE(chunks.size() >= 5);
  const uint64_t header_end = chunks.front().offset;

  for (size_t size = 0; size <= bytes.size(); ++size) {
    WriteFile(cut.str(), bytes.substr(0, size));
    auto reader = TraceReader::Open(cut.str());
    INFO("cut at byte " << size);
    if (size < header_end) {
      REQUIRE_FALSE(reader.ok());
      REQUIRE_THAT(reader.status().message(), Catch::Contains(cut.str()));
      continue;
    }
    REQUIRE(reader.ok());
    size_t expected = 0;
    for (const ChunkInfo& chunk : chunks) {
      if (chunk.end() <= size) expected += chunk.count;
    }
    const std::vector<Record> records = ReadAll(**reader);
    REQUIRE(records.size() == expected);
    REQUIRE(std::equal(records.begin(), records.end(), all.begin()));
    REQUIRE((*reader)->damage().empty());
    REQUIRE((*reader)->complete() == (size == bytes.size()));
  }
}

TEST_CASE("ReadHeader reads the header alone, whatever follows it", "[formats]") {
  TempPath path("header-source.ndt");
  TempPath changed("header-changed.ndt");
  const std::string bytes = WriteSmallTrace(path.str(), 60, 1024);
  auto reader = TraceReader::Open(path.str());
  REQUIRE(reader.ok());
  const TraceHeader header = (*reader)->header();
  const uint64_t header_end = (*reader)->chunks().front().offset;
  REQUIRE(header.command_line == SampleHeader().command_line);

  StatusOr<TraceHeader> read = TraceReader::ReadHeader(path.str());
  REQUIRE(read.ok());
  CHECK(*read == header);

  // The body is never looked at: garbage after the header, or nothing at all.
  WriteFile(changed.str(), bytes.substr(0, header_end) + std::string(4096, '\x5a'));
  read = TraceReader::ReadHeader(changed.str());
  REQUIRE(read.ok());
  CHECK(*read == header);
  WriteFile(changed.str(), bytes.substr(0, header_end));
  read = TraceReader::ReadHeader(changed.str());
  REQUIRE(read.ok());
  CHECK(*read == header);

  // A header that is not whole, or no trace, is refused as Open refuses it.
  WriteFile(changed.str(), bytes.substr(0, header_end - 1));
  read = TraceReader::ReadHeader(changed.str());
  REQUIRE_FALSE(read.ok());
  CHECK_THAT(read.status().message(), Catch::Contains(changed.str()));
  WriteFile(changed.str(), "not a trace");
  CHECK_FALSE(TraceReader::ReadHeader(changed.str()).ok());
  CHECK_FALSE(TraceReader::ReadHeader(changed.str() + ".missing").ok());
}

TEST_CASE("a flipped byte anywhere in a trace is detected and located", "[formats]") {
  TempPath path("flip-source.ndt");
  TempPath flipped("flip.ndt");
  const std::string bytes = WriteSmallTrace(path.str(), 40, 1024);
  auto full_reader = TraceReader::Open(path.str());
  REQUIRE(full_reader.ok());
  const std::vector<Record> all = ReadAll(**full_reader);

  for (size_t at = 0; at < bytes.size(); ++at) {
    std::string copy = bytes;
    copy[at] = static_cast<char>(copy[at] ^ 0x20);
    WriteFile(flipped.str(), copy);
    INFO("byte " << at << " flipped");
    auto reader = TraceReader::Open(flipped.str());
    if (!reader.ok()) {
      REQUIRE_THAT(reader.status().message(), Catch::Contains(flipped.str()));
      continue;
    }
    const std::vector<Record> records = ReadAll(**reader);
    const auto& damage = (*reader)->damage();
    REQUIRE_FALSE(damage.empty());
    bool located = false;
    for (const TraceDamage& d : damage) located |= d.begin <= at && at < d.end;
    REQUIRE(located);
    // Whatever was read is genuine: no record is invented from damaged bytes.
    for (const Record& record : records) {
      REQUIRE(std::find(all.begin(), all.end(), record) != all.end());
    }
  }
}

TEST_CASE("files that are not traces are refused with a reason", "[formats]") {
  TempPath path("garbage.ndt");
  WriteFile(path.str(), "");
  CHECK_THAT(TraceReader::Open(path.str()).status().message(), Catch::Contains("too short"));
  WriteFile(path.str(), std::string(4096, 'x'));
  CHECK_THAT(TraceReader::Open(path.str()).status().message(),
             Catch::Contains("not an ndtrace trace"));
  CHECK_THAT(TraceReader::Open("/nonexistent.ndt").status().message(),
             Catch::Contains("cannot open"));
  CHECK_THAT(TraceReader::Open("/tmp").status().message(), Catch::Contains("not a regular file"));

  std::string future = WriteSmallTrace(path.str(), 1, 1024);
  future[8] = 9;  // format version 9
  WriteFile(path.str(), future);
  CHECK_THAT(TraceReader::Open(path.str()).status().message(),
             Catch::Contains("unsupported trace format version 9"));
}

// Appends a chunk with a valid hash around `payload` (already compressed) claiming
// `uncompressed` bytes: hostile content that passes the integrity check.
void AppendForgedChunk(std::string* file, const std::string& payload, uint32_t uncompressed) {
  container::ChunkHeader header;
  header.kind = ChunkKind::kRecords;
  header.count = 1;
  header.uncompressed_size = uncompressed;
  header.compressed_size = static_cast<uint32_t>(payload.size());
  char bytes[container::kChunkHeaderBytes];
  container::EncodeChunkHeader(header, payload, bytes);
  file->append(bytes, sizeof bytes);
  file->append(payload);
}

std::string Compress(const std::string& raw) {
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 19));
  return out;
}

// One zstd frame holding `gigabytes` GiB of zeros, built without holding them in memory.
std::string ZeroBomb(size_t gigabytes) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setPledgedSrcSize(cctx, gigabytes << 30);
  const std::string zeros(1 << 20, '\0');
  std::string out;
  std::string buffer(ZSTD_CStreamOutSize(), '\0');
  for (size_t i = 0; i < (gigabytes << 10); ++i) {
    ZSTD_inBuffer in{zeros.data(), zeros.size(), 0};
    const bool last = i + 1 == (gigabytes << 10);
    size_t left = 0;
    do {
      ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
      left = ZSTD_compressStream2(cctx, &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
      out.append(buffer.data(), o.pos);
    } while (in.pos < in.size || (last && left != 0));
  }
  ZSTD_freeCCtx(cctx);
  return out;
}

TEST_CASE("decompression bombs and oversized declarations are refused without allocating",
          "[formats]") {
  TempPath source("bomb-source.ndt");
  TempPath path("bomb.ndt");
  std::string base = WriteSmallTrace(source.str(), 1, 1024);
  // Keep the preamble and header chunk only: the file then has no footer.
  auto reader = TraceReader::Open(source.str());
  REQUIRE(reader.ok());
  base.resize((*reader)->chunks().front().offset);

  SECTION("a 1 GiB frame declared as 1 KiB") {
    std::string file = base;
    const std::string bomb = ZeroBomb(1);
    REQUIRE(bomb.size() < (1u << 20));
    AppendForgedChunk(&file, bomb, 1024);
    WriteFile(path.str(), file);
    auto opened = TraceReader::Open(path.str());
    REQUIRE(opened.ok());
    CHECK(ReadAll(**opened).empty());
    REQUIRE((*opened)->damage().size() == 1);
    CHECK_THAT((*opened)->damage()[0].what, Catch::Contains("does not declare"));
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    CHECK(usage.ru_maxrss < 256 * 1024);  // KiB: this process never held the 1 GiB
  }
  SECTION("a chunk declaring 4 GiB") {
    std::string file = base;
    AppendForgedChunk(&file, Compress("x"), 0xFFFFFFFFu);
    WriteFile(path.str(), file);
    auto opened = TraceReader::Open(path.str());
    REQUIRE(opened.ok());
    CHECK(ReadAll(**opened).empty());
    REQUIRE((*opened)->damage().size() == 1);
    CHECK_THAT((*opened)->damage()[0].what, Catch::Contains("above the limit"));
  }
}

TEST_CASE("ops are found and iteration resumes by op sequence through the index", "[formats]") {
  TempPath path("seek.ndt");
  WriteSmallTrace(path.str(), 10000, 4096);
  auto opened = TraceReader::Open(path.str());
  REQUIRE(opened.ok());
  TraceReader& reader = **opened;
  REQUIRE(reader.chunks().size() > 10);

  const auto op = reader.FindOp(6789);
  REQUIRE(op.has_value());
  CHECK(*op == SampleOp(6789));
  CHECK_FALSE(reader.FindOp(10000).has_value());

  reader.SeekToOp(5000);
  Record record;
  REQUIRE(reader.Next(&record));
  CHECK(std::get<OpRecord>(record).sequence == 5000);
  uint64_t rest = 1;
  while (reader.Next(&record)) rest += std::holds_alternative<OpRecord>(record) ? 1 : 0;
  CHECK(rest == 5000);

  reader.Rewind();
  REQUIRE(reader.Next(&record));
  CHECK(std::get<OpRecord>(record).sequence == 0);
}

TEST_CASE("PassOver skips the record types asked for, without decoding, and keeps the rest",
          "[formats]") {
  // Each record type's bit is its index in Record, which is its frames' record type.
  CHECK(RecordTypeBit<OpRecord>() == 1u);
  CHECK(RecordTypeBit<GpuActivityRecord>() == 1u << 9);
  static_assert(std::variant_size_v<Record> == 10, "a new record type: extend the checks");

  TempPath path("pass_over.ndt");
  const std::vector<Record> every = testing::EveryRecordType();
  {
    WriterOptions options;
    options.chunk_bytes = 512;
    auto writer = TraceWriter::Create(path.str(), SampleHeader(), options);
    REQUIRE(writer.ok());
    for (int round = 0; round < 20; ++round) {
      for (const Record& record : every) REQUIRE((*writer)->Append(record));
    }
    REQUIRE((*writer)->Close().ok());
  }
  auto opened = TraceReader::Open(path.str());
  REQUIRE(opened.ok());
  TraceReader& reader = **opened;
  const std::vector<Record> all = ReadAll(reader);
  REQUIRE(all.size() == 20 * every.size());

  const uint32_t skipped = RecordTypeBit<AllocationRecord>() |
                           RecordTypeBit<GpuActivityRecord>() | RecordTypeBit<TracerNote>();
  reader.Rewind();
  reader.PassOver(skipped);
  std::vector<Record> kept;
  Record record;
  while (reader.Next(&record)) kept.push_back(record);
  std::vector<Record> expected;
  for (const Record& r : all) {
    if ((skipped >> r.index() & 1) == 0) expected.push_back(r);
  }
  CHECK(kept == expected);
  CHECK(kept.size() + 20 * 3 <= all.size());  // every type is in `every`, the skipped ones too
  CHECK(reader.damage().empty());

  reader.Rewind();
  reader.PassOver(0);
  CHECK(ReadAll(reader) == all);
}

// Last in the file: they allocate much (ASan keeps freed memory in quarantine), and a test above
// measures the peak RSS of this process when the tests run in one.
// A closed trace with blobs (captured buffers) between its record chunks: ops, then a blob of
// `blob_bytes` random bytes after every tenth op.
std::string WriteTraceWithBlobs(const std::string& path, size_t blob_bytes) {
  WriterOptions options;
  options.chunk_bytes = 512;
  auto writer = TraceWriter::Create(path, SampleHeader(), options);
  REQUIRE(writer.ok());
  uint64_t state = 0x9E3779B97F4A7C15u;
  for (uint64_t i = 0; i < 30; ++i) {
    (*writer)->Append(SampleOp(i));
    if (i % 10 != 9) continue;
    std::vector<std::byte> blob(blob_bytes);
    for (std::byte& b : blob) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      b = static_cast<std::byte>(state >> 56);
    }
    REQUIRE((*writer)->PutBlob(blob).ok());
    REQUIRE((*writer)->Flush().ok());  // the blob lands between record chunks
  }
  REQUIRE((*writer)->Close().ok());
  return ReadFile(path);
}

TEST_CASE("every byte of a trace with blobs is checked: any change is reported as damage",
          "[formats]") {
  TempPath path("blob-flip-source.ndt");
  TempPath flipped("blob-flip.ndt");
  const std::string bytes = WriteTraceWithBlobs(path.str(), 300);
  auto full_reader = TraceReader::Open(path.str());
  REQUIRE(full_reader.ok());
  size_t blob_chunks = 0;
  for (const ChunkInfo& chunk : (*full_reader)->chunks()) {
    blob_chunks += chunk.kind == ChunkKind::kBlob;
  }
  REQUIRE(blob_chunks == 3);
  REQUIRE(ReadAll(**full_reader).size() == 30);
  REQUIRE((*full_reader)->damage().empty());

  // Two different changes of every byte: no byte of a closed trace goes unchecked (the
  // preamble, chunk headers and payloads, blob parts, the index and the footer alike).
  for (const int mask : {0x20, 0x81}) {
    for (size_t at = 0; at < bytes.size(); ++at) {
      std::string copy = bytes;
      copy[at] = static_cast<char>(copy[at] ^ mask);
      WriteFile(flipped.str(), copy);
      INFO("byte " << at << " of " << bytes.size() << " xor " << mask);
      auto reader = TraceReader::Open(flipped.str());
      if (!reader.ok()) continue;  // refused whole, with a reason (the header is damaged)
      ReadAll(**reader);
      const auto& damage = (*reader)->damage();
      REQUIRE_FALSE(damage.empty());
      bool located = false;
      for (const TraceDamage& d : damage) located |= d.begin <= at && at < d.end;
      REQUIRE(located);
    }
  }
}

TEST_CASE("a damaged writer summary is reported, and the trace reads without it", "[formats]") {
  TempPath path("summary-source.ndt");
  TempPath changed("summary-changed.ndt");
  std::string bytes = WriteSmallTrace(path.str(), 50, 1024);
  // The footer names the index chunk, whose header (tag0, tag1) names the summary's chunk.
  const uint64_t index_offset = LoadLe64(bytes.data() + bytes.size() - container::kFooterBytes + 8);
  REQUIRE(LoadLe64(bytes.data() + index_offset + 40) == codec::kSummaryIndexMarker);
  const uint64_t summary_offset = LoadLe64(bytes.data() + index_offset + 32);
  REQUIRE(summary_offset < index_offset);
  auto intact = ReadWriterSummary(path.str());
  REQUIRE(intact.ok());
  REQUIRE(intact->has_value());
  CHECK((*intact)->records == 51);
  CHECK((*intact)->ops == 50);

  const uint64_t at = summary_offset + container::kChunkHeaderBytes + 3;  // in its payload
  bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
  WriteFile(changed.str(), bytes);
  auto quick = ReadWriterSummary(changed.str());
  REQUIRE(quick.ok());
  CHECK_FALSE(quick->has_value());
  auto reader = TraceReader::Open(changed.str());
  REQUIRE(reader.ok());
  CHECK((*reader)->complete());
  CHECK(ReadAll(**reader).size() == 51);
  REQUIRE((*reader)->damage().size() == 1);
  CHECK((*reader)->damage()[0].begin == summary_offset);
  CHECK_THAT((*reader)->damage()[0].what, Catch::Contains("summary"));
}

TEST_CASE("the preamble's format version must agree with the header's", "[formats]") {
  TempPath path("version-source.ndt");
  TempPath changed("version-changed.ndt");
  std::string bytes = WriteSmallTrace(path.str(), 5, 1024);
  REQUIRE(bytes[8] == static_cast<char>(kFormatVersion));
  bytes[8] = 1;  // an older version this reader accepts, but not the one the header names
  WriteFile(changed.str(), bytes);
  auto reader = TraceReader::Open(changed.str());
  REQUIRE_FALSE(reader.ok());
  CHECK_THAT(reader.status().message(), Catch::Contains("format version"));
}


std::vector<std::tuple<uint64_t, uint64_t, std::string>> DamageOf(const TraceReader& reader) {
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> damage;
  for (const TraceDamage& d : reader.damage()) damage.emplace_back(d.begin, d.end, d.what);
  return damage;
}

TEST_CASE("read-ahead: the same records and the same damage as reading on one thread",
          "[formats][read_ahead]") {
  TempPath path("ahead-source.ndt");
  TempPath changed("ahead.ndt");
  const std::string bytes = WriteTraceWithBlobs(path.str(), 300);
  // The clean trace, then every 5th byte changed: damaged records chunks, blob parts, index.
  for (size_t at = 0; at < bytes.size(); at += 5) {
    std::string copy = bytes;
    if (at != 0) copy[at] = static_cast<char>(copy[at] ^ 0x20);
    WriteFile(changed.str(), copy);
    INFO("byte " << at << " changed");
    auto plain = TraceReader::Open(changed.str());
    auto ahead = TraceReader::Open(changed.str());
    REQUIRE(plain.ok() == ahead.ok());
    if (!plain.ok()) continue;
    (*ahead)->ReadAhead(true);
    REQUIRE(ReadAll(**ahead) == ReadAll(**plain));
    REQUIRE(DamageOf(**ahead) == DamageOf(**plain));
  }
}

TEST_CASE("read-ahead: seeking, rewinding and closing mid-way", "[formats][read_ahead]") {
  TempPath path("ahead-seek.ndt");
  WriteSmallTrace(path.str(), 5000, 2048);
  auto opened = TraceReader::Open(path.str());
  REQUIRE(opened.ok());
  TraceReader& reader = **opened;
  const std::vector<Record> all = ReadAll(reader);
  reader.Rewind();
  reader.ReadAhead(true);
  Record record;
  for (int i = 0; i < 1234; ++i) REQUIRE(reader.Next(&record));
  reader.SeekToOp(4000);
  REQUIRE(reader.Next(&record));
  CHECK(std::get<OpRecord>(record).sequence == 4000);
  reader.Rewind();
  CHECK(ReadAll(reader) == all);
  reader.Rewind();
  for (int i = 0; i < 100; ++i) REQUIRE(reader.Next(&record));
  reader.ReadAhead(false);
  size_t rest = 0;
  while (reader.Next(&record)) ++rest;
  CHECK(rest == all.size() - 100);
  // Destroyed while its thread reads ahead.
  auto again = TraceReader::Open(path.str());
  REQUIRE(again.ok());
  (*again)->ReadAhead(true);
  REQUIRE((*again)->Next(&record));
  again->reset();
  CHECK(reader.damage().empty());
}

}  // namespace
}  // namespace ndt::format
