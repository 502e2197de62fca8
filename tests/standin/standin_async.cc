// Asynchronous streams: one worker thread per queue, one lock and one condition variable for all
// of them (the programs are small; simplicity beats throughput here).
#include "standin_async.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "standin_immortal.h"

namespace ndt::standin {

class WorkQueue {
 public:
  explicit WorkQueue(bool blocking) : blocking_(blocking) {}

  // Everything below is guarded by Queues::mu.
  std::deque<WorkItem> items_;
  std::uint64_t enqueued_ = 0;
  std::uint64_t completed_ = 0;
  bool blocking_;
  bool closing_ = false;
  CUresult error_ = CUDA_SUCCESS;
};

namespace {

struct Queues {
  std::mutex mu;
  std::condition_variable changed;  // any queue's completion count or items, any event
  std::vector<std::shared_ptr<WorkQueue>> live;  // queues whose worker has not exited
  std::shared_ptr<WorkQueue> legacy;
};

Queues& GetQueues() {
  static Immortal<Queues> queues;
  return *queues;
}

void RunWorker(std::shared_ptr<WorkQueue> queue) {
  Queues& q = GetQueues();
  std::unique_lock lock(q.mu);
  for (;;) {
    q.changed.wait(lock, [&] { return !queue->items_.empty() || queue->closing_; });
    if (queue->items_.empty()) break;  // closing, and nothing left
    WorkItem item = std::move(queue->items_.front());
    queue->items_.pop_front();
    lock.unlock();
    CUresult result;
    try {
      result = item();
    } catch (...) {
      result = CUDA_ERROR_UNKNOWN;
    }
    item = nullptr;
    lock.lock();
    if (result != CUDA_SUCCESS && queue->error_ == CUDA_SUCCESS) queue->error_ = result;
    ++queue->completed_;
    q.changed.notify_all();
  }
  std::erase(q.live, queue);
}

std::shared_ptr<WorkQueue> StartQueueLocked(Queues& q, bool blocking) {
  auto queue = std::make_shared<WorkQueue>(blocking);
  q.live.push_back(queue);
  std::thread(RunWorker, queue).detach();
  return queue;
}

// An item that blocks its queue's worker until `other` has completed `ticket` items.
WorkItem WaitForOther(std::shared_ptr<WorkQueue> other, std::uint64_t ticket) {
  return [other = std::move(other), ticket] {
    Queues& q = GetQueues();
    std::unique_lock lock(q.mu);
    q.changed.wait(lock, [&] { return other->completed_ >= ticket; });
    return CUDA_SUCCESS;
  };
}

std::uint64_t PushLocked(WorkQueue& queue, WorkItem item) {
  queue.items_.push_back(std::move(item));
  return ++queue.enqueued_;
}

// Closes the calling thread's per-thread default stream when the thread exits.
struct PerThreadHolder {
  std::shared_ptr<WorkQueue> queue;
  ~PerThreadHolder() {
    if (queue != nullptr) CloseQueue(queue);
  }
};

thread_local PerThreadHolder t_per_thread;

}  // namespace

bool AsyncStreams() {
  static const bool async = [] {
    const char* value = std::getenv("NDT_STANDIN_ASYNC");
    return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
  }();
  return async;
}

std::shared_ptr<WorkQueue> NewWorkQueue(bool blocking) {
  Queues& q = GetQueues();
  std::lock_guard lock(q.mu);
  return StartQueueLocked(q, blocking);
}

std::shared_ptr<WorkQueue> LegacyWorkQueue() {
  Queues& q = GetQueues();
  std::lock_guard lock(q.mu);
  if (q.legacy == nullptr) q.legacy = StartQueueLocked(q, /*blocking=*/false);
  return q.legacy;
}

std::shared_ptr<WorkQueue> PerThreadWorkQueue() {
  if (t_per_thread.queue == nullptr) t_per_thread.queue = NewWorkQueue(/*blocking=*/true);
  return t_per_thread.queue;
}

std::uint64_t Enqueue(const std::shared_ptr<WorkQueue>& queue, WorkItem item) {
  Queues& q = GetQueues();
  std::lock_guard lock(q.mu);
  if (queue == q.legacy) {
    for (const std::shared_ptr<WorkQueue>& other : q.live) {
      if (other != queue && other->blocking_ && other->completed_ < other->enqueued_) {
        PushLocked(*queue, WaitForOther(other, other->enqueued_));
      }
    }
  } else if (queue->blocking_ && q.legacy != nullptr &&
             q.legacy->completed_ < q.legacy->enqueued_) {
    PushLocked(*queue, WaitForOther(q.legacy, q.legacy->enqueued_));
  }
  const std::uint64_t ticket = PushLocked(*queue, std::move(item));
  q.changed.notify_all();
  return ticket;
}

CUresult WaitForTicket(const std::shared_ptr<WorkQueue>& queue, std::uint64_t ticket) {
  Queues& q = GetQueues();
  std::unique_lock lock(q.mu);
  q.changed.wait(lock, [&] { return queue->completed_ >= ticket; });
  return std::exchange(queue->error_, CUDA_SUCCESS);
}

// An empty item enqueued and waited for: what the host sees when a library's work on the stream
// has run, so the legacy stream's implicit synchronisation applies to it too (the stand-in
// libraries synchronise the stream, then compute on the host).
CUresult SynchronizeQueue(const std::shared_ptr<WorkQueue>& queue) {
  return WaitForTicket(queue, Enqueue(queue, [] { return CUDA_SUCCESS; }));
}

bool QueueIdle(const std::shared_ptr<WorkQueue>& queue) {
  std::lock_guard lock(GetQueues().mu);
  return queue->completed_ >= queue->enqueued_;
}

CUresult SynchronizeAllQueues() {
  return SynchronizeQueuesExcept({});
}

CUresult SynchronizeQueuesExcept(const std::vector<std::shared_ptr<WorkQueue>>& other_devices) {
  Queues& q = GetQueues();
  std::vector<std::pair<std::shared_ptr<WorkQueue>, std::uint64_t>> targets;
  {
    std::lock_guard lock(q.mu);
    for (const auto& queue : q.live) {
      if (std::find(other_devices.begin(), other_devices.end(), queue) != other_devices.end()) {
        continue;
      }
      targets.emplace_back(queue, queue->enqueued_);
    }
  }
  CUresult first = CUDA_SUCCESS;
  for (const auto& [queue, ticket] : targets) {
    const CUresult r = WaitForTicket(queue, ticket);
    if (first == CUDA_SUCCESS) first = r;
  }
  return first;
}

void CloseQueue(const std::shared_ptr<WorkQueue>& queue) {
  Queues& q = GetQueues();
  std::lock_guard lock(q.mu);
  queue->closing_ = true;
  q.changed.notify_all();
}

void EnqueueEventRecord(const std::shared_ptr<WorkQueue>& queue,
                        const std::shared_ptr<EventSync>& event) {
  std::uint64_t generation;
  {
    std::lock_guard lock(GetQueues().mu);
    generation = ++event->recorded;
  }
  Enqueue(queue, [event, generation] {
    Queues& q = GetQueues();
    std::lock_guard lock(q.mu);
    if (generation >= event->completed) {  // an older record finishing late changes nothing
      event->completed = generation;
      event->time = std::chrono::steady_clock::now();
    }
    q.changed.notify_all();
    return CUDA_SUCCESS;
  });
}

void EnqueueEventWait(const std::shared_ptr<WorkQueue>& queue,
                      const std::shared_ptr<EventSync>& event) {
  std::uint64_t generation;
  {
    std::lock_guard lock(GetQueues().mu);
    generation = event->recorded;
    if (event->completed >= generation) return;  // nothing pending to wait for
  }
  Enqueue(queue, [event, generation] {
    Queues& q = GetQueues();
    std::unique_lock lock(q.mu);
    q.changed.wait(lock, [&] { return event->completed >= generation; });
    return CUDA_SUCCESS;
  });
}

void WaitForEvent(const std::shared_ptr<EventSync>& event) {
  Queues& q = GetQueues();
  std::unique_lock lock(q.mu);
  const std::uint64_t generation = event->recorded;
  q.changed.wait(lock, [&] { return event->completed >= generation; });
}

bool EventComplete(const std::shared_ptr<EventSync>& event) {
  std::lock_guard lock(GetQueues().mu);
  return event->completed >= event->recorded;
}

bool EventTime(const std::shared_ptr<EventSync>& event,
               std::chrono::steady_clock::time_point* out) {
  std::lock_guard lock(GetQueues().mu);
  if (event->recorded == 0 || event->completed < event->recorded) return false;
  *out = event->time;
  return true;
}

}  // namespace ndt::standin
