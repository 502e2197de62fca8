// TraceReader: index from the footer or from a scan, then chunk-at-a-time iteration.
//
// Every length read from the file is checked against the limits of container.h and the
// file's size before anything is allocated or read; every chunk's hash is checked before
// its payload is decompressed; zstd runs with a bounded window into a buffer of exactly
// the declared size. Damage is recorded with its byte range, and reading resumes at the
// next chunk the index (or a search for the chunk magic) finds.
#include "formats/trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
// ZSTD_d_forceIgnoreChecksum is experimental (zstd 1.4.7 and later); a zstd without it refuses
// the parameter and keeps verifying.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <unordered_set>

#include "formats/byte_order.h"
#include "formats/record_codec.h"
#include "formats/writer_summary.h"

namespace ndt::format {
namespace {

using container::ChunkHeader;
using container::kChunkHeaderBytes;

std::string Range(uint64_t begin, uint64_t end) {
  return "bytes " + std::to_string(begin) + ".." + std::to_string(end);
}

ChunkInfo InfoFrom(const ChunkHeader& header, uint64_t offset) {
  ChunkInfo info;
  info.offset = offset;
  info.kind = header.kind;
  info.writer_id = header.writer_id;
  info.sequence = header.sequence;
  info.count = header.count;
  info.compressed_size = header.compressed_size;
  info.uncompressed_size = header.uncompressed_size;
  if (header.kind == ChunkKind::kRecords) {
    info.first_op = header.tag0;
    info.last_op = header.tag1;
  } else if (header.kind == ChunkKind::kBlob) {
    info.blob = {header.tag0, header.tag1};
  }
  return info;
}

}  // namespace

// A growable buffer that is never zero-filled: a chunk is decompressed (a payload read)
// straight into it. resize() does not keep the contents when it grows.
template <typename T>
class RawBuffer {
 public:
  RawBuffer() = default;
  RawBuffer(RawBuffer&& other) noexcept { *this = std::move(other); }
  RawBuffer& operator=(RawBuffer&& other) noexcept {  // leaves `other` empty, not stale
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    return *this;
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  void clear() { size_ = 0; }
  void resize(size_t n) {
    if (n > capacity_) {
      data_ = std::make_unique_for_overwrite<T[]>(n);
      capacity_ = n;
    }
    size_ = n;
  }

 private:
  std::unique_ptr<T[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};
using Words = RawBuffer<uint64_t>;

// A zstd context with the reader's window limit and the buffer compressed payloads are read
// into: one per thread that decompresses (the reader's own, its read-ahead thread's). A frame's
// content checksum is not verified: the chunk's hash has covered every byte decompressed
// (formats/README.md, "Container"), and verifying it cost 6-8 % of reading.
struct Decompressor {
  Decompressor() : dctx(ZSTD_createDCtx()) {
    ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, container::kZstdWindowLogMax);
    ZSTD_DCtx_setParameter(dctx, ZSTD_d_forceIgnoreChecksum, ZSTD_d_ignoreChecksum);
  }
  ~Decompressor() { ZSTD_freeDCtx(dctx); }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
  ZSTD_DCtx* dctx;
  RawBuffer<char> compressed;
};

uint64_t ChunkInfo::end() const { return offset + kChunkHeaderBytes + compressed_size; }

class TraceReader::Impl {
 public:
  Impl(std::string path, int fd, uint64_t size) : path_(std::move(path)), fd_(fd), size_(size) {
    blob_hash_ = XXH3_createState();
  }
  ~Impl() {
    ahead_.reset();  // its thread reads the file
    XXH3_freeState(blob_hash_);
    ::close(fd_);
  }

  // The preamble and the header chunk; `header_end` is the offset of the byte after it.
  Status OpenHeader(uint64_t* header_end) {
    std::string preamble;
    NDT_RETURN_IF_ERROR(ReadAt(0, std::min<uint64_t>(size_, container::kPreambleBytes), &preamble));
    NDT_RETURN_IF_ERROR(container::CheckPreamble(preamble));
    NDT_RETURN_IF_ERROR(ReadHeaderChunk(header_end));
    // The preamble's version is outside every hash: the header (format version 1 on) says it
    // again, under its chunk's hash.
    const uint32_t version = LoadLe32(preamble.data() + 8);
    if (header_.format_version != version) {
      return Status::Error(path_ + ": trace header damaged: the preamble says format version " +
                           std::to_string(version) + ", the header " +
                           std::to_string(header_.format_version));
    }
    return Status::Ok();
  }

  Status Open() {
    uint64_t header_end = 0;
    NDT_RETURN_IF_ERROR(OpenHeader(&header_end));
    if (!LoadIndexFromFooter(header_end)) ScanChunks(header_end);
    Rewind();
    return Status::Ok();
  }

  const TraceHeader& header() const { return header_; }
  bool complete() const { return complete_; }
  uint64_t truncated_tail_bytes() const { return truncated_tail_; }
  uint64_t file_bytes() const { return size_; }
  const std::vector<ChunkInfo>& chunks() const { return chunks_; }
  const std::vector<TraceDamage>& damage() const { return damage_; }
  const std::optional<WriterSummary>& summary() const { return summary_; }

  // The summary of a closed trace from its footer, its index chunk's header and the summary's
  // chunk, never the index's payload or the body; nullopt when there is none to be had.
  std::optional<WriterSummary> ReadSummaryOnly(uint64_t header_end) {
    if (size_ < header_end + container::kFooterBytes) return std::nullopt;
    std::string footer;
    if (!ReadAt(size_ - container::kFooterBytes, container::kFooterBytes, &footer).ok()) {
      return std::nullopt;
    }
    const std::optional<uint64_t> index_offset = container::DecodeFooter(footer);
    if (!index_offset || *index_offset < header_end ||
        *index_offset >= size_ - container::kFooterBytes) {
      return std::nullopt;
    }
    std::string header_bytes;
    StatusOr<ChunkHeader> header = ReadChunkHeader(*index_offset, &header_bytes);
    if (!header.ok() || header->kind != ChunkKind::kIndex ||
        *index_offset + kChunkHeaderBytes + header->compressed_size + container::kFooterBytes !=
            size_ ||
        header->tag1 != codec::kSummaryIndexMarker || header->tag0 < header_end ||
        header->tag0 >= *index_offset) {
      return std::nullopt;
    }
    WriterSummary summary;
    uint64_t end = 0;
    if (!LoadSummaryAt(header->tag0, &summary, &end).ok() || end != *index_offset) {
      return std::nullopt;
    }
    return summary;
  }

  bool Next(Record* record) {
    while (true) {
      if (frame_pos_ < frames_.size()) {
        size_t consumed = 0;
        uint32_t type = 0;
        if (pass_over_ != 0 &&
            codec::PeekRecordType(frames_.data() + frame_pos_, frames_.size() - frame_pos_,
                                  &type, &consumed)
                .ok() &&
            (pass_over_ >> type & 1) != 0) {
          frame_pos_ += consumed;
          continue;
        }
        const Status status = codec::DecodeRecord(frames_.data() + frame_pos_,
                                                  frames_.size() - frame_pos_, record, &consumed);
        if (!status.ok()) {
          const ChunkInfo& chunk = chunks_[chunk_pos_ - 1];
          AddDamage(chunk.offset, chunk.end(),
                    "chunk " + std::to_string(chunk_pos_ - 1) + ", record at word " +
                        std::to_string(frame_pos_) + ": " + status.message());
          frame_pos_ = frames_.size();
          continue;
        }
        frame_pos_ += consumed;
        if (const auto* op = std::get_if<OpRecord>(record); op && op->sequence < skip_below_) {
          continue;
        }
        return true;
      }
      if (!LoadNextRecordsChunk()) return false;
    }
  }

  void ReadAheadOn(bool on) {
    read_ahead_ = on;
    if (!on) ahead_.reset();
  }

  void Rewind() {
    ahead_.reset();  // it loads from the old position
    chunk_pos_ = 0;
    frames_.clear();
    frame_pos_ = 0;
    skip_below_ = 0;
    blob_ = OpenBlob{};
    blobs_from_start_ = true;
  }

  void PassOver(uint32_t record_types) { pass_over_ = record_types; }

  void SeekToOp(uint64_t sequence) {
    Rewind();
    skip_below_ = sequence;
    blobs_from_start_ = false;  // the parts of a blob before the seek go unseen
    while (chunk_pos_ < chunks_.size()) {
      const ChunkInfo& chunk = chunks_[chunk_pos_];
      if (chunk.kind == ChunkKind::kRecords && chunk.first_op != kNoOp &&
          chunk.last_op >= sequence) {
        break;
      }
      ++chunk_pos_;
    }
  }

  std::optional<OpRecord> FindOp(uint64_t sequence) {
    Words frames;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      const ChunkInfo& chunk = chunks_[i];
      if (chunk.kind != ChunkKind::kRecords || chunk.first_op == kNoOp ||
          sequence < chunk.first_op || sequence > chunk.last_op) {
        continue;
      }
      if (!LoadPayload(chunk, &frames)) continue;
      size_t pos = 0;
      Record record;
      while (pos < frames.size()) {
        size_t consumed = 0;
        if (!codec::DecodeRecord(frames.data() + pos, frames.size() - pos, &record, &consumed)
                 .ok()) {
          break;  // Next() reports it when iteration reaches this chunk
        }
        pos += consumed;
        if (auto* op = std::get_if<OpRecord>(&record); op && op->sequence == sequence) {
          return std::move(*op);
        }
      }
    }
    return std::nullopt;
  }

  StatusOr<std::string> ReadBlob(const BlobId& id, uint64_t max_bytes) {
    std::string blob;
    uint64_t total = 0;
    uint64_t filled = 0;
    bool seen = false;
    Words payload;
    for (const ChunkInfo& chunk : chunks_) {
      if (chunk.kind != ChunkKind::kBlob || !(chunk.blob == id)) continue;
      if (!LoadPayload(chunk, &payload)) continue;
      const size_t bytes = chunk.uncompressed_size;
      if (bytes < container::kBlobPartPrefixBytes) {
        return Status::Error(path_ + ": blob part at " + std::to_string(chunk.offset) +
                             " is too short");
      }
      const char* p = reinterpret_cast<const char*>(payload.data());
      const uint64_t part_total = LoadLe64(p);
      const uint64_t part_offset = LoadLe64(p + 8);
      const uint64_t part_bytes = bytes - container::kBlobPartPrefixBytes;
      if (!seen) {
        if (part_total > max_bytes) {
          return Status::Error(path_ + ": blob of " + std::to_string(part_total) +
                               " bytes exceeds the limit of " + std::to_string(max_bytes));
        }
        total = part_total;
        blob.assign(total, '\0');
        seen = true;
      }
      if (part_total != total || part_offset > total || part_bytes > total - part_offset) {
        return Status::Error(path_ + ": blob part at " + std::to_string(chunk.offset) +
                             " does not fit its blob");
      }
      std::memcpy(blob.data() + part_offset, p + container::kBlobPartPrefixBytes, part_bytes);
      filled += part_bytes;
    }
    if (!seen) return Status::Error(path_ + ": no intact blob with that id");
    const XXH128_hash_t hash = XXH3_128bits(blob.data(), blob.size());
    if (filled != total || hash.low64 != id.lo || hash.high64 != id.hi) {
      return Status::Error(path_ + ": blob is incomplete or damaged");
    }
    return blob;
  }

 private:
  static constexpr uint64_t kNoOp = std::numeric_limits<uint64_t>::max();
  static constexpr uint32_t kWriterSelfId = std::numeric_limits<uint32_t>::max();

  Status ReadAt(uint64_t offset, uint64_t bytes, std::string* out) {
    if (offset > size_ || bytes > size_ - offset) {
      return Status::Error(path_ + ": read past the end of the file");
    }
    out->resize(bytes);
    return ReadInto(offset, bytes, out->data());
  }
  Status ReadAt(uint64_t offset, uint64_t bytes, RawBuffer<char>* out) {
    if (offset > size_ || bytes > size_ - offset) {
      return Status::Error(path_ + ": read past the end of the file");
    }
    out->resize(bytes);
    return ReadInto(offset, bytes, out->data());
  }
  Status ReadInto(uint64_t offset, uint64_t bytes, char* out) {
    uint64_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pread(fd_, out + done, bytes - done,
                                static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return Status::Error(path_ + ": read failed at byte " + std::to_string(offset + done) +
                             ": " + (n == 0 ? "unexpected end of file" : std::strerror(errno)));
      }
      done += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  // Lists damage; past kMaxDamageListed ranges (a file of garbage), the last entry stands for
  // all the rest, so memory stays bounded.
  void AddDamage(uint64_t begin, uint64_t end, std::string what) {
    if (damage_.size() < kMaxDamageListed) {
      damage_.push_back({begin, end, std::move(what)});
      return;
    }
    TraceDamage& rest = damage_.back();
    rest.begin = std::min(rest.begin, begin);
    rest.end = std::max(rest.end, end);
    rest.what =
        std::to_string(++unlisted_damage_ + 1) + " more damaged ranges, not listed one by one";
  }

  // Reads and checks the chunk header at `offset`: the header must decode and the chunk
  // must lie inside the file.
  StatusOr<ChunkHeader> ReadChunkHeader(uint64_t offset, std::string* bytes) {
    if (offset + kChunkHeaderBytes > size_) return Status::Error("chunk header cut short");
    NDT_RETURN_IF_ERROR(ReadAt(offset, kChunkHeaderBytes, bytes));
    StatusOr<ChunkHeader> header = container::DecodeChunkHeader(*bytes);
    if (!header.ok()) return header;
    if (header->compressed_size > size_ - offset - kChunkHeaderBytes) {
      return Status::Error("chunk extends past the end of the file");
    }
    return header;
  }

  // Reads, verifies and decompresses a chunk's payload into whole words, with `with`'s zstd
  // context and buffer (the reader's own unless given: the read-ahead thread has its own).
  Status ReadPayload(uint64_t offset, const std::string& header_bytes, const ChunkHeader& header,
                     Words* out, Decompressor* with = nullptr) {
    Decompressor& d = with != nullptr ? *with : decompressor_;
    NDT_RETURN_IF_ERROR(ReadAt(offset + kChunkHeaderBytes, header.compressed_size, &d.compressed));
    if (!container::ChunkHashMatches(
            header_bytes, std::string_view(d.compressed.data(), d.compressed.size()))) {
      return Status::Error("checksum mismatch");
    }
    const unsigned long long declared =
        ZSTD_getFrameContentSize(d.compressed.data(), d.compressed.size());
    if (declared != header.uncompressed_size) {
      return Status::Error("compressed frame does not declare the chunk's size");
    }
    out->resize((header.uncompressed_size + 7) / 8);
    if (header.uncompressed_size % 8 != 0) out->data()[out->size() - 1] = 0;  // no stale tail
    const size_t n = ZSTD_decompressDCtx(d.dctx, out->data(), header.uncompressed_size,
                                         d.compressed.data(), d.compressed.size());
    if (ZSTD_isError(n)) {
      return Status::Error(std::string("decompression failed: ") + ZSTD_getErrorName(n));
    }
    if (n != header.uncompressed_size) return Status::Error("decompressed size mismatch");
    return Status::Ok();
  }

  // Reads a chunk listed in chunks_, checked against its index entry, into `out`. Reads only
  // what Open left unchanged: the read-ahead thread calls it too, with its own `with`.
  Status LoadChunk(const ChunkInfo& chunk, Words* out, Decompressor* with = nullptr) {
    std::string header_bytes;
    StatusOr<ChunkHeader> header = ReadChunkHeader(chunk.offset, &header_bytes);
    if (!header.ok()) return header.status();
    if (header->kind != chunk.kind || header->sequence != chunk.sequence ||
        header->compressed_size != chunk.compressed_size) {
      return Status::Error("chunk does not match its index entry");
    }
    return ReadPayload(chunk.offset, header_bytes, *header, out, with);
  }

  // Lists a chunk that could not be loaded as damage (once, however often iterated).
  void ChunkDamaged(const ChunkInfo& chunk, const Status& status) {
    if (damaged_chunks_.insert_unique(chunk.offset)) {
      AddDamage(chunk.offset, chunk.end(),
                std::string(ChunkKindName(chunk.kind)) + " chunk: " + status.message());
    }
  }

  // Loads a chunk listed in chunks_; on failure records the damage and returns false.
  bool LoadPayload(const ChunkInfo& chunk, Words* out) {
    const Status status = LoadChunk(chunk, out);
    if (!status.ok()) ChunkDamaged(chunk, status);
    return status.ok();
  }

  // Whether a verified chunk is the writer's summary: a blob of the writer's own whose content
  // is one frame of kSummaryRecordType.
  static bool IsSummaryChunk(const ChunkHeader& header, const Words& payload) {
    if (header.kind != ChunkKind::kBlob || header.writer_id != kWriterSelfId ||
        header.count != 0 || header.uncompressed_size < container::kBlobPartPrefixBytes + 8) {
      return false;
    }
    const char* p = reinterpret_cast<const char*>(payload.data());
    return LoadLe32(p + container::kBlobPartPrefixBytes + 4) == codec::kSummaryRecordType;
  }

  // Decodes a summary chunk's verified payload: its blob prefix and id, then the frame.
  static Status DecodeSummaryPayload(const ChunkHeader& header, const Words& payload,
                                     WriterSummary* out) {
    const uint64_t bytes = header.uncompressed_size;
    const uint64_t frame_bytes = bytes - container::kBlobPartPrefixBytes;
    const char* p = reinterpret_cast<const char*>(payload.data());
    if (bytes < container::kBlobPartPrefixBytes + 8 || frame_bytes % 8 != 0 ||
        LoadLe64(p) != frame_bytes || LoadLe64(p + 8) != 0) {
      return Status::Error("its blob prefix does not fit its size");
    }
    const XXH128_hash_t id = XXH3_128bits(p + container::kBlobPartPrefixBytes, frame_bytes);
    if (id.low64 != header.tag0 || id.high64 != header.tag1) {
      return Status::Error("its bytes do not match its id");
    }
    size_t consumed = 0;
    NDT_RETURN_IF_ERROR(codec::DecodeSummary(payload.data() + container::kBlobPartPrefixBytes / 8,
                                             frame_bytes / 8, out, &consumed));
    if (consumed != frame_bytes / 8) return Status::Error("bytes after its frame");
    return Status::Ok();
  }

  // Reads, verifies and decodes the summary chunk at `offset`; `*end`: the byte after it.
  Status LoadSummaryAt(uint64_t offset, WriterSummary* out, uint64_t* end) {
    std::string header_bytes;
    StatusOr<ChunkHeader> header = ReadChunkHeader(offset, &header_bytes);
    if (!header.ok()) return header.status();
    Words payload;
    NDT_RETURN_IF_ERROR(ReadPayload(offset, header_bytes, *header, &payload));
    if (!IsSummaryChunk(*header, payload)) return Status::Error("not a writer summary");
    NDT_RETURN_IF_ERROR(DecodeSummaryPayload(*header, payload, out));
    *end = offset + kChunkHeaderBytes + header->compressed_size;
    return Status::Ok();
  }

  bool LoadNextRecordsChunk() {
    frames_.clear();
    frame_pos_ = 0;
    if (read_ahead_ && ahead_ == nullptr && chunk_pos_ < chunks_.size()) {
      ahead_ = std::make_unique<ReadAhead>(*this, chunk_pos_);
    }
    while (chunk_pos_ < chunks_.size()) {
      const ChunkInfo& chunk = chunks_[chunk_pos_++];
      if (chunk.kind != ChunkKind::kBlob && chunk.kind != ChunkKind::kRecords) continue;
      Words& into = chunk.kind == ChunkKind::kBlob ? blob_payload_ : frames_;
      Status status;
      if (ahead_ != nullptr) {
        status = ahead_->Take(&into);  // chunk_pos_ - 1: the thread loads them in this order
      } else {
        status = LoadChunk(chunk, &into);
      }
      if (!status.ok()) ChunkDamaged(chunk, status);
      if (chunk.kind == ChunkKind::kBlob) {
        CheckBlobPart(chunk, status.ok());
      } else if (status.ok()) {
        frames_.resize(chunk.uncompressed_size / 8);  // frames are whole words
        return true;
      }
    }
    EndBlob(/*at_end=*/true);
    return false;
  }

  // Blobs are checked as iteration passes them, like records: every part's hash, size and
  // place in its blob, and each whole blob against its id. The writer stores a blob's parts
  // one after another under one lock (records of other threads may fall between them), so
  // one running hash suffices.
  // `loaded`: its payload is in blob_payload_ (else it was reported as damage).
  void CheckBlobPart(const ChunkInfo& chunk, bool loaded) {
    if (!loaded) {
      if (!blob_.open || !(blob_.id == chunk.blob)) {
        EndBlob(/*at_end=*/false);
        blob_ = OpenBlob{.open = true, .id = chunk.blob};
      }
      blob_.broken = true;  // its later parts are not reported again
      return;
    }
    const auto damage = [&](const std::string& why) {
      if (damaged_chunks_.insert_unique(chunk.offset)) {
        AddDamage(chunk.offset, chunk.end(), "blob chunk: " + why);
      }
      blob_.broken = true;
    };
    if (chunk.uncompressed_size < container::kBlobPartPrefixBytes) {
      return damage("part too short for its prefix");
    }
    const char* p = reinterpret_cast<const char*>(blob_payload_.data());
    const uint64_t total = LoadLe64(p);
    const uint64_t offset = LoadLe64(p + 8);
    const uint64_t bytes = chunk.uncompressed_size - container::kBlobPartPrefixBytes;
    // The writer fills every part but the last.
    if (offset > total ||
        bytes != std::min<uint64_t>(container::kBlobPartBytes, total - offset) ||
        (offset != 0 && bytes == 0) ||
        offset != uint64_t{chunk.count} * container::kBlobPartBytes) {
      return damage("part " + std::to_string(chunk.count) + " (" + std::to_string(bytes) +
                    " bytes at " + std::to_string(offset) + ") does not fit a blob of " +
                    std::to_string(total) + " bytes");
    }
    if (!blobs_from_start_) return;  // parts before a seek were not seen
    if (offset == 0) {
      EndBlob(/*at_end=*/false);
      blob_ = OpenBlob{true, chunk.blob, total, 0, chunk.offset, 0, false};
      XXH3_128bits_reset(blob_hash_);
    } else if (!blob_.open || !(blob_.id == chunk.blob) || blob_.total != total ||
               blob_.next_offset != offset) {
      const bool broken = blob_.open && blob_.broken && blob_.id == chunk.blob;
      if (!broken) {
        damage("part " + std::to_string(chunk.count) + " does not follow its blob's previous part");
      }
      return;
    }
    blob_.end = chunk.end();
    if (blob_.broken) return;
    XXH3_128bits_update(blob_hash_, p + container::kBlobPartPrefixBytes, bytes);
    blob_.next_offset = offset + bytes;
    if (blob_.next_offset == blob_.total) {
      const XXH128_hash_t hash = XXH3_128bits_digest(blob_hash_);
      if ((hash.low64 != blob_.id.lo || hash.high64 != blob_.id.hi) &&
          damaged_chunks_.insert_unique(blob_.begin)) {  // once, however often iterated
        AddDamage(blob_.begin, blob_.end, "blob: its bytes do not match its id");
      }
      blob_.open = false;
    }
  }

  // Closes the blob being checked: one that is not whole is damage, unless it is the cut-off
  // end of a trace that was never closed.
  void EndBlob(bool at_end) {
    if (!blobs_from_start_ || !blob_.open || blob_.broken) {
      blob_.open = false;
      return;
    }
    if (!(at_end && !complete_) && damaged_chunks_.insert_unique(blob_.begin)) {
      AddDamage(blob_.begin, blob_.end,
                "blob: ends after " + std::to_string(blob_.next_offset) + " of its " +
                    std::to_string(blob_.total) + " bytes");
    }
    blob_.open = false;
  }

  Status ReadHeaderChunk(uint64_t* header_end) {
    const uint64_t offset = container::kPreambleBytes;
    if (size_ < offset + kChunkHeaderBytes) {
      return Status::Error(path_ + ": trace ends before its header is whole (truncated at byte " +
                           std::to_string(size_) + ")");
    }
    std::string header_bytes;
    StatusOr<ChunkHeader> header = ReadChunkHeader(offset, &header_bytes);
    if (!header.ok()) {
      return Status::Error(path_ + ": trace header damaged or truncated at " +
                           Range(offset, size_) + ": " + header.status().message());
    }
    if (header->kind != ChunkKind::kHeader) {
      return Status::Error(path_ + ": first chunk is not the trace header");
    }
    Words words;
    if (Status status = ReadPayload(offset, header_bytes, *header, &words); !status.ok()) {
      return Status::Error(path_ + ": trace header damaged at " +
                           Range(offset, offset + kChunkHeaderBytes + header->compressed_size) +
                           ": " + status.message());
    }
    size_t consumed = 0;
    if (Status status = codec::DecodeHeader(words.data(), header->uncompressed_size / 8,
                                            &header_, &consumed);
        !status.ok()) {
      return Status::Error(path_ + ": trace header unreadable: " + status.message());
    }
    *header_end = offset + kChunkHeaderBytes + header->compressed_size;
    return Status::Ok();
  }

  // The index of a closed trace. False (and the reason in damage_ when something was
  // there but broken) if the trace was not closed or its index cannot be trusted.
  bool LoadIndexFromFooter(uint64_t header_end) {
    if (size_ < header_end + container::kFooterBytes) return false;
    std::string footer;
    if (!ReadAt(size_ - container::kFooterBytes, container::kFooterBytes, &footer).ok()) {
      return false;
    }
    const std::optional<uint64_t> index_offset = container::DecodeFooter(footer);
    if (!index_offset) return false;
    auto distrust = [&](const std::string& why) {
      AddDamage(std::min(*index_offset, size_), size_, "index: " + why + "; rebuilt by scanning");
      return false;
    };
    if (*index_offset < header_end || *index_offset >= size_ - container::kFooterBytes) {
      return distrust("footer points outside the file");
    }
    std::string header_bytes;
    StatusOr<ChunkHeader> header = ReadChunkHeader(*index_offset, &header_bytes);
    if (!header.ok()) return distrust(header.status().message());
    if (header->kind != ChunkKind::kIndex ||
        *index_offset + kChunkHeaderBytes + header->compressed_size + container::kFooterBytes !=
            size_ ||
        header->uncompressed_size !=
            uint64_t{header->count} * container::kIndexEntryBytes) {
      return distrust("index chunk is malformed");
    }
    Words words;
    if (Status status = ReadPayload(*index_offset, header_bytes, *header, &words); !status.ok()) {
      return distrust(status.message());
    }
    const char* entries = reinterpret_cast<const char*>(words.data());
    std::optional<uint64_t> summary_offset;  // the index's header names the summary's chunk
    if (header->tag1 == codec::kSummaryIndexMarker) summary_offset = header->tag0;
    std::optional<ChunkInfo> summary_chunk;
    std::vector<ChunkInfo> chunks;
    chunks.reserve(header->count);
    uint64_t expected_offset = container::kPreambleBytes;
    for (uint32_t i = 0; i < header->count; ++i) {
      const char* entry = entries + uint64_t{i} * container::kIndexEntryBytes;
      const uint64_t offset = LoadLe64(entry);
      StatusOr<ChunkHeader> chunk =
          container::DecodeChunkHeader(std::string_view(entry + 8, kChunkHeaderBytes));
      if (!chunk.ok() || offset != expected_offset) {
        return distrust("entry " + std::to_string(i) + " is inconsistent");
      }
      expected_offset = offset + kChunkHeaderBytes + chunk->compressed_size;
      if (expected_offset > *index_offset) return distrust("entry past the index");
      if (chunk->kind == ChunkKind::kHeader || chunk->kind == ChunkKind::kIndex) continue;
      if (summary_offset == offset) {
        summary_chunk = InfoFrom(*chunk, offset);
        continue;
      }
      chunks.push_back(InfoFrom(*chunk, offset));
    }
    if (expected_offset != *index_offset) return distrust("index does not cover the file");
    if (summary_offset && (!summary_chunk || summary_chunk->kind != ChunkKind::kBlob)) {
      return distrust("the summary chunk it names is not a blob it lists");
    }
    chunks_ = std::move(chunks);
    complete_ = true;
    if (summary_chunk) {
      WriterSummary summary;
      uint64_t end = 0;
      Status status = LoadSummaryAt(summary_chunk->offset, &summary, &end);
      if (status.ok() && end != summary_chunk->end()) {
        status = Status::Error("chunk does not match its index entry");
      }
      if (status.ok()) {
        summary_ = std::move(summary);
      } else {
        AddDamage(summary_chunk->offset, summary_chunk->end(),
                  "summary chunk: " + status.message());
      }
    }
    return true;
  }

  // Rebuilds the index by walking the file: every chunk whose header decodes and whose
  // hash matches is kept; anything else is damage, skipped by searching for the next
  // chunk magic. A chunk that runs past the end of the file is the truncated tail.
  void ScanChunks(uint64_t offset) {
    Words scratch;
    std::string header_bytes;
    bool after_index = false;  // the footer follows the index chunk
    while (offset < size_) {
      if (size_ - offset < kChunkHeaderBytes) {
        if (after_index && size_ - offset == container::kFooterBytes) {
          if (!IsFooterAt(offset)) AddDamage(offset, size_, "footer damaged");
        } else {
          truncated_tail_ = size_ - offset;
        }
        break;
      }
      StatusOr<ChunkHeader> header = ReadChunkHeader(offset, &header_bytes);
      Status status = header.status();
      if (status.ok()) {
        status = ReadPayload(offset, header_bytes, *header, &scratch);
        if (status.ok()) {
          if (IsSummaryChunk(*header, scratch)) {
            WriterSummary summary;
            if (Status decoded = DecodeSummaryPayload(*header, scratch, &summary); decoded.ok()) {
              summary_ = std::move(summary);
            } else {
              AddDamage(offset, offset + kChunkHeaderBytes + header->compressed_size,
                        "summary chunk: " + decoded.message());
            }
          } else if (header->kind != ChunkKind::kHeader && header->kind != ChunkKind::kIndex) {
            chunks_.push_back(InfoFrom(*header, offset));
          }
          after_index = header->kind == ChunkKind::kIndex;
          offset += kChunkHeaderBytes + header->compressed_size;
          continue;
        }
      } else if (header_bytes.size() == kChunkHeaderBytes &&
                 std::memcmp(header_bytes.data(), container::kChunkMagic, 4) == 0 &&
                 status.message() == "chunk extends past the end of the file" &&
                 !WholeChunkAfter(offset + 1)) {
        truncated_tail_ = size_ - offset;  // the last chunk was being written
        break;
      }
      const uint64_t next = NextMagic(offset + 1);
      AddDamage(offset, next, "not a whole chunk: " + status.message());
      offset = next;
    }
  }

  bool IsFooterAt(uint64_t offset) {
    if (size_ - offset != container::kFooterBytes) return false;
    std::string footer;
    return ReadAt(offset, container::kFooterBytes, &footer).ok() &&
           container::DecodeFooter(footer).has_value();
  }

  // True if an intact chunk starts anywhere at or after `from`: then a chunk header that
  // runs past the end of the file is damage, not the tail a crash cut off.
  bool WholeChunkAfter(uint64_t from) {
    std::string header_bytes;
    Words scratch;
    for (uint64_t at = NextMagic(from); at < size_; at = NextMagic(at + 1)) {
      StatusOr<ChunkHeader> header = ReadChunkHeader(at, &header_bytes);
      if (header.ok() && ReadPayload(at, header_bytes, *header, &scratch).ok()) return true;
    }
    return false;
  }

  // Offset of the next chunk magic at or after `from`, or the file size.
  uint64_t NextMagic(uint64_t from) {
    constexpr size_t kWindow = 64 << 10;
    std::string window;
    while (from + sizeof container::kChunkMagic <= size_) {
      const uint64_t n = std::min<uint64_t>(kWindow, size_ - from);
      if (!ReadAt(from, n, &window).ok()) return size_;
      const std::string_view view(window);
      const size_t hit = view.find(std::string_view(container::kChunkMagic, 4));
      if (hit != std::string_view::npos) return from + hit;
      if (n < kWindow) break;
      from += n - 3;  // a magic may straddle two windows
    }
    return size_;
  }

  // Offsets of chunks already reported damaged.
  struct OffsetSet {
    std::unordered_set<uint64_t> offsets;
    bool insert_unique(uint64_t offset) { return offsets.insert(offset).second; }
  };
  static constexpr size_t kMaxDamageListed = 1000;
  uint64_t unlisted_damage_ = 0;

  const std::string path_;
  const int fd_;
  const uint64_t size_;
  Decompressor decompressor_;
  TraceHeader header_;
  bool complete_ = false;
  std::optional<WriterSummary> summary_;
  uint64_t truncated_tail_ = 0;
  std::vector<ChunkInfo> chunks_;
  std::vector<TraceDamage> damage_;
  OffsetSet damaged_chunks_;

  // The blob whose parts iteration is passing (CheckBlobPart).
  struct OpenBlob {
    bool open = false;
    BlobId id;
    uint64_t total = 0;
    uint64_t next_offset = 0;  // bytes hashed so far
    uint64_t begin = 0;        // file range of its parts so far
    uint64_t end = 0;
    bool broken = false;       // a part was damaged (reported there)
  };
  OpenBlob blob_;
  bool blobs_from_start_ = true;  // iteration started at the first chunk (not SeekToOp)
  XXH3_state_t* blob_hash_ = nullptr;
  Words blob_payload_;

  size_t chunk_pos_ = 0;          // next chunk Next() will load
  Words frames_;  // the loaded chunk's record frames
  size_t frame_pos_ = 0;          // next frame, in words
  uint64_t skip_below_ = 0;       // SeekToOp: op records below this are skipped
  uint32_t pass_over_ = 0;        // PassOver: record types Next does not decode

  // Loads the chunks Next will need, chunks_[first..] in order (records and blobs), on a thread
  // of its own, at most kAhead of them before Next takes them: reading, checking and
  // decompressing a chunk leave the thread that decodes. Started by LoadNextRecordsChunk when
  // read_ahead_ is on, stopped by Rewind (SeekToOp) and the destructor.
  class ReadAhead {
   public:
    ReadAhead(Impl& impl, size_t first) : impl_(impl), next_(first), thread_([this] { Run(); }) {}
    ~ReadAhead() {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      room_.notify_all();
      thread_.join();
    }
    ReadAhead(const ReadAhead&) = delete;
    ReadAhead& operator=(const ReadAhead&) = delete;

    // The next chunk's load (LoadChunk's status), its payload swapped into *out: the buffer
    // *out held goes back to the thread for a later chunk.
    Status Take(Words* out) {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return !loaded_.empty(); });
      Loaded front = std::move(loaded_.front());
      loaded_.pop_front();
      if (front.error) std::rethrow_exception(front.error);
      std::swap(*out, front.payload);
      spare_.push_back(std::move(front.payload));
      lock.unlock();
      room_.notify_one();
      return front.status;
    }

   private:
    static constexpr size_t kAhead = 2;
    struct Loaded {
      Status status;
      Words payload;
      std::exception_ptr error;  // out of memory: rethrown by Take, as Next would throw it
    };

    void Run() {
      Decompressor own;
      while (true) {
        Loaded loaded;
        size_t index = 0;
        {
          std::unique_lock lock(mu_);
          room_.wait(lock, [&] { return stop_ || loaded_.size() < kAhead; });
          while (next_ < impl_.chunks_.size() && impl_.chunks_[next_].kind != ChunkKind::kBlob &&
                 impl_.chunks_[next_].kind != ChunkKind::kRecords) {
            ++next_;
          }
          if (stop_ || next_ == impl_.chunks_.size()) return;
          index = next_++;
          if (!spare_.empty()) {
            loaded.payload = std::move(spare_.back());
            spare_.pop_back();
          }
        }
        try {
          loaded.status = impl_.LoadChunk(impl_.chunks_[index], &loaded.payload, &own);
        } catch (...) {
          loaded.error = std::current_exception();
        }
        {
          std::lock_guard lock(mu_);
          loaded_.push_back(std::move(loaded));
        }
        ready_.notify_one();
      }
    }

    Impl& impl_;
    std::mutex mu_;
    std::condition_variable ready_;  // a chunk was loaded
    std::condition_variable room_;   // one was taken, or stop_ set
    std::deque<Loaded> loaded_;      // under mu_, in chunk order
    std::vector<Words> spare_;       // buffers Take gave back, under mu_
    size_t next_;                    // under mu_
    bool stop_ = false;              // under mu_
    std::thread thread_;
  };
  bool read_ahead_ = false;           // ReadAheadOn
  std::unique_ptr<ReadAhead> ahead_;  // while reading ahead
};

namespace {

// The open file at `path`, not yet read.
StatusOr<std::unique_ptr<TraceReader::Impl>> OpenFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(path + ": not a regular file");
  }
  return std::make_unique<TraceReader::Impl>(path, fd, static_cast<uint64_t>(st.st_size));
}

// `status`, its message starting with `path`.
Status NamingPath(Status status, const std::string& path) {
  if (status.message().rfind(path, 0) != 0) return status.Prefixed(path);
  return status;
}

}  // namespace

StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  StatusOr<std::unique_ptr<Impl>> impl = OpenFile(path);
  if (!impl.ok()) return impl.status();
  if (Status status = (*impl)->Open(); !status.ok()) return NamingPath(status, path);
  return std::unique_ptr<TraceReader>(new TraceReader(std::move(impl).value()));
}

StatusOr<TraceHeader> TraceReader::ReadHeader(const std::string& path) {
  StatusOr<std::unique_ptr<Impl>> impl = OpenFile(path);
  if (!impl.ok()) return impl.status();
  uint64_t header_end = 0;
  if (Status status = (*impl)->OpenHeader(&header_end); !status.ok()) {
    return NamingPath(status, path);
  }
  return (*impl)->header();
}

StatusOr<std::optional<WriterSummary>> ReadWriterSummary(const std::string& path) {
  StatusOr<std::unique_ptr<TraceReader::Impl>> impl = OpenFile(path);
  if (!impl.ok()) return impl.status();
  uint64_t header_end = 0;
  if (Status status = (*impl)->OpenHeader(&header_end); !status.ok()) {
    return NamingPath(status, path);
  }
  return (*impl)->ReadSummaryOnly(header_end);
}

TraceReader::TraceReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceReader::~TraceReader() = default;
const TraceHeader& TraceReader::header() const { return impl_->header(); }
bool TraceReader::complete() const { return impl_->complete(); }
uint64_t TraceReader::truncated_tail_bytes() const { return impl_->truncated_tail_bytes(); }
uint64_t TraceReader::file_bytes() const { return impl_->file_bytes(); }
const std::vector<ChunkInfo>& TraceReader::chunks() const { return impl_->chunks(); }
const std::vector<TraceDamage>& TraceReader::damage() const { return impl_->damage(); }
bool TraceReader::Next(Record* record) { return impl_->Next(record); }
void TraceReader::Rewind() { impl_->Rewind(); }
void TraceReader::PassOver(uint32_t record_types) { impl_->PassOver(record_types); }
void TraceReader::ReadAhead(bool on) { impl_->ReadAheadOn(on); }
void TraceReader::SeekToOp(uint64_t sequence) { impl_->SeekToOp(sequence); }
std::optional<OpRecord> TraceReader::FindOp(uint64_t sequence) {
  return impl_->FindOp(sequence);
}
StatusOr<std::string> TraceReader::ReadBlob(const BlobId& id, uint64_t max_bytes) {
  return impl_->ReadBlob(id, max_bytes);
}

}  // namespace ndt::format
