// What two runs' records of the same op are compared on, shared by `ndtrace diff`
// (trace_diff.cc) and live verify (live_verify.cc), and the element-by-element comparison of
// two captured buffers that gives a divergence its exact size.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "formats/records.h"

namespace ndt::replay {

// Arguments compared as behaviour, not placement. Where memory lies is placement: a caching
// allocator hands a tensor another block, or another offset in a segment, whenever its free
// list was filled in another order (a deterministic program's threads free blocks in varying
// order), and a framework takes events from a pool the same way. So device pointers compare
// equal to device pointers (their data is compared through digests), and the `event` an op
// names and the streams it names (`stream`, `eventStream`: pooled, see LaneKeys) are not
// compared; everything else by value.
bool SameArgument(const format::Argument& a, const format::Argument& b);

// Whether `name` is a capture's blob reference (`blob:in:<role>`, `blob:out:<role>`,
// `blob:module`; tracer/capture.h). Its value is the content's id, so it is compared as data
// (an input or an output), never as an argument the program passed.
bool IsBlobArgument(std::string_view name);

// The op's arguments other than blob references, measurements (a cuDNN Find's `first`,
// ranked by timing), "insideOp" (the tracer's note of the call an op was made from inside) and
// "result" (a value the op returned to the host: an output),
// pairwise in order. A kernel's by-value struct parameters and its pointer
// parameters that hold host addresses are compared through the data, not as bytes (their bytes
// differ from run to run in deterministic programs: uninitialized slots, stack addresses); the
// device pointers inside structs are arguments of their own ("<name>@<offset>",
// tracer/README.md) and compare as pointers. Returns the index pair of
// the first that differs (an index equal to the size: that side has no more), or nullopt.
struct ArgumentMismatch {
  size_t a = 0;
  size_t b = 0;
};
std::optional<ArgumentMismatch> FirstDifferentArgument(const format::OpRecord& a,
                                                       const format::OpRecord& b);

// Lanes: the ops one thread issued on one stream, the unit runs are aligned by. Within a lane
// a stream is named by its order of first use by that thread (its 1st, 2nd, ... stream), not by
// its id: frameworks hand pooled streams to threads in the order the threads ask, from a pool
// whichever thread asked first created, so which stream a thread gets varies in a
// deterministic program, while the order in which each thread comes to use its streams does
// not. One LaneKeys per run, fed that run's ops (lifecycle ops left out) in file order.
class LaneKeys {
 public:
  // (thread id << 32) | the op's stream's ordinal among the thread's streams (0, 1, ...).
  uint64_t Key(const format::OpRecord& op);
  // The same for an op already given a key; a stream this thread has not used gets the next
  // ordinal it would.
  uint64_t Find(const format::OpRecord& op) const;

 private:
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> ordinal_;  // (thread, stream) -> ordinal
  std::map<uint32_t, uint32_t> next_;                          // thread -> streams seen
};

// Whether `op` only creates or destroys a stream or an event (format::IsLifecycleOp). Frameworks
// take both from pools that whichever thread first finds empty refills, so which thread creates
// them varies in a deterministic program; they compute nothing. Such ops are not aligned or
// compared.
using format::IsLifecycleOp;

// Whether `decision` forced a recorded choice (`--pin`, replay) on an op whose program asked
// for another one itself, or got another from the library's heuristic: a difference in what
// the program did, which forcing would otherwise hide. A choice made by timing (benchmark)
// differing is what pinning is for, and is not one.
bool ForcedOverRequest(const format::PolicyDecisionRecord& decision);

bool SameChoice(const format::AlgorithmChoice& a, const format::AlgorithmChoice& b);
bool SameRng(const format::RngState& a, const format::RngState& b);

// The argument `name` of `op`, or null.
const format::Argument* FindArgument(const format::OpRecord& op, std::string_view name);
// The text argument `name`; null when absent or not text.
const std::string* TextOf(const format::OpRecord& op, std::string_view name);
// A blob id written by the tracer as 32 hex digits, low 64 bits first.
std::optional<format::BlobId> ParseBlobId(std::string_view text);
// The blob id an op's `blob:...` argument `name` holds, or nullopt when the argument is absent
// or says why the tracer could not store it ("missing: ...").
std::optional<format::BlobId> CapturedBlob(const format::OpRecord& op, std::string_view name);

// The element type of the buffer a kernel's pointer parameter `index` points to, from the
// launch's demangled name ("RacySum(float const*, float*, int, int)": parameter 1 is f32), or
// kUnknown when the name has no parameter list or the parameter is not a pointer to a
// built-in arithmetic type (or CUDA's/PyTorch's half types).
format::DType PointerParameterDType(std::string_view demangled_name, size_t index);

// Whether a kernel's parameter `index` is a pointer to const (`float const*`, `const float*`):
// the kernel only reads through it. False when unknown.
bool PointerParameterIsConst(std::string_view demangled_name, size_t index);

// Where and by how much two buffers of the same op differ, element by element. Elements of an
// unknown dtype are bytes.
struct ExactDifference {
  std::string role;
  format::DType dtype = format::DType::kUnknown;
  uint64_t elements = 0;       // in the shorter buffer
  uint64_t differing = 0;      // elements whose bits differ
  uint64_t first_index = 0;    // the first of them
  double first_a = 0, first_b = 0;
  double max_abs_diff = 0;     // over elements finite in both runs
  uint64_t max_abs_index = 0;
  double max_rel_diff = 0;     // |a - b| / max(|a|, |b|), over the same elements
  uint64_t bytes_a = 0, bytes_b = 0;
  // How the differing elements' |a - b| spread: bucket k counts differences in
  // [10^(k + kHistogramLowest), 10^(k + kHistogramLowest + 1)), the first bucket also every
  // smaller one and the last every larger one; non-finite ones (a NaN or an infinity on one
  // side) are counted apart.
  static constexpr int kHistogramLowest = -12;
  static constexpr int kHistogramBuckets = 20;  // 1e-12 .. 1e+8
  std::array<uint64_t, kHistogramBuckets> histogram{};
  uint64_t non_finite = 0;
};
ExactDifference CompareBuffers(std::string_view a, std::string_view b, format::DType dtype);

// "cudnn engine 3 knobs 1=2 [nondeterministic] (picked by benchmark)".
std::string ChoiceText(const format::AlgorithmChoice& choice);

}  // namespace ndt::replay
