// Helpers shared by the libFuzzer targets: present fuzz bytes to TraceReader as a file
// without touching the disk, and read everything the reader will give.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/trace_reader.h"
#include "formats/writer_summary.h"

namespace ndt::fuzz {

// The fuzz bytes as a file (in memory), named by path() while this lives.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(memfd_create("ndt-fuzz", MFD_CLOEXEC)) {
    size_t done = 0;
    while (fd_ >= 0 && done < size) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  bool ok() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// Opens `bytes` as a trace through an in-memory file and drives every reader entry point.
inline void ReadEverything(const uint8_t* data, size_t size) {
  MemoryFile file(data, size);
  if (!file.ok()) return;
  const std::string& path = file.path();
  (void)format::TraceReader::ReadHeader(path);
  (void)format::ReadWriterSummary(path);
  auto reader = format::TraceReader::Open(path);
  if (reader.ok()) {
    format::TraceReader& r = **reader;
    format::Record record;
    while (r.Next(&record)) {
    }
    r.SeekToOp(1);
    (void)r.Next(&record);
    (void)r.FindOp(0);
    for (const format::ChunkInfo& chunk : r.chunks()) {
      if (chunk.kind == format::ChunkKind::kBlob) (void)r.ReadBlob(chunk.blob, 64 << 20);
    }
  }
}

}  // namespace ndt::fuzz
