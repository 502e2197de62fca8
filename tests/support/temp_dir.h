// A fresh directory under the system's temporary directory, removed with its contents.
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "support/sample_records.h"

namespace ndt::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ndtrace_test_XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Writes `records` as the closed trace `name` in `dir`, with the sample header; its path.
inline std::string WriteTrace(const TempDir& dir, const std::string& name,
                              const std::vector<format::Record>& records) {
  const std::string path = (dir / name).string();
  auto writer = format::TraceWriter::Create(path, SampleHeader());
  REQUIRE(writer.ok());
  for (const format::Record& record : records) (*writer)->Append(record);
  REQUIRE((*writer)->Close().ok());
  return path;
}

}  // namespace ndt::testing
