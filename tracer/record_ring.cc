#include "tracer/record_ring.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>
#include <utility>

namespace ndt::tracer {

struct RecordRings::Ring {
  enum class Holds : uint8_t { kOp, kRaw, kOther };
  struct Slot {
    Holds holds = Holds::kOp;
    uint64_t origin = 0;
    format::OpRecord op;   // kOp
    RawOpHeader raw{};     // kRaw; its body is in the arena at [body, body_end)
    uint64_t body = 0;
    uint64_t body_end = 0;
    format::Record other;  // kOther
    std::vector<uint64_t> tickets;  // kOther held for its GPU digests (AppendHeld) while not empty
  };

  Ring(size_t n, size_t arena_bytes)
      : slots(new Slot[n]),
        mask(n - 1),
        arena(new unsigned char[arena_bytes]),
        arena_mask(arena_bytes - 1) {}

  // Where a raw op's body of `bytes` bytes goes: at arena_head, or at the start of the arena
  // when it would wrap (bodies are contiguous). Owning thread only.
  uint64_t BodyAt(size_t bytes) const {
    const uint64_t at = arena_head;
    const uint64_t room_to_end = arena_mask + 1 - (at & arena_mask);
    return bytes <= room_to_end ? at : at + room_to_end;
  }

  const std::unique_ptr<Slot[]> slots;
  const uint64_t mask;
  // Raw ops' bodies, oldest first, in the slots' order: [arena_tail, arena_head) are queued.
  const std::unique_ptr<unsigned char[]> arena;
  const uint64_t arena_mask;
  // Written by the owning thread only: the next slot it fills. Slots [tail, head) are queued.
  alignas(64) std::atomic<uint64_t> head{0};
  std::atomic<uint64_t> appended{0};  // owning thread only (relaxed), for stats()
  uint64_t arena_head = 0;            // owning thread only
  // Written under consume_mu only: the next slot to encode, and the arena's oldest byte in use.
  alignas(64) std::atomic<uint64_t> tail{0};
  std::atomic<uint64_t> arena_tail{0};
  std::mutex consume_mu;
  std::atomic<bool> owned{true};  // false once its thread has exited: the next new thread's
  format::OpRecord scratch;       // a raw op with facts turned into a record (under consume_mu)
};

namespace {

// Appends the raw op of `header` and `body` (PackBody's) for `origin`: as it stands when its
// arguments are all in the body, else through an OpRecord built in `scratch`.
void AppendRawTo(format::TraceWriter& writer, const RawOpHeader& header, const unsigned char* body,
                 format::OpRecord& scratch, uint64_t origin) {
  if (header.build == nullptr) {
    writer.Append(View(header, body), origin);
    return;
  }
  ToOpRecord(header, body, scratch);
  writer.Append(scratch, origin);
}

uint64_t NextUid() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// The calling thread's ring in the RecordRings of uid `uid` (trivially destructible: readable
// at any point of the thread's exit).
struct CallingRing {
  uint64_t uid = 0;
  RecordRings::Ring* ring = nullptr;
};
thread_local CallingRing t_ring;
thread_local bool t_exited = false;

// Hands the thread's ring back when the thread exits, for a later thread to reuse. Shares the
// ring: a RecordRings destroyed before the thread exits (tests) leaves it alive until then.
struct RingRelease {
  std::shared_ptr<RecordRings::Ring> ring;
  ~RingRelease() {
    if (ring != nullptr) ring->owned.store(false, std::memory_order_release);
    t_ring = {};
    t_exited = true;
  }
};
thread_local RingRelease t_release;

void Pause() { __builtin_ia32_pause(); }
constexpr int kSpins = 256;  // MakeRoom's spins before it waits for a ring's lock

int StartDetached(void* (*routine)(void*), void* argument) {
  pthread_attr_t attributes;
  if (const int error = pthread_attr_init(&attributes); error != 0) return error;
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int error = pthread_create(&thread, &attributes, routine, argument);
  pthread_attr_destroy(&attributes);
  return error;
}

}  // namespace

RecordRings::RecordRings(format::TraceWriter* writer, size_t slots, StartThreadFn start_thread,
                         Held held)
    : writer_(writer),
      held_fns_(std::move(held)),
      slots_(std::bit_ceil(std::max(slots, 2 * kEncoderBatch))),
      arena_bytes_(std::max(slots_ * kArenaBytesPerSlot,
                            std::bit_ceil(2 * (sizeof(RawOp::args) + RawOp::kMaxBytes)))),
      wake_at_(slots_ / 4),
      uid_(NextUid()) {
  // The encoder starts with every signal blocked: a signal meant for the program is never
  // delivered to it.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  encoder_running_ =
      (start_thread != nullptr ? start_thread : StartDetached)(&RecordRings::EncoderMain, this) == 0;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!encoder_running_) stopped_.store(true, std::memory_order_release);
}

RecordRings::~RecordRings() { Stop(); }

void* RecordRings::EncoderMain(void* self) {
  static_cast<RecordRings*>(self)->RunEncoder();
  return nullptr;
}

RecordRings::Ring* RecordRings::CallingThreadRing() {
  CallingRing& calling = t_ring;
  if (calling.uid == uid_) return calling.ring;
  if (stopped_.load(std::memory_order_acquire)) return nullptr;
  std::shared_ptr<Ring> ring = NewRing();
  calling = {uid_, ring.get()};
  if (!t_exited) t_release.ring = ring;
  return ring.get();
}

std::shared_ptr<RecordRings::Ring> RecordRings::NewRing() {
  std::lock_guard lock(registry_mu_);
  for (const auto& ring : rings_) {
    bool owned = false;
    if (ring->owned.compare_exchange_strong(owned, true, std::memory_order_acq_rel)) {
      return ring;
    }
  }
  rings_.push_back(std::make_shared<Ring>(slots_, arena_bytes_));
  ring_count_.store(rings_.size(), std::memory_order_release);
  return rings_.back();
}

size_t RecordRings::DrainLocked(Ring& ring, size_t max, bool wait, bool* waiting) {
  uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  const uint64_t head = ring.head.load(std::memory_order_acquire);
  size_t done = 0;
  while (tail != head && done < max) {
    Ring::Slot& slot = ring.slots[tail & ring.mask];
    uint64_t lost = 0;
    if (!slot.tickets.empty()) {
      try {
        lost = held_fns_.settle(slot.other, slot.tickets, wait);
      } catch (...) {
        slot.tickets.clear();  // out of memory: written with the placeholders left
      }
      if (!slot.tickets.empty()) {
        if (waiting != nullptr) *waiting = true;
        break;
      }
      held_.fetch_sub(1, std::memory_order_acq_rel);
    }
    try {
      switch (slot.holds) {
        case Ring::Holds::kOp:
          writer_->Append(slot.op, slot.origin);
          break;
        case Ring::Holds::kRaw:
          AppendRawTo(*writer_, slot.raw, &ring.arena[slot.body & ring.arena_mask], ring.scratch,
                      slot.origin);
          break;
        case Ring::Holds::kOther:
          writer_->Append(slot.other, slot.origin);
          if (lost != 0) writer_->Append(held_fns_.lost_note(lost), slot.origin);
          break;
      }
    } catch (...) {
      // Out of memory in the writer: this record is lost, as a record the writer cannot buffer.
    }
    if (slot.holds == Ring::Holds::kRaw) {
      ring.arena_tail.store(slot.body_end, std::memory_order_release);
    }
    ++tail;
    ++done;
    ring.tail.store(tail, std::memory_order_release);
  }
  return done;
}

void RecordRings::MakeRoom(Ring& ring, uint64_t body_end) {
  const uint64_t head = ring.head.load(std::memory_order_relaxed);
  int spins = 0;
  while (head - ring.tail.load(std::memory_order_acquire) > ring.mask ||
         body_end - ring.arena_tail.load(std::memory_order_acquire) > ring.arena_mask + 1) {
    // The encoder is encoding this ring: a slot frees with its next record. Spin a little, then
    // wait for its lock (an encoder preempted while holding it must get the CPU back).
    if (ring.consume_mu.try_lock() || (++spins > kSpins && (ring.consume_mu.lock(), true))) {
      const size_t done = DrainLocked(ring, kHelpBatch);
      ring.consume_mu.unlock();
      helped_.fetch_add(done, std::memory_order_relaxed);
      spins = 0;
    } else {
      Pause();
    }
  }
}

template <typename Fill>
void RecordRings::Push(Fill&& fill, size_t body_bytes) {
  Ring* ring = CallingThreadRing();
  if (ring == nullptr || stopped_.load(std::memory_order_acquire)) {
    // Stopped (or no encoder): this thread's queued records first, then this one, directly.
    if (ring != nullptr) DrainCallingThread();
    direct_.fetch_add(1, std::memory_order_relaxed);
    fill(nullptr, nullptr);
    return;
  }
  const uint64_t head = ring->head.load(std::memory_order_relaxed);
  const uint64_t body = ring->BodyAt(body_bytes);
  if (head - ring->tail.load(std::memory_order_acquire) > ring->mask ||
      body + body_bytes - ring->arena_tail.load(std::memory_order_acquire) > ring->arena_mask + 1) {
    MakeRoom(*ring, body + body_bytes);
  }
  Ring::Slot& slot = ring->slots[head & ring->mask];
  slot.body = body;
  slot.body_end = body + body_bytes;
  ring->arena_head = slot.body_end;
  fill(&slot, &ring->arena[body & ring->arena_mask]);
  ring->head.store(head + 1, std::memory_order_release);
  ring->appended.store(ring->appended.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
  // Wake a sleeping encoder once a quarter of the ring is queued (no system call when it is
  // awake: pthread_cond_signal returns at once without waiters). Not sooner: a thread that
  // issues ops steadily would otherwise pay for a wake-up (a futex call, about a microsecond)
  // every few records, as the encoder, faster than it, empties the ring and sleeps again.
  if (head + 1 - ring->tail.load(std::memory_order_relaxed) == wake_at_) {
    wake_cv_.notify_one();
  }
}

void RecordRings::Append(const format::OpRecord& op, uint64_t origin) {
  Push([&](Ring::Slot* slot, unsigned char*) {
    if (slot == nullptr) {
      writer_->Append(op, origin);
      return;
    }
    slot->holds = Ring::Holds::kOp;
    slot->origin = origin;
    slot->op = op;
  });
}

void RecordRings::SwapOp(format::OpRecord& a, format::OpRecord& b) {
  std::swap(a.sequence, b.sequence);
  std::swap(a.thread_id, b.thread_id);
  std::swap(a.stream_id, b.stream_id);
  std::swap(a.kind, b.kind);
  a.name.swap(b.name);
  a.args.swap(b.args);
  if (a.algorithm || b.algorithm) std::swap(a.algorithm, b.algorithm);
  if (a.rng || b.rng) std::swap(a.rng, b.rng);
  a.inputs.swap(b.inputs);
  a.outputs.swap(b.outputs);
  std::swap(a.status, b.status);
  std::swap(a.start_ns, b.start_ns);
  std::swap(a.end_ns, b.end_ns);
  std::swap(a.module_id, b.module_id);
  std::swap(a.device_ordinal, b.device_ordinal);
  std::swap(a.nvtx_range_id, b.nvtx_range_id);
}

void RecordRings::AppendSwap(format::OpRecord& op, uint64_t origin) {
  Push([&](Ring::Slot* slot, unsigned char*) {
    if (slot == nullptr) {
      writer_->Append(op, origin);
      return;
    }
    slot->holds = Ring::Holds::kOp;
    slot->origin = origin;
    SwapOp(slot->op, op);
  });
}

void RecordRings::AppendRaw(const RawOp& op, uint64_t origin) {
  Push(
      [&](Ring::Slot* slot, unsigned char* body) {
        if (slot == nullptr) {
          alignas(RawOp::Arg) unsigned char packed[sizeof(RawOp::args) + RawOp::kMaxBytes];
          PackBody(op, packed);
          format::OpRecord record;
          AppendRawTo(*writer_, op, packed, record, origin);
          return;
        }
        slot->holds = Ring::Holds::kRaw;
        slot->origin = origin;
        slot->raw = op;
        PackBody(op, body);
      },
      (op.BodyBytes() + 7) / 8 * 8);
}

void RecordRings::Append(const format::Record& record, uint64_t origin) {
  Push([&](Ring::Slot* slot, unsigned char*) {
    if (slot == nullptr) {
      writer_->Append(record, origin);
      return;
    }
    slot->holds = Ring::Holds::kOther;
    slot->origin = origin;
    slot->other = record;
  });
}

void RecordRings::AppendHeld(format::Record record, std::vector<uint64_t> tickets,
                             uint64_t origin) {
  Push([&](Ring::Slot* slot, unsigned char*) {
    if (slot == nullptr) {  // no encoder: settled here, waiting
      const uint64_t lost = held_fns_.settle(record, tickets, /*wait=*/true);
      writer_->Append(record, origin);
      if (lost != 0) writer_->Append(held_fns_.lost_note(lost), origin);
      return;
    }
    slot->holds = Ring::Holds::kOther;
    slot->origin = origin;
    slot->other = std::move(record);
    slot->tickets = std::move(tickets);
    held_.fetch_add(1, std::memory_order_acq_rel);
  });
}

namespace {

// `into` made the record `fields` describe, its strings assigned in place.
void FillNvtx(const RecordRings::NvtxFields& fields, format::NvtxRangeRecord& into) {
  const format::NvtxRangeRecord& from = fields.numbers;
  into.thread_id = from.thread_id;
  into.push = from.push;
  into.name.assign(fields.name);
  into.before_op = from.before_op;
  into.time_ns = from.time_ns;
  into.kind = from.kind;
  into.range_id = from.range_id;
  into.parent_id = from.parent_id;
  into.domain.assign(fields.domain);
  into.category = from.category;
}

}  // namespace

format::NvtxRangeRecord RecordRings::NvtxFields::ToRecord() const {
  format::NvtxRangeRecord record;
  FillNvtx(*this, record);
  return record;
}

void RecordRings::AppendNvtx(const NvtxFields& fields, uint64_t origin) {
  Push([&](Ring::Slot* slot, unsigned char*) {
    if (slot == nullptr) {
      writer_->Append(format::Record(fields.ToRecord()), origin);
      return;
    }
    slot->holds = Ring::Holds::kOther;
    slot->origin = origin;
    auto* record = std::get_if<format::NvtxRangeRecord>(&slot->other);
    if (record == nullptr) record = &slot->other.emplace<format::NvtxRangeRecord>();
    FillNvtx(fields, *record);
  });
}

void RecordRings::DrainCallingThread() {
  const CallingRing& calling = t_ring;
  if (calling.uid != uid_) return;
  Ring& ring = *calling.ring;
  if (ring.head.load(std::memory_order_relaxed) == ring.tail.load(std::memory_order_acquire)) {
    return;
  }
  std::lock_guard lock(ring.consume_mu);
  DrainLocked(ring, std::numeric_limits<size_t>::max());
}

void RecordRings::RunEncoder() {
  std::vector<Ring*> rings;
  auto idle_wait = std::chrono::microseconds(500);
  while (true) {
    if (ring_count_.load(std::memory_order_acquire) != rings.size()) {
      std::lock_guard lock(registry_mu_);
      rings.clear();
      for (const auto& ring : rings_) rings.push_back(ring.get());
    }
    size_t done = 0;
    bool waiting = false;  // a ring's oldest record waits for its GPU digests
    for (Ring* ring : rings) {
      if (ring->head.load(std::memory_order_acquire) ==
          ring->tail.load(std::memory_order_relaxed)) {
        continue;
      }
      // Not waited for: its thread may hold it while it waits for a held record's digests.
      std::unique_lock lock(ring->consume_mu, std::try_to_lock);
      if (!lock.owns_lock()) continue;
      done += DrainLocked(*ring, kEncoderBatch, /*wait=*/false, &waiting);
    }
    std::unique_lock lock(wake_mu_);
    if (stop_) {
      // Under the lock, and the last thing this thread does with the object: Stop() may return
      // (and the object be destroyed) as soon as the lock is released.
      encoder_done_ = true;
      wake_cv_.notify_all();
      return;
    }
    if (done == 0) {
      if (waiting) {  // digests on their way: look again soon
        wake_cv_.wait_for(lock, std::chrono::microseconds(kHeldPollMicros));
        continue;
      }
      // Nothing queued: sleep, longer the longer nothing comes (at most 16 ms); an appending
      // thread wakes us once a quarter of its ring is queued.
      wake_cv_.wait_for(lock, idle_wait);
      idle_wait = std::min(idle_wait * 2, std::chrono::microseconds(16000));
    } else {
      idle_wait = std::chrono::microseconds(500);
    }
  }
}

void RecordRings::Stop() {
  if (stopped_.exchange(true, std::memory_order_acq_rel)) return;
  {
    std::unique_lock lock(wake_mu_);
    stop_ = true;
    wake_cv_.notify_all();
    wake_cv_.wait(lock, [&] { return !encoder_running_ || encoder_done_; });
  }
  std::vector<Ring*> rings;
  {
    std::lock_guard lock(registry_mu_);
    for (const auto& ring : rings_) rings.push_back(ring.get());
  }
  for (Ring* ring : rings) {
    std::lock_guard lock(ring->consume_mu);
    DrainLocked(*ring, std::numeric_limits<size_t>::max());
  }
}

void RecordRings::Flush(bool wait) {
  std::vector<Ring*> rings;
  {
    std::lock_guard lock(registry_mu_);
    for (const auto& ring : rings_) rings.push_back(ring.get());
  }
  for (Ring* ring : rings) {
    std::lock_guard lock(ring->consume_mu);
    DrainLocked(*ring, std::numeric_limits<size_t>::max(), wait);
  }
}

RecordRings::Stats RecordRings::stats() const {
  Stats stats;
  std::lock_guard lock(registry_mu_);
  for (const auto& ring : rings_) stats.appended += ring->appended.load(std::memory_order_relaxed);
  stats.rings = rings_.size();
  stats.helped = helped_.load(std::memory_order_relaxed);
  stats.direct = direct_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace ndt::tracer
