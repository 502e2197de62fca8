// Helpers shared by the libFuzzer targets: present fuzz bytes to TraceReader as a file
// without touching the disk, and read everything the reader will give.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/trace_reader.h"

namespace ndt::fuzz {

// Opens `bytes` as a trace through an in-memory file and drives every reader entry point.
inline void ReadEverything(const uint8_t* data, size_t size) {
  const int fd = memfd_create("ndt-fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  (void)format::TraceReader::ReadHeader(path);
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
  ::close(fd);
}

}  // namespace ndt::fuzz
