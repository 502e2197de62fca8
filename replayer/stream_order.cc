#include "replayer/stream_order.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string_view>

#include "formats/records.h"
#include "formats/trace_reader.h"

namespace ndt::replay {
namespace {

constexpr uint32_t kLegacyStream = 0;
constexpr uint64_t kNonBlocking = 1;  // CU_STREAM_NON_BLOCKING

const uint64_t* Unsigned(const format::OpRecord& op, std::string_view name) {
  for (const format::Argument& argument : op.args) {
    if (argument.name == name) return std::get_if<uint64_t>(&argument.value);
  }
  return nullptr;
}

bool Captured(const format::OpRecord& op) {
  return Unsigned(op, "capturedInto") != nullptr;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// A copy made by a synchronous call (cuMemcpyHtoD_v2, cuMemcpy2D_v2, ...), not an Async one.
bool SynchronousCopy(const format::OpRecord& op) {
  return op.kind == format::OpKind::kMemcpy &&
         std::string_view(op.name).find("Async") == std::string_view::npos;
}

}  // namespace

std::optional<std::string> UnorderedStreams(const std::string& path_a, const Divergence& d) {
  if (d.klass != DivergenceClass::kPropagated || !d.root) return std::nullopt;
  const uint64_t write = d.root->sequence, read = d.op.sequence;
  const uint32_t writer_stream = d.root->stream_id, reader_stream = d.op.stream_id;
  if (writer_stream == reader_stream || write >= read) return std::nullopt;
  auto reader = format::TraceReader::Open(path_a);
  if (!reader.ok()) return std::nullopt;
  std::set<uint32_t> non_blocking;
  std::set<uint64_t> events_after_write;
  bool ordered = false;
  bool legacy_between = false;
  format::Record record;
  // Records come in chunk order, not sequence order: events recorded after the write are
  // collected first, the waits on them checked after the pass.
  struct Wait {
    uint64_t event;
  };
  std::vector<Wait> waits;
  while (!ordered && (*reader)->Next(&record)) {
    const auto* op = std::get_if<format::OpRecord>(&record);
    if (op == nullptr) continue;
    if ((op->name == "cuStreamCreate" || op->name == "cuStreamCreateWithPriority") &&
        op->status == 0) {
      const uint64_t* flags = Unsigned(*op, "flags");
      if (flags != nullptr && (*flags & kNonBlocking) != 0) non_blocking.insert(op->stream_id);
      continue;
    }
    if (op->sequence == write) {
      if (Captured(*op) || SynchronousCopy(*op) || op->kind == format::OpKind::kGraphLaunch) {
        ordered = true;
      }
      continue;
    }
    if (op->sequence == read) {
      if (Captured(*op) || op->kind == format::OpKind::kGraphLaunch) ordered = true;
      continue;
    }
    if (op->sequence <= write || op->sequence >= read) continue;
    if (op->kind == format::OpKind::kSynchronize) {
      ordered = true;
    } else if (StartsWith(op->name, "cuEventRecord")) {
      if (const uint64_t* event = Unsigned(*op, "event")) events_after_write.insert(*event);
    } else if (StartsWith(op->name, "cuStreamWaitEvent") && op->stream_id == reader_stream) {
      if (const uint64_t* event = Unsigned(*op, "event")) waits.push_back({*event});
    } else if (op->stream_id == kLegacyStream && op->kind != format::OpKind::kOther) {
      legacy_between = true;  // work on the legacy stream (not a handle or stream setting)
    }
  }
  if (ordered) return std::nullopt;
  for (const Wait& wait : waits) {
    if (events_after_write.count(wait.event) != 0) return std::nullopt;
  }
  const auto blocking = [&](uint32_t stream) {
    return stream != kLegacyStream && non_blocking.count(stream) == 0;
  };
  if ((writer_stream == kLegacyStream && blocking(reader_stream)) ||
      (reader_stream == kLegacyStream && blocking(writer_stream)) || legacy_between) {
    return std::nullopt;
  }
  return "nothing orders op " + std::to_string(write) + " (" + d.root->name +
         ", the write) before op " + std::to_string(read) + " (" + d.op.name +
         ", the read) on another stream: no event recorded after the write that the reading "
         "stream waited for, no synchronisation between them — a race between streams: the "
         "read may come before, during or after the write";
}

}  // namespace ndt::replay
