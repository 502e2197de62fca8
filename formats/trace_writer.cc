// TraceWriter: per-thread buffers, background threads that compress and write.
//
// An appending thread never waits for another thread (FullPolicy::kDrop): it takes only its
// own buffer's mu, which nobody else holds except for the instant a background thread seals
// an idle buffer (SealAll: try_lock, a pointer swap and a push), and hands a sealed chunk to
// its worker through a lock-free list (Worker::head, a Treiber stack the worker empties
// whole), wakes the worker with a futex only when it sleeps (and has not written a chunk
// lately: then it polls every millisecond, kBusyWindow), and takes its next buffer from
// the chunks the workers gave back (ThreadBuffer::returned, another lock-free list). No
// mutex shared with a background thread, no condition variable and no allocation but a
// new buffer when every one of its own is still in flight. Under kStall an appending thread
// that finds no room waits on space_cv_ (stall_mu_), at most kMaxStall, and the wait is
// counted (WriterStats::stall_ns; the trace's WriterSummary: stall_ns, stalls).
//
// Locks, always taken in this order: registry_mu_ -> ThreadBuffer::mu -> stall_mu_, and
// self_mu_ or blob_mu_ -> file_mu_ -> status_mu_ -> stall_mu_ (SetError). idle_mu_ guards
// nothing but the Flush wake-up. Compression happens outside file_mu_, which covers only the
// write, the index entry and the totals. A background thread never waits for a buffer's mu
// (SealAll uses try_lock there), so kStall cannot deadlock.
#include "formats/trace_writer.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "formats/byte_order.h"
#include "formats/container.h"
#include "formats/record_codec.h"

namespace ndt::format {
namespace {

using Clock = std::chrono::steady_clock;

// Writer id of chunks the writer itself produces: the header, DroppedRecords, blobs.
constexpr uint32_t kWriterSelfId = std::numeric_limits<uint32_t>::max();
// kStall: the longest one seal waits for room; then its records are dropped and counted.
constexpr auto kMaxStall = std::chrono::seconds(10);
// Written buffers a thread keeps for reuse; more are freed by the worker that wrote them.
constexpr uint32_t kMaxSpareNodes = 4;
// A worker that wrote a chunk within kBusyWindow sleeps at most kPollInterval and is not woken
// by appending threads unless kWakeBacklog chunks are in flight (Impl::Wake): at 1 GB/s a
// 256 KiB chunk is sealed every 250 us, so a busy stretch costs the appending threads no system
// call, and a record waits at most kPollInterval longer. A program that fills a chunk only
// every few milliseconds or less often gets its workers woken (a system call a chunk) and
// leaves them asleep in between, not polling.
constexpr auto kBusyWindow = std::chrono::milliseconds(5);
constexpr auto kPollInterval = std::chrono::milliseconds(1);
constexpr uint32_t kWakeBacklog = 16;
constexpr size_t kRecordTypes = std::variant_size_v<Record>;

uint64_t NextWriterUid() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::string ErrnoText(int error) { return std::strerror(error); }

// Sleeps while *word == expected, at most `timeout` (a wake-up may be spurious).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, Clock::duration timeout) {
  const auto ns = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count());
  const timespec relative{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
                  &relative, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) {
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, 1, nullptr,
                  nullptr, 0);
}

// What a chunk holds, by record type and op kind, for the WriterSummary.
struct Tally {
  std::array<uint64_t, kRecordTypes> by_type{};
  std::array<uint64_t, kOpKindCount> by_kind{};
};

struct ThreadBuffer;

struct PendingDrop {
  uint64_t records = 0;
  uint64_t bytes = 0;
};

// One buffer of record frames: a thread's current one, sealed and in flight to its worker,
// or written and waiting to be reused.
struct ChunkNode {
  ChunkNode* next = nullptr;  // in a Worker's or a ThreadBuffer's list
  ThreadBuffer* owner = nullptr;
  std::string data;  // record frames
  uint32_t count = 0;
  uint64_t sequence = 0;
  uint64_t first_op = std::numeric_limits<uint64_t>::max();
  uint64_t last_op = 0;
  Tally tally;
  void Reset() {
    data.clear();
    count = 0;
    first_op = std::numeric_limits<uint64_t>::max();
    last_op = 0;
    tally = Tally{};
  }
};

// Nodes live in lock-free lists as raw pointers; whoever takes one out owns it (the writer
// frees every list when it is destroyed, after its workers are joined).
using NodePtr = std::unique_ptr<ChunkNode>;

void DeleteList(ChunkNode* node) {
  while (node != nullptr) {
    NodePtr owned(node);
    node = node->next;
  }
}

// Pushes `node` on a lock-free list whose consumer takes it whole (exchange), so there is no
// ABA: newest first.
void PushNode(std::atomic<ChunkNode*>& head, ChunkNode* node) {
  node->next = head.load();
  while (!head.compare_exchange_weak(node->next, node)) {
  }
}

struct ThreadBuffer {
  std::mutex mu;
  uint32_t writer_id = 0;
  uint64_t next_sequence = 0;
  ChunkNode* current = nullptr;  // the buffer being filled (under mu)
  ChunkNode* spare = nullptr;    // written buffers ready for reuse (under mu)
  std::atomic<ChunkNode*> returned{nullptr};  // written buffers the workers gave back
  std::atomic<uint32_t> kept{0};               // in spare and returned, for kMaxSpareNodes
  // When `current` got its first record (steady_clock ns; 0: it is empty). The flush timer
  // seals only buffers this old, so it never touches a thread that fills its buffer itself.
  std::atomic<int64_t> opened_ns{0};
  uint64_t appended = 0;   // records accepted, for stats()
  uint64_t oversized = 0;  // records refused as too large, for stats()
  // Dropped since the last DroppedRecords record (WriteDropRecords takes them).
  std::atomic<uint64_t> drop_records{0};
  std::atomic<uint64_t> drop_bytes{0};
  ~ThreadBuffer() {
    NodePtr owned(current);
    DeleteList(spare);
    DeleteList(returned.load());
  }
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
  std::atomic<ChunkNode*> head{nullptr};  // sealed chunks, newest first
  std::atomic<uint32_t> wake{0};          // futex word: bumped to wake the worker
  std::atomic<bool> sleeping{false};      // the worker is (about to be) in FutexWait
  // ... for at most kPollInterval: it wrote a chunk within kBusyWindow, so an appending thread
  // need not wake it (Wake), unless chunks pile up.
  std::atomic<bool> polling{false};
  std::chrono::steady_clock::time_point last_work;  // the worker's own
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

  // RecordLike: Record, OpRecord or OpView (codec::AppendRecord takes each). `buffer`: the
  // calling thread's (null) or an origin's.
  template <typename RecordLike>
  bool Append(const RecordLike& record, ThreadBuffer* buffer = nullptr) {
    if (buffer == nullptr) buffer = LocalBuffer();
    std::lock_guard buffer_lock(buffer->mu);
    if (closed_.load(std::memory_order_relaxed)) {
      CountLost(1, 0);
      return false;
    }
    ChunkNode& node = *buffer->current;
    if (!codec::AppendRecord(record, &node.data)) {
      ++buffer->oversized;
      return false;
    }
    if (++node.count == 1) {
      buffer->opened_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    }
    ++buffer->appended;
    const auto tally_op = [&node](const auto& op) {
      ++node.tally.by_type[0];
      node.first_op = std::min(node.first_op, op.sequence);
      node.last_op = std::max(node.last_op, op.sequence);
      const auto kind = static_cast<size_t>(op.kind);
      if (kind < kOpKindCount) ++node.tally.by_kind[kind];
    };
    if constexpr (std::is_same_v<RecordLike, Record>) {
      if (const OpRecord* op = std::get_if<OpRecord>(&record)) {
        tally_op(*op);
      } else {
        ++node.tally.by_type[record.index()];
      }
    } else {
      tally_op(record);
    }
    if (node.data.size() >= options_.chunk_bytes) return SealLocked(*buffer, true);
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
    std::unique_lock idle_lock(idle_mu_);
    idle_cv_.wait(idle_lock, [&] { return in_flight_.load() == 0; });
    return status();
  }

  Status Close() {
    std::lock_guard close_lock(close_mu_);
    if (closed_.exchange(true)) return status();
    // Every buffer, blocking: an Append that got in before closed_ was set finishes first.
    SealAll(/*blocking=*/true);
    stopping_.store(true);
    WakeStallers();
    for (auto& worker : workers_) {
      Wake(*worker, /*always=*/true);
      if (worker->thread.joinable()) worker->thread.join();
    }
    WriteDropRecords();
    WriteSummary();
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
    // No content checksum: the chunk's hash covers the compressed bytes (formats/README.md).
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
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
      buffer->current = NewNode(*buffer);
      if (buffer->current == nullptr) throw std::bad_alloc();
      slot = buffer.get();
      buffers_.push_back(std::move(buffer));
    }
    return slot;
  }

  // A new empty buffer for `owner`, or null when there is no memory for one.
  ChunkNode* NewNode(ThreadBuffer& owner) {
    try {
      auto node = std::make_unique<ChunkNode>();
      node->owner = &owner;
      node->data.reserve(options_.chunk_bytes + 4096);
      return node.release();
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }

  // The buffer `buffer` fills next: a written one given back, else a new one (unless
  // `may_allocate` is false: then null). Its mu held.
  ChunkNode* TakeNode(ThreadBuffer& buffer, bool may_allocate = true) {
    if (buffer.spare == nullptr) buffer.spare = buffer.returned.exchange(nullptr);
    if (buffer.spare != nullptr) {
      ChunkNode* node = buffer.spare;
      buffer.spare = node->next;
      node->next = nullptr;
      buffer.kept.fetch_sub(1);
      return node;
    }
    return may_allocate ? NewNode(buffer) : nullptr;
  }

  // Hands a written buffer back to its thread (or frees it when the thread keeps enough).
  void ReturnNode(ChunkNode* node) {
    ThreadBuffer& owner = *node->owner;
    if (owner.kept.fetch_add(1) >= kMaxSpareNodes) {
      owner.kept.fetch_sub(1);
      NodePtr owned(node);
      return;
    }
    node->Reset();
    PushNode(owner.returned, node);
  }

  // Counts `bytes` as buffered if they fit under max_buffered_bytes (always when `force`).
  bool Reserve(size_t bytes, bool force) {
    size_t buffered = buffered_bytes_.load();
    do {
      if (!force && buffered != 0 && buffered + bytes > options_.max_buffered_bytes) return false;
    } while (!buffered_bytes_.compare_exchange_weak(buffered, buffered + bytes));
    return true;
  }

  // kStall: waits, at most kMaxStall, until `bytes` fit (then reserved: true), the writer
  // fails or closes. Counts the wait.
  bool StallFor(size_t bytes) {
    const auto start = Clock::now();
    bool reserved = false;
    stallers_.fetch_add(1);
    {
      std::unique_lock stall_lock(stall_mu_);
      space_cv_.wait_until(stall_lock, start + kMaxStall, [&] {
        reserved = Reserve(bytes, /*force=*/false);
        return reserved || failed_.load() || stopping_.load();
      });
    }
    stallers_.fetch_sub(1);
    stall_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    ++stalls_;
    return reserved;
  }

  void WakeStallers() {
    if (stallers_.load() == 0) return;
    std::lock_guard stall_lock(stall_mu_);
    space_cv_.notify_all();
  }

  // Wakes `worker` if it sleeps (or is about to): the seq_cst push before this load and the
  // worker's seq_cst store of `sleeping` before it looks at its list again mean either the
  // worker sees the chunk or this sees it sleeping. A worker that polls looks again within
  // kPollInterval: it is left to, so that an appending thread makes no system call when it
  // seals a buffer in a busy stretch, unless kWakeBacklog chunks are in flight (or `always`).
  // The worker stores `polling` false before `sleeping` true, so a worker going to sleep for
  // longer is never taken for one that polls.
  void Wake(Worker& worker, bool always = false) {
    if (!worker.sleeping.load()) return;
    if (!always && worker.polling.load() && in_flight_.load() < kWakeBacklog) return;
    worker.wake.fetch_add(1);
    FutexWake(&worker.wake);
  }

  // Hands the buffer's records to its compression worker, or drops them when the buffers are
  // full (kDrop; kStall after kMaxStall), the writer has failed or there is no memory for the
  // next buffer. `may_stall`: an appending thread (under kStall it waits for room); a
  // background thread never waits, and never drops for want of room. The buffer's mu held.
  bool SealLocked(ThreadBuffer& buffer, bool may_stall) {
    ChunkNode* node = buffer.current;
    const size_t bytes = node->data.size();
    ChunkNode* next = failed_.load() ? nullptr : TakeNode(buffer);
    return HandOver(buffer, may_stall, node, bytes, next);
  }

  // The flush timer's seal of an idle buffer, on a background thread while the buffer's
  // thread may be about to append: it holds the buffer's mu for a swap and a push only, never
  // for an allocation (with no written buffer to swap in, the buffer waits for its thread or
  // the next interval). False when it did not seal.
  bool SealIdleLocked(ThreadBuffer& buffer) {
    if (failed_.load()) return SealLocked(buffer, /*may_stall=*/false);
    ChunkNode* next = TakeNode(buffer, /*may_allocate=*/false);
    if (next == nullptr) return false;
    return HandOver(buffer, /*may_stall=*/false, buffer.current, buffer.current->data.size(),
                    next);
  }

  // SealLocked's second half: queues `node` (`bytes` of frames) and makes `next` the buffer's
  // current one, or drops `node`'s records.
  bool HandOver(ThreadBuffer& buffer, bool may_stall, ChunkNode* node, size_t bytes,
                ChunkNode* next) {
    bool room = next != nullptr && Reserve(bytes, /*force=*/!may_stall);
    if (next != nullptr && !room && options_.when_full == FullPolicy::kStall) {
      room = StallFor(bytes);
    }
    if (!room || failed_.load()) {
      if (room) buffered_bytes_.fetch_sub(bytes);
      if (next != nullptr) {  // back to the spares
        next->next = buffer.spare;
        buffer.spare = next;
        buffer.kept.fetch_add(1);
      }
      buffer.drop_records += node->count;
      buffer.drop_bytes += bytes;
      CountLost(node->count, bytes);
      node->Reset();
      buffer.opened_ns.store(0, std::memory_order_relaxed);
      return false;
    }
    node->sequence = buffer.next_sequence++;
    buffer.current = next;
    buffer.opened_ns.store(0, std::memory_order_relaxed);
    Worker& worker = *workers_[buffer.writer_id % workers_.size()];
    in_flight_.fetch_add(1);
    PushNode(worker.head, node);
    Wake(worker);
    return true;
  }

  // Seals every buffer that holds records (`blocking`: Flush, Close), or (the flush timer)
  // every one whose first record is at least half a flush interval old, without waiting for
  // a buffer its thread holds.
  void SealAll(bool blocking) {
    const int64_t now = Clock::now().time_since_epoch().count();
    const int64_t min_age =
        std::chrono::duration_cast<Clock::duration>(options_.flush_interval / 2).count();
    std::lock_guard registry_lock(registry_mu_);
    for (const auto& buffer : buffers_) {
      if (!blocking) {
        const int64_t opened = buffer->opened_ns.load(std::memory_order_relaxed);
        if (opened == 0 || now - opened < min_age) continue;  // empty, or its thread fills it
      }
      std::unique_lock buffer_lock(buffer->mu, std::defer_lock);
      if (blocking) {
        buffer_lock.lock();
      } else if (!buffer_lock.try_lock()) {
        continue;  // its thread is appending and will seal it itself
      }
      if (buffer->current->data.empty()) continue;
      if (blocking) {
        SealLocked(*buffer, /*may_stall=*/false);
      } else if (!SealIdleLocked(*buffer) && !failed_.load()) {
        // No written buffer to swap in: make one without the lock, give it to the buffer as
        // if written, and try again.
        buffer_lock.unlock();
        ChunkNode* spare = NewNode(*buffer);
        if (spare == nullptr) continue;
        buffer->kept.fetch_add(1);
        PushNode(buffer->returned, spare);
        if (buffer_lock.try_lock() && !buffer->current->data.empty()) SealIdleLocked(*buffer);
      }
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
    // The timer ticks every half interval and seals buffers half an interval old: a record
    // waits at most about one interval for its chunk.
    const auto tick = std::max<Clock::duration>(options_.flush_interval / 2,
                                                std::chrono::milliseconds(1));
    auto next_seal = Clock::now() + tick;
    while (true) {
      ChunkNode* list = worker.head.exchange(nullptr);
      if (list == nullptr) {
        const auto now = Clock::now();
        if (i == 0 && now >= next_seal) {
          try {
            SealAll(/*blocking=*/false);
            WriteDropRecords();
          } catch (...) {
            FailFromException();
          }
          next_seal = Clock::now() + tick;
          continue;
        }
        // Close sets stopping_ after its last seal, so nothing is pushed after this is seen.
        if (stopping_.load()) {
          if (worker.head.load() == nullptr) return;
          continue;
        }
        const uint32_t wake = worker.wake.load();
        const bool poll = now - worker.last_work < kBusyWindow;
        worker.polling.store(poll);
        worker.sleeping.store(true);
        if (worker.head.load() == nullptr && !stopping_.load()) {
          Clock::duration timeout = i == 0 ? next_seal - now : options_.flush_interval;
          if (poll) timeout = std::min<Clock::duration>(timeout, kPollInterval);
          FutexWait(&worker.wake, wake, timeout);
        }
        worker.sleeping.store(false);
        worker.polling.store(false);
        continue;
      }
      worker.last_work = Clock::now();
      ChunkNode* fifo = nullptr;  // the list, oldest first
      while (list != nullptr) {
        ChunkNode* next = list->next;
        list->next = fifo;
        fifo = list;
        list = next;
      }
      while (fifo != nullptr) {
        ChunkNode* node = fifo;
        fifo = node->next;
        node->next = nullptr;
        try {
          WriteRecordsChunk(worker, *node);
        } catch (...) {
          FailFromException();
          CountLost(node->count, node->data.size());
        }
        buffered_bytes_.fetch_sub(node->data.size());
        ReturnNode(node);
        if (in_flight_.fetch_sub(1) == 1) {
          std::lock_guard idle_lock(idle_mu_);
          idle_cv_.notify_all();
        }
        WakeStallers();
      }
    }
  }

  void WriteRecordsChunk(Worker& worker, const ChunkNode& sealed) {
    container::ChunkHeader chunk;
    chunk.kind = ChunkKind::kRecords;
    chunk.writer_id = sealed.owner->writer_id;
    chunk.sequence = sealed.sequence;
    chunk.count = sealed.count;
    chunk.tag0 = sealed.first_op;
    chunk.tag1 = sealed.last_op;
    if (!CompressAndWrite(worker.cctx, &worker.compressed, chunk, sealed.data, &sealed.tally)
             .ok()) {
      CountLost(sealed.count, sealed.data.size());
    }
  }

  void WriteDropRecords() {
    std::vector<std::pair<uint32_t, PendingDrop>> drops;
    {
      std::lock_guard registry_lock(registry_mu_);
      for (const auto& buffer : buffers_) {
        if (buffer->drop_records.load() == 0 && buffer->drop_bytes.load() == 0) continue;
        drops.push_back({buffer->writer_id,
                         {buffer->drop_records.exchange(0), buffer->drop_bytes.exchange(0)}});
      }
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
    Tally tally;
    tally.by_type[Record(DroppedRecords{}).index()] = count;
    std::lock_guard self_lock(self_mu_);
    (void)CompressAndWrite(self_cctx_, &self_compressed_, chunk, frames, &tally);
  }

  // The WriterSummary, as one blob (the last chunk before the index; the index chunk's header
  // points at it), so a reader has the trace's totals without reading its records.
  void WriteSummary() {
    WriterSummary summary;
    {
      std::lock_guard file_lock(file_mu_);
      if (failed_.load()) return;
      summary.records_by_type.assign(totals_.by_type.begin(), totals_.by_type.end());
      summary.ops_by_kind.assign(totals_.by_kind.begin(), totals_.by_kind.end());
      for (uint64_t n : totals_.by_type) summary.records += n;
      summary.ops = totals_.by_type[0];
      summary.chunks = index_.size() / container::kIndexEntryBytes - 1;  // not the header
      summary.uncompressed_bytes = uncompressed_bytes_;
    }
    summary.dropped_records = dropped_records_.load();
    summary.dropped_bytes = dropped_bytes_.load();
    summary.stall_ns = stall_ns_.load();
    summary.stalls = stalls_.load();
    summary.blobs = stored_blob_count_.load();
    {
      std::lock_guard registry_lock(registry_mu_);
      for (const auto& buffer : buffers_) {
        std::lock_guard buffer_lock(buffer->mu);
        summary.oversized_records += buffer->oversized;
      }
    }
    std::string frame;
    if (!codec::AppendSummary(summary, &frame)) return;
    std::string part(container::kBlobPartPrefixBytes, '\0');
    StoreLe64(part.data(), frame.size());
    StoreLe64(part.data() + 8, 0);
    part += frame;
    const XXH128_hash_t id = XXH3_128bits(frame.data(), frame.size());
    container::ChunkHeader chunk;
    chunk.kind = ChunkKind::kBlob;
    chunk.writer_id = kWriterSelfId;
    chunk.count = 0;
    chunk.tag0 = id.low64;
    chunk.tag1 = id.high64;
    std::lock_guard self_lock(self_mu_);
    uint64_t offset = 0;
    if (CompressAndWrite(self_cctx_, &self_compressed_, chunk, part, nullptr, &offset).ok()) {
      summary_offset_ = offset;
    }
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
    if (summary_offset_) {
      chunk.tag0 = *summary_offset_;
      chunk.tag1 = codec::kSummaryIndexMarker;
    }
    std::lock_guard self_lock(self_mu_);
    if (!CompressAndWrite(self_cctx_, &self_compressed_, chunk, entries).ok()) return;
    char footer[container::kFooterBytes];
    container::EncodeFooter(index_offset, footer);
    std::lock_guard file_lock(file_mu_);
    (void)WriteAllLocked(footer, sizeof footer, nullptr, 0);
  }

  // Compresses `payload` with `cctx` into `*compressed` (outside the file lock), then
  // appends the chunk to the file. Chunks of the writer itself get their sequence here, in
  // file order. `tally`: a records chunk's counts, added to the totals once it is written;
  // `chunk_offset_out`: where it was written.
  Status CompressAndWrite(ZSTD_CCtx* cctx, std::string* compressed, container::ChunkHeader chunk,
                          std::string_view payload, const Tally* tally = nullptr,
                          uint64_t* chunk_offset_out = nullptr) {
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
    if (tally != nullptr) {
      for (size_t i = 0; i < kRecordTypes; ++i) totals_.by_type[i] += tally->by_type[i];
      for (size_t i = 0; i < kOpKindCount; ++i) totals_.by_kind[i] += tally->by_kind[i];
    }
    if (chunk_offset_out != nullptr) *chunk_offset_out = chunk_offset;
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
    std::lock_guard stall_lock(stall_mu_);  // no stalled appender misses the wake-up
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

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<size_t> buffered_bytes_{0};  // sealed, not yet written
  std::atomic<uint64_t> in_flight_{0};     // sealed chunks not yet written
  std::atomic<bool> stopping_{false};      // Close sealed the last buffers
  std::mutex stall_mu_;
  std::condition_variable space_cv_;  // room in the buffers (kStall)
  std::atomic<uint32_t> stallers_{0};  // appending threads waiting on space_cv_
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;  // in_flight_ reached 0 (Flush)

  std::mutex self_mu_;  // the writer's own chunks: header, DroppedRecords, index
  ZSTD_CCtx* self_cctx_ = nullptr;
  std::string self_compressed_;

  mutable std::mutex file_mu_;
  uint64_t offset_ = 0;
  uint64_t self_sequence_ = 0;
  uint64_t uncompressed_bytes_ = 0;
  Tally totals_;       // records written, by type and op kind
  std::string index_;  // kIndexEntryBytes per chunk written
  std::optional<uint64_t> summary_offset_;  // of the WriterSummary blob (Close's thread only)

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
  std::atomic<uint64_t> stalls_{0};
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
bool TraceWriter::Append(const OpView& op, uint64_t origin) {
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
