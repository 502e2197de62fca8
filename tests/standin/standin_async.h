// Asynchronous streams for the stand-in driver (NDT_STANDIN_ASYNC=1): each stream has a worker
// thread that runs its queued work in stream order, concurrently with other streams and with the
// host, so that work the program leaves unordered really races.
//
// The driver (standin_driver.cc) decides what goes on a queue (kernels, copies, memsets, event
// records, event waits, host functions) and when the host waits; this file only keeps the queues.
// Ordering rules kept here:
// - Within a queue, items run one at a time in enqueue order.
// - The legacy default stream's implicit synchronisation: an item enqueued on the legacy queue
//   first waits for everything enqueued before it on every blocking queue (streams created
//   without CU_STREAM_NON_BLOCKING, and per-thread default streams); an item enqueued on a
//   blocking queue first waits for everything enqueued before it on the legacy queue.
// - An event wait waits for the event's latest record enqueued before the wait (none: no wait).
// Every wait refers to work enqueued strictly earlier, so waits never form a cycle.
//
// Thread safety: every function may be called from any thread. Functions that block (Wait*,
// Synchronize*) must not be called with the driver's lock held, since queued kernels take it.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace ndt::standin {

// True when NDT_STANDIN_ASYNC is set to something other than "" or "0" (read once).
bool AsyncStreams();

// One unit of queued work. Its result, when not CUDA_SUCCESS, is kept by the queue and returned
// (once) by the next host synchronisation with that queue, as a GPU reports a fault.
using WorkItem = std::function<CUresult()>;

class WorkQueue;

// The completion state of an event under asynchronous streams. Shared by the event and the
// record items still queued, so destroying an event with a pending record is safe.
struct EventSync {
  std::uint64_t recorded = 0;   // records enqueued
  std::uint64_t completed = 0;  // records that have run
  std::chrono::steady_clock::time_point time;  // when the latest completed record ran
};

// A new queue with its own worker thread. `blocking`: takes part in the legacy default stream's
// implicit synchronisation (false for CU_STREAM_NON_BLOCKING streams).
std::shared_ptr<WorkQueue> NewWorkQueue(bool blocking);

// The legacy default stream's queue, and the calling thread's per-thread default stream's (made
// on first use; its worker finishes the queue and exits when the thread exits).
std::shared_ptr<WorkQueue> LegacyWorkQueue();
std::shared_ptr<WorkQueue> PerThreadWorkQueue();

// Enqueues `item` (after the waits the legacy-stream rule requires) and returns its ticket: the
// value the queue's completion count reaches when it has run.
std::uint64_t Enqueue(const std::shared_ptr<WorkQueue>& queue, WorkItem item);

// Blocks until the queue has run every item up to `ticket`; returns and clears the first
// failure of its queued work.
CUresult WaitForTicket(const std::shared_ptr<WorkQueue>& queue, std::uint64_t ticket);

// Blocks until everything enqueued so far has run, and for a blocking stream also what the
// legacy stream had queued, as if an empty kernel had been enqueued and waited for
// (cuStreamSynchronize).
CUresult SynchronizeQueue(const std::shared_ptr<WorkQueue>& queue);

// True when everything enqueued so far has run (cuStreamQuery).
bool QueueIdle(const std::shared_ptr<WorkQueue>& queue);

// Blocks until every queue has run everything enqueued so far (cuCtxSynchronize, and before
// memory is freed); returns and clears the first failure of any queue.
CUresult SynchronizeAllQueues();
// The same for every queue but those in `other_devices` (cuCtxSynchronize of one device: the
// queues of other devices' streams are left running).
CUresult SynchronizeQueuesExcept(const std::vector<std::shared_ptr<WorkQueue>>& other_devices);

// cuStreamDestroy: the worker runs what is queued, then exits.
void CloseQueue(const std::shared_ptr<WorkQueue>& queue);

// cuEventRecord: enqueues an item that marks `event` complete and takes its timestamp.
void EnqueueEventRecord(const std::shared_ptr<WorkQueue>& queue,
                        const std::shared_ptr<EventSync>& event);

// cuStreamWaitEvent: later work on `queue` waits for the event's latest record so far.
void EnqueueEventWait(const std::shared_ptr<WorkQueue>& queue,
                      const std::shared_ptr<EventSync>& event);

// cuEventSynchronize / cuEventQuery; an event never recorded is complete.
void WaitForEvent(const std::shared_ptr<EventSync>& event);
bool EventComplete(const std::shared_ptr<EventSync>& event);

// The event's timestamp when its latest record has run; false while it is pending or was never
// recorded.
bool EventTime(const std::shared_ptr<EventSync>& event, std::chrono::steady_clock::time_point* out);

}  // namespace ndt::standin
