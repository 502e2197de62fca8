// DriverObjects: the canonical ids of the driver objects a trace names besides streams and
// allocations (events, graphs, executable graphs), and the stream captures in progress.
//
// Ids are handed out by the thread that creates (or first names) an object, as lineage.h's
// NewObjectId: (thread lineage << 32) | the thread's ordinal for that kind, so two runs name
// the same objects alike whatever their handles and however their threads interleave. A
// destroyed object's handle is retired: a later object at the same address gets a new id.
//
// Graph ids are shared by captured graphs and graphs first seen otherwise: a capture takes its
// graph id when it begins (ops recorded while the stream captures name it) and binds it to the
// CUgraph handle when it ends. A stream that waits on an event recorded inside a capture joins
// that capture, as in CUDA.
//
// PyTorch's graph-captured Philox state: launches captured into a graph may read their seed and
// base offset through device pointers (PhiloxWords); the graph keeps those addresses, and each
// executable graph instantiated from it carries a copy (PyTorch destroys the graph after
// instantiation), so that its launches can read the words the replay fills.
//
// Thread-safe (one internal lock, never held across a driver call); owned by the Session.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tracer/lineage.h"

namespace ndt::tracer {

class DriverObjects {
 public:
  // Where an event was last recorded: the stream id, the op that recorded it and the graph
  // whose capture it belongs to (0: an ordinary record). `recorded` false: never recorded.
  struct EventRecord {
    bool recorded = false;
    uint32_t stream_id = 0;
    uint64_t op_sequence = 0;
    uint64_t graph = 0;
  };
  // Where launches captured into a graph read PyTorch's Philox state (at::PhiloxCudaState with
  // captured_ set): the device addresses of the int64 seed and base offset, and each such
  // launch's offset_intragraph_, in capture order. Launch k uses (*seed, *offset + intragraph k).
  struct PhiloxWords {
    uint64_t seed_address = 0;
    uint64_t offset_address = 0;
    std::vector<uint32_t> offsets_intragraph;
  };
  // What an executable graph came from.
  struct Exec {
    uint64_t id = 0;
    uint64_t graph = 0;
    uint64_t nodes = 0;
    // The graph's Philox state words at instantiation, one entry per distinct (seed, offset)
    // address pair, by first capture; empty for most graphs.
    std::vector<PhiloxWords> philox;
  };

  uint64_t EventId(uint64_t handle) {
    std::lock_guard lock(mutex_);
    return IdLocked(events_, ObjectKind::kEvent, handle);
  }
  void RetireEvent(uint64_t handle) {
    std::lock_guard lock(mutex_);
    events_.erase(handle);
    event_records_.erase(handle);
  }
  void OnEventRecord(uint64_t handle, const EventRecord& record) {
    std::lock_guard lock(mutex_);
    event_records_[handle] = record;
  }
  EventRecord LastRecord(uint64_t handle) {
    std::lock_guard lock(mutex_);
    const auto it = event_records_.find(handle);
    return it == event_records_.end() ? EventRecord{} : it->second;
  }

  // A capture begins on `stream_id`: returns the id of the graph it makes.
  uint64_t BeginCapture(uint32_t stream_id) {
    const uint64_t graph = NewObjectId(ObjectKind::kGraph);
    std::lock_guard lock(mutex_);
    capturing_[stream_id] = graph;
    captured_ops_[graph] = 0;
    active_.store(capturing_.size(), std::memory_order_release);
    return graph;
  }
  // `stream_id` joins the capture of `graph` (it waited on an event recorded inside it), if
  // that capture is still in progress.
  void JoinCapture(uint32_t stream_id, uint64_t graph) {
    std::lock_guard lock(mutex_);
    if (!captured_ops_.contains(graph)) return;
    capturing_[stream_id] = graph;
    active_.store(capturing_.size(), std::memory_order_release);
  }
  // Whether any stream is capturing: no synchronisation may happen then (it would invalidate
  // the capture), so digests that need one are skipped.
  bool AnyCapture() const { return active_.load(std::memory_order_acquire) != 0; }

  // The graph `stream_id` is capturing into, or 0; counts the op being recorded into it when
  // `count_op`. Lock-free while no capture is in progress.
  uint64_t CaptureOf(uint32_t stream_id, bool count_op) {
    if (active_.load(std::memory_order_acquire) == 0) return 0;
    std::lock_guard lock(mutex_);
    const auto it = capturing_.find(stream_id);
    if (it == capturing_.end()) return 0;
    if (count_op) ++captured_ops_[it->second];
    return it->second;
  }
  // The capture on `stream_id` ends with `graph_handle` (0 when the driver made no graph):
  // every stream leaves it. Returns the graph id (0 when the stream was not capturing) and
  // sets `*captured_ops` to the ops recorded into it.
  uint64_t EndCapture(uint32_t stream_id, uint64_t graph_handle, uint64_t* captured_ops) {
    std::lock_guard lock(mutex_);
    *captured_ops = 0;
    const auto it = capturing_.find(stream_id);
    if (it == capturing_.end()) return 0;
    const uint64_t graph = it->second;
    for (auto s = capturing_.begin(); s != capturing_.end();) {
      s = s->second == graph ? capturing_.erase(s) : std::next(s);
    }
    active_.store(capturing_.size(), std::memory_order_release);
    *captured_ops = captured_ops_[graph];
    captured_ops_.erase(graph);
    if (graph_handle != 0) {
      graphs_[graph_handle] = graph;
    } else {
      philox_.erase(graph);
    }
    return graph;
  }

  // A launch captured into `graph` reads its Philox state from the words at `seed_address` and
  // `offset_address`, at `offset_intragraph` past the base offset.
  void AddPhiloxWords(uint64_t graph, uint64_t seed_address, uint64_t offset_address,
                      uint32_t offset_intragraph) {
    std::lock_guard lock(mutex_);
    std::vector<PhiloxWords>& all = philox_[graph];
    auto it = std::find_if(all.begin(), all.end(), [&](const PhiloxWords& words) {
      return words.seed_address == seed_address && words.offset_address == offset_address;
    });
    if (it == all.end()) it = all.insert(all.end(), PhiloxWords{seed_address, offset_address, {}});
    it->offsets_intragraph.push_back(offset_intragraph);
  }

  uint64_t GraphId(uint64_t handle) {
    std::lock_guard lock(mutex_);
    return IdLocked(graphs_, ObjectKind::kGraph, handle);
  }
  void RetireGraph(uint64_t handle) {
    std::lock_guard lock(mutex_);
    const auto it = graphs_.find(handle);
    if (it == graphs_.end()) return;
    philox_.erase(it->second);
    graphs_.erase(it);
  }

  // An executable graph instantiated from `graph` with `nodes` nodes; returns its id.
  uint64_t OnInstantiate(uint64_t handle, uint64_t graph, uint64_t nodes) {
    const uint64_t id = NewObjectId(ObjectKind::kGraphExec);
    std::lock_guard lock(mutex_);
    const auto philox = philox_.find(graph);
    execs_[handle] = Exec{id, graph, nodes,
                          philox == philox_.end() ? std::vector<PhiloxWords>{} : philox->second};
    return id;
  }
  // The executable graph at `handle`; one first seen here gets an id with graph 0, nodes 0.
  Exec FindExec(uint64_t handle) {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = execs_.try_emplace(handle);
    if (inserted) it->second.id = NewObjectId(ObjectKind::kGraphExec);
    return it->second;
  }
  void RetireExec(uint64_t handle) {
    std::lock_guard lock(mutex_);
    execs_.erase(handle);
  }

 private:
  // The id of `handle`; one first seen here gets a new id of `kind` from the calling thread.
  static uint64_t IdLocked(std::unordered_map<uint64_t, uint64_t>& ids, ObjectKind kind,
                           uint64_t handle) {
    auto [it, inserted] = ids.try_emplace(handle, 0);
    if (inserted) it->second = NewObjectId(kind);
    return it->second;
  }

  std::mutex mutex_;
  std::unordered_map<uint64_t, uint64_t> events_;  // handle -> id
  std::unordered_map<uint64_t, EventRecord> event_records_;
  std::unordered_map<uint64_t, uint64_t> graphs_;        // handle -> id
  std::unordered_map<uint32_t, uint64_t> capturing_;     // stream id -> graph id
  std::unordered_map<uint64_t, uint64_t> captured_ops_;  // graph id -> ops, while capturing
  std::atomic<size_t> active_{0};                        // capturing_.size()
  std::unordered_map<uint64_t, std::vector<PhiloxWords>> philox_;  // graph id -> words
  std::unordered_map<uint64_t, Exec> execs_;                       // handle -> executable graph
};

}  // namespace ndt::tracer
