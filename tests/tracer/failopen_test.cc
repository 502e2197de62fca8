// Nothing read inside the traced process can end or change it: a hostile `--pin` reference
// (NDTRACE_PIN=, read at load for its header and when recording starts for its records) with
// valid chunk hashes around crafted Cap'n Proto messages. Each traced run must print what the
// untraced run prints and exit as it does. Programs run on the stand-in device.
#include <zstd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/container.h"
#include "formats/record_codec.h"
#include "formats/trace_writer.h"
#include "support/temp_dir.h"
#include "support/traced_program.h"

namespace {

using namespace ndt::test;  // NOLINT(google-build-using-namespace): the shared test helpers
namespace container = ndt::format::container;

const std::string kVectorAdd = "'" PROG_VECTOR_ADD "'";
const std::string kNdtrace = "'" NDTRACE_BIN "'";

void WriteFile(const std::string& path, const std::string& bytes) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size());
  std::fclose(file);
}

std::string Compress(const std::string& raw) {
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 3));
  return out;
}

// A chunk whose hash is right for its (hostile) content.
std::string Chunk(ndt::format::ChunkKind kind, const std::string& frames, uint32_t count) {
  const std::string payload = Compress(frames);
  container::ChunkHeader header;
  header.kind = kind;
  header.writer_id = kind == ndt::format::ChunkKind::kHeader ? 0xFFFFFFFFu : 0;
  header.count = count;
  header.uncompressed_size = static_cast<uint32_t>(frames.size());
  header.compressed_size = static_cast<uint32_t>(payload.size());
  char bytes[container::kChunkHeaderBytes];
  container::EncodeChunkHeader(header, payload, bytes);
  return std::string(bytes, sizeof bytes) + payload;
}

std::string Preamble() {
  char preamble[container::kPreambleBytes];
  container::EncodePreamble(preamble);
  return std::string(preamble, sizeof preamble);
}

std::string HeaderFrame() {
  ndt::format::TraceHeader header;
  header.command_line = {"reference"};
  std::string frame;
  REQUIRE(ndt::format::codec::AppendHeader(header, &frame));
  return frame;
}

// A pinnable op (a fingerprint and an algorithm choice), as the cuBLAS hooks record it.
std::string OpFrame() {
  ndt::format::OpRecord op;
  op.sequence = 0;
  op.name = "cublasGemmEx";
  op.args.push_back({"fingerprint", std::string("m=64 n=64 k=64 f32")});
  ndt::format::AlgorithmChoice choice;
  choice.library = "cublas";
  choice.id = 3;
  op.algorithm = choice;
  std::string frame;
  REQUIRE(ndt::format::codec::AppendRecord(op, &frame));
  return frame;
}

void SetWord(std::string* frame, size_t word, uint64_t value) {
  std::memcpy(frame->data() + 8 * word, &value, 8);
}

// The frame with its Cap'n Proto segment table saying one segment of `words` words.
std::string WithSegmentSize(std::string frame, uint32_t words) {
  uint64_t table = 0;
  std::memcpy(&table, frame.data() + 8, 8);
  SetWord(&frame, 1, (table & 0xFFFFFFFFu) | uint64_t{words} << 32);
  return frame;
}

std::string Reference(const std::string& header_frame, const std::string& record_frames,
                      uint32_t count) {
  return Preamble() + Chunk(ndt::format::ChunkKind::kHeader, header_frame, 1) +
         Chunk(ndt::format::ChunkKind::kRecords, record_frames, count);
}

// The command's stdout followed by "status N" (its exit status, 128 + N for signal N).
std::string StatusLine(const std::string& command) {
  return Run("sh -c \"" + command + "; echo status \\$?\"").out;
}

}  // namespace

TEST_CASE("a hostile pin reference never reaches the traced program", "[failopen]") {
  ndt::testing::TempDir dir;
  const std::string reference = (dir / "reference.ndt").string();
  const std::string plain = StatusLine(kVectorAdd);
  REQUIRE(Contains(plain, "checksum 664dc617a67a437d\nstatus 0"));

  std::vector<std::pair<std::string, std::string>> references = {
      {"a record's segment of 0xFFFFFFF0 words",
       Reference(HeaderFrame(), WithSegmentSize(OpFrame(), 0xFFFFFFF0u), 1)},
      {"the header's segment of 0xFFFFFFF0 words",
       Reference(WithSegmentSize(HeaderFrame(), 0xFFFFFFF0u), OpFrame(), 1)},
      {"a record's segment of 0 words", Reference(HeaderFrame(), WithSegmentSize(OpFrame(), 0), 1)},
  };
  {
    std::string frame = OpFrame();
    SetWord(&frame, 2, 0x7FFFFFFC00000000ull | (0x7FFFFFFFull << 2));  // far out-of-bounds root
    references.push_back({"a root pointer far outside its segment",
                          Reference(HeaderFrame(), frame, 1)});
  }
  // Random word and bit damage behind valid hashes, everywhere but the frame prefix.
  std::mt19937_64 random(16);
  const std::string op = OpFrame();
  for (int i = 0; i < 40; ++i) {
    std::string frame = op;
    const size_t words = frame.size() / 8;
    for (int k = 0; k < 1 + i % 4; ++k) {
      const size_t word = 1 + random() % (words - 1);
      if (i % 2 == 0) {
        SetWord(&frame, word, random());
      } else {
        frame[8 * word + random() % 8] ^= static_cast<char>(1u << (random() % 8));
      }
    }
    references.push_back({"damaged op frame " + std::to_string(i),
                          Reference(HeaderFrame(), frame, 1)});
  }

  for (const auto& [what, bytes] : references) {
    INFO(what);
    WriteFile(reference, bytes);
    const std::string traced =
        StatusLine("env LD_PRELOAD='" NDT_TRACER_LIB "' NDTRACE_PIN='" + reference +
                   "' NDTRACE_OUTPUT='" + (dir / "t.ndt").string() + "' " + kVectorAdd);
    CHECK(traced == plain);
  }
  // Through the command line as well.
  WriteFile(reference, references.front().second);
  const RunResult cli = Run(kNdtrace + " record --pin '" + reference + "' -o '" +
                            (dir / "c.ndt").string() + "' -- " + kVectorAdd);
  CHECK(cli.status != -1);
  CHECK(cli.status != 128 + 6);
  if (cli.status == 0) CHECK(cli.out == Run(kVectorAdd).out);
}

TEST_CASE("SIGTERM at 12 moments of a busy program ends it at once with a complete trace",
          "[failopen]") {
  // Most moments fall inside a hook, which may hold a lock closing the trace needs: the signal
  // is taken as the hook returns. (Waiting for the close inside the handler instead left the
  // trace incomplete whenever that lock was held.)
  ndt::testing::TempDir dir;
  for (int attempt = 0; attempt < 12; ++attempt) {
    const std::string trace = (dir / ("t" + std::to_string(attempt) + ".ndt")).string();
    const std::string delay = std::to_string(0.15 + 0.03 * attempt);
    INFO("attempt " << attempt << ", SIGTERM after " << delay << " s");
    const std::string command = "env LD_PRELOAD='" NDT_TRACER_LIB "' NDTRACE_OUTPUT='" + trace +
                                "' NDTRACE_QUIET=1 '" PROG_WORKERS
                                "' --iterations 100000000 & pid=\\$!; sleep " + delay +
                                "; kill -TERM \\$pid; wait \\$pid";
    CHECK(Run("sh -c \"" + command + "\"").status == 128 + 15);
    auto reader = ndt::format::TraceReader::Open(trace);
    REQUIRE(reader.ok());
    CHECK((*reader)->complete());
  }
}
