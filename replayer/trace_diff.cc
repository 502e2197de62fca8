// Streaming alignment of two traces.
//
// The two readers are pumped alternately, one record at a time. Ops go into per-lane
// queues (lane = thread id and stream id, which is the order a GPU executes them in); as
// soon as both runs have op k of a lane, the pair is compared and dropped. Ops of one
// lane come from one thread, and the writer keeps each thread's records in order, so a
// lane's queue is in issue order in both runs. State digests are aligned by their order.
//
// Resynchronisation: when the heads of a lane differ in kind or name, the first pair (i, j)
// within the next `resync_window` ops of each run whose kind and name agree, with i + j
// smallest, is taken as the next common op; the ops before it exist in one run only.
//
// The first divergence is the smallest op sequence (run A) among all divergent pairs; an
// uncovered divergence (a state digest) counts at the end of its window, so an op-level
// divergence inside the window, which explains it, wins.
#include "replayer/trace_diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "formats/trace_reader.h"
#include "kernels/digest_v1.h"
#include "replayer/capture_placement.h"
#include "replayer/op_compare.h"
#include "replayer/op_multiset.h"
#include "replayer/stream_order.h"

namespace ndt::replay {
namespace {

using format::OpRecord;

// Captured buffers larger than this are not compared element by element (two are read).
constexpr uint64_t kMaxExactCompareBytes = uint64_t{256} << 20;

std::string Hex(const format::Digest& d) { return kernels::ToHex({d.lo, d.hi}); }

std::string PointerText(const format::DevicePointer& p) {
  if (p.allocation_id == 0) return "not in a device allocation";
  return "a" + std::to_string(p.allocation_id) + "+" + std::to_string(p.offset);
}

std::string BufferText(const format::BufferDigest& d) {
  std::string text = d.role.empty() ? "buffer" : "`" + d.role + "`";
  text += " (" + PointerText(d.pointer) + ", " + std::to_string(d.bytes) + " B";
  if (d.dtype != format::DType::kUnknown) text += std::string(", ") + format::DTypeName(d.dtype);
  return text + ")";
}

std::string RngText(const format::RngState& r) {
  return r.generator + " seed " + std::to_string(r.seed) + " offset " +
         std::to_string(r.offset) +
         (r.subsequence ? " subsequence " + std::to_string(r.subsequence) : "") +
         (r.ordering.empty() ? "" : " ordering " + r.ordering);
}

std::string ArgumentText(const format::Argument& a) {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return a.name + "=?";
        } else if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t> ||
                             std::is_same_v<T, double>) {
          // A double as the shortest text that reads back as it: two values that differ never
          // print alike (a dot product's last bits).
          return fmt::format("{}={}", a.name, v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return a.name + "=\"" + v + "\"";
        } else if constexpr (std::is_same_v<T, format::Argument::Bytes>) {
          return a.name + "=<" + std::to_string(v.data.size()) + " bytes>";
        } else if constexpr (std::is_same_v<T, format::DevicePointer>) {
          return a.name + "=" + PointerText(v);
        } else {
          std::string text = a.name + "=[";
          for (size_t i = 0; i < v.size(); ++i) text += (i ? "," : "") + std::to_string(v[i]);
          return text + "]";
        }
      },
      a.value);
}

OpLocation Locate(const OpRecord& op, uint64_t lane_index, const LaneKeys& lanes) {
  return OpLocation{op.sequence, op.thread_id, op.stream_id,  lane_index,
                    op.kind,     op.name,      lanes.Find(op)};
}

bool SameShape(const OpRecord& a, const OpRecord& b) {
  return a.kind == b.kind && a.name == b.name;
}

double MaxAbs(const format::NumericSummary& s) { return std::max(std::fabs(s.min), std::fabs(s.max)); }

// The `blob:<direction>:<role>` arguments (direction "in" or "out") whose captured bytes
// differ between the two runs (both captured, different ids).
std::vector<std::string> DifferingCaptures(const OpRecord& a, const OpRecord& b,
                                           std::string_view direction) {
  std::vector<std::string> names;
  for (const format::Argument& argument : a.args) {
    // "blob:<direction>:<role>"
    const std::string_view name = argument.name;
    if (name.size() <= 6 + direction.size() || name.substr(0, 5) != "blob:" ||
        name.substr(5, direction.size()) != direction || name[5 + direction.size()] != ':') {
      continue;
    }
    const auto id_a = CapturedBlob(a, argument.name);
    const auto id_b = CapturedBlob(b, argument.name);
    if (id_a && id_b && !(*id_a == *id_b)) names.push_back(argument.name);
  }
  return names;
}

// A lane's ops waiting for their partners, oldest first: a ring of records. Its slots keep
// their strings' and vectors' capacity: a decoded record is swapped in for the slot's old one,
// into which the reader decodes the next record, so steady reading allocates nothing.
class OpQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  const OpRecord& front() const { return slots_[head_]; }
  const OpRecord& operator[](size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  // Appends `op`, which comes back holding a record of no use but its capacity.
  void SwapIn(OpRecord& op) {
    if (size_ == slots_.size()) Grow();
    std::swap(slots_[(head_ + size_) & (slots_.size() - 1)], op);
    ++size_;
  }
  void pop_front() {
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }

 private:
  void Grow() {
    std::vector<OpRecord> bigger(std::max<size_t>(8, 2 * slots_.size()));
    for (size_t i = 0; i < size_; ++i) {
      std::swap(bigger[i], slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<OpRecord> slots_;  // a power of two of them
  size_t head_ = 0;
  size_t size_ = 0;
};

struct Lane {
  OpQueue a;
  OpQueue b;
  uint64_t next_index_a = 0;  // lane position of a.front()
  uint64_t next_index_b = 0;
};

struct LastWriter {
  uint64_t sequence = 0;  // the op that computed the data
  format::OpKind kind = format::OpKind::kOther;
  std::string name;
  uint32_t thread_id = 0;
  uint32_t stream_id = 0;
  uint64_t lane_index = 0;
  uint64_t at = 0;  // the op that wrote it here
  uint64_t lane = 0;  // LaneKeys key of the op's lane in run A
  // A device-to-device copy: where its data came from (resolved to that place's writer when a
  // root is named: a copy is deterministic).
  std::optional<format::DevicePointer> copied_from;
};

// The last few ops that wrote one place, oldest overwritten first: a fixed ring, so that
// remembering a write reuses the slot's name capacity instead of allocating.
template <size_t N>
class WriterRing {
 public:
  void Push(const LastWriter& writer) {
    slots_[next_] = writer;
    next_ = (next_ + 1) % N;
    if (size_ < N) ++size_;
  }
  // The writer of the latest op (`at`) before op `before`, or null; of equals, the oldest.
  const LastWriter* LatestBefore(uint64_t before) const {
    const LastWriter* found = nullptr;
    for (size_t i = 0; i < size_; ++i) {
      const LastWriter& writer = slots_[(next_ + N - size_ + i) % N];
      if (writer.at < before && (!found || writer.at > found->at)) found = &writer;
    }
    return found;
  }

 private:
  std::array<LastWriter, N> slots_;
  size_t next_ = 0;
  size_t size_ = 0;
};

struct PlaceHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& place) const {
    return std::hash<uint64_t>{}(place.first * 0x9E3779B97F4A7C15ull ^ place.second);
  }
};

// Where an NCCL call of run A stands among its communicator's calls (Differ::NoteCollective):
// the `index`-th collective (peer -1), or the `index`-th message sent to or received from `peer`.
struct NcclPlace {
  uint64_t comm = 0;
  int64_t peer = -1;
  bool send = false;
  uint64_t index = 0;
  auto operator<=>(const NcclPlace&) const = default;
};

struct RootQuery {
  format::DevicePointer pointer;
  uint64_t before = 0;
  std::string what;
  std::string with_writer;
  std::optional<LastWriter> best;
  bool exact = false;
};

// A kernel launch's captured whole allocation whose bytes differ between the runs
// (capture_placement.h): where they differ, and where the op's pointer parameters point into it.
struct CaptureCheck {
  std::string name;  // the blob argument: "blob:in:alloc<id>" or "blob:out:alloc<id>"
  uint64_t allocation = 0;
  uint64_t bytes = 0;             // the longer of the two blobs
  std::vector<uint64_t> offsets;  // ascending; the same in both runs
  std::vector<ByteRange> differing;
  bool checked = false;  // false: the op may reach bytes other than its tensors (see CheckCaptures)
};

enum class CaptureVerdict : uint8_t {
  kUnchecked,  // not known which bytes the op reaches: the difference counts
  kInside,     // a differing byte lies in a tensor the op points at
  kOutside,    // every differing byte lies outside them: placement
};

// An aligned pair whose classification waits for the end of the diff (Differ::Defer).
struct Deferred {
  OpRecord a;
  OpRecord b;
  uint64_t lane_index = 0;
  uint64_t lane_index_b = 0;
  Divergence d;  // located, nothing classified yet
  std::vector<CaptureCheck> checks;
  std::string input;               // the captured input that differed where the op reads it
  std::optional<RootQuery> query;  // its root, asked for as the pair was compared, refined since
};

class Differ {
 public:
  Differ(std::unique_ptr<format::TraceReader> a, std::unique_ptr<format::TraceReader> b,
         DiffReport* report, const DiffOptions& options)
      : a_(std::move(a)), b_(std::move(b)), report_(*report), options_(options) {
    // The records Take has no use for are passed over undecoded.
    constexpr uint32_t kUnused =
        format::RecordTypeBit<format::AllocationRecord>() |
        format::RecordTypeBit<format::ModuleLoadRecord>() |
        format::RecordTypeBit<format::TracerNote>() |
        format::RecordTypeBit<format::GpuActivityRecord>();
    a_->PassOver(kUnused);
    b_->PassOver(kUnused);
    // Each trace's chunks are read and decompressed on a thread of its reader's own.
    a_->ReadAhead(true);
    b_->ReadAhead(true);
  }

  size_t threads() const { return threads_.size(); }  // that issued ops, in either run

  void Run() {
    CompareHeaders();
    if (!options_.force && !report_.other_program.empty()) {
      report_.refused = true;  // not compared op by op: DiffOptions::force
      Warnings(*a_, "A");
      Warnings(*b_, "B");
      return;
    }
    // The run whose reading is behind in op sequence reads next, so the two advance together
    // whatever their lengths; a run read to the end makes the other's ops in lanes it has
    // no more of `only in run X` at once (Match), so nothing waits for ops that cannot come.
    format::Record record;
    while (!done_a_ || !done_b_) {
      const bool run_a = done_b_ || (!done_a_ && last_sequence_a_ <= last_sequence_b_);
      if ((run_a ? a_ : b_)->Next(&record)) {
        Take(std::move(record), run_a);
        continue;
      }
      (run_a ? done_a_ : done_b_) = true;
      for (auto& [key, lane] : lanes_) Match(lane);
      CompareStateDigests();
    }
    if (given_up_ != 0) {
      report_.notes.push_back(
          std::to_string(given_up_) + " op(s) were called one run's own after " +
          std::to_string(kMaxWaitingOps) + " ops of their lane waited for the other run's: the "
          "two files' chunk orders drift further apart than that");
    }
    for (auto& [key, lane] : lanes_) Match(lane);
    for (auto& [key, lane] : lanes_) {
      for (size_t i = 0; i < lane.a.size(); ++i) {
        Structural(&lane.a[i], lane.next_index_a++, nullptr, 0, "only in run A", true);
      }
      for (size_t i = 0; i < lane.b.size(); ++i) {
        Structural(nullptr, 0, &lane.b[i], lane.next_index_b++, "only in run B", true);
      }
    }
    CompareStateDigests();
    ResolveDeferred();
    ExplainCollective();
    DecideUncovered();
    ApplyRootQuery();
    AddExactDifference();
    AttachPythonStacks();
    Warnings(*a_, "A");
    Warnings(*b_, "B");
    if (report_.first_divergence) {
      auto& d = *report_.first_divergence;
      if (d.root && d.root->kind == format::OpKind::kKernelLaunch) {
        // The kernel that wrote the differing data is the suspect: its hint is the useful one.
        OpRecord root;
        root.kind = d.root->kind;
        root.name = d.root->name;
        d.hint = FindFixHint(root, DivergenceClass::kNondeterministicOp);
      } else if (d.klass != DivergenceClass::kUncovered && first_op_ && !d.hint) {
        d.hint = FindFixHint(*first_op_, d.klass, d.ranges ? d.ranges->framework_op : "");
      }
    }
  }

 private:
  void Take(format::Record&& record, bool run_a) {
    if (auto* range = std::get_if<format::NvtxRangeRecord>(&record)) {
      (run_a ? ranges_a_ : ranges_b_).Observe(*range);
    } else if (auto* op = std::get_if<OpRecord>(&record)) {
      (run_a ? report_.ops_a : report_.ops_b)++;
      (run_a ? last_sequence_a_ : last_sequence_b_) = op->sequence;
      if (IsLifecycleOp(*op)) return;
      uint64_t& max_sequence = run_a ? max_sequence_a_ : max_sequence_b_;
      max_sequence = std::max(max_sequence, op->sequence);
      (run_a ? starts_a_ : starts_b_).Observe(*op);
      threads_.insert(op->thread_id);
      if (run_a) NoteCollective(*op);
      Lane& lane = lanes_[(run_a ? lane_keys_a_ : lane_keys_b_).Key(*op)];
      // The next record is decoded into the strings and vectors of one already compared.
      (run_a ? lane.a : lane.b).SwapIn(*op);
      Match(lane);
    } else if (auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      (run_a ? states_a_ : states_b_).push_back(std::move(*state));
      CompareStateDigests();
    } else if (auto* dropped = std::get_if<format::DroppedRecords>(&record)) {
      (run_a ? dropped_a_ : dropped_b_) += dropped->records;
    } else if (auto* decision = std::get_if<format::PolicyDecisionRecord>(&record)) {
      if (ForcedOverRequest(*decision)) {
        (run_a ? forced_a_ : forced_b_)[decision->op_sequence] = std::move(*decision);
      }
    } else if (auto* stack = std::get_if<format::PythonStackRecord>(&record)) {
      // Only ops asked for have one (NDTRACE_PYTHON_STACK, at most 16 per process).
      if (run_a && python_stacks_a_.size() < kMaxPythonStacks) {
        python_stacks_a_[stack->op_sequence] = std::move(*stack);
      }
    }
  }

  static constexpr size_t kMaxPythonStacks = 64;

  // The Python stacks run A took of the divergent op and its root, if it has them.
  void AttachPythonStacks() {
    if (!report_.first_divergence) return;
    Divergence& d = *report_.first_divergence;
    if (auto it = python_stacks_a_.find(d.op.sequence); it != python_stacks_a_.end()) {
      d.python_stack = it->second;
      d.python_stack_trace = report_.path_a;
    }
    if (!d.root) return;
    if (auto it = python_stacks_a_.find(d.root->sequence); it != python_stacks_a_.end()) {
      d.root_python_stack = it->second;
      d.python_stack_trace = report_.path_a;
    }
  }

  // Compares heads of the lane while both runs have one, resynchronising on mismatch.
  void Match(Lane& lane) {
    while (true) {
      if (lane.a.empty() || lane.b.empty()) {
        // A run read to the end has no more ops in this lane: the other's are its own.
        if (lane.a.empty() && done_a_ && !lane.b.empty()) {
          Structural(nullptr, 0, &lane.b.front(), lane.next_index_b, "only in run B", true);
          Pop(lane, false);
          continue;
        }
        if (lane.b.empty() && done_b_ && !lane.a.empty()) {
          Structural(&lane.a.front(), lane.next_index_a, nullptr, 0, "only in run A", true);
          Pop(lane, true);
          continue;
        }
        if (lane.a.size() + lane.b.size() <= kMaxWaitingOps) return;
        // The other run's ops in this lane are further away in its file than any two runs'
        // chunk interleavings drift apart: give up waiting for them.
        ++given_up_;
        if (lane.a.empty()) {
          Structural(nullptr, 0, &lane.b.front(), lane.next_index_b, "only in run B");
          Pop(lane, false);
        } else {
          Structural(&lane.a.front(), lane.next_index_a, nullptr, 0, "only in run A");
          Pop(lane, true);
        }
        continue;
      }
      if (SameShape(lane.a.front(), lane.b.front())) {
        ComparePair(lane.a.front(), lane.next_index_a, lane.b.front(), lane.next_index_b);
        Pop(lane, true);
        Pop(lane, false);
        continue;
      }
      const size_t window = options_.resync_window;
      // Wait for a whole window on each side, unless that run has no more ops (or the lane
      // holds as many as it may: then resynchronise on what is there).
      if (((lane.a.size() < window && !done_a_) || (lane.b.size() < window && !done_b_)) &&
          lane.a.size() + lane.b.size() <= kMaxWaitingOps) {
        return;
      }
      size_t best_i = 0, best_j = 0;
      bool found = false;
      for (size_t sum = 1; !found && sum < 2 * window; ++sum) {
        for (size_t i = 0; i <= sum && !found; ++i) {
          const size_t j = sum - i;
          if (i < lane.a.size() && j < lane.b.size() && i < window && j < window &&
              SameShape(lane.a[i], lane.b[j])) {
            best_i = i;
            best_j = j;
            found = true;
          }
        }
      }
      if (!found) {  // no common op in the window: a different op at the same place
        Structural(&lane.a.front(), lane.next_index_a, &lane.b.front(), lane.next_index_b,
                   "a different op at the same place");
        Pop(lane, true);
        Pop(lane, false);
        continue;
      }
      for (size_t i = 0; i < best_i; ++i) {
        Structural(&lane.a.front(), lane.next_index_a, nullptr, 0, "only in run A");
        Pop(lane, true);
      }
      for (size_t j = 0; j < best_j; ++j) {
        Structural(nullptr, 0, &lane.b.front(), lane.next_index_b, "only in run B");
        Pop(lane, false);
      }
    }
  }

  void Pop(Lane& lane, bool run_a) {
    OpQueue& ops = run_a ? lane.a : lane.b;
    if (run_a) {
      NoteWrites(ops.front(), lane.next_index_a);
      if (!places_.empty()) places_.erase(ops.front().sequence);
      ++lane.next_index_a;
    } else {
      ++lane.next_index_b;
    }
    ops.pop_front();
  }

  // Remembers which ops last wrote (or may have written) each allocation, in run A: the
  // last few per place, since lanes are compared in the order both runs' records arrive, not
  // in op order. A kernel's pointers to const (`float const*` in its demangled name) are only
  // read; a synchronization's outputs are host bytes. A launch captured into a CUDA graph runs
  // only when the graph is launched: its writes are the graph's, and each launch of the graph
  // writes them all (named with the graph's kernels).
  void NoteWrites(const OpRecord& op, uint64_t lane_index) {
    // Built in a member kept for its name's capacity (every op read passes here).
    LastWriter& writer = writer_;
    writer.sequence = op.sequence;
    writer.kind = op.kind;
    writer.name.assign(op.name);
    writer.thread_id = op.thread_id;
    writer.stream_id = op.stream_id;
    writer.lane_index = lane_index;
    writer.at = op.sequence;
    writer.lane = lane_keys_a_.Find(op);
    writer.copied_from.reset();
    if (op.kind == format::OpKind::kGraphLaunch) {
      const uint64_t* graph = UnsignedArgument(op, "graph");
      const auto captured = graph ? graph_writes_.find(*graph) : graph_writes_.end();
      if (captured == graph_writes_.end()) return;
      writer.name += " (graph " + std::to_string(*graph) + ", whose captured kernels are " +
                     captured->second.kernels + ")";
      for (const format::DevicePointer& p : captured->second.pointers) RememberWrite(writer, p);
      return;
    }
    const uint64_t* captured_into = UnsignedArgument(op, "capturedInto");
    GraphWrites* graph = captured_into ? &graph_writes_[*captured_into] : nullptr;
    if (graph != nullptr && op.kind == format::OpKind::kKernelLaunch) {
      const std::string name = op.name.substr(0, op.name.find('('));
      if (graph->kernels.find(name) == std::string::npos && graph->kernels.size() < 1024) {
        graph->kernels += (graph->kernels.empty() ? "" : ", ") + name;
      }
    }
    const auto wrote = [&](const format::DevicePointer& p) {
      if (graph == nullptr) return RememberWrite(writer, p);
      if (graph->pointers.size() < kGraphWritesKept) graph->pointers.push_back(p);
    };
    if (op.kind != format::OpKind::kSynchronize) {
      for (const auto& out : op.outputs) {
        if (out.pointer.allocation_id) wrote(out.pointer);
      }
    }
    if (op.kind == format::OpKind::kKernelLaunch) {
      for (const auto& arg : op.args) {
        const auto* p = std::get_if<format::DevicePointer>(&arg.value);
        if (p == nullptr || p->allocation_id == 0) continue;
        if (arg.name.rfind("arg", 0) == 0 &&
            PointerParameterIsConst(op.name, std::strtoull(arg.name.c_str() + 3, nullptr, 10))) {
          continue;
        }
        wrote(*p);
      }
    }
    // A copy or memset writes its destination; a device-to-device copy is deterministic, so
    // what it wrote is whatever last wrote its source.
    if (op.kind == format::OpKind::kMemcpy || op.kind == format::OpKind::kMemset) {
      const uint64_t* into = UnsignedArgument(op, "capturedInto");
      const auto* dst_argument = FindArgument(op, "dst");
      const auto* src_argument = FindArgument(op, "src");
      const auto* dst =
          dst_argument ? std::get_if<format::DevicePointer>(&dst_argument->value) : nullptr;
      const auto* src =
          src_argument ? std::get_if<format::DevicePointer>(&src_argument->value) : nullptr;
      if (dst == nullptr || dst->allocation_id == 0) return;
      if (src != nullptr && into == nullptr) writer.copied_from = *src;
      wrote(*dst);
    }
  }

  // A library call writes what it writes when it returns, after the kernels, copies and memsets
  // it made from inside (cuBLAS launches its GEMM kernel; the tracer records such an op's
  // "insideOp", and it comes before the call in the trace). For them, "the last op that wrote
  // this before" means before the call.
  static uint64_t EffectiveSequence(const OpRecord& op) {
    const uint64_t* inside = UnsignedArgument(op, "insideOp");
    return inside != nullptr && *inside < op.sequence ? *inside : op.sequence;
  }

  static const uint64_t* UnsignedArgument(const OpRecord& op, std::string_view name) {
    const format::Argument* argument = FindArgument(op, name);
    return argument ? std::get_if<uint64_t>(&argument->value) : nullptr;
  }

  void RememberWrite(const LastWriter& writer, const format::DevicePointer& p) {
    last_writer_[p.allocation_id].Push(writer);
    last_writer_exact_[{p.allocation_id, p.offset}].Push(writer);
    RefineRootQuery(writer, p);
  }

  // `tail`: an op in one run only after the other run's last op in its lane (that run stopped
  // earlier there).
  void Structural(const OpRecord* a, uint64_t index_a, const OpRecord* b, uint64_t index_b,
                  const std::string& what, bool tail = false) {
    ++report_.structural_differences;
    if (tail) ++report_.lane_tail_ops;
    if (options_.observer != nullptr) {
      std::optional<OpLocation> location_a, location_b;
      if (a) location_a = Locate(*a, index_a, lane_keys_a_);
      if (b) location_b = Locate(*b, index_b, lane_keys_b_);
      options_.observer->Pair({PairOutcome::Kind::kStructural, location_a ? &*location_a : nullptr,
                               location_b ? &*location_b : nullptr});
    }
    const uint64_t key = a ? a->sequence : b->sequence;
    if (report_.first_structural && key >= structural_key_) return;
    structural_key_ = key;
    StructuralDifference difference;
    if (a) difference.a = Locate(*a, index_a, lane_keys_a_);
    if (b) difference.b = Locate(*b, index_b, lane_keys_b_);
    difference.what = what;
    report_.first_structural = std::move(difference);
  }

  void ComparePair(const OpRecord& a, uint64_t lane_index, const OpRecord& b,
                   uint64_t lane_index_b) {
    ++report_.ops_compared;
    pair_index_b_ = lane_index_b;
    pending_query_.reset();
    pending_placement_.clear();
    pending_checks_.clear();
    Divergence d;
    d.op = Locate(a, lane_index, lane_keys_a_);
    d.sequence_b = b.sequence;

    // A run whose choice was forced (--pin, replay) over what its program asked for did not do
    // what the other did, whatever its outputs.
    for (auto* forced : {&forced_a_, &forced_b_}) {
      const auto it = forced->find(forced == &forced_a_ ? a.sequence : b.sequence);
      if (it == forced->end()) continue;
      const format::PolicyDecisionRecord decision = std::move(it->second);
      forced->erase(it);
      const char* run = forced == &forced_a_ ? "A" : "B";
      d.klass = DivergenceClass::kAlgorithmSelection;
      d.what = std::string("the program asked for another algorithm in run ") + run +
               "; the policy forced the recorded one, hiding the difference";
      d.evidence.push_back(std::string("run ") + run + " asked for " +
                           ChoiceText(*decision.from_choice) + ", forced to " +
                           ChoiceText(*decision.to_choice) + " (" + decision.action + ")");
      AddOutputEvidence(a, b, &d);
      d.hint = FixHint{"(the program's own choice)",
                       "the program asked for this algorithm itself (or the library's heuristic "
                       "gave it) in one run and another in the other: what it was asked to do "
                       "changed between the runs",
                       "find what chose it (code, configuration, library version); record both "
                       "runs without a policy to see what the difference does"};
      return Found(std::move(d), a, b);
    }

    // The same problem (equal fingerprints) solved with a different algorithm: arguments that
    // follow from the algorithm (a workspace sized for it) may differ too.
    const std::string* fingerprint = TextOf(a, "fingerprint");
    const std::string* fingerprint_b = TextOf(b, "fingerprint");
    if (fingerprint && fingerprint_b && *fingerprint == *fingerprint_b && a.algorithm && b.algorithm &&
        !SameChoice(*a.algorithm, *b.algorithm)) {
      d.klass = DivergenceClass::kAlgorithmSelection;
      d.what = "the library chose a different algorithm";
      d.evidence.push_back("run A: " + ChoiceText(*a.algorithm));
      d.evidence.push_back("run B: " + ChoiceText(*b.algorithm));
      AddOutputEvidence(a, b, &d);
      return Found(std::move(d), a, b);
    }
    // Arguments first: a different argument means the program asked for something else.
    // (Captured buffers are data, compared below with the digests.)
    if (const auto mismatch = FirstDifferentArgument(a, b)) {
      const std::string text_a =
          mismatch->a < a.args.size() ? ArgumentText(a.args[mismatch->a]) : "(none)";
      const std::string text_b =
          mismatch->b < b.args.size() ? ArgumentText(b.args[mismatch->b]) : "(none)";
      Structural(&a, lane_index, &b, lane_index,
                 "the same op with different arguments: " + text_a + " in run A, " + text_b +
                     " in run B");
      return;
    }
    if (a.algorithm.has_value() != b.algorithm.has_value() ||
        (a.algorithm && !SameChoice(*a.algorithm, *b.algorithm))) {
      d.klass = DivergenceClass::kAlgorithmSelection;
      d.what = "the library chose a different algorithm";
      d.evidence.push_back("run A: " + (a.algorithm ? ChoiceText(*a.algorithm) : "(none)"));
      d.evidence.push_back("run B: " + (b.algorithm ? ChoiceText(*b.algorithm) : "(none)"));
      AddOutputEvidence(a, b, &d);
      return Found(std::move(d), a, b);
    }
    if (a.rng.has_value() != b.rng.has_value() || (a.rng && !SameRng(*a.rng, *b.rng))) {
      d.klass = DivergenceClass::kRngState;
      d.what = "the op consumed different random-number-generator state";
      d.evidence.push_back("run A: " + (a.rng ? RngText(*a.rng) : "(none)"));
      d.evidence.push_back("run B: " + (b.rng ? RngText(*b.rng) : "(none)"));
      AddOutputEvidence(a, b, &d);
      return Found(std::move(d), a, b);
    }
    for (size_t i = 0; i < std::min(a.inputs.size(), b.inputs.size()); ++i) {
      if (a.inputs[i].digest == b.inputs[i].digest) continue;
      if (Placement(a.inputs[i], b.inputs[i])) continue;
      d.klass = DivergenceClass::kPropagated;
      d.evidence.push_back("input " + BufferText(a.inputs[i]) + ": " + Hex(a.inputs[i].digest) +
                           " in run A, " + Hex(b.inputs[i].digest) + " in run B");
      const uint64_t allocation = a.inputs[i].pointer.allocation_id;
      const bool unwritten = allocation == 0 || !last_writer_.count(allocation);
      // The tracer names the digests of managed memory a kernel is given so (RecordLaunch).
      const bool managed = a.inputs[i].role.ends_with(" (managed memory)");
      if (a.kind == format::OpKind::kMemcpy && a.args.size() + a.inputs.size() > 0 && unwritten) {
        d.what = "the host data copied to the GPU differs: the runs diverged on the CPU";
        d.from_host = true;
      } else if (managed && unwritten) {
        d.what =
            "the data the host wrote into managed memory differs (no op wrote it): the "
            "runs diverged on the CPU";
        d.from_host = true;
        d.hint = HostDataHint(true);
      } else if (a.kind == format::OpKind::kFrameworkOp && allocation == 0) {
        // A host tensor: an earlier op that wrote it differently would have diverged first.
        d.what =
            "a host tensor or Python number the op read already differs, and no earlier op in "
            "the trace made it differ: it came from Python (a number computed there, "
            "torch.tensor or torch.from_numpy of Python or NumPy data, a file, a DataLoader "
            "worker)";
        d.from_host = true;
        d.hint = PythonDataHint();
      } else {
        PointBack(a.inputs[i].pointer, EffectiveSequence(a), &d);
      }
      AddOutputEvidence(a, b, &d);
      return Found(std::move(d), a, b);
    }
    // A result the op returned to the host (a BLAS reduction in host pointer mode) is an output:
    // a different one from identical inputs makes the op nondeterministic.
    const format::Argument* result_a = FindArgument(a, "result");
    const format::Argument* result_b = FindArgument(b, "result");
    if (result_a != nullptr && result_b != nullptr && !SameArgument(*result_a, *result_b)) {
      d.klass = DivergenceClass::kNondeterministicOp;
      d.what = "the op returned a different result from identical inputs";
      d.evidence.push_back("returned " + ArgumentText(*result_a) + " in run A, " +
                           ArgumentText(*result_b) + " in run B");
      AddOutputEvidence(a, b, &d);
      return Found(std::move(d), a, b);
    }
    // Captured whole allocations are read only for a pair that may be the first divergence.
    std::vector<CaptureCheck> checks;
    if (!report_.first_divergence || a.sequence < divergence_key_) checks = CheckCaptures(a, b);
    ClassifyByData(a, lane_index, b, lane_index_b, std::move(d), std::move(checks), nullptr);
  }

  // The rest of ComparePair, from the op's captured buffers on. A kernel's captured whole
  // allocation that differs only outside the tensors the op points at (`checks`, Verdict) is
  // placement: not an input or output that differs. Such a verdict is final, but one that
  // finds differing bytes inside may change as the diff learns where further tensors start
  // (TensorStarts): while the pair could still be the first divergence it waits (Defer) and is
  // decided at the end (ResolveDeferred: `deferred` is then its entry).
  void ClassifyByData(const OpRecord& a, uint64_t lane_index, const OpRecord& b,
                      uint64_t lane_index_b, Divergence d, std::vector<CaptureCheck> checks,
                      Deferred* deferred) {
    std::set<std::string> placement;  // blob arguments whose differences are placement
    bool inside = false;
    for (const CaptureCheck& check : checks) {
      switch (Verdict(check, a, b)) {
        case CaptureVerdict::kOutside:
          placement.insert(check.name);
          break;
        case CaptureVerdict::kInside:
          inside = true;
          break;
        case CaptureVerdict::kUnchecked:
          break;
      }
    }
    std::vector<std::string> captured;  // inputs that differ where the op reads them
    for (std::string& name : DifferingCaptures(a, b, "in")) {
      if (!placement.count(name)) captured.push_back(std::move(name));
    }
    std::optional<Divergence> propagated;
    if (!captured.empty()) {
      const std::string role = captured.front().substr(8);
      propagated = d;
      propagated->klass = DivergenceClass::kPropagated;
      propagated->evidence.push_back("captured input `" + role + "` differs: blob " +
                                     *TextOf(a, captured.front()) + " in run A, " +
                                     *TextOf(b, captured.front()) + " in run B");
      const auto* base = FindArgument(a, role);  // a launch's `alloc<id>`
      const auto* allocation = base ? std::get_if<format::DevicePointer>(&base->value) : nullptr;
      PointBack(allocation ? *allocation : format::DevicePointer{}, EffectiveSequence(a),
                &*propagated);
      if (deferred != nullptr && deferred->input == captured.front()) {
        // Its root was asked for as the pair was compared (the writers before it may since
        // have been forgotten), and refined as later-read writers arrived.
        pending_query_ = std::move(deferred->query);
      }
      AddOutputEvidence(a, b, &*propagated, &placement);
    }
    if (inside && deferred == nullptr &&
        Defer(a, lane_index, b, lane_index_b, d, checks,
              captured.empty() ? std::string() : captured.front())) {
      return;
    }
    NotePlacement(a, checks, placement, propagated ? &*propagated : &d);
    if (propagated) {
      pending_placement_ = std::move(placement);
      pending_checks_ = std::move(checks);
      return Found(std::move(*propagated), a, b);
    }
    if (a.status != b.status) {
      Structural(&a, lane_index, &b, lane_index,
                 "the same op returned " + std::to_string(a.status) + " in run A and " +
                     std::to_string(b.status) + " in run B");
      return;
    }
    // A copy or a memset is deterministic: when what it wrote differs, its device source
    // (no digest of its own) already differed.
    if ((a.kind == format::OpKind::kMemcpy || a.kind == format::OpKind::kMemset) &&
        AddOutputEvidence(a, b, &d)) {
      d.klass = DivergenceClass::kPropagated;
      // Its device source: the argument named src, else its first device pointer.
      const format::Argument* source = nullptr;
      for (const auto& arg : a.args) {
        const auto* p = std::get_if<format::DevicePointer>(&arg.value);
        if (p == nullptr || p->allocation_id == 0) continue;
        if (source == nullptr || arg.name == "src") source = &arg;
      }
      if (source != nullptr) {
        Query(std::get<format::DevicePointer>(source->value), EffectiveSequence(a),
              "the data this op copied already differs on the device",
              "the data this op copied already differs on the device; `" + source->name +
                  "` was last written by op ");
      } else {
        d.what = "the data this op copied already differs on the device";
      }
      return Found(std::move(d), a, b);
    }
    // A synchronization computes nothing: its outputs are the host bytes of the asynchronous
    // copies it completed ("dst of op N"), whose device source already differed.
    if (a.kind == format::OpKind::kSynchronize && AddOutputEvidence(a, b, &d)) {
      d.klass = DivergenceClass::kPropagated;
      d.what = "the data an asynchronous copy brought to the host already differed on the device";
      // The last copy that differs: host bytes are read when the synchronization returns, so
      // a later copy into the same host memory shows in an earlier one's digest too.
      for (size_t i = std::min(a.outputs.size(), b.outputs.size()); i-- > 0;) {
        if (a.outputs[i].digest == b.outputs[i].digest) continue;
        const std::string& role = a.outputs[i].role;
        const std::string what = "the data copied to the host by " +
                                 (role.rfind("dst of ", 0) == 0 ? role.substr(7) : role) +
                                 " (completed here) already differed on the device";
        Query(a.outputs[i].pointer, a.sequence, what,
              what + "; its source was last written by op ");
        break;
      }
      return Found(std::move(d), a, b);
    }
    // A PyTorch random op with identical inputs: its generator's state differed.
    if (a.kind == format::OpKind::kFrameworkOp && IsRandomAtenOp(a.name) &&
        AddOutputEvidence(a, b, &d, &placement)) {
      d.klass = DivergenceClass::kRngState;
      d.what = "the random op drew different numbers: its generator's state differed";
      return Found(std::move(d), a, b);
    }
    // A PyTorch op without tensor inputs (a factory of Python values) computes from what the
    // shim does not record: those values differed.
    if (a.kind == format::OpKind::kFrameworkOp && a.inputs.empty() && b.inputs.empty() &&
        AddOutputEvidence(a, b, &d, &placement)) {
      d.klass = DivergenceClass::kPropagated;
      d.what =
          "the op read no tensor, and its outputs differ: the Python values it was given "
          "(sizes, fill values, data) already differed";
      d.from_host = true;
      d.hint = PythonDataHint();
      return Found(std::move(d), a, b);
    }
    d.klass = DivergenceClass::kNondeterministicOp;
    if (AddOutputEvidence(a, b, &d, &placement)) {
      const bool inputs_known =
          !a.inputs.empty() || std::any_of(a.args.begin(), a.args.end(), [&](const auto& arg) {
            return arg.name.rfind("blob:in:", 0) == 0 && CapturedBlob(a, arg.name) &&
                   CapturedBlob(b, arg.name);
          });
      d.what = inputs_known ? "the op gave different results from identical inputs"
                            : "the op gave different results in the two runs";
      if (a.algorithm) d.evidence.push_back("algorithm (same in both runs): " + ChoiceText(*a.algorithm));
      pending_placement_ = std::move(placement);
      pending_checks_ = std::move(checks);
      return Found(std::move(d), a, b);
    }
    if (options_.observer != nullptr) {
      const OpLocation location_b = Locate(b, lane_index_b, lane_keys_b_);
      options_.observer->Pair({PairOutcome::Kind::kIdentical, &d.op, &location_b});
    }
  }

  // The differing captured whole allocations of a kernel launch, with where they differ. One is
  // left unchecked (its difference counts, as before) when the op may reach bytes of it other
  // than where its pointer parameters point: a parameter passed as bytes (a struct) or a
  // captured allocation (a table of pointers) holds an address in it; or when no pointer
  // parameter points into it, they point at other offsets in the two runs, or a blob is larger
  // than kMaxExactCompareBytes or cannot be read.
  std::vector<CaptureCheck> CheckCaptures(const OpRecord& a, const OpRecord& b) {
    std::vector<CaptureCheck> checks;
    if (a.kind != format::OpKind::kKernelLaunch) return checks;
    std::vector<std::string> names = DifferingCaptures(a, b, "in");
    for (std::string& name : DifferingCaptures(a, b, "out")) names.push_back(std::move(name));
    if (names.empty()) return checks;
    // The bytes of every captured input allocation of each run, read once, for the pointer scan.
    InputBlobs inputs_a, inputs_b;
    for (const std::string& name : names) {
      CaptureCheck check;
      check.name = name;
      const std::string role = name.substr(name.find(':', 5) + 1);
      const auto* base_a = PointerOf(a, role);
      const auto* base_b = PointerOf(b, role);
      if (base_a == nullptr || base_b == nullptr || base_a->allocation_id == 0 ||
          base_a->allocation_id != base_b->allocation_id) {
        continue;  // not a whole allocation: the buffer is the tensor
      }
      check.allocation = base_a->allocation_id;
      check.offsets = ParameterOffsets(a, check.allocation);
      if (!check.offsets.empty() && check.offsets == ParameterOffsets(b, check.allocation) &&
          !PointedAtFromBytes(a, *base_a, role, &inputs_a, *a_) &&
          !PointedAtFromBytes(b, *base_b, role, &inputs_b, *b_)) {
        StatusOr<std::string> bytes_a = a_->ReadBlob(*CapturedBlob(a, name), kMaxExactCompareBytes);
        StatusOr<std::string> bytes_b = b_->ReadBlob(*CapturedBlob(b, name), kMaxExactCompareBytes);
        if (bytes_a.ok() && bytes_b.ok()) {
          check.bytes = std::max(bytes_a->size(), bytes_b->size());
          check.differing = DifferingRanges(*bytes_a, *bytes_b);
          check.checked = true;
        }
      }
      checks.push_back(std::move(check));
    }
    return checks;
  }

  static const format::DevicePointer* PointerOf(const OpRecord& op, std::string_view name) {
    const format::Argument* argument = FindArgument(op, name);
    return argument ? std::get_if<format::DevicePointer>(&argument->value) : nullptr;
  }

  // Where a launch's pointer parameters (`arg<i>`) point into `allocation`, ascending.
  static std::vector<uint64_t> ParameterOffsets(const OpRecord& op, uint64_t allocation) {
    std::set<uint64_t> offsets;
    for (const format::Argument& argument : op.args) {
      if (argument.name.rfind("arg", 0) != 0) continue;
      const auto* p = std::get_if<format::DevicePointer>(&argument.value);
      if (p != nullptr && p->allocation_id == allocation) offsets.insert(p->offset);
    }
    return {offsets.begin(), offsets.end()};
  }

  // The captured input allocations of one run's launch, read once (PointedAtFromBytes).
  struct InputBlobs {
    bool read = false;
    bool failed = false;  // a blob could not be read, or they exceed kMaxExactCompareBytes
    std::vector<std::string> blobs;
  };

  // Whether launch `op` may find an address in allocation `base` (captured as `role`) other than
  // through its pointer parameters: in a parameter passed as bytes, or in the bytes of one of its
  // captured input allocations (`inputs`, read from `reader` on first use; unreadable: yes).
  static bool PointedAtFromBytes(const OpRecord& op, const format::DevicePointer& base,
                                 const std::string& role, InputBlobs* inputs,
                                 format::TraceReader& reader) {
    const uint64_t* size = nullptr;
    if (const auto* argument = FindArgument(op, role + ".bytes")) {
      size = std::get_if<uint64_t>(&argument->value);
    }
    if (size == nullptr || base.raw_address == 0) return true;
    for (const format::Argument& argument : op.args) {
      const auto* bytes = std::get_if<format::Argument::Bytes>(&argument.value);
      if (bytes != nullptr && HoldsPointerInto(bytes->data, base.raw_address, *size)) return true;
    }
    if (!inputs->read) {
      inputs->read = true;
      uint64_t total = 0;
      for (const format::Argument& argument : op.args) {
        if (argument.name.rfind("blob:in:", 0) != 0) continue;
        const auto id = CapturedBlob(op, argument.name);
        if (!id) {
          inputs->failed = true;
          break;
        }
        StatusOr<std::string> blob = reader.ReadBlob(*id, kMaxExactCompareBytes - total);
        if (!blob.ok()) {
          inputs->failed = true;
          break;
        }
        total += blob->size();
        inputs->blobs.push_back(std::move(*blob));
      }
      if (inputs->failed) inputs->blobs.clear();
    }
    if (inputs->failed) return true;
    for (const std::string& blob : inputs->blobs) {
      if (HoldsPointerInto(blob, base.raw_address, *size)) return true;
    }
    return false;
  }

  // Where op a/b's tensors in the checked allocation lie: from each pointer parameter's offset
  // to the next tensor start either run counts for it (the further of the two: a start only one
  // run knows may not bound the other's tensor), or the allocation's end.
  std::vector<ByteRange> Regions(const CaptureCheck& check, const OpRecord& a,
                                 const OpRecord& b) const {
    std::vector<ByteRange> regions;
    for (const uint64_t offset : check.offsets) {
      const uint64_t end =
          std::max(starts_a_.NextStart(check.allocation, offset, a.sequence, a.stream_id),
                   starts_b_.NextStart(check.allocation, offset, b.sequence, b.stream_id));
      regions.push_back({offset, std::min(end, check.bytes)});
    }
    return regions;
  }

  CaptureVerdict Verdict(const CaptureCheck& check, const OpRecord& a, const OpRecord& b) const {
    if (!check.checked) return CaptureVerdict::kUnchecked;
    for (const ByteRange& region : Regions(check, a, b)) {
      for (const ByteRange& range : check.differing) {
        if (range.begin < region.end && range.end > region.begin) return CaptureVerdict::kInside;
      }
    }
    return CaptureVerdict::kOutside;
  }

  // Keeps the pair for the end, when the diff knows every tensor start of both runs: a start
  // the diff has not read yet (a prefetch issued after the op, written while it was captured)
  // can only shrink the op's tensors. Only while the pair could be the first divergence, and
  // for at most kMaxDeferred pairs; otherwise (false) it is decided now, on the starts known.
  bool Defer(const OpRecord& a, uint64_t lane_index, const OpRecord& b, uint64_t lane_index_b,
             const Divergence& d, std::vector<CaptureCheck>& checks, const std::string& input) {
    if (deferred_.size() >= kMaxDeferred ||
        (report_.first_divergence && a.sequence >= divergence_key_)) {
      return false;
    }
    deferred_.push_back(Deferred{a, b, lane_index, lane_index_b, d, std::move(checks), input,
                                 std::move(pending_query_)});
    pending_query_.reset();
    return true;
  }

  void ResolveDeferred() {
    std::sort(deferred_.begin(), deferred_.end(),
              [](const Deferred& x, const Deferred& y) { return x.a.sequence < y.a.sequence; });
    std::vector<Deferred> deferred = std::move(deferred_);
    deferred_.clear();
    for (Deferred& entry : deferred) {
      pending_query_.reset();
      pair_index_b_ = entry.lane_index_b;
      ClassifyByData(entry.a, entry.lane_index, entry.b, entry.lane_index_b, std::move(entry.d),
                     std::move(entry.checks), &entry);
    }
  }

  // Counts the captured buffers of op `a` whose differences are placement (for the note) and
  // says so in the op's evidence.
  void NotePlacement(const OpRecord& a, const std::vector<CaptureCheck>& checks,
                     const std::set<std::string>& placement, Divergence* d) {
    for (const CaptureCheck& check : checks) {
      if (!placement.count(check.name)) continue;
      const bool input = check.name.rfind("blob:in:", 0) == 0;
      const std::string role = check.name.substr(input ? 8 : 9);
      d->evidence.push_back(std::string("captured ") + (input ? "input" : "output") + " `" + role +
                            "` differs only outside the tensors the op points at "
                            "(placement, not counted)");
      ++capture_placement_;
      if (check.differing.empty() ||
          (!capture_placement_example_.empty() && a.sequence >= capture_placement_sequence_)) {
        continue;
      }
      capture_placement_sequence_ = a.sequence;
      std::string where;
      for (const uint64_t offset : check.offsets) {
        where += (where.empty() ? "+" : ", +") + std::to_string(offset);
      }
      const ByteRange& first = check.differing.front();
      capture_placement_example_ = "op " + std::to_string(a.sequence) + ", `" + role + "`: bytes " +
                                   std::to_string(first.begin) + ".." + std::to_string(first.end) +
                                   " differ first; it points at " + where;
    }
  }

  static void SetRoot(const LastWriter& writer, uint64_t sequence, Divergence* d) {
    d->root = OpLocation{writer.sequence, writer.thread_id, writer.stream_id, writer.lane_index,
                         writer.kind,     writer.name,      writer.lane};
    d->window_begin = writer.sequence;
    d->window_end = sequence;
  }

  // The op that last wrote at `pointer` before op `before` in run A, as far as the diff has
  // seen: the last to write exactly there (a tensor of a caching allocator's segment starts
  // where an op's pointer points), else the last to write anywhere in its allocation; null
  // when none did. `exact` says which.
  const LastWriter* LastWriterOf(const format::DevicePointer& pointer, uint64_t before,
                                 bool* exact) const {
    *exact = false;
    if (pointer.allocation_id == 0) return nullptr;
    if (auto it = last_writer_exact_.find({pointer.allocation_id, pointer.offset});
        it != last_writer_exact_.end()) {
      if (const LastWriter* writer = it->second.LatestBefore(before)) {
        *exact = true;
        return writer;
      }
    }
    const auto it = last_writer_.find(pointer.allocation_id);
    return it == last_writer_.end() ? nullptr : it->second.LatestBefore(before);
  }

  // The inputs of op `sequence` at `pointer` already differ: the op that last wrote them is
  // the root, when the trace has one.
  void PointBack(const format::DevicePointer& pointer, uint64_t sequence, Divergence* d) {
    d->what = "the op's inputs already differ, and no earlier op in the trace wrote them";
    Query(pointer, sequence, d->what,
          "the op's inputs already differ; they were last written by op ");
  }

  // Asks for the root of the divergence being classified: the op that last wrote `pointer`
  // before op `before`. Writers in other lanes may reach the diff after the divergence does,
  // so the answer is refined as they come (NoteWrites) once the divergence is the first, and
  // written into it at the end (ApplyRootQuery): `what` without a writer, `with_writer` +
  // "N, which recorded no output digest" with one.
  void Query(const format::DevicePointer& pointer, uint64_t before, std::string what,
             std::string with_writer) {
    RootQuery query{pointer, before, std::move(what), std::move(with_writer), std::nullopt, false};
    if (const LastWriter* writer = LastWriterOf(pointer, before, &query.exact))
      query.best = *writer;
    pending_query_ = std::move(query);
  }

  void RefineRootQuery(const LastWriter& writer, const format::DevicePointer& written) {
    if (root_query_) Refine(writer, written, &*root_query_);
    for (Deferred& deferred : deferred_) {
      if (deferred.query) Refine(writer, written, &*deferred.query);
    }
    if (held_ && held_->query) Refine(writer, written, &*held_->query);
  }

  static void Refine(const LastWriter& writer, const format::DevicePointer& written,
                     RootQuery* query) {
    if (written.allocation_id != query->pointer.allocation_id || writer.at >= query->before) {
      return;
    }
    const bool exact = written.offset == query->pointer.offset;
    if (query->exact && !exact) return;
    if (query->best && query->exact == exact && writer.at <= query->best->at) return;
    query->best = writer;
    query->exact = exact;
  }

  void ApplyRootQuery() {
    if (!root_query_ || !report_.first_divergence) return;
    Divergence& d = *report_.first_divergence;
    if (!root_query_->best) {
      d.what = root_query_->what;
      return;
    }
    // Through device-to-device copies to the op that computed the data.
    LastWriter writer = *root_query_->best;
    for (int hops = 0; hops < 16 && writer.copied_from; ++hops) {
      bool exact = false;
      const LastWriter* source = LastWriterOf(*writer.copied_from, writer.at, &exact);
      if (source == nullptr) break;
      writer = *source;
    }
    d.what = root_query_->with_writer + std::to_string(writer.sequence) +
             ", which recorded no output digest";
    SetRoot(writer, root_query_->before, &d);
  }

  // Whole-allocation digests of sub-allocated memory: a difference may be placement (another
  // block order, stale bytes no op reads), never evidence of a divergence on its own.
  bool Placement(const format::BufferDigest& x, const format::BufferDigest& y) {
    if (!x.suballocated && !y.suballocated) return false;
    ++placement_differences_;
    return true;
  }

  // Adds one evidence line per differing output and the size of the first numeric one;
  // returns whether any output differs.
  // `placement`: captured outputs whose differences are placement (ClassifyByData), left out.
  bool AddOutputEvidence(const OpRecord& a, const OpRecord& b, Divergence* d,
                         const std::set<std::string>* placement = nullptr) {
    bool differs = false;
    for (size_t i = 0; i < std::min(a.outputs.size(), b.outputs.size()); ++i) {
      const auto& x = a.outputs[i];
      const auto& y = b.outputs[i];
      if (x.digest == y.digest || Placement(x, y)) continue;
      differs = true;
      d->evidence.push_back("output " + BufferText(x) + ": " + Hex(x.digest) + " in run A, " +
                            Hex(y.digest) + " in run B");
      if (!d->size && x.summary.count && y.summary.count) {
        d->size = DivergenceSize{x.role, x.dtype, x.summary.sum, y.summary.sum,
                                 MaxAbs(x.summary), MaxAbs(y.summary)};
      }
    }
    for (const std::string& name : DifferingCaptures(a, b, "out")) {
      if (placement != nullptr && placement->count(name)) continue;
      differs = true;
      d->evidence.push_back("captured output `" + name.substr(9) + "`: blob " + *TextOf(a, name) +
                            " in run A, " + *TextOf(b, name) + " in run B");
    }
    if (!differs && (!a.outputs.empty() || !b.outputs.empty())) {
      d->evidence.push_back("outputs identical in both runs");
    }
    return differs;
  }

  void Found(Divergence&& d, const OpRecord& a, const OpRecord& b) {
    ++report_.divergent_ops;
    if (options_.observer != nullptr) {
      const OpLocation location_b = Locate(b, pair_index_b_, lane_keys_b_);
      options_.observer->Pair({PairOutcome::Kind::kDiverged, &d.op, &location_b, d.klass,
                               d.size ? &*d.size : nullptr});
    }
    std::optional<RootQuery> query = std::move(pending_query_);
    pending_query_.reset();
    std::set<std::string> placement = std::move(pending_placement_);
    pending_placement_.clear();
    std::vector<CaptureCheck> checks = std::move(pending_checks_);
    pending_checks_.clear();
    const auto place = places_.find(a.sequence);
    if (place != places_.end() && d.klass == DivergenceClass::kPropagated &&
        tainted_.size() < kMaxTainted) {
      tainted_.try_emplace(place->second, a.sequence);
    }
    // An NCCL call that gave different results from identical inputs is held aside: it is the
    // first divergence only if no other rank's data explains it (ExplainCollective).
    if (place != places_.end() && d.klass == DivergenceClass::kNondeterministicOp) {
      if (!held_ || a.sequence < held_->a.sequence) {
        held_ = Held{std::move(d), std::move(query), std::move(placement), std::move(checks), a, b,
                     place->second};
      }
      return;
    }
    if (report_.first_divergence && a.sequence >= divergence_key_) return;
    TakeFirst(std::move(d), std::move(query), std::move(placement), std::move(checks), a, b);
  }

  // Makes the pair (a, b) the first divergence.
  void TakeFirst(Divergence&& d, std::optional<RootQuery> query, std::set<std::string> placement,
                 std::vector<CaptureCheck> checks, const OpRecord& a, const OpRecord& b) {
    root_query_ = std::move(query);
    first_placement_ = std::move(placement);
    first_checks_ = std::move(checks);
    divergence_key_ = a.sequence;
    first_op_ = std::make_unique<OpRecord>(a);
    first_op_b_ = std::make_unique<OpRecord>(b);
    if (format::RangeContext ranges = ranges_a_.Resolve(a.nvtx_range_id); !ranges.empty()) {
      d.ranges = std::move(ranges);
    }
    report_.first_divergence = std::move(d);
  }

  // NCCL calls of several ranks in one process (ranks as threads, or one thread driving every
  // rank in a group): run A's communicators by clique (the `clique` of ncclCommInitRank(Config,
  // Scalable), ncclCommSplit and ncclCommInitAll, which the tracer makes the same for every rank of
  // one communicator) and rank, and each call's place: its communicator and how many calls like it
  // that made before (a collective: collectives on it, in the one order every rank issues them;
  // a send or receive: messages to or from that peer). Cliques and ranks are resolved at the
  // end: a communicator's creation, made on one thread, may come later in the file than the
  // calls another thread made on it.
  void NoteCollective(const OpRecord& op) {
    // Every op of run A passes here: the others leave before any argument is looked up.
    if (op.kind != format::OpKind::kNcclCollective &&
        (op.kind != format::OpKind::kOther || !op.name.starts_with("ncclComm"))) {
      return;
    }
    const uint64_t* comm = UnsignedArgument(op, "comm");
    if (op.name.starts_with("ncclCommInitRank") || op.name == "ncclCommSplit") {
      const uint64_t* clique = UnsignedArgument(op, "clique");
      const format::Argument* rank = FindArgument(op, "rank");
      const auto* r = rank ? std::get_if<int64_t>(&rank->value) : nullptr;
      if (comm != nullptr && clique != nullptr && r != nullptr) {
        comms_[*comm] = {*clique, *r};
      }
      return;
    }
    if (op.name == "ncclCommInitAll") {
      const uint64_t* first = UnsignedArgument(op, "firstComm");
      const format::Argument* ndev = FindArgument(op, "ndev");
      const auto* count = ndev ? std::get_if<int64_t>(&ndev->value) : nullptr;
      if (first == nullptr || count == nullptr || *count < 1 || *count > 4096) return;
      const uint64_t* recorded = UnsignedArgument(op, "clique");  // older traces: none
      const uint64_t clique = recorded ? *recorded : *first | (uint64_t{1} << 63);
      for (int64_t r = 0; r < *count; ++r) comms_[*first + r] = {clique, r};
      return;
    }
    if (op.kind != format::OpKind::kNcclCollective || comm == nullptr) return;
    NcclPlace place{*comm, -1, false, 0};
    if (op.name == "ncclSend" || op.name == "ncclRecv") {
      const format::Argument* peer = FindArgument(op, "peer");
      const auto* p = peer ? std::get_if<int64_t>(&peer->value) : nullptr;
      if (p == nullptr) return;
      place.peer = *p;
      place.send = op.name == "ncclSend";
    }
    place.index = calls_on_[{place.comm, place.peer, place.send}]++;
    places_[op.sequence] = place;
  }

  // Whether `other` is another rank's part of the call at `place`: the other side of a message,
  // or the same collective on a communicator of the same clique.
  bool PartOfSameCall(const NcclPlace& place, const NcclPlace& other) const {
    const auto mine = comms_.find(place.comm);
    const auto its = comms_.find(other.comm);
    if (mine == comms_.end() || its == comms_.end() || other.comm == place.comm ||
        its->second.clique != mine->second.clique || other.index != place.index) {
      return false;
    }
    if (place.peer < 0) return other.peer < 0;
    return other.send != place.send && other.peer == mine->second.rank &&
           its->second.rank == place.peer;
  }

  // An NCCL call that only moves data between ranks, exactly: a receive, a gather, a scatter, an
  // all-to-all, a broadcast where this rank is not the root. Its outputs can differ with its own
  // inputs identical only because another rank's data did.
  static bool OnlyMovesData(const OpRecord& op) {
    if (op.kind != format::OpKind::kNcclCollective) return false;
    const std::string_view name = op.name;
    if (name == "ncclBroadcast" || name == "ncclBcast") {
      const format::Argument* rank = FindArgument(op, "rank");
      const format::Argument* root = FindArgument(op, "root");
      return rank != nullptr && root != nullptr && !(rank->value == root->value);
    }
    return name == "ncclRecv" || name == "ncclAllGather" || name == "ncclGather" ||
           name == "ncclScatter" || name == "ncclAlltoAll";
  }

  // The earliest NCCL call that gave different results from identical inputs (held_), when
  // another rank's part of the same call (PartOfSameCall) received inputs that already differed,
  // or when it only moves data (OnlyMovesData), is no divergence of its own: the first
  // divergence stays the earliest other one (that rank's, or one before it), with a line on what
  // became of the call. Otherwise it is the first divergence if it came before every other. A
  // call that only moves data when nothing else diverged (its sender in another process) is
  // called propagated, from "another rank".
  void ExplainCollective() {
    if (!held_) return;
    Held& h = *held_;
    const auto other = std::find_if(tainted_.begin(), tainted_.end(), [&](const auto& entry) {
      return PartOfSameCall(h.place, entry.first);
    });
    const bool moves_data = OnlyMovesData(h.a);
    if (other == tainted_.end() && !moves_data) {
      if (!report_.first_divergence || h.a.sequence < divergence_key_) {
        TakeFirst(std::move(h.d), std::move(h.query), std::move(h.placement), std::move(h.checks),
                  h.a, h.b);
      }
      return;
    }
    if (report_.first_divergence) {
      report_.first_divergence->evidence.push_back(fmt::format(
          "op {} ({}, thread {}) gave different results from identical inputs only through "
          "other ranks' data{}",
          h.d.op.sequence, h.d.op.name, format::ThreadLabel(h.d.op.thread_id),
          other == tainted_.end()
              ? std::string()
              : fmt::format(": op {}'s part of it received differing inputs", other->second)));
      return;
    }
    h.d.klass = DivergenceClass::kPropagated;
    h.d.what =
        "the op only moves other ranks' data, exactly, and that data already differed: "
        "the divergence is in the rank that sent it";
    h.d.from_process = "another rank";
    h.d.hint.reset();
    TakeFirst(std::move(h.d), std::move(h.query), std::move(h.placement), std::move(h.checks), h.a,
              h.b);
  }

  // The exact size of the first divergence, when both runs captured the op's outputs: the
  // first captured output that differs, element by element.
  void AddExactDifference() {
    if (!first_op_ || !first_op_b_ || !report_.first_divergence) return;
    const OpRecord& a = *first_op_;
    const OpRecord& b = *first_op_b_;
    Divergence& d = *report_.first_divergence;
    std::vector<std::string> captured = DifferingCaptures(a, b, "out");
    std::erase_if(captured, [&](const std::string& name) { return first_placement_.count(name); });
    if (captured.empty()) return;
    const std::string& name = captured.front();
    const std::string role = name.substr(9);
    StatusOr<std::string> bytes_a = a_->ReadBlob(*CapturedBlob(a, name), kMaxExactCompareBytes);
    StatusOr<std::string> bytes_b = b_->ReadBlob(*CapturedBlob(b, name), kMaxExactCompareBytes);
    if (!bytes_a.ok() || !bytes_b.ok()) {
      d.evidence.push_back("captured output `" + role + "` not compared element by element: " +
                           (bytes_a.ok() ? bytes_b : bytes_a).status().message());
      return;
    }
    // A whole allocation: only the op's tensors are compared (the other tensors of its segment
    // are placement), when the diff knows where they lie.
    for (const CaptureCheck& check : first_checks_) {
      if (check.name != name || !check.checked || bytes_a->size() != bytes_b->size()) continue;
      uint64_t at = 0;
      for (const ByteRange& region : Regions(check, a, b)) {
        if (region.begin > at) {
          std::copy(bytes_a->begin() + at, bytes_a->begin() + region.begin, bytes_b->begin() + at);
        }
        at = std::max(at, region.end);
      }
      if (at < bytes_a->size())
        std::copy(bytes_a->begin() + at, bytes_a->end(), bytes_b->begin() + at);
    }
    d.exact = CompareBuffers(*bytes_a, *bytes_b, CapturedDType(a, role));
    d.exact->role = role;
  }

  // The element type of captured buffer `role`: that of the output digest of the same role, or,
  // for a kernel's allocation `alloc<id>`, of the pointer parameter that points into it.
  static format::DType CapturedDType(const OpRecord& op, const std::string& role) {
    for (const auto& out : op.outputs) {
      if (out.role == role && out.dtype != format::DType::kUnknown) return out.dtype;
    }
    const auto* base = FindArgument(op, role);
    const auto* allocation = base ? std::get_if<format::DevicePointer>(&base->value) : nullptr;
    if (op.kind != format::OpKind::kKernelLaunch || allocation == nullptr) {
      return format::DType::kUnknown;
    }
    format::DType found = format::DType::kUnknown;
    for (size_t i = 0;; ++i) {
      const auto* parameter = FindArgument(op, "arg" + std::to_string(i));
      if (parameter == nullptr) break;
      const auto* pointer = std::get_if<format::DevicePointer>(&parameter->value);
      if (pointer == nullptr || pointer->allocation_id != allocation->allocation_id) continue;
      const format::DType dtype = PointerParameterDType(op.name, i);
      if (found != format::DType::kUnknown && dtype != found) return format::DType::kUnknown;
      found = dtype;
    }
    return found;
  }

  // Compares state digests present in both runs, in order. Allocations marked sub-allocated
  // are left out (Placement). A differing digest becomes an `uncovered` divergence at the end
  // (DecideUncovered): one taken while the program ran counts only when a single thread issued
  // ops, since with several the op count at which it was taken does not say how far each
  // thread had got.
  void CompareStateDigests() {
    while (!states_a_.empty() && !states_b_.empty()) {
      const auto& x = states_a_.front();
      const auto& y = states_b_.front();
      std::map<uint64_t, const format::BufferDigest*> in_b;
      for (const auto& d : y.allocations) in_b[d.pointer.allocation_id] = &d;
      std::vector<std::string> differing;
      for (const auto& d : x.allocations) {
        auto it = in_b.find(d.pointer.allocation_id);
        if (it != in_b.end() && !(it->second->digest == d.digest) && !Placement(d, *it->second)) {
          differing.push_back(BufferText(d));
        }
      }
      // At exit every op has been issued: how many is the ops' business (structure), not
      // the digest's.
      const bool at_exit = x.reason == "exit" && y.reason == "exit";
      const bool moved = x.after_op != y.after_op && !at_exit;
      if (!differing.empty() || moved) {
        Divergence d;
        d.klass = DivergenceClass::kUncovered;
        d.op.sequence = x.after_op;
        d.op.name = "state digest after op " + std::to_string(x.after_op);
        d.sequence_b = y.after_op;
        d.window_begin = last_equal_state_ ? *last_equal_state_ + 1 : 0;
        d.window_end = x.after_op;
        d.what = "device memory differs after op " + std::to_string(x.after_op) +
                 ", and no op with an output digest diverged before it";
        for (const auto& text : differing) d.evidence.push_back("allocation " + text + " differs");
        if (x.after_op != y.after_op) {
          d.evidence.push_back("taken after op " + std::to_string(x.after_op) + " in run A, " +
                               std::to_string(y.after_op) + " in run B");
        }
        ++uncovered_count_;
        // Only the earliest of each kind can become the first divergence (DecideUncovered).
        std::optional<Divergence>& earliest = at_exit ? uncovered_at_exit_ : uncovered_mid_run_;
        if (!at_exit) ++uncovered_mid_run_count_;
        if (!earliest || d.op.sequence < earliest->op.sequence) earliest = std::move(d);
        if (at_exit) ++uncovered_at_exit_count_;
      } else if (uncovered_count_ == 0) {
        last_equal_state_ = x.after_op;
      }
      states_a_.pop_front();
      states_b_.pop_front();
    }
    // State digests the other run, read to the end, has no counterpart for.
    if (done_b_) states_a_.clear();
    if (done_a_) states_b_.clear();
  }

  void DecideUncovered() {
    uint64_t mid_run = 0;
    uint64_t exit_under_work = 0;
    if (threads_.size() > 1) {
      mid_run = uncovered_mid_run_count_;
      uncovered_mid_run_.reset();
      // An exit digest after which a run still recorded ops was taken while another thread
      // was issuing work (the program exited under it): how far that thread had got varies, as
      // in the middle of a run.
      if (uncovered_at_exit_ && (uncovered_at_exit_->op.sequence < max_sequence_a_ ||
                                 uncovered_at_exit_->sequence_b < max_sequence_b_)) {
        exit_under_work = uncovered_at_exit_count_;
        uncovered_at_exit_count_ = 0;
        uncovered_at_exit_.reset();
      }
    } else {
      report_.divergent_ops += uncovered_mid_run_count_;
    }
    report_.divergent_ops += uncovered_at_exit_count_;
    for (std::optional<Divergence>* uncovered : {&uncovered_mid_run_, &uncovered_at_exit_}) {
      if (!*uncovered) continue;
      Divergence& d = **uncovered;
      if (options_.observer != nullptr) {
        options_.observer->Pair({PairOutcome::Kind::kDiverged, &d.op, nullptr, d.klass});
      }
      if (!report_.first_divergence || d.op.sequence < divergence_key_) {
        divergence_key_ = d.op.sequence;
        root_query_.reset();
        first_op_.reset();
        first_op_b_.reset();
        report_.first_divergence = std::move(d);
      }
    }
    if (mid_run != 0) {
      report_.notes.push_back(std::to_string(mid_run) +
                              " state digest(s) taken while the program ran differ; not compared: "
                              "several threads issued ops, and how far each had got at that op "
                              "count varies from run to run");
    }
    if (exit_under_work != 0) {
      report_.notes.push_back(
          "the state digest at exit differs; not compared: ops were recorded after it, so "
          "another thread was still issuing work when the program exited, and how far it had "
          "got varies from run to run");
    }
    if (placement_differences_ != 0) {
      report_.notes.push_back(
          std::to_string(placement_differences_) +
          " digest(s) of whole sub-allocated allocations (caching-allocator segments) differ; "
          "not counted: where tensors lie in a segment, and the stale bytes between them, may "
          "differ in a deterministic program");
    }
    if (capture_placement_ != 0) {
      report_.notes.push_back(
          std::to_string(capture_placement_) +
          " captured whole allocation(s) of kernel launches differ only outside the tensors "
          "their ops point at; not counted: the rest of a caching allocator's segment holds "
          "other tensors, which may already differ or be written by other streams while the op "
          "is captured (first: " +
          capture_placement_example_ + ")");
    }
  }

  void CompareHeaders() {
    const auto& x = a_->header();
    const auto& y = b_->header();
    CompareInputs(x, y);
    auto add = [&](std::string field, std::string va, std::string vb, bool blocking) {
      if (va != vb) report_.header.push_back({std::move(field), std::move(va), std::move(vb), blocking});
    };
    add("gpu count", std::to_string(x.gpus.size()), std::to_string(y.gpus.size()), true);
    for (size_t i = 0; i < std::min(x.gpus.size(), y.gpus.size()); ++i) {
      const auto& g = x.gpus[i];
      const auto& h = y.gpus[i];
      const std::string prefix = "gpu " + std::to_string(i) + " ";
      add(prefix + "name", g.name, h.name, true);
      add(prefix + "compute capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor),
          std::to_string(h.cc_major) + "." + std::to_string(h.cc_minor), true);
      add(prefix + "SM count", std::to_string(g.sm_count), std::to_string(h.sm_count), true);
      add(prefix + "simulated", g.simulated ? "yes" : "no", h.simulated ? "yes" : "no", true);
    }
    const auto version = [](uint32_t v) { return v ? std::to_string(v) : std::string("(not loaded)"); };
    add("driver version", version(x.versions.driver), version(y.versions.driver), false);
    add("runtime version", version(x.versions.runtime), version(y.versions.runtime), false);
    add("cuDNN version", version(x.versions.cudnn), version(y.versions.cudnn), false);
    add("cuBLAS version", version(x.versions.cublas), version(y.versions.cublas), false);
    add("NCCL version", version(x.versions.nccl), version(y.versions.nccl), false);
    add("cuRAND version", version(x.versions.curand), version(y.versions.curand), false);
    add("policy", format::PolicyName(x.policy), format::PolicyName(y.policy), false);
    std::map<std::string, std::pair<std::string, std::string>> env;
    for (const auto& v : x.environment) env[v.name].first = v.value;
    for (const auto& v : y.environment) env[v.name].second = v.value;
    for (const auto& [name, values] : env) add("environment " + name, values.first, values.second, false);
  }

  // The program, its command line and the files it was started with (format version 2 on):
  // differing, the runs are not of the same program or input.
  void CompareInputs(const format::TraceHeader& x, const format::TraceHeader& y) {
    const auto add = [&](std::string field, std::string va, std::string vb) {
      if (va == vb) return;
      report_.other_program.push_back(field);
      report_.header.push_back({std::move(field), std::move(va), std::move(vb), false});
    };
    const auto joined = [](const std::vector<std::string>& words) {
      std::string text;
      for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
      return text;
    };
    const auto base = [](const std::vector<std::string>& words) {
      if (words.empty()) return std::string();
      const size_t slash = words[0].rfind('/');
      return slash == std::string::npos ? words[0] : words[0].substr(slash + 1);
    };
    add("program", base(x.command_line), base(y.command_line));
    add("command line", joined(x.command_line), joined(y.command_line));
    std::map<std::string, std::pair<const format::InputFile*, const format::InputFile*>> files;
    for (const auto& f : x.inputs) files[f.path].first = &f;
    for (const auto& f : y.inputs) files[f.path].second = &f;
    const auto text = [](const format::InputFile* f) {
      if (f == nullptr) return std::string("(not there)");
      return std::to_string(f->bytes) + " B, digest " +
             kernels::ToHex({f->digest_lo, f->digest_hi});
    };
    for (const auto& [path, pair] : files) {
      // A file only one run could see is a difference; one neither recorded is none.
      if (pair.first && pair.second && *pair.first == *pair.second) continue;
      add("input " + path, text(pair.first), text(pair.second));
    }
  }

  void Warnings(const format::TraceReader& reader, const char* run) {
    if (!reader.complete()) {
      (run[0] == 'A' ? report_.incomplete_a : report_.incomplete_b) =
          reader.truncated_tail_bytes();
    }
    (run[0] == 'A' ? report_.damage_a : report_.damage_b) = reader.damage();
    const uint64_t dropped = run[0] == 'A' ? dropped_a_ : dropped_b_;
    if (dropped) {
      report_.warnings.push_back(std::string("run ") + run + " dropped " + std::to_string(dropped) +
                                 " records while recording; alignment may report them as "
                                 "structural differences");
    }
  }

  std::unique_ptr<format::TraceReader> a_;
  std::unique_ptr<format::TraceReader> b_;
  DiffReport& report_;
  const DiffOptions options_;
  std::map<uint64_t, Lane> lanes_;
  LaneKeys lane_keys_a_;
  LaneKeys lane_keys_b_;
  std::deque<format::StateDigestRecord> states_a_;
  std::deque<format::StateDigestRecord> states_b_;
  std::optional<uint64_t> last_equal_state_;
  static constexpr size_t kWritersKept = 8;
  static constexpr size_t kGraphWritesKept = 4096;
  struct GraphWrites {
    std::vector<format::DevicePointer> pointers;  // written by the launches captured into it
    std::string kernels;                          // their names, once each
  };
  std::map<uint64_t, GraphWrites> graph_writes_;            // by graph id
  LastWriter writer_;                                       // NoteWrites's
  std::unordered_map<uint64_t, WriterRing<kWritersKept>> last_writer_;  // by allocation id
  std::unordered_map<std::pair<uint64_t, uint64_t>, WriterRing<kWritersKept>, PlaceHash>
      last_writer_exact_;  // by allocation id and offset
  // Choices forced over what the program asked for (ForcedOverRequest), by op sequence.
  std::map<uint64_t, format::PolicyDecisionRecord> forced_a_;
  std::map<uint64_t, format::PythonStackRecord> python_stacks_a_;  // by op sequence
  std::map<uint64_t, format::PolicyDecisionRecord> forced_b_;
  std::optional<RootQuery> pending_query_;  // of the pair being compared
  std::optional<RootQuery> root_query_;     // of the first divergence
  uint64_t placement_differences_ = 0;
  // Where tensors start in each run's allocations, from every op read (ClassifyByData).
  TensorStarts starts_a_;
  TensorStarts starts_b_;
  // Pairs whose captured allocations wait for the end to be classified (Defer), at most
  // kMaxDeferred.
  static constexpr size_t kMaxDeferred = 16;
  std::vector<Deferred> deferred_;
  // Of the pair being compared and of the first divergence: captured outputs whose differences
  // are placement, and the checks of its captured allocations (AddExactDifference).
  std::set<std::string> pending_placement_;
  std::vector<CaptureCheck> pending_checks_;
  std::set<std::string> first_placement_;
  std::vector<CaptureCheck> first_checks_;
  uint64_t capture_placement_ = 0;         // captured allocations whose difference is placement
  std::string capture_placement_example_;  // of the earliest such op
  uint64_t capture_placement_sequence_ = 0;
  std::set<uint32_t> threads_;  // thread ids seen in either run
  // Differing state digests, decided at the end (DecideUncovered): the earliest taken while
  // the program ran and the earliest taken at exit, and how many of each.
  uint64_t uncovered_count_ = 0;
  std::optional<Divergence> uncovered_mid_run_;
  std::optional<Divergence> uncovered_at_exit_;
  uint64_t uncovered_mid_run_count_ = 0;
  uint64_t uncovered_at_exit_count_ = 0;
  // Reading: a run read to the end, and the op sequence each run's reading has reached.
  bool done_a_ = false;
  bool done_b_ = false;
  uint64_t last_sequence_a_ = 0;
  uint64_t last_sequence_b_ = 0;
  uint64_t max_sequence_a_ = 0;  // the highest sequence of an op that is no lifecycle op
  uint64_t max_sequence_b_ = 0;
  // Ops one lane may hold waiting for the other run's (memory bound; Match), and how many
  // were declared one run's own for it.
  static constexpr size_t kMaxWaitingOps = 16384;
  uint64_t given_up_ = 0;
  uint64_t divergence_key_ = 0;
  uint64_t pair_index_b_ = 0;  // the lane index in run B of the pair ComparePair compares
  uint64_t structural_key_ = 0;
  format::NvtxPaths ranges_a_;  // each run's NVTX ranges, to name the divergent op's
  format::NvtxPaths ranges_b_;
  // NCCL calls (NoteCollective, ExplainCollective): run A's communicators' cliques and ranks,
  // each communicator's calls so far, the place of each call of run A not yet compared, the
  // places where a pair's inputs differed (with that op's sequence; at most kMaxTainted), and the
  // earliest call that gave different results from identical inputs, held aside.
  struct Held {
    Divergence d;
    std::optional<RootQuery> query;
    std::set<std::string> placement;
    std::vector<CaptureCheck> checks;
    OpRecord a;
    OpRecord b;
    NcclPlace place;
  };
  static constexpr size_t kMaxTainted = 64;
  struct Communicator {
    uint64_t clique = 0;
    int64_t rank = 0;
  };
  std::unordered_map<uint64_t, Communicator> comms_;
  std::map<std::tuple<uint64_t, int64_t, bool>, uint64_t> calls_on_;  // (comm, peer, send)
  std::unordered_map<uint64_t, NcclPlace> places_;
  std::map<NcclPlace, uint64_t> tainted_;
  std::optional<Held> held_;
  std::unique_ptr<OpRecord> first_op_;    // the first divergent op of run A, for its hint
  std::unique_ptr<OpRecord> first_op_b_;  // and of run B
  uint64_t dropped_a_ = 0;
  uint64_t dropped_b_ = 0;
};

}  // namespace

bool DiffReport::comparable() const {
  for (const auto& h : header) {
    if (h.blocking) return false;
  }
  return true;
}

std::string DamageText(const DiffReport& report) {
  const bool in_a = !report.damage_a.empty();
  const format::TraceDamage* first = in_a    ? &report.damage_a.front()
                                     : !report.damage_b.empty() ? &report.damage_b.front()
                                                                : nullptr;
  if (first == nullptr) return std::string();
  const size_t more = report.damage_a.size() + report.damage_b.size() - 1;
  return (in_a ? report.path_a : report.path_b) + ": damaged trace: " + first->what + " (bytes " +
         std::to_string(first->begin) + ".." + std::to_string(first->end) + ")" +
         (more != 0 ? " and " + std::to_string(more) + " more damaged range(s)" : "");
}

bool DiffReport::identical() const {
  return comparable() && !refused && !first_divergence && structural_differences == 0;
}

bool DiffReport::differs_only_at_lane_tails() const {
  return comparable() && !refused && !first_divergence && structural_differences != 0 &&
         structural_differences == lane_tail_ops;
}

namespace {

std::string LaneTailNote(const DiffReport& report) {
  return std::to_string(report.lane_tail_ops) + " of the " +
         std::to_string(report.structural_differences) +
         " structural difference(s) are ops after the other run's last op in their lane: that "
         "run stopped earlier there (killed, failed, or ended while a thread was still issuing "
         "work)";
}

}  // namespace

void MarkReordered(DiffReport* report, std::string why) {
  if (report->lane_tail_ops != 0) std::erase(report->notes, LaneTailNote(*report));
  report->notes.push_back(std::move(why));
  report->first_divergence.reset();
  report->first_structural.reset();
  report->divergent_ops = 0;
  report->structural_differences = 0;
  report->lane_tail_ops = 0;
  report->reordered = true;
}

StatusOr<DiffReport> DiffTraces(const std::string& path_a, const std::string& path_b,
                                const DiffOptions& options) {
  auto a = format::TraceReader::Open(path_a);
  if (!a.ok()) return a.status();
  auto b = format::TraceReader::Open(path_b);
  if (!b.ok()) return b.status();
  DiffReport report;
  report.path_a = path_a;
  report.path_b = path_b;
  Differ differ(std::move(a).value(), std::move(b).value(), &report, options);
  differ.Run();
  // Ops that differ lane by lane may be the same ops, with the same data, handed to other
  // threads (a thread pool): then the runs computed the same, and the diff says so.
  // (A trace never closed is compared too: ops it lost change its multiset.) Only where several
  // threads issued ops: a single thread's runs that differ are not read twice more.
  if ((report.first_divergence || report.structural_differences > 0) && differ.threads() > 1 &&
      report.comparable() && !report.refused && !report.damaged()) {
    const std::optional<OpMultiset> ops_a = ContentMultiset(path_a);
    const std::optional<OpMultiset> ops_b = ContentMultiset(path_b);
    if (ops_a && ops_b && *ops_a == *ops_b) {
      MarkReordered(
          &report,
          "the same " + std::to_string(ops_a->ops) +
              " ops, with the same arguments and the same data read and written, ran in another "
              "order or on other threads in run B (" +
              std::to_string(report.divergent_ops) + " aligned ops differed and " +
              std::to_string(report.structural_differences) +
              " were in one run's lane only: work handed to whichever thread was free, a thread "
              "pool or a work queue): the runs computed the same");
    }
  }
  if (report.lane_tail_ops != 0) report.notes.push_back(LaneTailNote(report));
  if (report.first_divergence) {
    if (std::optional<std::string> race = UnorderedStreams(path_a, *report.first_divergence)) {
      report.first_divergence->evidence.push_back(std::move(*race));
      report.first_divergence->hint = StreamRaceHint();
    }
  }
  return report;
}

std::optional<format::RangeContext> FindOpRanges(const std::string& path, uint64_t sequence) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return std::nullopt;
  format::NvtxPaths ranges;
  format::Record record;
  while ((*reader)->Next(&record)) {
    ranges.Observe(record);
    const auto* op = std::get_if<OpRecord>(&record);
    if (op == nullptr || op->sequence != sequence) continue;
    format::RangeContext context = ranges.Resolve(op->nvtx_range_id);
    if (context.empty()) return std::nullopt;
    return context;
  }
  return std::nullopt;
}

}  // namespace ndt::replay
