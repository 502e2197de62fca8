// Plain C++ mirror of formats/trace.capnp: what the rest of ndtrace reads and writes.
//
// Field meanings, units and invariants are documented once, in trace.capnp; the names here
// are the snake_case forms of the schema's names. No Cap'n Proto type appears outside
// formats/: record_codec.h converts between these structs and the wire form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace ndt::format {

// ---- Header ---------------------------------------------------------------------------

struct GpuInfo {
  uint32_t ordinal = 0;
  std::string name;
  std::string uuid;  // 16 raw bytes (may be empty when unknown)
  uint32_t cc_major = 0;
  uint32_t cc_minor = 0;
  uint32_t sm_count = 0;
  uint64_t memory_bytes = 0;
  bool simulated = false;
  bool operator==(const GpuInfo&) const = default;
};

struct LibraryVersions {
  uint32_t driver = 0;
  uint32_t runtime = 0;
  uint32_t cudnn = 0;
  uint32_t cublas = 0;
  uint32_t nccl = 0;
  uint32_t curand = 0;
  bool operator==(const LibraryVersions&) const = default;
};

struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

enum class Policy : uint16_t { kObserve = 0, kEnforce = 1, kPin = 2, kReplayForce = 3 };

struct InputFile {
  std::string path;
  uint64_t bytes = 0;
  uint64_t digest_lo = 0;
  uint64_t digest_hi = 0;
  bool operator==(const InputFile&) const = default;
};

struct TraceHeader {
  uint32_t format_version = 0;  // filled in by the writer
  std::string tool_version;
  std::vector<std::string> command_line;
  std::string host;
  uint32_t pid = 0;
  int32_t rank = -1;
  uint64_t start_unix_ns = 0;
  std::vector<GpuInfo> gpus;
  LibraryVersions versions;
  std::vector<EnvVar> environment;
  Policy policy = Policy::kObserve;
  std::string pinned_from;
  std::vector<std::string> notes;
  std::vector<InputFile> inputs;
  std::string python;  // CPython version in the process ("3.11.7"); empty: none found
  bool operator==(const TraceHeader&) const = default;
};

// ---- Records --------------------------------------------------------------------------

enum class OpKind : uint16_t {
  kOther = 0,
  kKernelLaunch = 1,
  kMemcpy = 2,
  kMemset = 3,
  kGraphLaunch = 4,
  kCudnnConvolution = 5,
  kCudnnBackendExecute = 6,
  kCublasGemm = 7,
  kCublasLtMatmul = 8,
  kCurandGenerate = 9,
  kNcclCollective = 10,
  kSynchronize = 11,
  kFrameworkOp = 12,
};
inline constexpr int kOpKindCount = 13;

struct DevicePointer {
  uint64_t allocation_id = 0;
  uint64_t offset = 0;
  uint64_t raw_address = 0;
  bool operator==(const DevicePointer&) const = default;
};

struct Argument {
  using Dims = std::vector<int64_t>;
  // A captured byte string (kernel parameter bytes), distinct from text.
  struct Bytes {
    std::string data;
    bool operator==(const Bytes&) const = default;
  };
  std::string name;
  std::variant<std::monostate, uint64_t, int64_t, double, std::string, Bytes, DevicePointer,
               Dims>
      value;
  bool operator==(const Argument&) const = default;
};

struct Knob {
  int64_t type = 0;
  int64_t value = 0;
  bool operator==(const Knob&) const = default;
};

enum class Determinism : uint16_t { kUnknown = 0, kDeterministic = 1, kNondeterministic = 2 };
enum class ChoiceSource : uint16_t {
  kUnknown = 0,
  kRequested = 1,
  kHeuristic = 2,
  kBenchmark = 3,
  kEnforced = 4,
  kPinned = 5,
};

struct AlgorithmChoice {
  std::string library;
  int64_t id = -1;
  std::string name;
  std::vector<Knob> knobs;
  std::string opaque;  // raw bytes
  Determinism determinism = Determinism::kUnknown;
  ChoiceSource source = ChoiceSource::kUnknown;
  bool operator==(const AlgorithmChoice&) const = default;
};

struct RngState {
  std::string generator;
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint64_t subsequence = 0;
  std::string ordering;
  bool device_dependent = false;
  bool operator==(const RngState&) const = default;
};

enum class DType : uint16_t {
  kUnknown = 0,
  kF64 = 1,
  kF32 = 2,
  kF16 = 3,
  kBF16 = 4,
  kF8E4M3 = 5,
  kF8E5M2 = 6,
  kI64 = 7,
  kI32 = 8,
  kI16 = 9,
  kI8 = 10,
  kU8 = 11,
  kBool = 12,
};

struct NumericSummary {
  uint64_t count = 0;  // 0 = no summary
  double min = 0;
  double max = 0;
  double sum = 0;
  uint64_t nan_count = 0;
  uint64_t inf_count = 0;
  bool operator==(const NumericSummary&) const = default;
};

// 128-bit digest v1 value (formats/README.md, "Digest v1").
struct Digest {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const Digest&) const = default;
};

// Content address of a captured buffer in the blob stream: XXH3-128 of its bytes.
struct BlobId {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const BlobId&) const = default;
};

struct BufferDigest {
  std::string role;
  DevicePointer pointer;
  uint64_t bytes = 0;
  Digest digest;
  DType dtype = DType::kUnknown;
  NumericSummary summary;
  bool suballocated = false;
  bool operator==(const BufferDigest&) const = default;
};

struct OpRecord {
  uint64_t sequence = 0;
  uint32_t thread_id = 0;
  uint32_t stream_id = 0;
  OpKind kind = OpKind::kOther;
  std::string name;
  std::vector<Argument> args;
  std::optional<AlgorithmChoice> algorithm;
  std::optional<RngState> rng;
  std::vector<BufferDigest> inputs;
  std::vector<BufferDigest> outputs;
  int32_t status = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t module_id = 0;
  uint32_t device_ordinal = 0;
  uint64_t nvtx_range_id = 0;  // innermost enclosing push/pop range; never compared
  bool operator==(const OpRecord&) const = default;
};

enum class AllocationEvent : uint16_t { kAllocate = 0, kFree = 1 };

struct AllocationRecord {
  uint64_t allocation_id = 0;
  AllocationEvent event = AllocationEvent::kAllocate;
  uint64_t bytes = 0;
  std::string api;
  uint32_t device_ordinal = 0;
  uint64_t raw_address = 0;
  uint64_t before_op = 0;
  uint32_t stream_id = 0;
  bool operator==(const AllocationRecord&) const = default;
};

struct ModuleLoadRecord {
  uint64_t module_id = 0;
  std::string api;
  uint64_t image_bytes = 0;
  Digest digest;
  std::vector<std::string> kernels;
  bool operator==(const ModuleLoadRecord&) const = default;
};

enum class NvtxEvent : uint16_t {
  kPush = 0,
  kPop = 1,
  kStart = 2,
  kEnd = 3,
  kMark = 4,
  kCategoryName = 5,
};

struct NvtxRangeRecord {
  uint32_t thread_id = 0;
  bool push = true;
  std::string name;
  uint64_t before_op = 0;
  uint64_t time_ns = 0;
  NvtxEvent kind = NvtxEvent::kPush;
  uint64_t range_id = 0;
  uint64_t parent_id = 0;
  std::string domain;
  uint32_t category = 0;
  bool operator==(const NvtxRangeRecord&) const = default;
};

struct PolicyDecisionRecord {
  uint64_t op_sequence = 0;
  std::string library;
  std::string action;
  std::optional<AlgorithmChoice> from_choice;
  std::optional<AlgorithmChoice> to_choice;
  bool applied = true;
  bool operator==(const PolicyDecisionRecord&) const = default;
};

enum class Severity : uint16_t { kInfo = 0, kWarning = 1, kError = 2 };

struct TracerNote {
  Severity severity = Severity::kInfo;
  std::string text;
  uint64_t before_op = 0;
  uint64_t time_ns = 0;
  bool operator==(const TracerNote&) const = default;
};

struct DroppedRecords {
  uint32_t writer_id = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;
  std::string reason;
  bool operator==(const DroppedRecords&) const = default;
};

struct StateDigestRecord {
  uint64_t after_op = 0;
  std::string reason;
  std::vector<BufferDigest> allocations;
  uint64_t time_ns = 0;
  bool operator==(const StateDigestRecord&) const = default;
};

enum class PythonStackStatus : uint16_t {
  kCaptured = 0,
  kNoPython = 1,
  kNotRunning = 2,
  kNativeThread = 3,
  kNoFrames = 4,
  kGilUnavailable = 5,
  kUnsupported = 6,
  kFailed = 7,
};

struct PythonFrame {
  std::string file;
  int32_t line = -1;
  std::string function;
  bool operator==(const PythonFrame&) const = default;
};

// The Python stack of the thread that issued op `op_sequence` (trace.capnp PythonStackRecord).
struct PythonStackRecord {
  uint64_t op_sequence = 0;
  uint32_t thread_id = 0;
  uint32_t lane_stream = 0;
  uint64_t lane_index = 0;
  PythonStackStatus status = PythonStackStatus::kCaptured;
  std::vector<PythonFrame> frames;  // innermost first
  std::string detail;
  std::string python;
  bool operator==(const PythonStackRecord&) const = default;
};
enum class GpuActivityKind : uint16_t { kKernel = 0, kMemcpy = 1, kMemset = 2 };

// When the GPU ran one piece of an op's work (CUPTI activity), ns since trace start.
struct GpuActivityRecord {
  GpuActivityKind kind = GpuActivityKind::kKernel;
  std::optional<uint64_t> op_sequence;          // the op whose driver call started it
  std::optional<uint64_t> library_op_sequence;  // the library op it ran inside
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t device_stream = 0;
  bool ndtrace_own = false;  // ndtrace's own work (digest kernels, copies to the host): no op's
  bool operator==(const GpuActivityRecord&) const = default;
};
const char* GpuActivityKindName(GpuActivityKind kind);  // "kernel", "memcpy", "memset"

// One record of a trace. The alternatives' order matches the schema's union ordinals.
using Record = std::variant<OpRecord, AllocationRecord, ModuleLoadRecord, NvtxRangeRecord,
                            PolicyDecisionRecord, TracerNote, DroppedRecords, StateDigestRecord,
                            PythonStackRecord, GpuActivityRecord>;

namespace internal {
template <typename T, typename... Types>
constexpr uint32_t TypeBit(std::variant<Types...>*) {
  static_assert((std::is_same_v<T, Types> || ...), "not a record type");
  uint32_t index = 0;
  (void)((std::is_same_v<T, Types> ? false : (++index, true)) && ...);
  return uint32_t{1} << index;
}
}  // namespace internal

// The bit of record type T (its index in Record, which is its frames' record type) in a mask
// of record types (TraceReader::PassOver).
template <typename T>
constexpr uint32_t RecordTypeBit() {
  return internal::TypeBit<T>(static_cast<Record*>(nullptr));
}

// Short lower-case names used by show/stats/JSON ("kernelLaunch" -> "kernel_launch").
const char* OpKindName(OpKind kind);

// Readable forms of the lineage-based ids (formats/README.md, "Identities"): a thread as its
// lineage path ("0" the main thread, "2" its second thread, "2.1" that one's first, "#1a2b3c4d"
// a hashed path, "?3" a thread first seen without its creation); a stream as "0" (the legacy
// default stream), "3" (the main thread's third), "2.1:1" (thread 2.1's first), "2.1:default"
// (its per-thread default stream) or "#..." (hashed).
std::string ThreadLabel(uint32_t thread_id);
std::string StreamLabel(uint32_t stream_id);
const char* DTypeName(DType dtype);
// The DType DTypeName gives `name` ("f32", "bf16"...); nullopt for any other text, "unknown"
// included.
std::optional<DType> ParseDType(std::string_view name);
// Bytes per element of `dtype` (bool: 1); 0 for kUnknown.
uint64_t DTypeBytes(DType dtype);
const char* PolicyName(Policy policy);
const char* RecordTypeName(const Record& record);
// "captured", "no_python", "not_running", "native_thread", "no_frames", "gil_unavailable",
// "unsupported", "failed".
const char* PythonStackStatusName(PythonStackStatus status);

// Whether a Python frame's file is the interpreter's or a package's rather than the user's own:
// under a `lib/pythonX.Y/` directory (the standard library, and site-packages beneath it), a
// `site-packages/` or `dist-packages/` directory, or not a file at all (`<frozen ...>`,
// `<string>`).
bool IsLibraryPythonFile(std::string_view file);
// The frame a report names: the innermost one in the user's own files, else the innermost;
// null when there are no frames.
const PythonFrame* UserPythonFrame(const PythonStackRecord& stack);
// "train.py:42 in forward" (the file as Python has it).
std::string PythonFrameText(const PythonFrame& frame);
// What a report says about the stack in a few words: "train.py:42 in forward" when captured,
// else why there is none ("no Python stack: the op was issued by a native thread ...").
std::string PythonStackSummary(const PythonStackRecord& stack);

// Whether `op` only creates or destroys a stream or an event: such ops are left out of lanes
// (formats/README.md "Lanes"), by the replayer when it aligns runs and by the tracer when it
// finds an op asked for by its place in a lane.
bool IsLifecycleOp(const OpRecord& op);

}  // namespace ndt::format
