// The NCCL hooks: communicators, collectives and point-to-point calls.
//
// Each hook is the exported ncclX and forwards to the real library's strong pncclX (ncclX is a
// weak alias there). Communicators get a stable id by creation order (ncclCommInitAll numbers
// its communicators in rank order). Every data-moving call (AllReduce, Broadcast, Bcast,
// Reduce, ReduceScatter, AllGather, AlltoAll, Gather, Scatter, Send, Recv) is an
// OpKind::kNcclCollective op naming the communicator, rank, size, reduction, type, count, root
// or peer and the group nesting depth, with a fingerprint, the digest of what the rank sends
// before the call and of what it receives after it; which extent each call reads and writes is
// the table of CallShapes below. Inside ncclGroupStart/End the call only runs at the outermost
// ncclGroupEnd: its op is then completed (receive digest, status) by that call.
//
// The AlgorithmChoice ("nccl") is what the environment asks NCCL for: NCCL_ALGO and NCCL_PROTO
// (id = NCCL's algorithm enum, knob 1 = protocol enum, knobs 2/3 = NCCL_MIN/MAX_NCHANNELS), its
// text in `name`; source = enforced when the deterministic policy set NCCL_ALGO at load time,
// pinned when --pin set it from the reference (policy.cc), requested when the program's
// environment set it, heuristic when unset. NCCL itself does not report what its tuner picked
// per call.
#pragma GCC visibility push(default)
#include <nccl.h>
#include <unistd.h>
#pragma GCC visibility pop

#include <atomic>
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/records.h"
#include "tracer/library_support.h"
#include "tracer/policy.h"
#include "tracer/recorder.h"

namespace ndt::tracer {
namespace {

constexpr const char* kSoname = kNcclSoname;

// Stable communicator ids, from the thread that first names a communicator (lineage.h).
// Thread-safe; never destroyed (hooks run during exit).
class Communicators {
 public:
  static Communicators& Get() {
    static auto* communicators = new Communicators();
    return *communicators;
  }
  uint64_t Id(ncclComm_t comm) {
    std::lock_guard lock(mutex_);
    auto [entry, added] = ids_.try_emplace(comm, 0);
    if (added) entry->second = NewObjectId(ObjectKind::kNcclComm);
    return entry->second;
  }
  // The ranks a communicator belongs with (the `clique` argument of its creation).
  void SetClique(ncclComm_t comm, uint64_t clique) {
    std::lock_guard lock(mutex_);
    cliques_[comm] = clique;
  }
  std::optional<uint64_t> Clique(ncclComm_t comm) {
    std::lock_guard lock(mutex_);
    const auto it = cliques_.find(comm);
    return it == cliques_.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  }
  // How many times `comm` was split before (every rank splits it in one order).
  uint64_t NextSplit(ncclComm_t comm) {
    std::lock_guard lock(mutex_);
    return splits_[comm]++;
  }
  // `comm` was destroyed: a communicator made later at its address is another one.
  void Forget(ncclComm_t comm) {
    std::lock_guard lock(mutex_);
    ids_.erase(comm);
    cliques_.erase(comm);
    splits_.erase(comm);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<ncclComm_t, uint64_t> ids_;
  std::unordered_map<ncclComm_t, uint64_t> cliques_;
  std::unordered_map<ncclComm_t, uint64_t> splits_;
};

// A collective whose receive buffer is final only at the outermost ncclGroupEnd.
struct PendingCollective {
  Session* session;
  format::OpRecord op;
  uint64_t stream;
  Extent recv;
};
thread_local int t_group_depth = 0;
thread_local std::vector<PendingCollective> t_pending;

const char* OpName(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "custom";
  }
}

struct TypeInfo {
  const char* name;
  size_t bytes;
  format::DType dtype;
};

TypeInfo TypeOf(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return {"int8", 1, format::DType::kI8};
    case ncclUint8: return {"uint8", 1, format::DType::kU8};
    case ncclInt32: return {"int32", 4, format::DType::kI32};
    case ncclUint32: return {"uint32", 4, format::DType::kUnknown};
    case ncclInt64: return {"int64", 8, format::DType::kI64};
    case ncclUint64: return {"uint64", 8, format::DType::kUnknown};
    case ncclFloat16: return {"float16", 2, format::DType::kF16};
    case ncclFloat32: return {"float32", 4, format::DType::kF32};
    case ncclFloat64: return {"float64", 8, format::DType::kF64};
    case ncclBfloat16: return {"bfloat16", 2, format::DType::kBF16};
    case ncclFloat8e4m3: return {"float8e4m3", 1, format::DType::kF8E4M3};
    case ncclFloat8e5m2: return {"float8e5m2", 1, format::DType::kF8E5M2};
    default: return {"unknown", 0, format::DType::kUnknown};
  }
}

// Index of `value` in `names` (case-insensitive), or -1 (unset) / -2 (not a single name).
int64_t EnumOf(const char* value, const std::vector<std::string>& names) {
  if (value == nullptr || *value == '\0') return -1;
  std::string text(value);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < names.size(); ++i) {
    std::string name = names[i];
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (text == name) return static_cast<int64_t>(i);
  }
  return -2;
}

int64_t IntegerOf(const char* value) {
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  return end != nullptr && *end == '\0' ? parsed : -2;
}

format::AlgorithmChoice EffectiveChoice(PolicyMode mode) {
  // NCCL 2.28's ncclAlgo and ncclProto enums (research/cuda-interposition.md §6).
  static const std::vector<std::string> kAlgorithms = {
      "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
  static const std::vector<std::string> kProtocols = {"LL", "LL128", "Simple"};
  const char* algo = std::getenv("NCCL_ALGO");
  const char* proto = std::getenv("NCCL_PROTO");
  format::AlgorithmChoice choice;
  choice.library = "nccl";
  choice.id = EnumOf(algo, kAlgorithms);
  choice.name = std::string("NCCL_ALGO=") + (algo != nullptr ? algo : "(unset)") +
                " NCCL_PROTO=" + (proto != nullptr ? proto : "(unset)");
  choice.knobs.push_back({1, EnumOf(proto, kProtocols)});
  choice.knobs.push_back({2, IntegerOf(std::getenv("NCCL_MIN_NCHANNELS"))});
  choice.knobs.push_back({3, IntegerOf(std::getenv("NCCL_MAX_NCHANNELS"))});
  choice.determinism = choice.id >= 0 && choice.knobs[0].value >= 0
                           ? format::Determinism::kDeterministic
                           : format::Determinism::kUnknown;
  choice.source = algo == nullptr ? format::ChoiceSource::kHeuristic
                                  : format::ChoiceSource::kRequested;
  for (const format::EnvVar& variable : EnvironmentSetByPolicy()) {
    if (variable.name != "NCCL_ALGO") continue;
    choice.source =
        mode == PolicyMode::kPin ? format::ChoiceSource::kPinned : format::ChoiceSource::kEnforced;
  }
  return choice;
}

// Under --pin, what could not be pinned for NCCL (NcclPinProblems), decided once per trace when
// the program first uses NCCL (a program that never does hears nothing of it); NCCL is loaded
// by then, so its version is known.
void ReportPinProblems(Session& session) {
  static std::atomic<Session*> reported{nullptr};
  if (session.policy().mode != PolicyMode::kPin || reported.exchange(&session) == &session) {
    return;
  }
  format::TraceHeader current = session.header();
  int version = 0;
  if (const auto get_version = NDT_REAL_LIBRARY_AS(kSoname, ncclGetVersion, "pncclGetVersion");
      get_version != nullptr && get_version(&version) == ncclSuccess && version > 0) {
    current.versions.nccl = static_cast<uint32_t>(version);
  }
  for (format::PolicyDecisionRecord decision : NcclPinProblems(session.pins(), current)) {
    decision.op_sequence = session.PeekOpSequence();
    session.Decide(decision);
  }
}

// How much of its send or receive buffer one rank of a call uses, in elements.
enum class Span : uint8_t {
  kNone,            // the buffer is not used
  kCount,           // count
  kCountRanks,      // count x nranks
  kRootCount,       // count at the root, nothing elsewhere
  kRootCountRanks,  // count x nranks at the root, nothing elsewhere
};

// What a call does with its buffers: its name, its word in the fingerprint and the extents it
// reads (send, digested before the call) and writes (receive, digested after it).
struct CallShape {
  const char* api;
  const char* kind;
  Span send;
  Span recv;
  const char* send_role = "sendbuff";
  const char* recv_role = "recvbuff";
};

// Every data-moving call of nccl.h (research/cuda-interposition.md §6), in one table.
constexpr CallShape kAllReduce{"ncclAllReduce", "allreduce", Span::kCount, Span::kCount};
constexpr CallShape kBroadcast{"ncclBroadcast", "broadcast", Span::kRootCount, Span::kCount};
constexpr CallShape kBcast{"ncclBcast", "bcast", Span::kRootCount, Span::kCount, "buff", "buff"};
constexpr CallShape kReduce{"ncclReduce", "reduce", Span::kCount, Span::kRootCount};
constexpr CallShape kReduceScatter{"ncclReduceScatter", "reducescatter", Span::kCountRanks,
                                   Span::kCount};
constexpr CallShape kAllGather{"ncclAllGather", "allgather", Span::kCount, Span::kCountRanks};
constexpr CallShape kAlltoAll{"ncclAlltoAll", "alltoall", Span::kCountRanks, Span::kCountRanks};
constexpr CallShape kGather{"ncclGather", "gather", Span::kCount, Span::kRootCountRanks};
constexpr CallShape kScatter{"ncclScatter", "scatter", Span::kRootCountRanks, Span::kCount};
constexpr CallShape kSend{"ncclSend", "send", Span::kCount, Span::kNone};
constexpr CallShape kRecv{"ncclRecv", "recv", Span::kNone, Span::kCount};

// One call's arguments. `reduction` is null for calls that do not reduce, `root` and `peer` -1
// for calls without one.
struct CollectiveCall {
  const CallShape& shape;
  const void* send;
  void* recv;
  size_t count;  // the call's count argument (AllGather's sendcount, ReduceScatter's recvcount)
  ncclDataType_t type;
  const char* reduction;
  int root;
  int peer;
  ncclComm_t comm;
  cudaStream_t stream;
};

// The bytes of a buffer this rank uses under `span`: nullopt when it does not use it, 0 when
// the size is unknown (type, communicator size) or does not fit in 64 bits.
std::optional<uint64_t> SpanBytes(Span span, const CollectiveCall& call, int rank, int nranks,
                                  size_t element_bytes) {
  if (span == Span::kNone) return std::nullopt;
  const bool rooted = span == Span::kRootCount || span == Span::kRootCountRanks;
  if (rooted && rank != call.root) return std::nullopt;
  uint64_t elements = call.count;
  if (span == Span::kCountRanks || span == Span::kRootCountRanks) {
    if (nranks < 1 || __builtin_mul_overflow(elements, static_cast<uint64_t>(nranks), &elements)) {
      return 0;
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(element_bytes), &bytes)) return 0;
  return bytes;
}

// Records one call around `real`: the send extent digested before, the receive extent after
// (at the outermost ncclGroupEnd inside a group).
template <typename Real>
ncclResult_t RecordCollective(Session& session, RealCall<ncclResult_t>& run,
                              const CollectiveCall& call, Real real) {
  ReportPinProblems(session);
  int rank = -1;
  int size = -1;
  if (const auto user_rank = NDT_REAL_LIBRARY_AS(kSoname, ncclCommUserRank, "pncclCommUserRank")) {
    user_rank(call.comm, &rank);
  }
  if (const auto comm_count = NDT_REAL_LIBRARY_AS(kSoname, ncclCommCount, "pncclCommCount")) {
    comm_count(call.comm, &size);
  }
  const CallShape& shape = call.shape;
  const uint64_t comm_id = Communicators::Get().Id(call.comm);
  const TypeInfo info = TypeOf(call.type);
  const auto stream_handle = reinterpret_cast<uint64_t>(call.stream);
  format::OpRecord op = session.BeginOp(format::OpKind::kNcclCollective, shape.api,
                                        session.StreamId(stream_handle, false));
  op.args.push_back(UnsignedArgument("comm", comm_id));
  op.args.push_back(SignedArgument("rank", rank));
  op.args.push_back(SignedArgument("nranks", size));
  if (call.reduction != nullptr) op.args.push_back(TextArgument("op", call.reduction));
  op.args.push_back(TextArgument("dtype", info.name));
  op.args.push_back(UnsignedArgument("count", call.count));
  if (call.root >= 0) op.args.push_back(SignedArgument("root", call.root));
  if (call.peer >= 0) op.args.push_back(SignedArgument("peer", call.peer));
  op.args.push_back(SignedArgument("groupDepth", t_group_depth));
  const std::optional<uint64_t> send_bytes = SpanBytes(shape.send, call, rank, size, info.bytes);
  const std::optional<uint64_t> recv_bytes = SpanBytes(shape.recv, call, rank, size, info.bytes);
  const auto send = reinterpret_cast<uint64_t>(call.send);
  const auto recv = reinterpret_cast<uint64_t>(call.recv);
  if (send_bytes) op.args.push_back(PointerArgument(session, shape.send_role, send));
  // ncclBcast's one buffer is one argument.
  if (recv_bytes && !(send_bytes && std::string_view(shape.recv_role) == shape.send_role)) {
    op.args.push_back(PointerArgument(session, shape.recv_role, recv));
  }
  std::string fingerprint = std::string("nccl ") + shape.kind + " comm " + std::to_string(comm_id) +
                            " rank " + std::to_string(rank) + "/" + std::to_string(size) + " " +
                            (call.reduction != nullptr ? std::string(call.reduction) + " " : "") +
                            info.name + " count=" + std::to_string(call.count);
  if (call.root >= 0) fingerprint += " root=" + std::to_string(call.root);
  if (call.peer >= 0) fingerprint += " peer=" + std::to_string(call.peer);
  op.args.push_back(TextArgument("fingerprint", fingerprint));
  op.algorithm = EffectiveChoice(session.policy().mode);
  if (send_bytes.value_or(0) > 0) {
    op.inputs =
        DigestExtents(session, stream_handle, {{shape.send_role, send, *send_bytes, info.dtype}});
  }
  const ncclResult_t result = run.Run(real);
  const Extent recv_extent{shape.recv_role, recv, recv_bytes.value_or(0), info.dtype};
  if (t_group_depth > 0 && result == ncclSuccess) {
    op.status = static_cast<int32_t>(result);
    t_pending.push_back({&session, std::move(op), stream_handle, recv_extent});
    return result;
  }
  if (result == ncclSuccess && recv_extent.bytes > 0) {
    op.outputs = DigestExtents(session, stream_handle, {recv_extent});
  }
  session.EndOp(op, static_cast<int32_t>(result));
  return result;
}

// A hooked call: forwards `args` to `real` (the library's pncclX), recording `call` around it.
template <typename Real, typename... Args>
ncclResult_t HookCollective(Real real, const CollectiveCall& call, Args... args) {
  const auto forward = [&]() { return real(args...); };
  return RunLibraryHook<ncclResult_t>(call.shape.api, real != nullptr, ncclSystemError, forward,
                                      [&](Session& session, RealCall<ncclResult_t>& run) {
                                        return RecordCollective(session, run, call, forward);
                                      });
}

// At the outermost ncclGroupEnd: completes the collectives recorded inside the group.
void FinishGroup(ncclResult_t group_result) {
  std::vector<PendingCollective> pending;
  pending.swap(t_pending);
  for (PendingCollective& collective : pending) {
    if (group_result == ncclSuccess && collective.recv.bytes > 0) {
      collective.op.outputs =
          DigestExtents(*collective.session, collective.stream, {collective.recv});
    }
    collective.session->EndOp(collective.op, static_cast<int32_t>(group_result));
  }
}

}  // namespace
}  // namespace ndt::tracer

using ndt::tracer::HookCollective;
using ndt::tracer::kAllGather, ndt::tracer::kAllReduce, ndt::tracer::kAlltoAll,
    ndt::tracer::kBcast, ndt::tracer::kBroadcast, ndt::tracer::kGather, ndt::tracer::kRecv,
    ndt::tracer::kReduce, ndt::tracer::kReduceScatter, ndt::tracer::kScatter,
    ndt::tracer::kSend;
using ndt::tracer::kSoname;
using ndt::tracer::OpName;
using ndt::tracer::RealCall;
using ndt::tracer::RunLibraryHook;
using ndt::tracer::Session;

namespace {

// FNV-1a over the bytes of `value`, from `hash`.
uint64_t Mix(uint64_t hash, uint64_t value) {
  for (int i = 0; i < 8; ++i) hash = (hash ^ ((value >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return hash;
}
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

// The ranks that share a unique id, in this process or others: the id's FNV-1a hash (random in
// every run, so never compared; replayer/op_compare.h).
uint64_t CliqueOf(const ncclUniqueId& id) {
  uint64_t clique = kFnvBasis;
  for (char c : id.internal) clique = (clique ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return clique;
}

// The determinism-relevant fields of a config where the caller's (versioned, `size`-long)
// struct has them.
void AddConfigArguments(const ncclConfig_t* config, ndt::format::OpRecord* op) {
  if (config == nullptr) return;
  const auto has = [&](size_t offset) { return offset + sizeof(int) <= config->size; };
  if (has(offsetof(ncclConfig_t, blocking))) {
    op->args.push_back(ndt::tracer::SignedArgument("blocking", config->blocking));
  }
  if (has(offsetof(ncclConfig_t, maxCTAs))) {
    op->args.push_back(ndt::tracer::SignedArgument("minCTAs", config->minCTAs));
    op->args.push_back(ndt::tracer::SignedArgument("maxCTAs", config->maxCTAs));
  }
  if (has(offsetof(ncclConfig_t, collnetEnable))) {
    op->args.push_back(ndt::tracer::SignedArgument("collnetEnable", config->collnetEnable));
  }
}

// ncclCommInitRank and ncclCommInitRankConfig: an `other` op named `api` with the communicator's
// size, rank, clique and id, and the config's fields. `init` makes the call and registers the
// communicator (recording or not).
template <typename Init>
ncclResult_t RecordCommInit(const char* api, bool found, int nranks, const ncclUniqueId& comm_id,
                            int rank, const ncclConfig_t* config, ncclComm_t* comm,
                            const Init& init) {
  return RunLibraryHook<ncclResult_t>(
      api, found, ncclSystemError, init, [&](Session& session, RealCall<ncclResult_t>& call) {
        ndt::tracer::ReportPinProblems(session);
        ndt::format::OpRecord op = session.BeginOp(ndt::format::OpKind::kOther, api, 0);
        op.args.push_back(ndt::tracer::SignedArgument("nranks", nranks));
        op.args.push_back(ndt::tracer::SignedArgument("rank", rank));
        op.args.push_back(ndt::tracer::UnsignedArgument("clique", CliqueOf(comm_id)));
        AddConfigArguments(config, &op);
        const ncclResult_t result = call.Run(init);
        if (result == ncclSuccess || result == ncclInProgress) {
          op.args.push_back(ndt::tracer::UnsignedArgument(
              "comm", ndt::tracer::Communicators::Get().Id(*comm)));
        }
        session.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

// Registers a communicator made from `comm_id` (ncclInProgress: a non-blocking one, with its
// handle already).
void Registered(ncclResult_t result, ncclComm_t comm, const ncclUniqueId& comm_id) {
  if (result != ncclSuccess && result != ncclInProgress) return;
  ndt::tracer::Communicators::Get().Id(comm);
  ndt::tracer::Communicators::Get().SetClique(comm, CliqueOf(comm_id));
}

}  // namespace

extern "C" ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  const auto real = NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommInitAll, "pncclCommInitAll");
  // Its communicators' clique: this process and the first one's id.
  uint64_t clique = 0;
  const auto init = [&]() {
    const ncclResult_t result = real(comms, ndev, devlist);
    if (result == ncclSuccess && ndev > 0) {
      auto& communicators = ndt::tracer::Communicators::Get();
      for (int r = 0; r < ndev; ++r) communicators.Id(comms[r]);
      clique = Mix(Mix(kFnvBasis, static_cast<uint64_t>(getpid())), communicators.Id(comms[0]));
      for (int r = 0; r < ndev; ++r) communicators.SetClique(comms[r], clique);
    }
    return result;
  };
  return RunLibraryHook<ncclResult_t>(
      "ncclCommInitAll", real != nullptr, ncclSystemError, init,
      [&](Session& session, RealCall<ncclResult_t>& call) {
        ndt::tracer::ReportPinProblems(session);
        ndt::format::OpRecord op =
            session.BeginOp(ndt::format::OpKind::kOther, "ncclCommInitAll", 0);
        op.args.push_back(ndt::tracer::SignedArgument("ndev", ndev));
        const ncclResult_t result = call.Run(init);
        if (result == ncclSuccess && ndev > 0) {
          op.args.push_back(ndt::tracer::UnsignedArgument(
              "firstComm", ndt::tracer::Communicators::Get().Id(comms[0])));
          op.args.push_back(ndt::tracer::UnsignedArgument("clique", clique));
        }
        session.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id,
                                         int rank) {
  const auto real =
      NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommInitRank, "pncclCommInitRank");
  return RecordCommInit("ncclCommInitRank", real != nullptr, nranks, comm_id, rank, nullptr, comm,
                        [&]() {
                          const ncclResult_t result = real(comm, nranks, comm_id, rank);
                          Registered(result, *comm, comm_id);
                          return result;
                        });
}

// What PyTorch's ProcessGroupNCCL calls (with NCCL >= 2.14): ncclCommInitRank with a config. A
// non-blocking communicator (config->blocking = 0) may return ncclInProgress: it has its handle.
extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id,
                                               int rank, ncclConfig_t* config) {
  const auto real =
      NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommInitRankConfig, "pncclCommInitRankConfig");
  return RecordCommInit("ncclCommInitRankConfig", real != nullptr, nranks, comm_id, rank, config,
                        comm, [&]() {
                          const ncclResult_t result = real(comm, nranks, comm_id, rank, config);
                          Registered(result, *comm, comm_id);
                          return result;
                        });
}

// NCCL >= 2.23's initialisation from several unique ids (every rank is given the same ones): the
// first names the clique.
extern "C" ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int count,
                                                 ncclUniqueId* ids, ncclConfig_t* config) {
  const auto real = NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommInitRankScalable,
                                        "pncclCommInitRankScalable");
  if (count < 1 || ids == nullptr) {  // nothing to name it by: the library answers
    return real != nullptr ? real(comm, nranks, rank, count, ids, config) : ncclInvalidArgument;
  }
  return RecordCommInit("ncclCommInitRankScalable", real != nullptr, nranks, ids[0], rank, config,
                        comm, [&]() {
                          const ncclResult_t result = real(comm, nranks, rank, count, ids, config);
                          Registered(result, *comm, ids[0]);
                          return result;
                        });
}

namespace ndt::tracer {
namespace {

// ncclCommDestroy and ncclCommAbort, not recorded: the communicator's id and clique are dropped,
// so that one made later at the same address gets its own.
ncclResult_t DestroyAndForget(ncclResult_t (*real)(ncclComm_t), ncclComm_t comm) {
  if (real == nullptr) return ncclSystemError;
  const ncclResult_t result = real(comm);
  if (result == ncclSuccess) Communicators::Get().Forget(comm);
  return result;
}

}  // namespace
}  // namespace ndt::tracer

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return ndt::tracer::DestroyAndForget(
      NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommDestroy, "pncclCommDestroy"), comm);
}

extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return ndt::tracer::DestroyAndForget(
      NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommAbort, "pncclCommAbort"), comm);
}

// A sub-communicator (PyTorch's new_group / DeviceMesh split a process group with it): an `other`
// op with the parent, color and key, the config's fields, and the new communicator's id, rank,
// size and clique (the parent's, mixed with how many splits of the parent came before and the
// color: the same for every rank of the new communicator, in any process).
extern "C" ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                      ncclConfig_t* config) {
  const auto real = NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommSplit, "pncclCommSplit");
  const auto user_rank =
      NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommUserRank, "pncclCommUserRank");
  const auto count = NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclCommCount, "pncclCommCount");
  auto& communicators = ndt::tracer::Communicators::Get();
  const auto split = [&]() {
    const uint64_t ordinal = comm != nullptr ? communicators.NextSplit(comm) : 0;
    const ncclResult_t result = real(comm, color, key, newcomm, config);
    if ((result == ncclSuccess || result == ncclInProgress) && newcomm != nullptr &&
        *newcomm != nullptr) {
      communicators.Id(*newcomm);
      const uint64_t parent = communicators.Clique(comm).value_or(communicators.Id(comm));
      communicators.SetClique(
          *newcomm, Mix(Mix(Mix(kFnvBasis, parent), ordinal), static_cast<uint64_t>(color)));
    }
    return result;
  };
  return RunLibraryHook<ncclResult_t>(
      "ncclCommSplit", real != nullptr, ncclSystemError, split,
      [&](Session& session, RealCall<ncclResult_t>& call) {
        ndt::format::OpRecord op = session.BeginOp(ndt::format::OpKind::kOther, "ncclCommSplit", 0);
        if (comm != nullptr) {
          op.args.push_back(ndt::tracer::UnsignedArgument("parentComm", communicators.Id(comm)));
        }
        op.args.push_back(ndt::tracer::SignedArgument("color", color));
        op.args.push_back(ndt::tracer::SignedArgument("key", key));
        AddConfigArguments(config, &op);
        const ncclResult_t result = call.Run(split);
        if ((result == ncclSuccess || result == ncclInProgress) && newcomm != nullptr &&
            *newcomm != nullptr) {
          int rank = -1, size = -1;
          if (user_rank != nullptr) user_rank(*newcomm, &rank);
          if (count != nullptr) count(*newcomm, &size);
          op.args.push_back(ndt::tracer::SignedArgument("nranks", size));
          op.args.push_back(ndt::tracer::SignedArgument("rank", rank));
          op.args.push_back(
              ndt::tracer::UnsignedArgument("clique", communicators.Clique(*newcomm).value_or(0)));
          op.args.push_back(ndt::tracer::UnsignedArgument("comm", communicators.Id(*newcomm)));
        }
        session.EndOp(op, static_cast<int32_t>(result));
        return result;
      });
}

extern "C" ncclResult_t ncclGroupStart() {
  const auto real = NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclGroupStart, "pncclGroupStart");
  if (real == nullptr) return ncclSystemError;
  const ncclResult_t result = real();
  if (result == ncclSuccess) ++ndt::tracer::t_group_depth;
  return result;
}

extern "C" ncclResult_t ncclGroupEnd() {
  const auto real = NDT_REAL_LIBRARY_AS(ndt::tracer::kSoname, ncclGroupEnd, "pncclGroupEnd");
  const auto end = [&]() { return real(); };
  return RunLibraryHook<ncclResult_t>(
      "ncclGroupEnd", real != nullptr, ncclSystemError,
      [&]() {
        const ncclResult_t result = end();
        if (ndt::tracer::t_group_depth > 0 && --ndt::tracer::t_group_depth == 0) {
          ndt::tracer::t_pending.clear();  // not recording now: the ops stay unwritten
        }
        return result;
      },
      [&](Session&, RealCall<ncclResult_t>& call) {
        const ncclResult_t result = call.Run(end);
        if (ndt::tracer::t_group_depth > 0 && --ndt::tracer::t_group_depth == 0) {
          ndt::tracer::FinishGroup(result);
        }
        return result;
      });
}

// The data-moving calls: each forwards to its pncclX through HookCollective.

extern "C" ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclAllReduce, "pncclAllReduce");
  return HookCollective(
      real, {kAllReduce, sendbuff, recvbuff, count, datatype, OpName(op), -1, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, op, comm, stream);
}

extern "C" ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclBroadcast, "pncclBroadcast");
  return HookCollective(
      real, {kBroadcast, sendbuff, recvbuff, count, datatype, nullptr, root, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, root, comm, stream);
}

extern "C" ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclBcast, "pncclBcast");
  return HookCollective(real,
                        {kBcast, buff, buff, count, datatype, nullptr, root, -1, comm, stream},
                        buff, count, datatype, root, comm, stream);
}

extern "C" ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                   ncclDataType_t datatype, ncclRedOp_t op, int root,
                                   ncclComm_t comm, cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclReduce, "pncclReduce");
  return HookCollective(
      real, {kReduce, sendbuff, recvbuff, count, datatype, OpName(op), root, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

extern "C" ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclReduceScatter, "pncclReduceScatter");
  return HookCollective(
      real,
      {kReduceScatter, sendbuff, recvbuff, recvcount, datatype, OpName(op), -1, -1, comm, stream},
      sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

extern "C" ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclAllGather, "pncclAllGather");
  return HookCollective(
      real, {kAllGather, sendbuff, recvbuff, sendcount, datatype, nullptr, -1, -1, comm, stream},
      sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

extern "C" ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclComm_t comm,
                                     cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclAlltoAll, "pncclAlltoAll");
  return HookCollective(
      real, {kAlltoAll, sendbuff, recvbuff, count, datatype, nullptr, -1, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, comm, stream);
}

extern "C" ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclGather, "pncclGather");
  return HookCollective(
      real, {kGather, sendbuff, recvbuff, count, datatype, nullptr, root, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, root, comm, stream);
}

extern "C" ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclScatter, "pncclScatter");
  return HookCollective(
      real, {kScatter, sendbuff, recvbuff, count, datatype, nullptr, root, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, root, comm, stream);
}

extern "C" ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                 int peer, ncclComm_t comm, cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclSend, "pncclSend");
  return HookCollective(
      real, {kSend, sendbuff, nullptr, count, datatype, nullptr, -1, peer, comm, stream}, sendbuff,
      count, datatype, peer, comm, stream);
}

extern "C" ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                 ncclComm_t comm, cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY_AS(kSoname, ncclRecv, "pncclRecv");
  return HookCollective(
      real, {kRecv, nullptr, recvbuff, count, datatype, nullptr, -1, peer, comm, stream}, recvbuff,
      count, datatype, peer, comm, stream);
}
