#include "replayer/window_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <utility>
#include <variant>

#include "replayer/op_compare.h"

namespace ndt::replay {

// ---- DeviceImage ------------------------------------------------------------------------------

void DeviceImage::Write(uint64_t address, std::string_view bytes) {
  if (bytes.empty()) return;
  Erase(address, bytes.size());
  segments_.emplace(address, std::string(bytes));
}

void DeviceImage::Erase(uint64_t address, uint64_t bytes) {
  if (bytes == 0) return;
  const uint64_t end = address + bytes;
  // The segments overlapping [address, end) keep only their parts outside it.
  auto it = segments_.lower_bound(address);
  if (it != segments_.begin()) --it;
  while (it != segments_.end() && it->first < end) {
    const uint64_t start = it->first;
    const uint64_t stop = start + it->second.size();
    if (stop <= address) {
      ++it;
      continue;
    }
    std::string old = std::move(it->second);
    it = segments_.erase(it);
    if (start < address) segments_.emplace(start, old.substr(0, address - start));
    if (stop > end) segments_.emplace(end, old.substr(end - start));
  }
}

bool DeviceImage::Covers(uint64_t address, uint64_t bytes) const {
  uint64_t at = address;
  const uint64_t end = address + bytes;
  auto it = segments_.upper_bound(address);
  if (it != segments_.begin()) --it;
  for (; it != segments_.end() && at < end; ++it) {
    if (it->first > at) return false;
    at = std::max(at, it->first + it->second.size());
  }
  return at >= end;
}

std::string DeviceImage::ReadOver(uint64_t address, std::string fallback, uint64_t* from_fallback) {
  const uint64_t end = address + fallback.size();
  uint64_t known = 0;
  auto it = segments_.upper_bound(address);
  if (it != segments_.begin()) --it;
  for (; it != segments_.end() && it->first < end; ++it) {
    const uint64_t start = std::max(address, it->first);
    const uint64_t stop = std::min(end, it->first + it->second.size());
    if (start >= stop) continue;
    std::memcpy(fallback.data() + (start - address), it->second.data() + (start - it->first),
                stop - start);
    known += stop - start;
  }
  if (from_fallback != nullptr) *from_fallback = fallback.size() - known;
  Write(address, fallback);
  return fallback;
}

std::optional<std::string> DeviceImage::Read(uint64_t address, uint64_t bytes) const {
  if (!Covers(address, bytes)) return std::nullopt;
  std::string out(bytes, '\0');
  const uint64_t end = address + bytes;
  auto it = segments_.upper_bound(address);
  if (it != segments_.begin()) --it;
  for (; it != segments_.end() && it->first < end; ++it) {
    const uint64_t start = std::max(address, it->first);
    const uint64_t stop = std::min(end, it->first + it->second.size());
    if (start >= stop) continue;
    std::memcpy(out.data() + (start - address), it->second.data() + (start - it->first),
                stop - start);
  }
  return out;
}

uint64_t DeviceImage::known_bytes() const {
  uint64_t total = 0;
  for (const auto& [start, bytes] : segments_) total += bytes.size();
  return total;
}

namespace {

// ---- what each op reads and writes ----------------------------------------------------------

// A device extent of an op: its recorded address and size.
struct Place {
  uint64_t address = 0;
  uint64_t bytes = 0;
};

// Places larger than this are not replayed (the image holds them in host memory; captures stop
// at 1 GiB too).
constexpr uint64_t kMaxPlaceBytes = uint64_t{1} << 30;

bool Plausible(uint64_t address, uint64_t bytes) {
  return address != 0 && bytes > 0 && bytes <= kMaxPlaceBytes && address + bytes > address;
}

// Where `role` of `op` lies: a digested buffer of that role, or a kernel's captured allocation
// ("alloc<id>" and "alloc<id>.bytes"); nullopt when the trace does not say.
std::optional<Place> PlaceOf(const format::OpRecord& op, const std::string& role) {
  for (const auto* list : {&op.outputs, &op.inputs}) {
    for (const format::BufferDigest& digest : *list) {
      if (digest.role == role && Plausible(digest.pointer.raw_address, digest.bytes)) {
        return Place{digest.pointer.raw_address, digest.bytes};
      }
    }
  }
  const format::Argument* base = FindArgument(op, role);
  const format::Argument* size = FindArgument(op, role + ".bytes");
  const auto* pointer =
      base == nullptr ? nullptr : std::get_if<format::DevicePointer>(&base->value);
  const auto* bytes = size == nullptr ? nullptr : std::get_if<uint64_t>(&size->value);
  if (pointer != nullptr && bytes != nullptr && Plausible(pointer->raw_address, *bytes)) {
    return Place{pointer->raw_address, *bytes};
  }
  return std::nullopt;
}

// The roles of the op's "blob:<direction>:<role>" arguments, with the text each holds.
std::vector<std::pair<std::string, std::string>> BlobRoles(const format::OpRecord& op,
                                                           std::string_view direction) {
  const std::string prefix = fmt::format("blob:{}:", direction);
  std::vector<std::pair<std::string, std::string>> roles;
  for (const format::Argument& argument : op.args) {
    if (argument.name.rfind(prefix, 0) != 0) continue;
    const auto* text = std::get_if<std::string>(&argument.value);
    roles.emplace_back(argument.name.substr(prefix.size()), text != nullptr ? *text : "");
  }
  return roles;
}

bool HasCapture(const format::OpRecord& op) {
  for (const format::Argument& argument : op.args) {
    if (IsBlobArgument(argument.name)) return true;
  }
  return false;
}

const format::DevicePointer* PointerArgument(const format::OpRecord& op, const char* name) {
  const format::Argument* argument = FindArgument(op, name);
  return argument == nullptr ? nullptr : std::get_if<format::DevicePointer>(&argument->value);
}

uint64_t UnsignedArgument(const format::OpRecord& op, const char* name) {
  const format::Argument* argument = FindArgument(op, name);
  const auto* value = argument == nullptr ? nullptr : std::get_if<uint64_t>(&argument->value);
  return value != nullptr ? *value : 0;
}

std::string OpName(const format::OpRecord& op) {
  return fmt::format("op {} ({})", op.sequence, op.name);
}

// How window replay treats `op`.
enum class Treatment { kReplay, kCopy, kMemset, kOrdering, kRecorded, kRefused };

// The device places a call window replay does not re-execute wrote (its output digests).
std::vector<Place> WrittenPlaces(const format::OpRecord& op, bool* all_known) {
  std::vector<Place> places;
  *all_known = true;
  for (const format::BufferDigest& output : op.outputs) {
    if (output.pointer.allocation_id == 0) continue;  // host memory
    if (Plausible(output.pointer.raw_address, output.bytes)) {
      places.push_back({output.pointer.raw_address, output.bytes});
    } else {
      *all_known = false;
    }
  }
  return places;
}

Treatment TreatmentOf(const format::OpRecord& op, std::string* why) {
  if (FindArgument(op, "capturedInto") != nullptr) {
    return Treatment::kOrdering;  // put into a CUDA graph, not run then
  }
  switch (op.kind) {
    case format::OpKind::kMemcpy:
      return Treatment::kCopy;
    case format::OpKind::kMemset:
      return Treatment::kMemset;
    case format::OpKind::kSynchronize:
      return Treatment::kOrdering;
    case format::OpKind::kGraphLaunch:
      *why = "a CUDA graph launch is not replayed in a window yet";
      return Treatment::kRefused;
    case format::OpKind::kNcclCollective:
      *why = "a collective needs the other ranks: it is not replayed in a window";
      return Treatment::kRefused;
    default:
      break;
  }
  if (CheckReplayable(op).ok()) return Treatment::kReplay;
  if (op.kind != format::OpKind::kOther) {
    *why = CheckReplayable(op).message();
    return Treatment::kRefused;
  }
  bool all_known = true;
  const std::vector<Place> written = WrittenPlaces(op, &all_known);
  if (!all_known) {
    *why =
        "it writes device memory at places the trace does not give, and window replay "
        "cannot re-execute it";
    return Treatment::kRefused;
  }
  return written.empty() ? Treatment::kOrdering : Treatment::kRecorded;
}

// For each op of the window, the sequence of the library call re-executed in the window that
// made it from inside (its "insideOp": cuBLAS launching its GEMM kernel), or 0.
std::vector<uint64_t> InsideLibraryCalls(const WindowOps& window) {
  std::vector<uint64_t> inside(window.ops.size(), 0);
  std::map<uint64_t, bool> replayed;  // the window's ops by sequence: re-executed?
  for (const format::OpRecord& op : window.ops) {
    std::string why;
    replayed[op.sequence] =
        op.kind != format::OpKind::kKernelLaunch && TreatmentOf(op, &why) == Treatment::kReplay;
  }
  for (size_t i = 0; i < window.ops.size(); ++i) {
    const uint64_t call = UnsignedArgument(window.ops[i], "insideOp");
    if (const auto it = replayed.find(call); it != replayed.end() && it->second) inside[i] = call;
  }
  return inside;
}

// The source and destination of a copy (0: host) and its size.
struct Copy {
  uint64_t dst = 0, src = 0, bytes = 0;
};

Copy CopyOf(const format::OpRecord& op) {
  Copy copy;
  if (const format::DevicePointer* dst = PointerArgument(op, "dst")) copy.dst = dst->raw_address;
  if (const format::DevicePointer* src = PointerArgument(op, "src")) copy.src = src->raw_address;
  copy.bytes = UnsignedArgument(op, "bytes");
  return copy;
}

// The bytes a memset writes, or nullopt when its arguments are incomplete.
std::optional<std::string> MemsetBytes(const format::OpRecord& op) {
  const uint64_t count = UnsignedArgument(op, "count");
  const uint64_t element = UnsignedArgument(op, "elementBytes");
  const uint64_t value = UnsignedArgument(op, "value");
  if (element != 1 && element != 2 && element != 4) return std::nullopt;
  if (count > kMaxPlaceBytes / element) return std::nullopt;
  std::string bytes(count * element, '\0');
  for (uint64_t i = 0; i < count; ++i) std::memcpy(bytes.data() + i * element, &value, element);
  return bytes;
}

// ---- CheckWindow: coverage only ---------------------------------------------------------------

// Byte ranges known to the window (written or first read), without their bytes.
class Coverage {
 public:
  void Add(uint64_t address, uint64_t bytes) {
    if (bytes == 0) return;
    uint64_t start = address, end = address + bytes;
    auto it = ranges_.upper_bound(start);
    if (it != ranges_.begin() && std::prev(it)->second >= start) --it;
    while (it != ranges_.end() && it->first <= end) {
      start = std::min(start, it->first);
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(start, end);
  }
  void Erase(uint64_t address, uint64_t bytes) {
    if (bytes == 0) return;
    const uint64_t end = address + bytes;
    auto it = ranges_.upper_bound(address);
    if (it != ranges_.begin()) --it;
    while (it != ranges_.end() && it->first < end) {
      const uint64_t start = it->first, stop = it->second;
      if (stop <= address) {
        ++it;
        continue;
      }
      it = ranges_.erase(it);
      if (start < address) ranges_.emplace(start, address);
      if (stop > end) ranges_.emplace(end, stop);
    }
  }
  bool Covers(uint64_t address, uint64_t bytes) const {
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) return bytes == 0;
    --it;
    return it->first <= address && it->second >= address + bytes;
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // start -> end, disjoint, not touching
};

std::string NotKept(const format::OpRecord& op, const std::string& role, const std::string& why,
                    const WindowOps& window) {
  std::string kept = window.captured_last == 0
                         ? "the trace captured no op: record it with `ndtrace record --window "
                           "A:B`"
                         : fmt::format("the trace captured ops {}..{}", window.captured_first,
                                       window.captured_last);
  return fmt::format("{} reads {}, which the trace did not keep ({}); {}", OpName(op), role, why,
                     kept);
}

}  // namespace

StatusOr<WindowOps> ReadWindowOps(format::TraceReader& reader, uint64_t first,
                                  std::optional<uint64_t> last) {
  if (last && *last < first) {
    return Status::Error(fmt::format("the window {}:{} ends before it begins", first, *last));
  }
  WindowOps window;
  bool any = false;
  reader.Rewind();
  format::Record record;
  while (reader.Next(&record)) {
    auto* op = std::get_if<format::OpRecord>(&record);
    if (op == nullptr) continue;
    any = true;
    window.last_in_trace = std::max(window.last_in_trace, op->sequence);
    if (HasCapture(*op)) {
      if (window.captured_last == 0 || op->sequence < window.captured_first) {
        window.captured_first = op->sequence;
      }
      window.captured_last = std::max(window.captured_last, op->sequence);
    }
    if (op->sequence >= first && (!last || op->sequence <= *last)) {
      window.ops.push_back(std::move(*op));
    }
  }
  if (!any) return Status::Error("the trace holds no op");
  if (window.ops.empty()) {
    return Status::Error(fmt::format("the trace has no op in the window {}:{} (its ops end at {})",
                                     first, last ? fmt::format("{}", *last) : "",
                                     window.last_in_trace));
  }
  std::sort(
      window.ops.begin(), window.ops.end(),
      [](const format::OpRecord& a, const format::OpRecord& b) { return a.sequence < b.sequence; });
  return window;
}

Status CheckWindow(const WindowOps& window) {
  Coverage known;
  const auto input = [&](const format::OpRecord& op, const std::string& role,
                         const std::string& text, std::optional<Place> place) -> Status {
    const bool kept = ParseBlobId(text).has_value();
    if (place) {
      if (kept || known.Covers(place->address, place->bytes)) {
        known.Add(place->address, place->bytes);
        return Status::Ok();
      }
    } else if (kept) {
      return Status::Ok();
    }
    return Status::Error(NotKept(op, role, text.empty() ? "not captured" : text, window));
  };
  const std::vector<uint64_t> inside = InsideLibraryCalls(window);
  for (size_t i = 0; i < window.ops.size(); ++i) {
    const format::OpRecord& op = window.ops[i];
    if (inside[i] != 0) continue;
    std::string why;
    switch (TreatmentOf(op, &why)) {
      case Treatment::kRefused:
        return Status::Error(fmt::format("{} cannot be replayed in a window: {}", OpName(op), why));
      case Treatment::kOrdering:
        break;
      case Treatment::kRecorded: {
        bool all_known = true;
        for (const Place& place : WrittenPlaces(op, &all_known)) {
          known.Erase(place.address, place.bytes);
        }
        break;
      }
      case Treatment::kMemset: {
        const format::DevicePointer* dst = PointerArgument(op, "dst");
        const std::optional<std::string> bytes = MemsetBytes(op);
        if (dst == nullptr || !bytes || !Plausible(dst->raw_address, bytes->size())) {
          return Status::Error(fmt::format("{} lacks its destination or value", OpName(op)));
        }
        known.Add(dst->raw_address, bytes->size());
        break;
      }
      case Treatment::kCopy: {
        const Copy copy = CopyOf(op);
        if (copy.dst == 0) break;  // to the host: nothing on the device changes
        if (!Plausible(copy.dst, copy.bytes) ||
            (copy.src != 0 && !Plausible(copy.src, copy.bytes))) {
          return Status::Error(
              fmt::format("{} has an impossible extent ({} bytes)", OpName(op), copy.bytes));
        }
        const std::string* src = TextOf(op, "blob:in:src");
        std::optional<Place> from;
        if (copy.src != 0) from.emplace(Place{copy.src, copy.bytes});
        if (Status status = input(op, "its source", src != nullptr ? *src : "", from);
            !status.ok()) {
          return status;
        }
        known.Add(copy.dst, copy.bytes);
        break;
      }
      case Treatment::kReplay: {
        if (!HasCapture(op)) {
          return Status::Error(NotKept(op, "its inputs", "not captured", window));
        }
        if (op.kind == format::OpKind::kKernelLaunch) {
          const std::string* module = TextOf(op, "blob:module");
          if (module == nullptr || !ParseBlobId(*module)) {
            return Status::Error(fmt::format("{}: its module image was not kept ({})", OpName(op),
                                             module != nullptr ? *module : "not captured"));
          }
        }
        for (const auto& [role, text] : BlobRoles(op, "in")) {
          if (Status status = input(op, role, text, PlaceOf(op, role)); !status.ok()) {
            return status;
          }
        }
        for (const auto& [role, text] : BlobRoles(op, "out")) {
          if (std::optional<Place> place = PlaceOf(op, role)) {
            known.Add(place->address, place->bytes);
          }
        }
        break;
      }
    }
  }
  return Status::Ok();
}

namespace {

// Reads the captured blob `text` names; nullopt when it names none.
StatusOr<std::optional<std::string>> ReadKept(format::TraceReader& reader, const std::string* text,
                                              uint64_t bytes) {
  if (text == nullptr) return std::optional<std::string>();
  const std::optional<format::BlobId> id = ParseBlobId(*text);
  if (!id) return std::optional<std::string>();
  StatusOr<std::string> read = reader.ReadBlob(*id, uint64_t{1} << 32);
  if (!read.ok()) return read.status();
  if (read->size() != bytes) {
    return Status::Error(
        fmt::format("a captured buffer holds {} bytes, not {}", read->size(), bytes));
  }
  return std::optional<std::string>(std::move(*read));
}

// Splits "y+hy+cy" into its roles.
std::vector<std::string> Roles(const std::string& joined) {
  std::vector<std::string> roles;
  size_t start = 0;
  while (start <= joined.size()) {
    size_t end = joined.find('+', start);
    if (end == std::string::npos) end = joined.size();
    if (end > start) roles.push_back(joined.substr(start, end - start));
    start = end + 1;
  }
  return roles;
}

// Writes an op's compared output bytes (its roles end to end) back to the image.
Status WriteOutputs(DeviceImage& image, const format::OpRecord& op, const std::string& joined,
                    const std::string& bytes) {
  uint64_t at = 0;
  for (const std::string& role : Roles(joined)) {
    const std::optional<Place> place = PlaceOf(op, role);
    if (!place || at + place->bytes > bytes.size()) {
      return Status::Error(fmt::format(
          "{}: cannot place its output {} in the window's device memory (its address or size "
          "was not recorded)",
          OpName(op), role));
    }
    image.Write(place->address, std::string_view(bytes).substr(at, place->bytes));
    at += place->bytes;
  }
  if (at != bytes.size()) {
    return Status::Error(fmt::format("{}: its outputs {} hold {} bytes, their places {}",
                                     OpName(op), joined, bytes.size(), at));
  }
  return Status::Ok();
}

std::string ValueDiff(const AlgorithmRuns& runs) {
  if (!runs.compared_values) return "";
  return fmt::format("; max |a-b| {:.3g}, max |a-b|/max(|a|,|b|) {:.3g}", runs.max_abs_diff,
                     runs.max_rel_diff);
}

// Runs the window's ops from `from` on `image`, each K times; returns at the first op whose
// outputs vary (its index in `report->ops`) or nullopt at the end of the window.
class WindowRunner {
 public:
  WindowRunner(format::TraceReader& reader, const WindowOps& window,
               const WindowReplayOptions& options, WindowReplayReport* report)
      : reader_(reader),
        window_(window),
        options_(options),
        report_(report),
        inside_(InsideLibraryCalls(window)) {}

  // Applies or replays op `index` of the window. Sets `*varies` when its K outputs differ
  // (then nothing is written to the image); `alternative` >= 0 replays the candidate of that
  // index in a try_deterministic report instead (already run: its output is written).
  Status Step(size_t index, bool* varies) {
    const format::OpRecord& op = window_.ops[index];
    WindowOpResult result;
    result.op = op;
    *varies = false;
    if (inside_[index] != 0) {
      result.step = WindowStep::kInside;
      report_->ops.push_back(std::move(result));
      return Status::Ok();
    }
    std::string why;
    switch (TreatmentOf(op, &why)) {
      case Treatment::kRefused:
        return Status::Error(fmt::format("{} cannot be replayed in a window: {}", OpName(op), why));
      case Treatment::kOrdering:
        result.step = WindowStep::kOrdering;
        break;
      case Treatment::kRecorded: {
        result.step = WindowStep::kRecorded;
        bool all_known = true;
        for (const Place& place : WrittenPlaces(op, &all_known)) {
          image_.Erase(place.address, place.bytes);
        }
        break;
      }
      case Treatment::kMemset: {
        result.step = WindowStep::kApplied;
        const format::DevicePointer* dst = PointerArgument(op, "dst");
        const std::optional<std::string> bytes = MemsetBytes(op);
        if (dst == nullptr || !bytes) {
          return Status::Error(fmt::format("{} lacks its destination or value", OpName(op)));
        }
        image_.Write(dst->raw_address, *bytes);
        break;
      }
      case Treatment::kCopy: {
        result.step = WindowStep::kApplied;
        const Copy copy = CopyOf(op);
        if (copy.dst == 0) break;
        StatusOr<std::optional<std::string>> kept =
            ReadKept(reader_, TextOf(op, "blob:in:src"), copy.bytes);
        if (!kept.ok()) return kept.status().Prefixed(OpName(op));
        std::string bytes;
        if (copy.src != 0 && *kept) {
          bytes = image_.ReadOver(copy.src, std::move(**kept), &result.bytes_from_trace);
        } else if (copy.src != 0 && image_.Covers(copy.src, copy.bytes)) {
          bytes = *image_.Read(copy.src, copy.bytes);
        } else if (*kept) {
          bytes = std::move(**kept);  // from the host: the bytes the program handed over
          result.bytes_from_trace = bytes.size();
        } else {
          return Status::Error(NotKept(op, "its source", "not captured", window_));
        }
        image_.Write(copy.dst, bytes);
        break;
      }
      case Treatment::kReplay: {
        result.step = WindowStep::kReplayed;
        StatusOr<OpReplayReport> replayed = Replay(op, false, &result.bytes_from_trace);
        if (!replayed.ok()) return replayed.status();
        result.output_role = replayed->output_role;
        result.output_bytes = replayed->output_bytes;
        result.runs = std::move(replayed->algorithms.front());
        if (!result.runs.stable()) {
          *varies = true;
        } else {
          if (result.runs.runs_matching_recorded == 0) ++report_->differing_from_recorded;
          if (Status status =
                  WriteOutputs(image_, op, result.output_role, result.runs.first_output_bytes);
              !status.ok()) {
            return status;
          }
        }
        result.runs.first_output_bytes.clear();
        break;
      }
    }
    report_->bytes_from_trace += result.bytes_from_trace;
    report_->ops.push_back(std::move(result));
    return Status::Ok();
  }

  // Replays the varying op `op` with its deterministic alternatives; writes the first stable
  // one's output and returns its runs, or nullopt when none is stable.
  StatusOr<std::optional<AlgorithmRuns>> Fix(const format::OpRecord& op) {
    uint64_t ignored = 0;
    StatusOr<OpReplayReport> replayed = Replay(op, true, &ignored);
    if (!replayed.ok()) return replayed.status();
    std::optional<AlgorithmRuns> chosen;
    for (size_t i = 1; i < replayed->algorithms.size(); ++i) {
      if (replayed->algorithms[i].stable()) {
        chosen = replayed->algorithms[i];
        break;
      }
    }
    if (chosen) {
      if (Status status =
              WriteOutputs(image_, op, replayed->output_role, chosen->first_output_bytes);
          !status.ok()) {
        return status;
      }
      chosen->first_output_bytes.clear();
    }
    for (AlgorithmRuns& runs : replayed->algorithms) runs.first_output_bytes.clear();
    if (!report_->alternatives) report_->alternatives = std::move(*replayed);
    return chosen;
  }

  const DeviceImage& image() const { return image_; }

 private:
  StatusOr<OpReplayReport> Replay(const format::OpRecord& op, bool try_deterministic,
                                  uint64_t* from_trace) {
    OpReplayOptions replay;
    replay.repeat = options_.repeat;
    replay.try_deterministic = try_deterministic;
    replay.keep_first_output = true;
    *from_trace = 0;
    Status failure = Status::Ok();
    // Each input: the window's device memory, over the captured bytes where the window has not
    // been (first touch: the memory as it was at op A).
    replay.input_source = [&](const format::OpRecord& of, const std::string& role,
                              uint64_t bytes) -> std::optional<std::string> {
      const std::optional<Place> place = PlaceOf(of, role);
      if (!place || place->bytes != bytes) return std::nullopt;  // as captured
      StatusOr<std::optional<std::string>> kept =
          ReadKept(reader_, TextOf(of, "blob:in:" + role), bytes);
      if (!kept.ok()) {
        failure = kept.status();
        return std::nullopt;
      }
      if (*kept) {
        uint64_t fallback = 0;
        std::string read = image_.ReadOver(place->address, std::move(**kept), &fallback);
        *from_trace += fallback;
        return read;
      }
      return image_.Read(place->address, bytes);
    };
    StatusOr<OpReplayReport> replayed = ReplayOp(reader_, op, replay);
    if (!failure.ok()) return failure.Prefixed(OpName(op));
    if (!replayed.ok()) return replayed.status();
    if (replayed->algorithms.empty()) {
      return Status::Error(fmt::format("{}: the replay ran nothing", OpName(op)));
    }
    return replayed;
  }

  format::TraceReader& reader_;
  const WindowOps& window_;
  const WindowReplayOptions& options_;
  WindowReplayReport* report_;
  std::vector<uint64_t> inside_;  // InsideLibraryCalls
  DeviceImage image_;
};

}  // namespace

StatusOr<WindowReplayReport> ReplayWindow(format::TraceReader& reader,
                                          const WindowReplayOptions& options) {
  StatusOr<WindowOps> window = ReadWindowOps(reader, options.first, options.last);
  if (!window.ok()) return window.status();
  if (Status status = CheckWindow(*window); !status.ok()) return status;

  WindowReplayReport report;
  report.first = options.first;
  report.last = options.last.value_or(window->last_in_trace);
  report.captured_first = window->captured_first;
  report.captured_last = window->captured_last;
  report.ops_in_window = window->ops.size();
  report.repeat = std::max(1, options.repeat);
  uint64_t start_ns = UINT64_MAX, end_ns = 0;
  for (const format::OpRecord& op : window->ops) {
    if (op.start_ns != 0) start_ns = std::min(start_ns, op.start_ns);
    end_ns = std::max(end_ns, op.end_ns);
  }
  report.recorded_ns = end_ns > start_ns ? end_ns - start_ns : 0;

  WindowReplayOptions effective = options;
  effective.repeat = report.repeat;
  WindowRunner runner(reader, *window, effective, &report);
  const auto started = std::chrono::steady_clock::now();
  bool stopped = false;
  for (size_t i = 0; i < window->ops.size(); ++i) {
    bool varies = false;
    if (Status status = runner.Step(i, &varies); !status.ok()) return status;
    if (!varies) continue;
    const size_t index = report.ops.size() - 1;
    if (!report.first_varying) {
      report.first_varying = index;
      const WindowOpResult& result = report.ops[index];
      report.evidence.push_back(fmt::format(
          "inputs equal: the window's own device memory, the same in every repeat up to this "
          "op ({} earlier ops stable)",
          index));
      report.evidence.push_back(fmt::format("{} of {} runs of {} gave {} different {} ({} bytes){}",
                                            result.runs.runs, result.runs.runs, result.runs.name,
                                            result.runs.distinct_outputs, result.output_role,
                                            result.output_bytes, ValueDiff(result.runs)));
      if (result.runs.runs_matching_recorded >= 0) {
        report.evidence.push_back(fmt::format("{} of {} runs equal the recorded output",
                                              result.runs.runs_matching_recorded,
                                              result.runs.runs));
      }
      report.hint = FindFixHint(result.op, DivergenceClass::kNondeterministicOp);
    }
    if (!options.try_deterministic) {
      stopped = true;
      break;
    }
    StatusOr<std::optional<AlgorithmRuns>> fixed = runner.Fix(window->ops[i]);
    if (!fixed.ok()) return fixed.status();
    if (!*fixed) {
      report.unfixed.push_back(index);
      stopped = true;
      break;  // the window's memory after it is unknown
    }
    WindowOpResult& result = report.ops[index];
    result.runs = std::move(**fixed);
    result.substituted = true;
    report.fixed.push_back(index);
  }
  report.ran_to_end = !stopped && report.ops.size() == window->ops.size();
  report.replay_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  report.image_bytes = runner.image().known_bytes();
  return report;
}

}  // namespace ndt::replay
