// Running the CUDA test programs (tests/programs/) on the stand-in device, under the tracer or
// not, and reading their traces back: what the tests in tests/tracer/ share.
//
// Compiled into a test with NDT_STANDIN_DIR (the stand-in libraries' directory) and NDTRACE_BIN
// defined (tests/CMakeLists.txt does it for every tests/tracer/ test).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "formats/records.h"
#include "formats/trace_reader.h"

namespace ndt::test {

using format::Argument;
using format::DevicePointer;
using format::OpRecord;
using format::Record;

struct RunResult {
  int status = -1;
  std::string out;
  std::string err;
};

inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/ndt_tracer_test_" +
         std::to_string(getpid()) + "_" + name;
}

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `command` through the shell with the stand-in libraries first on LD_LIBRARY_PATH.
inline RunResult Run(const std::string& command) {
  const std::string out = TempPath("stdout"), err = TempPath("stderr");
  const std::string line =
      "LD_LIBRARY_PATH='" NDT_STANDIN_DIR "' " + command + " >" + out + " 2>" + err;
  const int raw = std::system(line.c_str());
  RunResult result;
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  result.out = Slurp(out);
  result.err = Slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return result;
}

inline RunResult RecordRun(const std::string& trace, const std::string& program,
                    const std::string& options = "") {
  std::remove(trace.c_str());
  return Run(std::string("'" NDTRACE_BIN "' record ") + options + " -o '" + trace + "' -- '" +
             program + "'");
}

inline std::vector<Record> ReadAll(const std::string& path) {
  auto reader = ndt::format::TraceReader::Open(path);
  REQUIRE(reader.ok());
  CHECK((*reader)->complete());
  std::vector<Record> records;
  Record record;
  while ((*reader)->Next(&record)) records.push_back(record);
  return records;
}

inline std::vector<OpRecord> Ops(const std::vector<Record>& records) {
  std::vector<OpRecord> ops;
  for (const Record& record : records) {
    if (const auto* op = std::get_if<OpRecord>(&record)) ops.push_back(*op);
  }
  std::sort(ops.begin(), ops.end(),
            [](const OpRecord& a, const OpRecord& b) { return a.sequence < b.sequence; });
  return ops;
}

// The op with its times and raw addresses cleared: what must be equal between two runs.
inline OpRecord Masked(OpRecord op) {
  op.start_ns = op.end_ns = 0;
  for (Argument& argument : op.args) {
    if (auto* pointer = std::get_if<DevicePointer>(&argument.value)) pointer->raw_address = 0;
  }
  for (auto* digests : {&op.inputs, &op.outputs}) {
    for (auto& digest : *digests) digest.pointer.raw_address = 0;
  }
  return op;
}

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> NdtraceLines(const std::string& text) {
  std::vector<std::string> lines;
  for (const std::string& line : Lines(text)) {
    if (line.rfind("ndtrace:", 0) == 0) lines.push_back(line);
  }
  return lines;
}

}  // namespace ndt::test
