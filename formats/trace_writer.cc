// TraceWriter: per-thread buffers, one background thread that compresses and writes.
//
// Locks, always taken in this order: registry_mu_ -> ThreadBuffer::mu -> queue_mu_, and
// self_mu_ or blob_mu_ -> file_mu_ -> status_mu_, queue_mu_ (SetError); nothing waits for
// another lock while holding queue_mu_. An appending thread holds only its own
// buffer's mu (uncontended unless a background thread is sealing that buffer) and
// queue_mu_ for the instant it takes to queue a sealed buffer. Compression happens outside
// file_mu_, which covers only the write and the index entry. A background thread never
// waits for a buffer's mu while stalled appenders could be waiting for it (SealAll uses
// try_lock there), so kStall cannot deadlock.
#include "formats/trace_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <new>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>

#include "formats/byte_order.h"
#include "formats/container.h"
#include "formats/record_codec.h"

namespace ndt::format {
namespace {

using Clock = std::chrono::steady_clock;

// Writer id of chunks the writer itself produces: the header, DroppedRecords, blobs.
constexpr uint32_t kWriterSelfId = std::numeric_limits<uint32_t>::max();
constexpr size_t kMaxRecycledBuffers = 16;

uint64_t NextWriterUid() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::string ErrnoText(int error) { return std::strerror(error); }

struct ThreadBuffer {
  std::mutex mu;
  uint32_t writer_id = 0;
  uint64_t next_sequence = 0;
  std::string data;  // record frames
  uint32_t count = 0;
  uint64_t first_op = std::numeric_limits<uint64_t>::max();
  uint64_t last_op = 0;
  uint64_t appended = 0;   // records accepted, for stats()
  uint64_t oversized = 0;  // records refused as too large, for stats()
};

struct SealedChunk {
  uint32_t writer_id = 0;
  uint64_t sequence = 0;
  uint32_t count = 0;
  uint64_t first_op = 0;
  uint64_t last_op = 0;
  std::string data;
};

struct PendingDrop {
  uint64_t records = 0;
  uint64_t bytes = 0;
};

// Per-thread cache of the buffer this thread appends to, keyed by writer uid (never
// reused, so a stale entry for a destroyed writer is never dereferenced).
struct LocalBufferCache {
  uint64_t writer_uid = 0;
  ThreadBuffer* buffer = nullptr;
};
thread_local LocalBufferCache tls_buffer_cache;
// The same for the last origin this thread appended for (TraceWriter::Append with an origin).
struct OriginBufferCache {
  uint64_t writer_uid = 0;
  uint64_t origin = 0;
  ThreadBuffer* buffer = nullptr;
};
thread_local OriginBufferCache tls_origin_cache;

}  // namespace

// One background compression thread. Chunks of writer id w always go to worker
// w % workers, so each appending thread's chunks reach the file in the order it sealed them.
struct Worker {
  std::condition_variable cv;
  std::deque<SealedChunk> queue;  // guarded by Impl::queue_mu_
  ZSTD_CCtx* cctx = nullptr;
  std::string compressed;
  std::thread thread;
};

class TraceWriter::Impl {
 public:
  Impl(std::string path, int fd, const WriterOptions& options)
      : path_(std::move(path)), fd_(fd), options_(options), uid_(NextWriterUid()) {
    self_cctx_ = NewCCtx();
    blob_cctx_ = NewCCtx();
    for (int i = 0; i < options_.compressor_threads; ++i) {
      workers_.push_back(std::make_unique<Worker>());
      workers_.back()->cctx = NewCCtx();
    }
  }

  ~Impl() {
    for (auto& worker : workers_) ZSTD_freeCCtx(worker->cctx);
    ZSTD_freeCCtx(self_cctx_);
    ZSTD_freeCCtx(blob_cctx_);
  }

  Status WriteHeader(const TraceHeader& header) {
    char preamble[container::kPreambleBytes];
    container::EncodePreamble(preamble);
    {
      std::lock_guard file_lock(file_mu_);
      NDT_RETURN_IF_ERROR(WriteAllLocked(preamble, sizeof preamble, nullptr, 0));
    }
    std::string frame;
    TraceHeader copy = header;
    copy.format_version = kFormatVersion;
    if (!codec::AppendHeader(copy, &frame)) {
      return Status::Error("trace header is larger than the 1 MiB record limit");
    }
    container::ChunkHeader chunk;
    chunk.kind = ChunkKind::kHeader;
    chunk.writer_id = kWriterSelfId;
    chunk.count = 1;
    std::lock_guard self_lock(self_mu_);
    return CompressAndWrite(self_cctx_, &self_compressed_, chunk, frame);
  }

  // The workers start with every signal blocked: a signal meant for the program (one it
  // blocks in its own threads included) is never delivered to them, and a write past
  // RLIMIT_FSIZE there never raises SIGXFSZ (WriteAllLocked).
  void Start() {
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    try {
      for (size_t i = 0; i < workers_.size(); ++i) {
        workers_[i]->thread = std::thread([this, i] { Run(i); });
      }
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  // RecordLike: Record or OpRecord (codec::AppendRecord takes both). `buffer`: the calling
  // thread's (null) or an origin's.
  template <typename RecordLike>
  bool Append(const RecordLike& record, ThreadBuffer* buffer = nullptr) {
    if (buffer == nullptr) buffer = LocalBuffer();
    std::lock_guard buffer_lock(buffer->mu);
    if (closed_.load(std::memory_order_relaxed)) {
      CountLost(1, 0);
      return false;
    }
    if (!codec::AppendRecord(record, &buffer->data)) {
      ++buffer->oversized;
      return false;
    }
    ++buffer->count;
    ++buffer->appended;
    const OpRecord* op = nullptr;
    if constexpr (std::is_same_v<RecordLike, OpRecord>) {
      op = &record;
    } else {
      op = std::get_if<OpRecord>(&record);
    }
    if (op != nullptr) {
      buffer->first_op = std::min(buffer->first_op, op->sequence);
      buffer->last_op = std::max(buffer->last_op, op->sequence);
    }
    if (buffer->data.size() >= options_.chunk_bytes) return SealLocked(*buffer, true);
    return true;
  }

  template <typename RecordLike>
  bool AppendFor(const RecordLike& record, uint64_t origin) {
    return Append(record, OriginBuffer(origin));
  }

  StatusOr<BlobId> PutBlob(std::span<const std::byte> bytes) {
    const XXH128_hash_t hash = XXH3_128bits(bytes.data(), bytes.size());
    const BlobId id{hash.low64, hash.high64};
    std::lock_guard blob_lock(blob_mu_);
    if (stored_blobs_.count({id.lo, id.hi}) != 0) return id;
    if (closed_.load()) return Status::Error(path_ + ": writer is closed");
    std::string part;
    uint32_t part_index = 0;
    uint64_t offset = 0;
    do {
      const size_t n = std::min<uint64_t>(container::kBlobPartBytes, bytes.size() - offset);
      part.resize(container::kBlobPartPrefixBytes + n);
      StoreLe64(part.data(), bytes.size());
      StoreLe64(part.data() + 8, offset);
      if (n != 0) {
        std::memcpy(part.data() + container::kBlobPartPrefixBytes, bytes.data() + offset, n);
      }
      container::ChunkHeader chunk;
      chunk.kind = ChunkKind::kBlob;
      chunk.writer_id = kWriterSelfId;
      chunk.count = part_index++;
      chunk.tag0 = id.lo;
      chunk.tag1 = id.hi;
      NDT_RETURN_IF_ERROR(CompressAndWrite(blob_cctx_, &blob_compressed_, chunk, part));
      offset += n;
    } while (offset < bytes.size());
    stored_blobs_.insert({id.lo, id.hi});
    ++stored_blob_count_;
    return id;
  }

  Status Flush() {
    if (closed_.load()) return status();
    SealAll(/*blocking=*/true);
    std::unique_lock queue_lock(queue_mu_);
    idle_cv_.wait(queue_lock, [&] { return in_flight_ == 0; });
    return status();
  }

  Status Close() {
    std::lock_guard close_lock(close_mu_);
    if (closed_.exchange(true)) return status();
    // Every buffer, blocking: an Append that got in before closed_ was set finishes first.
    SealAll(/*blocking=*/true);
    {
      std::lock_guard queue_lock(queue_mu_);
      stopping_ = true;
    }
    for (auto& worker : workers_) {
      worker->cv.notify_all();
      if (worker->thread.joinable()) worker->thread.join();
    }
    WriteDropRecords();
    WriteIndexAndFooter();
    if (::close(fd_) != 0) SetError(path_ + ": close failed: " + ErrnoText(errno));
    fd_ = -1;
    return status();
  }

  Status status() const {
    std::lock_guard status_lock(status_mu_);
    return status_;
  }

  bool failed() const { return failed_.load(std::memory_order_relaxed); }

  WriterStats stats() const {
    WriterStats stats;
    {
      std::lock_guard registry_lock(registry_mu_);
      for (const auto& buffer : buffers_) {
        std::lock_guard buffer_lock(buffer->mu);
        stats.records_appended += buffer->appended;
        stats.records_oversized += buffer->oversized;
      }
    }
    stats.records_dropped = dropped_records_.load();
    stats.bytes_dropped = dropped_bytes_.load();
    stats.stall_ns = stall_ns_.load();
    stats.blobs = stored_blob_count_.load();
    std::lock_guard file_lock(file_mu_);
    stats.uncompressed_bytes = uncompressed_bytes_;
    stats.file_bytes = offset_;
    stats.chunks = index_.size() / container::kIndexEntryBytes;
    return stats;
  }

  const std::string& path() const { return path_; }

 private:
  ZSTD_CCtx* NewCCtx() const {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options_.compression_level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, container::kZstdWindowLogMax);
    return cctx;
  }

  ThreadBuffer* LocalBuffer() {
    LocalBufferCache& cache = tls_buffer_cache;
    if (cache.writer_uid == uid_) return cache.buffer;
    std::lock_guard registry_lock(registry_mu_);
    ThreadBuffer* buffer = NewBufferLocked(buffer_of_thread_[std::this_thread::get_id()]);
    cache = {uid_, buffer};
    return buffer;
  }

  ThreadBuffer* OriginBuffer(uint64_t origin) {
    OriginBufferCache& cache = tls_origin_cache;
    if (cache.writer_uid == uid_ && cache.origin == origin) return cache.buffer;
    std::lock_guard registry_lock(registry_mu_);
    ThreadBuffer* buffer = NewBufferLocked(buffer_of_origin_[origin]);
    cache = {uid_, origin, buffer};
    return buffer;
  }

  // `slot`'s buffer, made now if it has none. registry_mu_ held.
  ThreadBuffer* NewBufferLocked(ThreadBuffer*& slot) {
    if (slot == nullptr) {
      auto buffer = std::make_unique<ThreadBuffer>();
      buffer->writer_id = static_cast<uint32_t>(buffers_.size());
      buffer->data.reserve(options_.chunk_bytes + 4096);
      slot = buffer.get();
      buffers_.push_back(std::move(buffer));
    }
    return slot;
  }

  // Hands the buffer's records to its compression worker, or drops them when the queues
  // are full (kDrop) or the writer has failed. `may_stall`: an appending thread under
  // kStall waits for room instead; a background thread never waits.
  bool SealLocked(ThreadBuffer& buffer, bool may_stall) {
    SealedChunk chunk;
    chunk.writer_id = buffer.writer_id;
    chunk.count = buffer.count;
    chunk.first_op = buffer.first_op;
    chunk.last_op = buffer.last_op;
    const size_t bytes = buffer.data.size();
    Worker& worker = *workers_[buffer.writer_id % workers_.size()];
    bool queued = false;
    {
      std::unique_lock queue_lock(queue_mu_);
      const bool stall = may_stall && options_.when_full == FullPolicy::kStall;
      if (stall && !Fits(bytes)) {
        const auto start = Clock::now();
        space_cv_.wait(queue_lock, [&] { return Fits(bytes) || stopping_ || failed_.load(); });
        stall_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start)
                         .count();
      }
      if (!failed_.load() && (Fits(bytes) || !may_stall)) {
        chunk.sequence = buffer.next_sequence++;
        chunk.data = std::move(buffer.data);
        buffered_bytes_ += bytes;
        ++in_flight_;
        worker.queue.push_back(std::move(chunk));
        queued = true;
        if (!recycled_.empty()) {
          buffer.data = std::move(recycled_.back());
          recycled_.pop_back();
        }
      } else {
        PendingDrop& drop = pending_drops_[buffer.writer_id];
        drop.records += buffer.count;
        drop.bytes += bytes;
      }
    }
    if (queued) {
      worker.cv.notify_one();
    } else {
      CountLost(buffer.count, bytes);
    }
    buffer.data.clear();
    if (buffer.data.capacity() < options_.chunk_bytes) {
      buffer.data.reserve(options_.chunk_bytes + 4096);
    }
    buffer.count = 0;
    buffer.first_op = std::numeric_limits<uint64_t>::max();
    buffer.last_op = 0;
    return queued;
  }

  bool Fits(size_t bytes) const {
    return buffered_bytes_ == 0 || buffered_bytes_ + bytes <= options_.max_buffered_bytes;
  }

  void SealAll(bool blocking) {
    std::lock_guard registry_lock(registry_mu_);
    for (const auto& buffer : buffers_) {
      std::unique_lock buffer_lock(buffer->mu, std::defer_lock);
      if (blocking) {
        buffer_lock.lock();
      } else if (!buffer_lock.try_lock()) {
        continue;  // its thread is appending and will seal it itself
      }
      if (!buffer->data.empty()) SealLocked(*buffer, /*may_stall=*/false);
    }
  }

  // Worker i's loop. Worker 0 also seals idle buffers every flush interval and writes the
  // DroppedRecords records.
  // Nothing escapes a worker (an exception there would end the process): a failure, out of
  // memory included, fails the writer, and the worker goes on draining its queue, so Flush and
  // Close never wait for a chunk nobody writes.
  void Run(size_t i) {
    while (true) {
      try {
        RunLoop(i);
        return;
      } catch (...) {
        FailFromException();
      }
    }
  }

  void FailFromException() noexcept {
    try {
      try {
        throw;
      } catch (const std::bad_alloc&) {
        SetError(path_ + ": out of memory");
      } catch (...) {
        SetError(path_ + ": internal error in the writer");
      }
    } catch (...) {
      SetError("");  // no memory even for the message
    }
  }

  void RunLoop(size_t i) {
    Worker& worker = *workers_[i];
    std::unique_lock queue_lock(queue_mu_);
    auto next_seal = Clock::now() + options_.flush_interval;
    while (true) {
      worker.cv.wait_until(queue_lock, next_seal,
                           [&] { return !worker.queue.empty() || stopping_; });
      if (worker.queue.empty() && stopping_) break;
      if (i == 0 && Clock::now() >= next_seal) {
        queue_lock.unlock();
        try {
          SealAll(/*blocking=*/false);
          WriteDropRecords();
        } catch (...) {
          FailFromException();
        }
        queue_lock.lock();
        next_seal = Clock::now() + options_.flush_interval;
      }
      while (!worker.queue.empty()) {
        SealedChunk chunk = std::move(worker.queue.front());
        worker.queue.pop_front();
        queue_lock.unlock();
        try {
          WriteRecordsChunk(worker, chunk);
        } catch (...) {
          FailFromException();
          CountLost(chunk.count, chunk.data.size());
        }
        queue_lock.lock();
        buffered_bytes_ -= chunk.data.size();
        if (recycled_.size() < kMaxRecycledBuffers) {
          chunk.data.clear();
          try {
            recycled_.push_back(std::move(chunk.data));
          } catch (...) {
          }
        }
        if (--in_flight_ == 0) idle_cv_.notify_all();
        space_cv_.notify_all();
      }
    }
  }

  void WriteRecordsChunk(Worker& worker, const SealedChunk& sealed) {
    container::ChunkHeader chunk;
    chunk.kind = ChunkKind::kRecords;
    chunk.writer_id = sealed.writer_id;
    chunk.sequence = sealed.sequence;
    chunk.count = sealed.count;
    chunk.tag0 = sealed.first_op;
    chunk.tag1 = sealed.last_op;
    if (!CompressAndWrite(worker.cctx, &worker.compressed, chunk, sealed.data).ok()) {
      CountLost(sealed.count, sealed.data.size());
    }
  }

  void WriteDropRecords() {
    std::map<uint32_t, PendingDrop> drops;
    {
      std::lock_guard queue_lock(queue_mu_);
      drops.swap(pending_drops_);
    }
    if (drops.empty()) return;
    std::string frames;
    uint32_t count = 0;
    for (const auto& [writer_id, drop] : drops) {
      DroppedRecords record;
      record.writer_id = writer_id;
      record.records = drop.records;
      record.bytes = drop.bytes;
      record.reason = failed_.load() ? "write failed" : "buffers full";
      if (codec::AppendRecord(Record{record}, &frames)) ++count;
    }
    container::ChunkHeader chunk;
    chunk.kind = ChunkKind::kRecords;
    chunk.writer_id = kWriterSelfId;
    chunk.count = count;
    chunk.tag0 = std::numeric_limits<uint64_t>::max();
    std::lock_guard self_lock(self_mu_);
    (void)CompressAndWrite(self_cctx_, &self_compressed_, chunk, frames);
  }

  void WriteIndexAndFooter() {
    std::string entries;
    uint64_t index_offset = 0;
    {
      std::lock_guard file_lock(file_mu_);
      if (failed_.load()) return;
      entries = index_;  // the index does not list itself
      index_offset = offset_;
    }
    if (entries.size() > container::kMaxIndexPayloadBytes) {
      SetError(path_ + ": too many chunks for one index; the trace stays readable by scanning");
      return;
    }
    container::ChunkHeader chunk;
    chunk.kind = ChunkKind::kIndex;
    chunk.writer_id = kWriterSelfId;
    chunk.count = static_cast<uint32_t>(entries.size() / container::kIndexEntryBytes);
    std::lock_guard self_lock(self_mu_);
    if (!CompressAndWrite(self_cctx_, &self_compressed_, chunk, entries).ok()) return;
    char footer[container::kFooterBytes];
    container::EncodeFooter(index_offset, footer);
    std::lock_guard file_lock(file_mu_);
    (void)WriteAllLocked(footer, sizeof footer, nullptr, 0);
  }

  // Compresses `payload` with `cctx` into `*compressed` (outside the file lock), then
  // appends the chunk to the file. Chunks of the writer itself get their sequence here, in
  // file order.
  Status CompressAndWrite(ZSTD_CCtx* cctx, std::string* compressed, container::ChunkHeader chunk,
                          std::string_view payload) {
    if (failed_.load()) return status();
    compressed->resize(ZSTD_compressBound(payload.size()));
    const size_t n =
        ZSTD_compress2(cctx, compressed->data(), compressed->size(), payload.data(), payload.size());
    if (ZSTD_isError(n)) {
      SetError(path_ + ": compression failed: " + ZSTD_getErrorName(n));
      return status();
    }
    chunk.uncompressed_size = static_cast<uint32_t>(payload.size());
    chunk.compressed_size = static_cast<uint32_t>(n);
    std::lock_guard file_lock(file_mu_);
    if (failed_.load()) return status();
    if (chunk.writer_id == kWriterSelfId) chunk.sequence = self_sequence_++;
    char header[container::kChunkHeaderBytes];
    container::EncodeChunkHeader(chunk, std::string_view(compressed->data(), n), header);
    const uint64_t chunk_offset = offset_;
    NDT_RETURN_IF_ERROR(WriteAllLocked(header, sizeof header, compressed->data(), n));
    char entry[container::kIndexEntryBytes];
    StoreLe64(entry, chunk_offset);
    std::memcpy(entry + 8, header, sizeof header);
    if (chunk.kind != ChunkKind::kIndex) index_.append(entry, sizeof entry);
    if (chunk.kind == ChunkKind::kRecords) uncompressed_bytes_ += payload.size();
    return Status::Ok();
  }

  // Writes both buffers at the end of the file with one writev where possible, so a
  // chunk reaches the file whole unless the process dies inside the call. Needs file_mu_.
  // A write past the file size limit (RLIMIT_FSIZE, `ulimit -f`) fails with EFBIG and raises
  // SIGXFSZ, whose default effect ends the process: the signal is blocked around the write in
  // this thread and the one the write raised is taken back, so the program never sees it.
  Status WriteAllLocked(const char* a, size_t a_size, const char* b, size_t b_size) {
    sigset_t xfsz, previous;
    sigemptyset(&xfsz);
    sigaddset(&xfsz, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &xfsz, &previous);
    sigset_t pending_before;
    sigemptyset(&pending_before);
    sigpending(&pending_before);
    const bool already_pending = sigismember(&pending_before, SIGXFSZ) == 1;
    Status result = WriteAllSignalsBlocked(a, a_size, b, b_size);
    if (!already_pending) {
      sigset_t pending;
      sigemptyset(&pending);
      const timespec now{0, 0};
      sigpending(&pending);
      if (sigismember(&pending, SIGXFSZ) == 1) (void)sigtimedwait(&xfsz, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return result;
  }

  Status WriteAllSignalsBlocked(const char* a, size_t a_size, const char* b, size_t b_size) {
    iovec parts[2] = {{const_cast<char*>(a), a_size}, {const_cast<char*>(b), b_size}};
    int first = 0;
    const int count = b_size > 0 ? 2 : 1;
    while (first < count) {
      const ssize_t written = ::writev(fd_, parts + first, count - first);
      if (written < 0) {
        if (errno == EINTR) continue;
        SetError(path_ + ": write failed: " + ErrnoText(errno));
        return status();
      }
      if (written == 0) {
        SetError(path_ + ": write failed: no progress");
        return status();
      }
      offset_ += static_cast<uint64_t>(written);
      size_t left = static_cast<size_t>(written);
      while (first < count && left >= parts[first].iov_len) {
        left -= parts[first].iov_len;
        ++first;
      }
      if (first < count) {
        parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + left;
        parts[first].iov_len -= left;
      }
    }
    return Status::Ok();
  }

  void SetError(const std::string& message) noexcept {
    {
      std::lock_guard status_lock(status_mu_);
      if (status_.ok()) {
        try {
          status_ = Status::Error(message.empty() ? "writer failed: out of memory" : message);
        } catch (...) {
        }
      }
      failed_.store(true);
    }
    std::lock_guard queue_lock(queue_mu_);  // no stalled appender misses the wake-up
    space_cv_.notify_all();
  }

  void CountLost(uint64_t records, uint64_t bytes) {
    dropped_records_ += records;
    dropped_bytes_ += bytes;
  }

  const std::string path_;
  int fd_;
  const WriterOptions options_;
  const uint64_t uid_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> failed_{false};
  std::mutex close_mu_;

  mutable std::mutex registry_mu_;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_;
  std::map<std::thread::id, ThreadBuffer*> buffer_of_thread_;
  std::map<uint64_t, ThreadBuffer*> buffer_of_origin_;

  std::mutex queue_mu_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::condition_variable space_cv_;  // room in the queues (kStall)
  std::condition_variable idle_cv_;   // in_flight_ reached 0 (Flush)
  std::vector<std::string> recycled_;
  size_t buffered_bytes_ = 0;
  uint64_t in_flight_ = 0;  // sealed chunks not yet written
  bool stopping_ = false;
  std::map<uint32_t, PendingDrop> pending_drops_;

  std::mutex self_mu_;  // the writer's own chunks: header, DroppedRecords, index
  ZSTD_CCtx* self_cctx_ = nullptr;
  std::string self_compressed_;

  mutable std::mutex file_mu_;
  uint64_t offset_ = 0;
  uint64_t self_sequence_ = 0;
  uint64_t uncompressed_bytes_ = 0;
  std::string index_;  // kIndexEntryBytes per chunk written

  std::mutex blob_mu_;
  ZSTD_CCtx* blob_cctx_ = nullptr;
  std::string blob_compressed_;
  std::set<std::pair<uint64_t, uint64_t>> stored_blobs_;
  std::atomic<uint64_t> stored_blob_count_{0};

  mutable std::mutex status_mu_;
  Status status_;
  std::atomic<uint64_t> dropped_records_{0};
  std::atomic<uint64_t> dropped_bytes_{0};
  std::atomic<uint64_t> stall_ns_{0};
};

StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Create(const std::string& path,
                                                           const TraceHeader& header,
                                                           const WriterOptions& options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes > (8u << 20)) {
    return Status::Error("chunk_bytes must be between 1 and 8 MiB");
  }
  if (options.compressor_threads < 1 || options.compressor_threads > 16) {
    return Status::Error("compressor_threads must be between 1 and 16");
  }
  // The header is written under a temporary name that is then renamed to `path`, so a file at
  // `path` always starts with a whole header: a process killed at any moment leaves either no
  // trace or a readable one.
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(path + ": cannot create trace: " + ErrnoText(errno));
  auto impl = std::make_unique<Impl>(path, fd, options);
  Status status = impl->WriteHeader(header);
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = Status::Error(path + ": cannot create trace: " + ErrnoText(errno));
  }
  if (!status.ok()) {
    (void)impl->Close();
    ::unlink(temporary.c_str());
    return status;
  }
  impl->Start();
  return std::unique_ptr<TraceWriter>(new TraceWriter(std::move(impl)));
}

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceWriter::~TraceWriter() { (void)impl_->Close(); }
bool TraceWriter::Append(const Record& record) { return impl_->Append(record); }
bool TraceWriter::Append(const OpRecord& op) { return impl_->Append(op); }
bool TraceWriter::Append(const Record& record, uint64_t origin) {
  return impl_->AppendFor(record, origin);
}
bool TraceWriter::Append(const OpRecord& op, uint64_t origin) {
  return impl_->AppendFor(op, origin);
}
StatusOr<BlobId> TraceWriter::PutBlob(std::span<const std::byte> bytes) {
  return impl_->PutBlob(bytes);
}
Status TraceWriter::Flush() { return impl_->Flush(); }
Status TraceWriter::Close() { return impl_->Close(); }
Status TraceWriter::status() const { return impl_->status(); }
bool TraceWriter::failed() const { return impl_->failed(); }
WriterStats TraceWriter::stats() const { return impl_->stats(); }
const std::string& TraceWriter::path() const { return impl_->path(); }

}  // namespace ndt::format
