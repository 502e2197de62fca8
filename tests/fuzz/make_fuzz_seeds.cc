// Writes the seed corpora of the fuzz targets, made by the real writer:
//   DIR/trace_file/    synthetic traces (closed, cut short, with blobs)
//   DIR/trace_index/   the decompressed index payloads of those traces
//   DIR/record_decode/ single record frames of every record type
//   DIR/pin_table/     the synthetic traces and a pin reference (fingerprinted ops with their
//                      algorithm choices and RNG states, as the library hooks record them)
//   DIR/live_verify/   the same, read as live verify's reference
// Usage: make_fuzz_seeds DIR
#include <zstd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "formats/byte_order.h"
#include "formats/container.h"
#include "formats/record_codec.h"
#include "formats/trace_reader.h"
#include "formats/trace_writer.h"
#include "tools/synthetic_trace.h"

namespace {

using namespace ndt;
namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The index payload of a closed trace, decompressed.
std::string IndexPayload(const std::string& file) {
  const std::string_view footer(file.data() + file.size() - format::container::kFooterBytes,
                                format::container::kFooterBytes);
  const auto index_offset = format::container::DecodeFooter(footer);
  if (!index_offset) return {};
  const char* header = file.data() + *index_offset;
  const uint32_t raw = format::LoadLe32(header + 24);
  const uint32_t compressed = format::LoadLe32(header + 28);
  std::string payload(raw, '\0');
  const size_t n = ZSTD_decompress(payload.data(), raw,
                                   header + format::container::kChunkHeaderBytes, compressed);
  return ZSTD_isError(n) ? std::string() : payload;
}

// A reference as `--pin` reads it: library ops with fingerprints, algorithm choices (one
// fingerprint timed with several candidates, then kept) and RNG states.
bool WritePinReference(const fs::path& path) {
  tools::SyntheticOptions options;
  format::WriterOptions writer_options;
  writer_options.chunk_bytes = 1024;
  auto writer = format::TraceWriter::Create(path, tools::SyntheticHeader(options), writer_options);
  if (!writer.ok()) return false;
  for (uint64_t i = 0; i < 24; ++i) {
    format::OpRecord op;
    op.sequence = i;
    op.kind = format::OpKind::kCublasGemm;
    op.name = i % 3 == 2 ? "curandGenerateUniform" : "cublasGemmEx";
    op.args.push_back({"fingerprint", "m=" + std::to_string(64 << (i % 4)) + " n=64 k=64 f32"});
    if (i % 3 == 2) {
      format::RngState rng;
      rng.generator = "philox4_32_10";
      rng.seed = 1234;
      rng.offset = 4096 * i;
      op.rng = rng;
    } else {
      format::AlgorithmChoice choice;
      choice.library = "cublas";
      choice.id = static_cast<int64_t>(i % 5);
      choice.name = "algo" + std::to_string(i % 5);
      choice.determinism =
          i % 2 == 0 ? format::Determinism::kDeterministic : format::Determinism::kNondeterministic;
      op.algorithm = choice;
    }
    (*writer)->Append(op);
  }
  return (*writer)->Close().ok();
}

int Run(const fs::path& dir) {
  for (const char* sub :
       {"trace_file", "trace_index", "record_decode", "pin_table", "live_verify"}) {
    fs::create_directories(dir / sub);
  }
  const fs::path scratch = dir / "scratch.ndt";
  int traces = 0;
  for (int variant = 0; variant < 3; ++variant) {
    tools::SyntheticOptions options;
    options.steps = 1 + variant;
    options.threads = 1 + variant % 2;
    options.seed = 7 + variant;
    format::WriterOptions writer_options;
    writer_options.chunk_bytes = 2048;
    auto writer =
        format::TraceWriter::Create(scratch, tools::SyntheticHeader(options), writer_options);
    if (!writer.ok()) {
      std::fprintf(stderr, "error: %s\n", writer.status().message().c_str());
      return 2;
    }
    if (variant == 2) {
      const std::string blob(5000, 'b');
      (void)(*writer)->PutBlob(std::as_bytes(std::span(blob)));
    }
    if (Status status = tools::WriteSyntheticTrace(**writer, options); !status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      return 2;
    }
    if (Status status = (*writer)->Close(); !status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      return 2;
    }
    const std::string bytes = ReadFile(scratch);
    const std::string name = "synthetic_" + std::to_string(variant);
    WriteFile(dir / "trace_file" / name, bytes);
    WriteFile(dir / "pin_table" / name, bytes);
    WriteFile(dir / "live_verify" / name, bytes);
    WriteFile(dir / "trace_file" / (name + "_cut"), bytes.substr(0, bytes.size() * 2 / 3));
    WriteFile(dir / "trace_index" / name, IndexPayload(bytes));
    ++traces;

    auto reader = format::TraceReader::Open(scratch);
    if (!reader.ok()) return 2;
    format::Record record;
    bool seen[std::variant_size_v<format::Record>] = {};
    while ((*reader)->Next(&record)) {
      if (seen[record.index()]) continue;
      seen[record.index()] = true;
      std::string frame;
      format::codec::AppendRecord(record, &frame);
      WriteFile(dir / "record_decode" /
                    (name + "_" + format::RecordTypeName(record)),
                frame);
    }
  }
  if (!WritePinReference(scratch)) return 2;
  const std::string pin = ReadFile(scratch);
  WriteFile(dir / "pin_table" / "pin_reference", pin);
  WriteFile(dir / "live_verify" / "pin_reference", pin);
  fs::remove(scratch);
  std::fprintf(stderr, "wrote seeds from %d synthetic traces under %s\n", traces,
               dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds DIR\n");
    return 2;
  }
  return Run(argv[1]);
}
