// RecordRings: takes the encoding of records (Cap'n Proto framing into the writer's buffers)
// off the threads that append them.
//
// Each appending thread gets its own single-producer ring of preallocated record slots. Append
// copies the record into the next slot (copy-assignment: the slot's strings and vectors keep
// their capacity, so in steady state nothing is allocated) and publishes it with one release
// store; no lock, no system call. A raw op (raw_op.h) puts its fixed-size header in the slot and
// its arguments and parameter bytes in the ring's byte arena, which is consumed in the slots'
// order; a ring whose arena has no room is full. A background thread (the encoder, one per
// RecordRings, all signals blocked) moves each ring's records into the TraceWriter under the
// origin each was appended for, oldest first, so the writer's order per origin is the order of
// the Append calls of the thread that made them.
//
// Whoever encodes a ring holds that ring's consumer lock: the encoder, the appending thread
// itself when it must write something directly (DrainCallingThread) or when its ring is full.
// A full ring never drops a record: the appending thread encodes a few of its own oldest
// records itself (what every append cost before the rings) and goes on; if the encoder is
// encoding that ring at that moment, it spins briefly (the encoder frees slots one by one, at
// most kEncoderBatch per turn), then waits for the ring's lock.
//
// A record whose GPU digests are still being computed (AppendHeld) goes into its thread's ring
// with their tickets: whoever encodes the ring stops at it until `Held::settle` says they have
// all arrived (the encoder looks again every kHeldPollMicros; a full ring's thread and Flush
// with `wait` wait for them). So it holds back its own thread's later records only.
//
// Stop() stops the encoder and encodes what every ring still holds; later appends go to the
// writer directly. A thread's ring is reused by a later thread once the first has exited.
// After fork() the child never touches the parent's rings (its RecordRings is another object).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "formats/records.h"
#include "formats/trace_writer.h"
#include "tracer/raw_op.h"

namespace ndt::tracer {

class RecordRings {
 public:
  // Records at most an encoder pass takes from one ring while holding its lock.
  static constexpr size_t kEncoderBatch = 32;
  // Records an appending thread encodes itself when its ring is full.
  static constexpr size_t kHelpBatch = 8;
  // Per ring slot, the bytes of its ring's arena for raw ops' arguments and parameter bytes
  // (a memset's take 160, a launch's with four parameters about 300).
  static constexpr size_t kArenaBytesPerSlot = 256;

  struct Stats {
    uint64_t appended = 0;  // records that went through a ring
    uint64_t helped = 0;    // of them, encoded by their own thread because its ring was full
    uint64_t direct = 0;    // appended after Stop(), straight to the writer
    uint64_t rings = 0;     // rings made
  };

  // Starts `routine(argument)` on a new detached thread; 0 on success (pthread_create's errors).
  using StartThreadFn = int (*)(void* (*routine)(void*), void* argument);

  // Records held for their GPU digests (AppendHeld): `settle` puts into `record` what has
  // arrived of the digests `tickets` name, taking those out of `tickets`; with `wait` it waits
  // for each. Returns how many can never arrive (their placeholders taken out of the record);
  // the record is written once `tickets` is empty, followed by `lost_note(lost)` when some were.
  struct Held {
    std::function<uint64_t(format::Record& record, std::vector<uint64_t>& tickets, bool wait)>
        settle;
    std::function<format::Record(uint64_t lost)> lost_note;
  };
  // While a ring's oldest record waits for its digests, the encoder looks again this often.
  static constexpr int kHeldPollMicros = 50;

  // `writer` outlives this object. `slots`: per ring, a power of two >= 2 * kEncoderBatch.
  // Starts the encoder thread with `start_thread` (the tracer's: StartOwnThread, which keeps it
  // out of the program's thread lineage; null: pthread_create); without one (it could not be
  // created) every Append goes to the writer directly.
  explicit RecordRings(format::TraceWriter* writer, size_t slots = 1024,
                       StartThreadFn start_thread = nullptr, Held held = {});
  ~RecordRings();  // Stop()s
  RecordRings(const RecordRings&) = delete;
  RecordRings& operator=(const RecordRings&) = delete;

  // Queues `op` (a copy) for the writer under `origin`. Any thread.
  void Append(const format::OpRecord& op, uint64_t origin);
  void Append(const format::Record& record, uint64_t origin);
  // Queues `record` (an op or a state digest with GPU digests in flight, named by `tickets`):
  // it and every record this thread appends after it are written once `held.settle` has
  // settled them, in order; other threads' records are not held back. A full ring's thread
  // waits for them.
  void AppendHeld(format::Record record, std::vector<uint64_t> tickets, uint64_t origin);
  // The same, swapping `op` into the slot instead of copying it: `op` comes back holding an
  // earlier record (already written; its strings and vectors keep their capacity), or, when
  // the record went to the writer directly, unchanged.
  void AppendSwap(format::OpRecord& op, uint64_t origin);
  // Queues the parts of `op` in use (its header in a slot, its arguments and bytes in the
  // ring's arena); the encoder turns it into an op record (raw_op.h).
  void AppendRaw(const RawOp& op, uint64_t origin);
  // An NVTX range record with its strings as views, for AppendNvtx.
  struct NvtxFields {
    format::NvtxRangeRecord numbers;  // every field but the strings (not read)
    std::string_view name;
    std::string_view domain;
    // The record, strings copied: for the paths that do not build it in a slot.
    format::NvtxRangeRecord ToRecord() const;
  };
  // Queues the NVTX range record `fields` describe, built in its slot: the slot's strings keep
  // their capacity, so in steady state nothing is allocated (the NVTX hooks' path).
  void AppendNvtx(const NvtxFields& fields, uint64_t origin);
  // Swaps two op records member by member (cheaper than std::swap's three whole moves).
  static void SwapOp(format::OpRecord& a, format::OpRecord& b);

  // Encodes every record the calling thread has queued, now, on this thread (waiting for held
  // records' digests): call before appending to the writer directly for the same origin.
  void DrainCallingThread();

  // Encodes every ring's records now, on the calling thread; with `wait`, waits for the held
  // ones' digests, else stops at each ring's first record still waiting. Any thread but the
  // encoder.
  void Flush(bool wait);
  // Records appended with AppendHeld and not yet written.
  uint64_t held() const { return held_.load(std::memory_order_acquire); }

  // Stops the encoder (waits for it), then encodes every ring's records on the calling thread.
  // Idempotent. Any thread but the encoder.
  void Stop();

  Stats stats() const;

  struct Ring;

 private:
  Ring* CallingThreadRing();
  std::shared_ptr<Ring> NewRing();
  // Encodes at most `max` of `ring`'s records; its consumer lock held. Returns how many. A held
  // record whose digests have not arrived stops it (`*waiting` set), unless `wait`.
  size_t DrainLocked(Ring& ring, size_t max, bool wait = true, bool* waiting = nullptr);
  // Makes room in `ring` (full: no free slot, or its arena's bytes up to `body_end` still
  // queued): encodes some of its records on this thread.
  void MakeRoom(Ring& ring, uint64_t body_end);
  // Fills the calling thread's next slot with `fill(slot, body)`, `body` the place of
  // `body_bytes` bytes (a multiple of 8) in its arena; fill(nullptr, nullptr) writes directly.
  template <typename Fill>
  void Push(Fill&& fill, size_t body_bytes = 0);
  void RunEncoder();
  static void* EncoderMain(void* self);

  format::TraceWriter* const writer_;
  const Held held_fns_;
  std::atomic<uint64_t> held_{0};
  const size_t slots_;
  const size_t arena_bytes_;  // a power of two, at least twice the largest raw op's body
  const size_t wake_at_;  // queued records at which an appending thread wakes the encoder
  const uint64_t uid_;
  std::atomic<bool> stopped_{false};

  mutable std::mutex registry_mu_;  // guards rings_
  std::vector<std::shared_ptr<Ring>> rings_;
  std::atomic<size_t> ring_count_{0};

  std::mutex wake_mu_;  // the encoder's sleep; stop_ and encoder_done_
  std::condition_variable wake_cv_;
  bool stop_ = false;
  bool encoder_running_ = false;
  bool encoder_done_ = false;

  std::atomic<uint64_t> helped_{0};
  std::atomic<uint64_t> direct_{0};
};

}  // namespace ndt::tracer
