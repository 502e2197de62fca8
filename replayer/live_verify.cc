#include "replayer/live_verify.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>
#include <variant>

#include "formats/trace_reader.h"
#include "replayer/op_compare.h"

namespace ndt::replay {
namespace {

using format::OpRecord;

constexpr uint64_t kNoOp = UINT64_MAX;
// Reference ops read ahead while looking for a lane's next op; past this the lane is taken to
// be missing from the reference (a structural difference).
constexpr size_t kMaxReadAhead = size_t{1} << 16;

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Joined(const std::vector<std::string>& words, size_t from) {
  std::string text;
  for (size_t i = from; i < words.size(); ++i) text += (i > from ? " " : "") + words[i];
  return text;
}

bool SameDigests(const std::vector<format::BufferDigest>& a,
                 const std::vector<format::BufferDigest>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    // Whole digests of sub-allocated memory may differ by placement alone (op_compare.h).
    if (!(a[i].digest == b[i].digest) && !a[i].suballocated && !b[i].suballocated) return false;
  }
  return true;
}

// Whether two aligned ops agree on every fact the diff compares.
bool SameOp(const OpRecord& a, const OpRecord& b) {
  if (a.kind != b.kind || a.name != b.name || a.status != b.status) return false;
  if (FirstDifferentArgument(a, b)) return false;
  if (a.algorithm.has_value() != b.algorithm.has_value()) return false;
  if (a.algorithm && !SameChoice(*a.algorithm, *b.algorithm)) return false;
  if (a.rng.has_value() != b.rng.has_value()) return false;
  if (a.rng && !SameRng(*a.rng, *b.rng)) return false;
  return SameDigests(a.inputs, b.inputs) && SameDigests(a.outputs, b.outputs);
}

// As diff compares them (trace_diff.cc): at exit the op count is the ops' business, and
// sub-allocated memory may differ by placement alone.
bool SameState(const format::StateDigestRecord& a, const format::StateDigestRecord& b) {
  if (a.after_op != b.after_op && !(a.reason == "exit" && b.reason == "exit")) return false;
  std::map<uint64_t, const format::BufferDigest*> in_b;
  for (const auto& d : b.allocations) in_b[d.pointer.allocation_id] = &d;
  for (const auto& d : a.allocations) {
    auto it = in_b.find(d.pointer.allocation_id);
    if (it == in_b.end() || it->second->digest == d.digest) continue;
    if (!d.suballocated && !it->second->suballocated) return false;
  }
  return true;
}

}  // namespace

StatusOr<RecordedDigests> FindRecordedDigests(const std::string& path) {
  StatusOr<std::unique_ptr<format::TraceReader>> reader = format::TraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  RecordedDigests found;
  std::optional<uint64_t> first, last;
  format::Record record;
  while ((*reader)->Next(&record)) {
    if (const auto* op = std::get_if<OpRecord>(&record)) {
      ++found.ops;
      if ((op->kind == format::OpKind::kKernelLaunch || op->kind == format::OpKind::kMemset) &&
          !op->outputs.empty()) {
        first = std::min(first.value_or(op->sequence), op->sequence);
        last = std::max(last.value_or(op->sequence), op->sequence);
      }
    } else if (const auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      const std::string& reason = state->reason;
      if (reason == "synchronize") found.sync = true;
      if (reason == "exit") found.exit = true;
      static constexpr std::string_view kEvery = "every ";
      if (reason.rfind(kEvery, 0) == 0) {
        uint64_t n = 0;
        size_t i = kEvery.size();
        while (i < reason.size() && reason[i] >= '0' && reason[i] <= '9') {
          n = n * 10 + static_cast<uint64_t>(reason[i++] - '0');
        }
        if (n > 0) found.every = n;
      }
    }
  }
  if (!(*reader)->damage().empty()) {
    const format::TraceDamage& damage = (*reader)->damage().front();
    return Status::Error(path + ": damaged trace: " + damage.what + " (bytes " +
                         std::to_string(damage.begin) + ".." + std::to_string(damage.end) + ")");
  }
  if (first) found.window = std::to_string(*first) + ":" + std::to_string(*last);
  return found;
}

Status CheckSameProgram(const format::TraceHeader& reference,
                        const std::vector<std::string>& command, std::string* warning) {
  if (reference.command_line.empty() || command.empty()) {
    return Status::Error("the reference trace records no command line");
  }
  const std::string recorded = BaseName(reference.command_line.front());
  const std::string given = BaseName(command.front());
  if (recorded != given) {
    return Status::Error("the reference trace was recorded from `" +
                         Joined(reference.command_line, 0) + "`, not from program `" + given +
                         "`");
  }
  if (Joined(reference.command_line, 1) != Joined(command, 1)) {
    *warning = "the reference was recorded with arguments `" + Joined(reference.command_line, 1) +
               "`, this run has `" + Joined(command, 1) + "`";
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<LiveVerifier>> LiveVerifier::Open(const std::string& reference_path,
                                                           const std::string& new_path) {
  StatusOr<std::unique_ptr<format::TraceReader>> reference =
      format::TraceReader::Open(reference_path);
  if (!reference.ok()) return reference.status();
  if (!(*reference)->damage().empty()) {
    const format::TraceDamage& damage = (*reference)->damage().front();
    return Status::Error(reference_path + ": damaged trace: " + damage.what + " (bytes " +
                         std::to_string(damage.begin) + ".." + std::to_string(damage.end) + ")");
  }
  return std::unique_ptr<LiveVerifier>(
      new LiveVerifier(std::move(reference).value(), reference_path, new_path));
}

LiveVerifier::LiveVerifier(std::unique_ptr<format::TraceReader> reference,
                           std::string reference_path, std::string new_path)
    : reference_(std::move(reference)),
      reference_path_(std::move(reference_path)),
      new_path_(std::move(new_path)) {}

LiveVerifier::~LiveVerifier() = default;

bool LiveVerifier::Poll() {
  struct stat st {};
  if (::stat(new_path_.c_str(), &st) != 0) return diverged();
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == new_file_bytes_) return diverged();
  StatusOr<std::unique_ptr<format::TraceReader>> opened = format::TraceReader::Open(new_path_);
  if (!opened.ok()) return diverged();  // its header is not whole yet
  format::TraceReader& reader = **opened;
  new_file_bytes_ = size;
  ++polls_that_read_;

  // Resume at the first chunk that may hold an unseen op, unless a chunk that landed since the
  // last read lies before it (a chunk of metadata only, such as the exit state digest).
  const auto& chunks = reader.chunks();
  bool seek = true;
  for (const format::ChunkInfo& chunk : chunks) {
    if (chunk.kind == format::ChunkKind::kRecords && chunk.first_op != kNoOp &&
        chunk.last_op >= watermark_) {
      break;
    }
    if (chunk.offset >= consumed_end_) {
      seek = false;
      break;
    }
  }
  if (seek) reader.SeekToOp(watermark_);

  format::Record record;
  while (reader.Next(&record)) {
    if (auto* op = std::get_if<OpRecord>(&record)) {
      if (op->sequence < watermark_ || seen_above_.count(op->sequence)) continue;
      seen_above_.insert(op->sequence);
      while (seen_above_.count(watermark_)) seen_above_.erase(watermark_++);
      ++ops_followed_;
      TakeNewOp(std::move(*op));
    } else if (auto* state = std::get_if<format::StateDigestRecord>(&record)) {
      if (!states_seen_.insert({state->after_op, state->reason}).second) continue;
      TakeNewState(std::move(*state));
    } else if (const auto* decision = std::get_if<format::PolicyDecisionRecord>(&record)) {
      // Forcing the reference's choice over the program's own request hides a difference.
      if (ForcedOverRequest(*decision)) Differs(decision->op_sequence);
    }
  }
  if (!chunks.empty()) consumed_end_ = std::max(consumed_end_, chunks.back().end());
  return diverged();
}

bool LiveVerifier::PullReference() {
  if (reference_done_) return false;
  format::Record record;
  if (!reference_->Next(&record)) {
    reference_done_ = true;
    return false;
  }
  if (auto* op = std::get_if<OpRecord>(&record)) {
    if (IsLifecycleOp(*op)) return true;
    const uint64_t key = reference_lanes_.Key(*op);
    lanes_[key].reference.push_back(std::move(*op));
  } else if (auto* state = std::get_if<format::StateDigestRecord>(&record)) {
    reference_states_.push_back(std::move(*state));
  }
  return true;
}

void LiveVerifier::TakeNewOp(OpRecord&& op) {
  if (IsLifecycleOp(op)) return;
  Lane& lane = lanes_[new_lanes_.Key(op)];
  ++lane.new_count;
  lane.pending.push_back(std::move(op));
  Match(lane);
}

void LiveVerifier::Match(Lane& lane) {
  while (!lane.pending.empty()) {
    size_t read_ahead = 0;
    while (lane.reference.empty() && read_ahead < kMaxReadAhead && PullReference()) ++read_ahead;
    const OpRecord& op = lane.pending.front();
    if (lane.reference.empty()) {  // not in the reference (within the read-ahead)
      Differs(op.sequence);
      lane.pending.pop_front();
      continue;
    }
    if (!SameOp(lane.reference.front(), op)) Differs(op.sequence);
    lane.reference.pop_front();
    lane.pending.pop_front();
  }
}

void LiveVerifier::TakeNewState(format::StateDigestRecord&& state) {
  new_states_.push_back(std::move(state));
  MatchStates();
}

void LiveVerifier::MatchStates() {
  while (!new_states_.empty()) {
    size_t read_ahead = 0;
    while (reference_states_.empty() && read_ahead < kMaxReadAhead && PullReference()) {
      ++read_ahead;
    }
    if (reference_states_.empty()) {
      Differs(new_states_.front().after_op);
      new_states_.pop_front();
      continue;
    }
    if (!SameState(reference_states_.front(), new_states_.front())) {
      Differs(new_states_.front().after_op);
    }
    reference_states_.pop_front();
    new_states_.pop_front();
  }
}

void LiveVerifier::Differs(uint64_t sequence) {
  if (!first_difference_ || sequence < *first_difference_) first_difference_ = sequence;
}

StatusOr<DiffReport> LiveVerifier::Report(bool finished) const {
  StatusOr<DiffReport> report = DiffTraces(reference_path_, new_path_);
  if (!report.ok() || finished) return report;
  // The reference's ops past the end of the new trace's lane are not missing: the program did
  // not get there (yet, or it was stopped).
  if (const auto& s = report->first_structural; s && s->a && !s->b) {
    auto it = lanes_.find(s->a->lane);
    const uint64_t reached = it == lanes_.end() ? 0 : it->second.new_count;
    if (s->a->lane_index >= reached) {
      report->first_structural.reset();
      report->structural_differences = 0;
    }
  }
  return report;
}

}  // namespace ndt::replay
