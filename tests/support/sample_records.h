// Records and traces for formats tests: one of every record type with every field set,
// and small traces written through the real writer.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"
#include "formats/trace_writer.h"

namespace ndt::testing {

inline format::TraceHeader SampleHeader() {
  format::TraceHeader header;
  header.tool_version = "0.1.0";
  header.command_line = {"python", "train.py", "--seed", "1"};
  header.host = "testhost";
  header.pid = 4242;
  header.rank = 3;
  header.start_unix_ns = 1'700'000'000'000'000'000ull;
  format::GpuInfo gpu;
  gpu.ordinal = 0;
  gpu.name = "stand-in";
  gpu.uuid = std::string("\x01\x02\x00\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10", 16);
  gpu.cc_major = 9;
  gpu.sm_count = 132;
  gpu.memory_bytes = 141ull << 30;
  gpu.simulated = true;
  header.gpus = {gpu};
  header.versions = {13000, 13000, 91000, 130000, 22700, 10400};
  header.environment = {{"CUBLAS_WORKSPACE_CONFIG", ":4096:8"}};
  header.policy = format::Policy::kEnforce;
  header.notes = {"written by a test"};
  return header;
}

inline format::OpRecord SampleOp(uint64_t sequence, uint32_t thread = 0) {
  format::OpRecord op;
  op.sequence = sequence;
  op.thread_id = thread;
  op.stream_id = 1 + sequence % 3;
  op.kind = format::OpKind::kKernelLaunch;
  op.name = "void at::native::index_add_kernel<float>(float*, long const*, float const*)";
  op.args.push_back({"grid", format::Argument::Dims{128, 1, 1}});
  op.args.push_back({"block", format::Argument::Dims{256, 1, 1}});
  op.args.push_back({"self", format::DevicePointer{3, 256, 0x7f0000000100}});
  op.args.push_back({"n", uint64_t{4096}});
  op.outputs.push_back({"self", {3, 256, 0x7f0000000100}, 16384, {sequence, ~sequence},
                        format::DType::kF32, {}});
  op.start_ns = 1000 * sequence;
  op.end_ns = 1000 * sequence + 400;
  return op;
}

// One record of every type, every field of interest set.
inline std::vector<format::Record> EveryRecordType() {
  std::vector<format::Record> records;
  format::OpRecord op = SampleOp(7, 2);
  op.kind = format::OpKind::kCudnnBackendExecute;
  op.algorithm = format::AlgorithmChoice{"cudnn", 42, "engine 42", {{1, 2}, {3, 4}},
                                         std::string("\x00\x01", 2),
                                         format::Determinism::kNondeterministic,
                                         format::ChoiceSource::kBenchmark};
  op.rng = format::RngState{"philox", 1234, 5678, 9, "PSEUDO_DEFAULT", false};
  op.args.push_back({"alpha", 1.5});
  op.args.push_back({"delta", int64_t{-3}});
  op.args.push_back({"mode", std::string("CUDNN_CROSS_CORRELATION")});
  op.args.push_back({"params", format::Argument::Bytes{std::string("\x00\xff\x10", 3)}});
  op.args.push_back({"unset", {}});
  op.inputs.push_back({"x", {1, 0, 0x1000}, 64, {1, 2}, format::DType::kBF16,
                       {16, -1.0, 2.0, 3.5, 1, 0}});
  op.status = 3;
  op.module_id = 5;
  op.device_ordinal = 1;
  records.push_back(op);
  records.push_back(format::AllocationRecord{9, format::AllocationEvent::kFree, 1 << 20,
                                             "cuMemFreeAsync", 1, 0x7f00deadbeef, 12, 2});
  records.push_back(format::ModuleLoadRecord{2, "cuModuleLoadData", 9000, {11, 12},
                                             {"kernel_a", "kernel_b"}});
  records.push_back(format::NvtxRangeRecord{1, true, "aten::conv2d", 40, 5000,
                                            format::NvtxEvent::kPush, (1ull << 32) | 1, 0, "", 0});
  records.push_back(format::PolicyDecisionRecord{
      812, "cudnn", "replaced bwd-filter algo 0 by 1",
      format::AlgorithmChoice{"cudnn", 0, "ALGO_0", {}, {}, format::Determinism::kNondeterministic,
                              format::ChoiceSource::kHeuristic},
      format::AlgorithmChoice{"cudnn", 1, "ALGO_1", {}, {}, format::Determinism::kDeterministic,
                              format::ChoiceSource::kEnforced},
      true});
  records.push_back(format::TracerNote{format::Severity::kWarning, "disabled: disk full", 99, 7});
  records.push_back(format::DroppedRecords{4, 100, 6400, "buffers full"});
  records.push_back(format::StateDigestRecord{
      50, "every 50 ops", {{"", {1, 0, 0}, 4096, {5, 6}, format::DType::kUnknown, {}}}, 77});
  records.push_back(format::PythonStackRecord{
      7, 2, 1, 3, format::PythonStackStatus::kCaptured,
      {{"train.py", 42, "step"}, {"train.py", 90, "<module>"}}, "", "3.11"});
  records.push_back(format::GpuActivityRecord{format::GpuActivityKind::kMemcpy, 7, 6, 1000,
                                              2500, 3});
  return records;
}

// A fresh path in /dev/shm (or the temporary directory), removed by the destructor.
class TempPath {
 public:
  explicit TempPath(const std::string& name) {
    // Tests that rewrite a file thousands of times run far faster in memory.
    const std::filesystem::path dir =
        std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                                                  : std::filesystem::temp_directory_path();
    path_ = (dir /
             ("ndt_" + std::to_string(::getpid()) + "_" + name))
                .string();
    std::filesystem::remove_all(path_);
  }
  ~TempPath() { std::filesystem::remove_all(path_); }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Every record of a trace in file order; damage is left in the reader.
inline std::vector<format::Record> ReadAll(format::TraceReader& reader) {
  std::vector<format::Record> records;
  format::Record record;
  while (reader.Next(&record)) records.push_back(record);
  return records;
}

}  // namespace ndt::testing
