// The cuBLAS and cuBLASLt hooks: handle setup, GEMMs, cuBLASLt heuristics and matmuls, and the
// policy applied to them (tracer/README.md, "cuBLAS and cuBLASLt").
//
// Recorded (what the program called, unmodified):
//  - cublasCreate_v2 / Destroy_v2 / SetStream_v2 / SetWorkspace_v2 / SetAtomicsMode /
//    SetMathMode: kOther ops naming the handle by ordinal (1, 2, ... by first appearance);
//  - cublasSgemm_v2, cublasDgemm_v2 and cublasGemmEx: kCublasGemm ops with the problem, a
//  "fingerprint", the
//    algo as an AlgorithmChoice (library "cublas"), digests of A, B and C before the call and
//    of C after it, over exactly the extents the dimensions and leading dimensions give;
//  - cublasSgemmStridedBatched, cublasDgemmStridedBatched and cublasGemmStridedBatchedEx:
//    kCublasGemm ops like the GEMMs, with batchCount and the strides, each matrix's extent
//    covering every batch; cublasSgemmBatched and cublasDgemmBatched: a kCublasGemm op with the
//    digests of the three pointer arrays (the matrices they point to are not read: that would need
//    the arrays on the host);
//  - cublas[SD]gemv_v2 (kCublasGemm), cublas[SD]axpy_v2, cublas[SD]scal_v2, cublas[SD]dot_v2
//    (kOther; the S forms float, the D forms double): the
//    arguments, scalars by pointer mode, digests of the vectors and matrix read before the call
//    and of those written after it (exact BLAS extents: (n - 1) * |inc| + 1 elements); a dot
//    product's result in host memory is recorded as the argument "result";
//  - cublas[SD]nrm2_v2, cublas[SD]asum_v2, cublasI[sd]amax_v2, cublasI[sd]amin_v2 (kOther):
//    the vector read, the result as a dot product's; cublas[SD]copy_v2 and cublas[SD]swap_v2
//    (kOther): the vectors read and written; cublas[SD]geam (kOther): A and B as read (not
//    when their scalar is 0 in host memory), C written;
//  - cublasLtMatmulAlgoGetHeuristic: a kOther op with every returned 64-byte algo;
//  - cublasLtMatmul: a kCublasLtMatmul op with the descriptors' fingerprint, the 64-byte algo
//    actually run (AlgorithmChoice library "cublasLt", opaque = the bytes, id and knobs from
//    cublasLtMatmulAlgoConfigGetAttribute), digests of A, B, C and of D, and of the epilogue's
//    bias vector (read with a BIAS epilogue, written with a bias-gradient one).
// A GEMM or matmul NDTRACE_CAPTURE selects (capture.h) also stores its matrices as blobs (A, B,
// C when beta != 0, before; C or D after) with what standalone replay needs that the record
// does not otherwise carry (pointer mode and workspace size; the matmul descriptor's attributes
// and the four layouts).
// An out-of-place split-K reduction (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE / OUTPUT_TYPE with
// more than one slice) counts as nondeterministic, as do atomics allowed on a handle and
// CUBLAS_GEMM_AUTOTUNE (a choice made by timing).
//
// Policy (every change is a PolicyDecisionRecord; what the program passed stays recorded):
//  - deterministic: atomics forced to CUBLAS_ATOMICS_NOT_ALLOWED; a workspace of its own for
//    every (handle, stream) the program sets, allocated through the real driver and set with
//    the real cublasSetWorkspace_v2; CUBLAS_GEMM_AUTOTUNE replaced by CUBLAS_GEMM_DEFAULT;
//    heuristic results without out-of-place split-K; a nondeterministic or implicit
//    (null) cuBLASLt algo replaced by the heuristic's first deterministic one.
//  - pin: cublasGemmEx gets the algo and cublasLtMatmul the 64-byte algo recorded for the same
//    fingerprint in the reference trace, unless the reference used another GPU or cuBLAS
//    version, the recorded algo does not fit the problem or needs more workspace than the
//    program gives (cublasLtMatmulAlgoCheck): then the program's own choice runs and the
//    unapplied decision is said once.
// Every hook in this file is exported under the library's exact name (libndtrace.map).
#pragma GCC visibility push(default)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#pragma GCC visibility pop

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/records.h"
#include "libfacts/cublas_scalars.h"
#include "tracer/capture.h"
#include "tracer/driver_table.h"
#include "tracer/library_support.h"
#include "tracer/recorder.h"
#include "tracer/tls_ref.h"

namespace ndt::tracer {
namespace {

using format::AlgorithmChoice;
using format::ChoiceSource;
using format::Determinism;
using format::DType;
using format::OpKind;
using format::OpRecord;
using format::PolicyDecisionRecord;

constexpr const char* kCublas = kCublasSoname;
constexpr const char* kCublasLt = kCublasLtSoname;
// The workspace the deterministic policy gives each (handle, stream): one buffer of the size
// CUBLAS_WORKSPACE_CONFIG=:4096:8 names.
constexpr size_t kPolicyWorkspaceBytes = 4096 * 1024;

uint64_t Address(const void* pointer) {
  return reinterpret_cast<uint64_t>(pointer);
}

// ---- handles and the workspaces the policy gave them -----------------------------------------

class CublasState {
 public:
  static CublasState& Get() {
    static auto* state = new CublasState();  // never destroyed: hooks may run during exit
    return *state;
  }

  // Named by the thread that first names it (its creator: cublasCreate_v2 is hooked). The
  // handle a thread named last is kept by it, valid until a handle is forgotten: PyTorch calls
  // with one handle per thread and device, several times per GEMM, and takes no lock for it.
  uint64_t HandleId(const void* handle) {
    struct Last {
      const void* handle = nullptr;
      uint64_t id = 0;
      uint64_t version = 0;
    };
    thread_local Last last;
    Last& mine = TlsRef(last);
    const uint64_t version = version_.load(std::memory_order_acquire);
    if (mine.handle == handle && mine.version == version && mine.id != 0) return mine.id;
    std::lock_guard lock(mutex_);
    auto [it, added] = handles_.try_emplace(handle, 0);
    if (added) it->second = NewObjectId(ObjectKind::kCublasHandle);
    mine = {handle, it->second, version};
    return it->second;
  }

  // The workspace given to (handle, stream) before, or 0.
  CUdeviceptr Workspace(const void* handle, const void* stream) {
    std::lock_guard lock(mutex_);
    auto found = workspaces_.find({handle, stream});
    return found == workspaces_.end() ? 0 : found->second;
  }
  void SetWorkspace(const void* handle, const void* stream, CUdeviceptr workspace) {
    std::lock_guard lock(mutex_);
    workspaces_[{handle, stream}] = workspace;
  }
  // The size of the workspace `handle` computes with now (cublasSetWorkspace_v2 or the policy's;
  // 0: the library's default pool, which cublasSetStream_v2 goes back to).
  uint64_t WorkspaceBytes(const void* handle) {
    std::lock_guard lock(mutex_);
    auto found = workspace_bytes_.find(handle);
    return found == workspace_bytes_.end() ? 0 : found->second;
  }
  void SetWorkspaceBytes(const void* handle, uint64_t bytes) {
    std::lock_guard lock(mutex_);
    workspace_bytes_[handle] = bytes;
  }
  // Forgets `handle`; returns the workspaces it had been given.
  std::vector<CUdeviceptr> Forget(const void* handle) {
    std::lock_guard lock(mutex_);
    handles_.erase(handle);
    version_.fetch_add(1, std::memory_order_release);
    workspace_bytes_.erase(handle);
    std::vector<CUdeviceptr> released;
    for (auto it = workspaces_.begin(); it != workspaces_.end();) {
      if (it->first.first == handle) {
        released.push_back(it->second);
        it = workspaces_.erase(it);
      } else {
        ++it;
      }
    }
    return released;
  }

 private:
  std::mutex mutex_;
  std::atomic<uint64_t> version_{0};  // bumped when a handle is forgotten
  std::unordered_map<const void*, uint64_t> handles_;
  std::map<std::pair<const void*, const void*>, CUdeviceptr> workspaces_;
  std::unordered_map<const void*, uint64_t> workspace_bytes_;
};

// ---- naming -------------------------------------------------------------------------------

const char* OperationName(int op) {
  switch (op) {
    case CUBLAS_OP_N:
      return "N";
    case CUBLAS_OP_T:
      return "T";
    case CUBLAS_OP_C:
      return "C";
    default:
      return "?";
  }
}

DType DTypeOf(int type) {
  switch (type) {
    case CUDA_R_64F:
      return DType::kF64;
    case CUDA_R_32F:
      return DType::kF32;
    case CUDA_R_16F:
      return DType::kF16;
    case CUDA_R_16BF:
      return DType::kBF16;
    case CUDA_R_8F_E4M3:
      return DType::kF8E4M3;
    case CUDA_R_8F_E5M2:
      return DType::kF8E5M2;
    case CUDA_R_32I:
      return DType::kI32;
    case CUDA_R_8I:
      return DType::kI8;
    case CUDA_R_8U:
      return DType::kU8;
    default:
      return DType::kUnknown;
  }
}

// Bytes per element of a real cudaDataType; 0 when not known here.
uint64_t ElementBytes(int type) { return format::DTypeBytes(DTypeOf(type)); }

std::string TypeName(int type) {
  const DType dtype = DTypeOf(type);
  return dtype == DType::kUnknown ? "cuda_type" + std::to_string(type) : format::DTypeName(dtype);
}

// The bytes a column-major rows x cols matrix with leading dimension ld spans.
uint64_t MatrixBytes(uint64_t rows, uint64_t cols, uint64_t ld, uint64_t element) {
  if (rows == 0 || cols == 0 || element == 0) return 0;
  return ((cols - 1) * ld + rows) * element;
}

std::string GemmAlgoName(int algo) {
  if (algo == CUBLAS_GEMM_DEFAULT) return "CUBLAS_GEMM_DEFAULT";
  if (algo == CUBLAS_GEMM_DEFAULT_TENSOR_OP) return "CUBLAS_GEMM_DEFAULT_TENSOR_OP";
  if (algo == CUBLAS_GEMM_AUTOTUNE) return "CUBLAS_GEMM_AUTOTUNE";
  if (algo >= CUBLAS_GEMM_ALGO0_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP) {
    return "CUBLAS_GEMM_ALGO" + std::to_string(algo - CUBLAS_GEMM_ALGO0_TENSOR_OP) + "_TENSOR_OP";
  }
  return "CUBLAS_GEMM_ALGO" + std::to_string(algo);
}

// Reads a host scalar of `type`; nullopt for a type not read here.
std::optional<double> HostScalar(const void* value, int type) {
  if (value == nullptr) return std::nullopt;
  if (type == CUDA_R_32F) {
    float f;
    std::memcpy(&f, value, sizeof(f));
    return f;
  }
  if (type == CUDA_R_64F) {
    double d;
    std::memcpy(&d, value, sizeof(d));
    return d;
  }
  if (type == CUDA_R_32I) {
    int32_t i;
    std::memcpy(&i, value, sizeof(i));
    return i;
  }
  return std::nullopt;
}

// A GEMM's scalar (alpha, beta) as ScalarArgument records it, read on the calling thread: in
// device memory, read from the host, or of a type not read here.
struct ScalarFact {
  enum class Kind : uint8_t { kDevice, kValue, kUnread };
  Kind kind;
  double value;
};

ScalarFact ReadScalar(const void* value, int type, bool host) {
  if (!host) return {ScalarFact::Kind::kDevice, 0};
  if (std::optional<double> read = HostScalar(value, type)) {
    return {ScalarFact::Kind::kValue, *read};
  }
  return {ScalarFact::Kind::kUnread, 0};
}

// Appends `fact` as ScalarArgument(name, ...) would have made it.
void AddScalar(OpRecord& op, const char* name, const ScalarFact& fact) {
  format::Argument& argument = op.args.emplace_back();
  argument.name = name;
  if (fact.kind == ScalarFact::Kind::kDevice) {
    argument.value = std::string("device pointer");
  } else if (fact.kind == ScalarFact::Kind::kValue) {
    argument.value = fact.value;
  }
}

format::Argument ScalarArgument(std::string name, const void* value, int type, bool host) {
  format::Argument argument;
  argument.name = std::move(name);
  if (!host) {
    argument.value = std::string("device pointer");
  } else if (std::optional<double> read = HostScalar(value, type)) {
    argument.value = *read;
  }
  return argument;
}

// ---- cuBLAS -------------------------------------------------------------------------------

cudaStream_t HandleStream(cublasHandle_t handle) {
  cudaStream_t stream = nullptr;
  if (auto get = NDT_REAL_LIBRARY(kCublas, cublasGetStream_v2)) get(handle, &stream);
  return stream;
}

OpRecord BeginHandleOp(Session& session, const char* name, cublasHandle_t handle,
                       cudaStream_t stream) {
  OpRecord op = session.BeginOp(OpKind::kOther, name, session.StreamId(Address(stream), false));
  op.args.push_back(UnsignedArgument("handle", CublasState::Get().HandleId(handle)));
  return op;
}

// The same on the raw path (raw_op.h), for the calls made before every GEMM (PyTorch sets the
// handle's stream, workspace and math mode each time it takes the handle).
RawOp& BeginRawHandleOp(Session& session, const char* name, cublasHandle_t handle,
                        cudaStream_t stream) {
  RawOp& op = session.BeginRawOp(OpKind::kOther, name, session.StreamId(Address(stream), false));
  op.AddUnsigned("handle", CublasState::Get().HandleId(handle));
  return op;
}

// Gives (handle, stream) a workspace of its own under the deterministic policy.
void GiveWorkspace(Session& session, uint64_t op_sequence, cublasHandle_t handle,
                   cudaStream_t stream, uint32_t stream_id) {
  CublasState& state = CublasState::Get();
  const auto set = NDT_REAL_LIBRARY(kCublas, cublasSetWorkspace_v2);
  const std::string where = "cuBLAS handle " + std::to_string(state.HandleId(handle)) +
                            " on stream " + std::to_string(stream_id);
  PolicyDecisionRecord decision{op_sequence, "cublas", "", std::nullopt, std::nullopt, true};
  CUdeviceptr workspace = state.Workspace(handle, stream);
  const bool fresh = workspace == 0;
  if (fresh) {
    using AllocFn = CUresult (*)(CUdeviceptr*, size_t);
    const auto alloc = reinterpret_cast<AllocFn>(RealDriverFunction(Hook::k_cuMemAlloc_v2));
    const CUresult result =
        alloc != nullptr ? alloc(&workspace, kPolicyWorkspaceBytes) : CUDA_ERROR_NOT_INITIALIZED;
    if (result != CUDA_SUCCESS) {
      decision.action = "could not give " + where +
                        " a workspace of its own: cuMemAlloc_v2 failed with CUresult " +
                        std::to_string(static_cast<int>(result));
      decision.applied = false;
      session.Decide(decision);
      return;
    }
    state.SetWorkspace(handle, stream, workspace);
  }
  const cublasStatus_t status =
      set != nullptr ? set(handle, reinterpret_cast<void*>(workspace), kPolicyWorkspaceBytes)
                     : CUBLAS_STATUS_NOT_INITIALIZED;
  if (status != CUBLAS_STATUS_SUCCESS) {
    decision.action = "could not give " + where +
                      " a workspace of its own: cublasSetWorkspace_v2 returned " +
                      std::to_string(static_cast<int>(status));
    decision.applied = false;
    session.Decide(decision);
  } else {
    state.SetWorkspaceBytes(handle, kPolicyWorkspaceBytes);
    if (fresh) {
      decision.action = "gave " + where + " a 4 MiB workspace of its own";
      session.Decide(decision);
    }
  }
}

// The parts of a GEMM the record needs, whichever API made it.
struct GemmCall {
  const char* api;
  cublasHandle_t handle;
  cublasOperation_t trans_a, trans_b;
  int m, n, k;
  const void* alpha;
  const void* a;
  cudaDataType a_type;
  int lda;
  const void* b;
  cudaDataType b_type;
  int ldb;
  const void* beta;
  void* c;
  cudaDataType c_type;
  int ldc;
  int compute;       // cublasComputeType_t; -1 for cublasSgemm_v2
  int algo;          // cublasGemmAlgo_t as the program asked (DEFAULT for cublasSgemm_v2)
  bool has_algo;     // cublasGemmEx: the algo can be replaced
  int batch;         // batchCount of the strided batched GEMMs; 0 for the others
  long long stride_a, stride_b, stride_c;  // elements between batches
};

// The bytes a strided batch of `batch` matrices of `one` bytes each spans (one for batch 0).
uint64_t BatchBytes(uint64_t one, int batch, long long stride, uint64_t element) {
  if (batch <= 1 || one == 0 || stride <= 0) return one;
  return std::max<uint64_t>(one, static_cast<uint64_t>(batch - 1) *
                                         static_cast<uint64_t>(stride) * element + one);
}

AlgorithmChoice GemmChoice(int algo, bool atomics, ChoiceSource source) {
  AlgorithmChoice choice;
  choice.library = "cublas";
  choice.id = algo;
  choice.name = GemmAlgoName(algo);
  if (atomics) choice.name += " (atomics allowed)";
  choice.determinism = atomics || algo == CUBLAS_GEMM_AUTOTUNE ? Determinism::kNondeterministic
                                                               : Determinism::kDeterministic;
  choice.source = algo == CUBLAS_GEMM_AUTOTUNE ? ChoiceSource::kBenchmark : source;
  return choice;
}

// A GEMM's record besides its header: what the call said and what the hook found, as a plain
// struct. AddGemmArguments makes the record's arguments and algorithm of it, on the calling
// thread or, for a GEMM on the raw path (metadata only), on the encoder's (RawOp::SetFacts).
struct GemmFacts {
  GemmCall call;  // its pointers are not read again: a, b and c are below, the scalars too
  uint64_t handle_id;
  format::DevicePointer a, b, c;
  ScalarFact alpha, beta;
  int math;      // cublasMath_t of the handle
  bool atomics;  // the handle allows atomics (after the policy's change, if any)
  int algo;      // the algo that runs (the policy's, if it replaced the program's)
  ChoiceSource source;
};

// "<api> op=N,T m=.. n=.. k=.. lda=.. ldb=.. ldc=.. A=f32 B=f32 C=f32 compute=.. math=..
// [batch=.. strides=..,..,..]": the key a pinned GEMM's choice is found by.
std::string GemmFingerprint(const GemmCall& g, int math) {
  std::string fingerprint;
  fingerprint.reserve(160);
  const auto field = [&fingerprint](const char* label, int64_t value) {
    fingerprint += label;
    AppendDecimal(fingerprint, value);
  };
  fingerprint.append(g.api).append(" op=").append(OperationName(g.trans_a)).append(",");
  fingerprint.append(OperationName(g.trans_b));
  field(" m=", g.m);
  field(" n=", g.n);
  field(" k=", g.k);
  field(" lda=", g.lda);
  field(" ldb=", g.ldb);
  field(" ldc=", g.ldc);
  fingerprint.append(" A=").append(TypeName(g.a_type)).append(" B=").append(TypeName(g.b_type));
  fingerprint.append(" C=").append(TypeName(g.c_type));
  field(" compute=", g.compute);
  field(" math=", math);
  if (g.batch > 0) {
    field(" batch=", g.batch);
    field(" strides=", g.stride_a);
    field(",", g.stride_b);
    field(",", g.stride_c);
  }
  return fingerprint;
}

void AddGemmArguments(const GemmFacts& f, OpRecord& op) {
  const GemmCall& g = f.call;
  const auto text = [&op](const char* name, std::string value) {
    AddArgument(op, name, std::move(value));
  };
  const auto number = [&op](const char* name, int64_t value) { AddArgument(op, name, value); };
  text("fingerprint", GemmFingerprint(g, f.math));
  AddArgument(op, "handle", f.handle_id);
  text("transa", OperationName(g.trans_a));
  text("transb", OperationName(g.trans_b));
  number("m", g.m);
  number("n", g.n);
  number("k", g.k);
  AddScalar(op, "alpha", f.alpha);
  AddArgument(op, "A", f.a);
  text("Atype", TypeName(g.a_type));
  number("lda", g.lda);
  AddArgument(op, "B", f.b);
  text("Btype", TypeName(g.b_type));
  number("ldb", g.ldb);
  AddScalar(op, "beta", f.beta);
  AddArgument(op, "C", f.c);
  text("Ctype", TypeName(g.c_type));
  number("ldc", g.ldc);
  if (g.batch > 0) {
    number("strideA", g.stride_a);
    number("strideB", g.stride_b);
    number("strideC", g.stride_c);
    number("batchCount", g.batch);
  }
  if (g.compute >= 0) number("computeType", g.compute);
  number("algo", g.algo);
  text("atomics", f.atomics ? "allowed" : "not allowed");
  number("mathMode", f.math);
  op.algorithm = GemmChoice(f.algo, f.atomics, f.source);
}

// The scalars a call reads from device memory (the handle's pointer mode is device, as solvers
// use it to keep results on the GPU): digested with its inputs, so that a scalar computed
// differently upstream is told apart from the call varying by itself. Nothing in host mode.
void AddDeviceScalars(bool host, int type,
                      std::initializer_list<std::pair<const char*, const void*>> scalars,
                      std::vector<Extent>* inputs) {
  if (host) return;
  for (const auto& [role, address] : scalars) {
    if (address != nullptr) {
      inputs->push_back({role, Address(address), ElementBytes(type), DTypeOf(type)});
    }
  }
}

// Records a GEMM around the real call `real(algo)`. Metadata only (no digest of library ops,
// nothing captured), the record is built off the calling thread: it takes the facts
// (GemmFacts) and queues them as a raw op.
template <typename Real>
cublasStatus_t RecordGemm(Session& session, RealCall<cublasStatus_t>& call, GemmCall g, Real real) {
  const cudaStream_t stream = HandleStream(g.handle);
  const uint32_t stream_id = session.StreamId(Address(stream), false);
  const bool raw = LibraryOpOffThread(session);
  RawOp* raw_op = raw ? &session.BeginRawOp(OpKind::kCublasGemm, g.api, stream_id) : nullptr;
  OpRecord op;
  if (!raw) op = session.BeginOp(OpKind::kCublasGemm, g.api, stream_id);
  const uint64_t sequence = raw ? raw_op->sequence : op.sequence;
  cublasAtomicsMode_t atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
  if (auto get = NDT_REAL_LIBRARY(kCublas, cublasGetAtomicsMode)) get(g.handle, &atomics);
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  if (auto get = NDT_REAL_LIBRARY(kCublas, cublasGetMathMode)) get(g.handle, &math);
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  if (auto get = NDT_REAL_LIBRARY(kCublas, cublasGetPointerMode_v2)) get(g.handle, &pointer_mode);

  const PolicyConfig& policy = session.policy();
  int algo = g.algo;
  ChoiceSource source = ChoiceSource::kRequested;
  // What the program asked for, said in the policy's decisions (observe makes none): the
  // handle's atomics mode as the call found it, before the policy changes it.
  const bool asked_atomics = atomics == CUBLAS_ATOMICS_ALLOWED;
  const auto requested = [&] {
    return GemmChoice(g.algo, asked_atomics, ChoiceSource::kRequested);
  };
  if (policy.mode == PolicyMode::kEnforce) {
    if (atomics == CUBLAS_ATOMICS_ALLOWED) {
      if (auto set = NDT_REAL_LIBRARY(kCublas, cublasSetAtomicsMode);
          set != nullptr && set(g.handle, CUBLAS_ATOMICS_NOT_ALLOWED) == CUBLAS_STATUS_SUCCESS) {
        atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
        session.Decide({sequence, "cublas",
                        std::string("disallowed atomics on the handle before ") + g.api,
                        requested(), GemmChoice(g.algo, false, ChoiceSource::kEnforced), true});
        source = ChoiceSource::kEnforced;
      }
    }
    if (g.has_algo && algo == CUBLAS_GEMM_AUTOTUNE) {
      algo = CUBLAS_GEMM_DEFAULT;
      source = ChoiceSource::kEnforced;
      session.Decide({sequence, "cublas",
                      "replaced cublasGemmEx algo CUBLAS_GEMM_AUTOTUNE (chosen by timing) by "
                      "CUBLAS_GEMM_DEFAULT",
                      requested(), GemmChoice(algo, false, source), true});
    }
  } else if (policy.mode == PolicyMode::kPin && g.has_algo && session.pins() != nullptr) {
    const std::string fingerprint = GemmFingerprint(g, static_cast<int>(math));
    const AlgorithmChoice* recorded = session.pins()->Choice(fingerprint);
    PolicyDecisionRecord decision{sequence, "cublas", "", requested(), std::nullopt, false};
    if (recorded == nullptr || recorded->library != "cublas") {
      decision.action = "cannot pin cublasGemmEx: no choice recorded for \"" + fingerprint + "\"";
    } else if (std::string why = session.pins()->Mismatch(session.header(), "cublas");
               !why.empty()) {
      decision.action = "cannot pin cublasGemmEx to the recorded " + recorded->name + ": " + why;
    } else if (recorded->id == CUBLAS_GEMM_AUTOTUNE) {
      decision.action =
          "cannot pin cublasGemmEx: the reference autotuned, and which algo it ran is not known";
    } else if (recorded->id != algo) {
      algo = static_cast<int>(recorded->id);
      source = ChoiceSource::kPinned;
      decision.action = "pinned cublasGemmEx algo " + GemmAlgoName(g.algo) + " to the recorded " +
                        GemmAlgoName(algo);
      decision.applied = true;
    }
    if (!decision.action.empty()) {
      decision.to_choice = GemmChoice(algo, atomics == CUBLAS_ATOMICS_ALLOWED, source);
      session.Decide(decision);
    }
  }

  const bool host_scalars = pointer_mode == CUBLAS_POINTER_MODE_HOST;
  const int scale_type = libfacts::ScaleTypeOfCompute(g.compute, g.c_type);
  GemmFacts facts{g,
                  CublasState::Get().HandleId(g.handle),
                  session.Canonical(Address(g.a)),
                  session.Canonical(Address(g.b)),
                  session.Canonical(Address(g.c)),
                  ReadScalar(g.alpha, scale_type, host_scalars),
                  ReadScalar(g.beta, scale_type, host_scalars),
                  static_cast<int>(math),
                  atomics == CUBLAS_ATOMICS_ALLOWED,
                  algo,
                  source};
  if (raw) {
    raw_op->SetFacts<&AddGemmArguments>(facts);
    call.Run([&] { return real(algo); });
    session.EndRawOp(*raw_op, static_cast<int32_t>(call.result()));
    return call.result();
  }
  AddGemmArguments(facts, op);

  const auto dims = [](bool transposed, int rows_n, int rows_t, int cols_n, int cols_t) {
    return transposed ? std::pair<uint64_t, uint64_t>(rows_t, cols_t)
                      : std::pair<uint64_t, uint64_t>(rows_n, cols_n);
  };
  if (g.m > 0 && g.n > 0 && g.k >= 0 && g.batch >= 0) {
    const auto [a_rows, a_cols] = dims(g.trans_a != CUBLAS_OP_N, g.m, g.k, g.k, g.m);
    const auto [b_rows, b_cols] = dims(g.trans_b != CUBLAS_OP_N, g.k, g.n, g.n, g.k);
    const uint64_t a_element = ElementBytes(g.a_type), b_element = ElementBytes(g.b_type),
                   c_element = ElementBytes(g.c_type);
    std::vector<Extent> inputs = {
        {"A", Address(g.a),
         BatchBytes(MatrixBytes(a_rows, a_cols, g.lda, a_element), g.batch, g.stride_a, a_element),
         DTypeOf(g.a_type)},
        {"B", Address(g.b),
         BatchBytes(MatrixBytes(b_rows, b_cols, g.ldb, b_element), g.batch, g.stride_b, b_element),
         DTypeOf(g.b_type)},
    };
    const Extent c_extent{
        "C", Address(g.c),
        BatchBytes(MatrixBytes(g.m, g.n, g.ldc, c_element), g.batch, g.stride_c, c_element),
        DTypeOf(g.c_type)};
    const std::optional<double> beta =
        host_scalars ? HostScalar(g.beta, scale_type) : std::nullopt;
    if (!beta || *beta != 0) inputs.push_back(c_extent);
    AddDeviceScalars(host_scalars, scale_type, {{"alpha", g.alpha}, {"beta", g.beta}}, &inputs);
    op.inputs = DigestExtents(session, Address(stream), inputs);
    // What standalone replay needs besides the arguments above: the handle's pointer mode and
    // workspace, and the buffers.
    const bool capture = CaptureWanted(op);
    if (capture) {
      op.args.push_back(SignedArgument("pointerMode", static_cast<int>(pointer_mode)));
      op.args.push_back(
          UnsignedArgument("workspaceBytes", CublasState::Get().WorkspaceBytes(g.handle)));
      CaptureExtents(session, Address(stream), inputs, "in", &op);
    }
    const cublasStatus_t status = call.Run([&] { return real(algo); });
    if (status == CUBLAS_STATUS_SUCCESS) {
      op.outputs = DigestExtents(session, Address(stream), {c_extent});
      if (capture) CaptureExtents(session, Address(stream), {c_extent}, "out", &op);
    }
  } else {
    call.Run([&] { return real(algo); });
  }
  session.EndOp(op, static_cast<int32_t>(call.result()));
  return call.result();
}

// The cuBLAS calls besides the GEMMs (level 1 and 2, pointer-array batches): `args` adds the
// arguments after the handle, `inputs` are digested before the call and `outputs` after it.
// `after` (may be empty) adds what the call returned in host memory.
cublasPointerMode_t PointerMode(cublasHandle_t handle) {
  cublasPointerMode_t mode = CUBLAS_POINTER_MODE_HOST;
  if (auto get = NDT_REAL_LIBRARY(kCublas, cublasGetPointerMode_v2)) get(handle, &mode);
  return mode;
}

// The bytes a BLAS vector of n elements of `element` bytes with increment inc spans from its
// pointer.
uint64_t VectorBytes(int n, int inc, uint64_t element) {
  if (n <= 0) return 0;
  const uint64_t step = static_cast<uint64_t>(inc < 0 ? -static_cast<int64_t>(inc) : inc);
  return (static_cast<uint64_t>(n - 1) * step + 1) * element;
}

template <typename Args, typename Real, typename After>
cublasStatus_t RecordBlas(Session& session, RealCall<cublasStatus_t>& call, OpKind kind,
                          const char* api, cublasHandle_t handle, Args args,
                          const std::vector<Extent>& inputs, const std::vector<Extent>& outputs,
                          Real real, After after) {
  const cudaStream_t stream = HandleStream(handle);
  OpRecord op = session.BeginOp(kind, api, session.StreamId(Address(stream), false));
  op.args.push_back(UnsignedArgument("handle", CublasState::Get().HandleId(handle)));
  args(op.args);
  std::vector<Extent> read;
  for (const Extent& extent : inputs) {
    if (extent.bytes > 0) read.push_back(extent);
  }
  std::vector<Extent> written;
  for (const Extent& extent : outputs) {
    if (extent.bytes > 0) written.push_back(extent);
  }
  if (!read.empty()) op.inputs = DigestExtents(session, Address(stream), read);
  const cublasStatus_t status = call.Run(real);
  if (status == CUBLAS_STATUS_SUCCESS) {
    if (!written.empty()) op.outputs = DigestExtents(session, Address(stream), written);
    after(op.args);
  }
  session.EndOp(op, static_cast<int32_t>(status));
  return status;
}

// The S (float) and D (double) forms of a BLAS call differ only in their element type.
template <typename T>
struct BlasElement;
template <>
struct BlasElement<float> {
  static constexpr cudaDataType kCuda = CUDA_R_32F;
  static constexpr DType kDType = DType::kF32;
};
template <>
struct BlasElement<double> {
  static constexpr cudaDataType kCuda = CUDA_R_64F;
  static constexpr DType kDType = DType::kF64;
};

// The GEMMs of one element type (cublasSgemm_v2 and cublasDgemm_v2, their strided batched
// forms): `api` is the exported name, `real` the real function.
template <typename T, typename Real>
cublasStatus_t HookTypedGemm(const char* api, Real real, cublasHandle_t handle,
                             cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                             int k, const T* alpha, const T* a, int lda, const T* b, int ldb,
                             const T* beta, T* c, int ldc) {
  auto call_real = [&] {
    return real(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  };
  constexpr cudaDataType kType = BlasElement<T>::kCuda;
  return RunLibraryHook(api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
                        [&](Session& session, RealCall<cublasStatus_t>& call) {
                          const GemmCall g{api,   handle, transa, transb, m,
                                           n,     k,      alpha,  a,      kType,
                                           lda,   b,      kType,  ldb,    beta,
                                           c,     kType,  ldc,    -1,     CUBLAS_GEMM_DEFAULT,
                                           false, 0,      0,      0,      0};
                          return RecordGemm(session, call, g, [&](int) { return call_real(); });
                        });
}

template <typename T, typename Real>
cublasStatus_t HookTypedGemmStridedBatched(const char* api, Real real, cublasHandle_t handle,
                                           cublasOperation_t transa, cublasOperation_t transb,
                                           int m, int n, int k, const T* alpha, const T* a, int lda,
                                           long long stride_a, const T* b, int ldb,
                                           long long stride_b, const T* beta, T* c, int ldc,
                                           long long stride_c, int batch) {
  auto call_real = [&] {
    return real(handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                ldc, stride_c, batch);
  };
  constexpr cudaDataType kType = BlasElement<T>::kCuda;
  return RunLibraryHook(api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
                        [&](Session& session, RealCall<cublasStatus_t>& call) {
                          const GemmCall g{api,   handle, transa,   transb,   m,
                                           n,     k,      alpha,    a,        kType,
                                           lda,   b,      kType,    ldb,      beta,
                                           c,     kType,  ldc,      -1,       CUBLAS_GEMM_DEFAULT,
                                           false, batch,  stride_a, stride_b, stride_c};
                          return RecordGemm(session, call, g, [&](int) { return call_real(); });
                        });
}

// The hooks of the level-1 and level-2 calls and of the pointer-array batched GEMM, for either
// element type: `api` is the exported name, `real` the real function.
template <typename T, typename Real>
cublasStatus_t HookGemmBatched(const char* api, Real real, cublasHandle_t handle,
                               cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                               int k, const T* alpha, const T* const Aarray[], int lda,
                               const T* const Barray[], int ldb, const T* beta, T* const Carray[],
                               int ldc, int batchCount) {
  auto call_real = [&] {
    return real(handle, transa, transb, m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray, ldc,
                batchCount);
  };
  constexpr cudaDataType kType = BlasElement<T>::kCuda;
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const bool host = PointerMode(handle) == CUBLAS_POINTER_MODE_HOST;
        const uint64_t array_bytes = batchCount > 0 ? uint64_t(batchCount) * sizeof(void*) : 0;
        std::vector<Extent> arrays = {{"Aarray", Address(Aarray), array_bytes, DType::kU8},
                                      {"Barray", Address(Barray), array_bytes, DType::kU8},
                                      {"Carray", Address(Carray), array_bytes, DType::kU8}};
        AddDeviceScalars(host, kType, {{"alpha", alpha}, {"beta", beta}}, &arrays);
        return RecordBlas(
            session, call, OpKind::kCublasGemm, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(TextArgument("transa", OperationName(transa)));
              args.push_back(TextArgument("transb", OperationName(transb)));
              args.push_back(SignedArgument("m", m));
              args.push_back(SignedArgument("n", n));
              args.push_back(SignedArgument("k", k));
              args.push_back(ScalarArgument("alpha", alpha, kType, host));
              args.push_back(PointerArgument(session, "Aarray", Address(Aarray)));
              args.push_back(SignedArgument("lda", lda));
              args.push_back(PointerArgument(session, "Barray", Address(Barray)));
              args.push_back(SignedArgument("ldb", ldb));
              args.push_back(ScalarArgument("beta", beta, kType, host));
              args.push_back(PointerArgument(session, "Carray", Address(Carray)));
              args.push_back(SignedArgument("ldc", ldc));
              args.push_back(SignedArgument("batchCount", batchCount));
            },
            arrays, {}, call_real, [](std::vector<format::Argument>&) {});
      });
}

template <typename T, typename Real>
cublasStatus_t HookGemv(const char* api, Real real, cublasHandle_t handle, cublasOperation_t trans,
                        int m, int n, const T* alpha, const T* a, int lda, const T* x, int incx,
                        const T* beta, T* y, int incy) {
  auto call_real = [&] { return real(handle, trans, m, n, alpha, a, lda, x, incx, beta, y, incy); };
  constexpr cudaDataType kType = BlasElement<T>::kCuda;
  constexpr DType kDType = BlasElement<T>::kDType;
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const bool host = PointerMode(handle) == CUBLAS_POINTER_MODE_HOST;
        const bool t = trans != CUBLAS_OP_N;
        const int x_len = t ? m : n, y_len = t ? n : m;
        const bool ok = m > 0 && n > 0;
        const Extent y_extent{"y", Address(y), ok ? VectorBytes(y_len, incy, sizeof(T)) : 0,
                              kDType};
        std::vector<Extent> inputs = {
            {"A", Address(a), ok ? MatrixBytes(m, n, lda, sizeof(T)) : 0, kDType},
            {"x", Address(x), ok ? VectorBytes(x_len, incx, sizeof(T)) : 0, kDType}};
        const std::optional<double> b = host ? HostScalar(beta, kType) : std::nullopt;
        if (!b || *b != 0) inputs.push_back(y_extent);
        AddDeviceScalars(host, kType, {{"alpha", alpha}, {"beta", beta}}, &inputs);
        return RecordBlas(
            session, call, OpKind::kCublasGemm, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(TextArgument("trans", OperationName(trans)));
              args.push_back(SignedArgument("m", m));
              args.push_back(SignedArgument("n", n));
              args.push_back(ScalarArgument("alpha", alpha, kType, host));
              args.push_back(PointerArgument(session, "A", Address(a)));
              args.push_back(SignedArgument("lda", lda));
              args.push_back(PointerArgument(session, "x", Address(x)));
              args.push_back(SignedArgument("incx", incx));
              args.push_back(ScalarArgument("beta", beta, kType, host));
              args.push_back(PointerArgument(session, "y", Address(y)));
              args.push_back(SignedArgument("incy", incy));
            },
            inputs, {y_extent}, call_real, [](std::vector<format::Argument>&) {});
      });
}

template <typename T, typename Real>
cublasStatus_t HookAxpy(const char* api, Real real, cublasHandle_t handle, int n, const T* alpha,
                        const T* x, int incx, T* y, int incy) {
  auto call_real = [&] { return real(handle, n, alpha, x, incx, y, incy); };
  constexpr DType kDType = BlasElement<T>::kDType;
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const bool host = PointerMode(handle) == CUBLAS_POINTER_MODE_HOST;
        const Extent y_extent{"y", Address(y), VectorBytes(n, incy, sizeof(T)), kDType};
        std::vector<Extent> inputs = {{"x", Address(x), VectorBytes(n, incx, sizeof(T)), kDType},
                                      y_extent};
        AddDeviceScalars(host, BlasElement<T>::kCuda, {{"alpha", alpha}}, &inputs);
        return RecordBlas(
            session, call, OpKind::kOther, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(SignedArgument("n", n));
              args.push_back(ScalarArgument("alpha", alpha, BlasElement<T>::kCuda, host));
              args.push_back(PointerArgument(session, "x", Address(x)));
              args.push_back(SignedArgument("incx", incx));
              args.push_back(PointerArgument(session, "y", Address(y)));
              args.push_back(SignedArgument("incy", incy));
            },
            inputs, {y_extent}, call_real, [](std::vector<format::Argument>&) {});
      });
}

template <typename T, typename Real>
cublasStatus_t HookScal(const char* api, Real real, cublasHandle_t handle, int n, const T* alpha,
                        T* x, int incx) {
  auto call_real = [&] { return real(handle, n, alpha, x, incx); };
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const bool host = PointerMode(handle) == CUBLAS_POINTER_MODE_HOST;
        const Extent x_extent{"x", Address(x), incx > 0 ? VectorBytes(n, incx, sizeof(T)) : 0,
                              BlasElement<T>::kDType};
        std::vector<Extent> inputs = {x_extent};
        AddDeviceScalars(host, BlasElement<T>::kCuda, {{"alpha", alpha}}, &inputs);
        return RecordBlas(
            session, call, OpKind::kOther, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(SignedArgument("n", n));
              args.push_back(ScalarArgument("alpha", alpha, BlasElement<T>::kCuda, host));
              args.push_back(PointerArgument(session, "x", Address(x)));
              args.push_back(SignedArgument("incx", incx));
            },
            inputs, {x_extent}, call_real, [](std::vector<format::Argument>&) {});
      });
}

template <typename T, typename Real>
cublasStatus_t HookDot(const char* api, Real real, cublasHandle_t handle, int n, const T* x,
                       int incx, const T* y, int incy, T* result) {
  auto call_real = [&] { return real(handle, n, x, incx, y, incy, result); };
  constexpr DType kDType = BlasElement<T>::kDType;
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const bool host = PointerMode(handle) == CUBLAS_POINTER_MODE_HOST;
        std::vector<Extent> outputs;
        if (!host) outputs.push_back({"result", Address(result), sizeof(T), kDType});
        return RecordBlas(
            session, call, OpKind::kOther, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(SignedArgument("n", n));
              args.push_back(PointerArgument(session, "x", Address(x)));
              args.push_back(SignedArgument("incx", incx));
              args.push_back(PointerArgument(session, "y", Address(y)));
              args.push_back(SignedArgument("incy", incy));
              args.push_back(TextArgument("pointerMode", host ? "host" : "device"));
            },
            {{"x", Address(x), VectorBytes(n, incx, sizeof(T)), kDType},
             {"y", Address(y), VectorBytes(n, incy, sizeof(T)), kDType}},
            outputs, call_real,
            [&](std::vector<format::Argument>& args) {
              if (host) {
                args.push_back(ScalarArgument("result", result, BlasElement<T>::kCuda, true));
              }
            });
      });
}

// A reduction of one vector to a scalar: nrm2 and asum (R = T), the 1-based index of amax and
// amin (R = int). The result in host memory is the argument "result"; in device memory, an
// output digested after the call (the handle's pointer mode says which).
template <typename T, typename R, typename Real>
cublasStatus_t HookReduce(const char* api, Real real, cublasHandle_t handle, int n, const T* x,
                          int incx, R* result) {
  auto call_real = [&] { return real(handle, n, x, incx, result); };
  constexpr bool kIndex = std::is_same_v<R, int>;
  constexpr cudaDataType kResultType = kIndex ? CUDA_R_32I : BlasElement<T>::kCuda;
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const bool host = PointerMode(handle) == CUBLAS_POINTER_MODE_HOST;
        std::vector<Extent> outputs;
        if (!host) outputs.push_back({"result", Address(result), sizeof(R), DTypeOf(kResultType)});
        return RecordBlas(
            session, call, OpKind::kOther, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(SignedArgument("n", n));
              args.push_back(PointerArgument(session, "x", Address(x)));
              args.push_back(SignedArgument("incx", incx));
              args.push_back(TextArgument("pointerMode", host ? "host" : "device"));
            },
            {{"x", Address(x), incx > 0 ? VectorBytes(n, incx, sizeof(T)) : 0,
              BlasElement<T>::kDType}},
            outputs, call_real,
            [&](std::vector<format::Argument>& args) {
              if (host) args.push_back(ScalarArgument("result", result, kResultType, true));
            });
      });
}

// y = x (copy), or x and y exchanged (swap: both read and both written).
template <typename T, typename Real>
cublasStatus_t HookCopy(const char* api, Real real, cublasHandle_t handle, int n, T* x, int incx,
                        T* y, int incy, bool swap) {
  auto call_real = [&] { return real(handle, n, x, incx, y, incy); };
  constexpr DType kDType = BlasElement<T>::kDType;
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const Extent x_extent{"x", Address(x), VectorBytes(n, incx, sizeof(T)), kDType};
        const Extent y_extent{"y", Address(y), VectorBytes(n, incy, sizeof(T)), kDType};
        std::vector<Extent> inputs = {x_extent};
        std::vector<Extent> outputs = {y_extent};
        if (swap) {
          inputs.push_back(y_extent);
          outputs.push_back(x_extent);
        }
        return RecordBlas(
            session, call, OpKind::kOther, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(SignedArgument("n", n));
              args.push_back(PointerArgument(session, "x", Address(x)));
              args.push_back(SignedArgument("incx", incx));
              args.push_back(PointerArgument(session, "y", Address(y)));
              args.push_back(SignedArgument("incy", incy));
            },
            inputs, outputs, call_real, [](std::vector<format::Argument>&) {});
      });
}

// C = alpha op(A) + beta op(B) (the transpose and matrix-addition extension): A is read unless
// alpha is 0 in host memory, B unless beta is.
template <typename T, typename Real>
cublasStatus_t HookGeam(const char* api, Real real, cublasHandle_t handle, cublasOperation_t transa,
                        cublasOperation_t transb, int m, int n, const T* alpha, const T* a, int lda,
                        const T* beta, const T* b, int ldb, T* c, int ldc) {
  auto call_real = [&] {
    return real(handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
  };
  constexpr cudaDataType kType = BlasElement<T>::kCuda;
  constexpr DType kDType = BlasElement<T>::kDType;
  return RunLibraryHook(
      api, real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED, call_real,
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const bool host = PointerMode(handle) == CUBLAS_POINTER_MODE_HOST;
        const bool ok = m > 0 && n > 0;
        const auto read = [&](const T* scalar) {
          const std::optional<double> value = host ? HostScalar(scalar, kType) : std::nullopt;
          return ok && (!value || *value != 0);
        };
        const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
        std::vector<Extent> inputs;
        if (read(alpha)) {
          inputs.push_back(
              {"A", Address(a), MatrixBytes(ta ? n : m, ta ? m : n, lda, sizeof(T)), kDType});
        }
        if (read(beta)) {
          inputs.push_back(
              {"B", Address(b), MatrixBytes(tb ? n : m, tb ? m : n, ldb, sizeof(T)), kDType});
        }
        AddDeviceScalars(host, kType, {{"alpha", alpha}, {"beta", beta}}, &inputs);
        return RecordBlas(
            session, call, OpKind::kOther, api, handle,
            [&](std::vector<format::Argument>& args) {
              args.push_back(TextArgument("transa", OperationName(transa)));
              args.push_back(TextArgument("transb", OperationName(transb)));
              args.push_back(SignedArgument("m", m));
              args.push_back(SignedArgument("n", n));
              args.push_back(ScalarArgument("alpha", alpha, kType, host));
              args.push_back(PointerArgument(session, "A", Address(a)));
              args.push_back(SignedArgument("lda", lda));
              args.push_back(ScalarArgument("beta", beta, kType, host));
              args.push_back(PointerArgument(session, "B", Address(b)));
              args.push_back(SignedArgument("ldb", ldb));
              args.push_back(PointerArgument(session, "C", Address(c)));
              args.push_back(SignedArgument("ldc", ldc));
            },
            inputs, {{"C", Address(c), ok ? MatrixBytes(m, n, ldc, sizeof(T)) : 0, kDType}},
            call_real, [](std::vector<format::Argument>&) {});
      });
}

// ---- cuBLASLt -----------------------------------------------------------------------------

struct LtDesc {
  int32_t compute = -1;
  int32_t scale = -1;
  int32_t pointer_mode = 0;
  int32_t trans_a = CUBLAS_OP_N;
  int32_t trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint64_t bias = 0;        // CUBLASLT_MATMUL_DESC_BIAS_POINTER (a bias or its gradient)
  int32_t bias_type = -1;   // -1: D's type
  int64_t bias_stride = 0;  // elements between the batches' vectors
};

struct LtLayout {
  uint32_t type = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0;
  uint64_t cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};

template <typename T, typename Get, typename Handle, typename Attribute>
void ReadAttribute(Get get, Handle handle, Attribute attribute, T* value) {
  size_t written = 0;
  if (get != nullptr) get(handle, attribute, value, sizeof(T), &written);
}

LtDesc ReadDesc(cublasLtMatmulDesc_t desc) {
  LtDesc d;
  const auto get = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulDescGetAttribute);
  if (desc == nullptr) return d;
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &d.compute);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &d.scale);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &d.pointer_mode);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_TRANSA, &d.trans_a);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_TRANSB, &d.trans_b);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &d.epilogue);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &d.bias);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &d.bias_type);
  ReadAttribute(get, desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &d.bias_stride);
  return d;
}

LtLayout ReadLayout(cublasLtMatrixLayout_t layout) {
  LtLayout l;
  const auto get = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatrixLayoutGetAttribute);
  if (layout == nullptr) return l;
  ReadAttribute(get, layout, CUBLASLT_MATRIX_LAYOUT_TYPE, &l.type);
  ReadAttribute(get, layout, CUBLASLT_MATRIX_LAYOUT_ORDER, &l.order);
  ReadAttribute(get, layout, CUBLASLT_MATRIX_LAYOUT_ROWS, &l.rows);
  ReadAttribute(get, layout, CUBLASLT_MATRIX_LAYOUT_COLS, &l.cols);
  ReadAttribute(get, layout, CUBLASLT_MATRIX_LAYOUT_LD, &l.ld);
  ReadAttribute(get, layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &l.batch);
  ReadAttribute(get, layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &l.stride);
  return l;
}

std::string LayoutText(const LtLayout& l) {
  return TypeName(static_cast<int>(l.type)) + " " + std::to_string(l.rows) + "x" +
         std::to_string(l.cols) + " ld=" + std::to_string(l.ld) +
         " order=" + std::to_string(l.order) + " batch=" + std::to_string(l.batch) +
         " stride=" + std::to_string(l.stride);
}

// The bytes a layout spans (every batch).
uint64_t LayoutBytes(const LtLayout& l) {
  const uint64_t element = ElementBytes(static_cast<int>(l.type));
  if (l.ld <= 0 || l.batch <= 0) return 0;
  const bool row_major = l.order == CUBLASLT_ORDER_ROW;
  const uint64_t one = row_major ? MatrixBytes(l.cols, l.rows, static_cast<uint64_t>(l.ld), element)
                                 : MatrixBytes(l.rows, l.cols, static_cast<uint64_t>(l.ld), element);
  if (one == 0 || l.order > CUBLASLT_ORDER_ROW) return 0;
  return one + static_cast<uint64_t>(l.batch - 1) * static_cast<uint64_t>(l.stride) * element;
}

// What the tracer knows of one matmul problem.
struct LtProblem {
  LtDesc desc;
  LtLayout a, b, c, d;
};

// The vector an epilogue reads (a bias added to D's rows: PyTorch's nn.Linear forward through
// addmm) or writes (a bias gradient: CUBLASLT_EPILOGUE_BGRADA/B and D{RELU,GELU}_BGRAD), as
// `role` "bias" with `input` saying which; none without such an epilogue or pointer.
struct LtBias {
  Extent extent;
  bool input;
};
std::optional<LtBias> BiasOf(const LtProblem& p, uint64_t address) {
  const uint32_t e = p.desc.epilogue;
  const bool reads = (e & CUBLASLT_EPILOGUE_BIAS) != 0;
  const bool writes = (e & (CUBLASLT_EPILOGUE_BGRADA | CUBLASLT_EPILOGUE_BGRADB | 16)) != 0;
  if (address == 0 || (!reads && !writes)) return std::nullopt;
  const int type = p.desc.bias_type != -1 ? p.desc.bias_type : static_cast<int>(p.d.type);
  const uint64_t element = ElementBytes(type);
  const uint64_t length = (e & CUBLASLT_EPILOGUE_BGRADB) != 0 ? p.d.cols : p.d.rows;
  uint64_t bytes = length * element;
  if (p.d.batch > 1 && p.desc.bias_stride > 0) {
    bytes +=
        static_cast<uint64_t>(p.d.batch - 1) * static_cast<uint64_t>(p.desc.bias_stride) * element;
  }
  return LtBias{{"bias", address, bytes, DTypeOf(type)}, reads};
}

LtProblem ReadProblem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                      cublasLtMatrixLayout_t d) {
  LtProblem p;
  p.desc = ReadDesc(desc);
  p.a = ReadLayout(a);
  p.b = ReadLayout(b);
  p.c = ReadLayout(c);
  p.d = d != nullptr ? ReadLayout(d) : p.c;
  return p;
}

// The key a pinned matmul's algo is found by: the descriptor's attributes and the layouts.
std::string LtFingerprint(const LtProblem& p) {
  return "cublasLtMatmul compute=" + std::to_string(p.desc.compute) +
         " scale=" + TypeName(p.desc.scale) + " op=" + OperationName(p.desc.trans_a) + "," +
         OperationName(p.desc.trans_b) + " epilogue=" + std::to_string(p.desc.epilogue) +
         " pointer_mode=" + std::to_string(p.desc.pointer_mode) + " A=" + LayoutText(p.a) +
         " B=" + LayoutText(p.b) + " C=" + LayoutText(p.c) + " D=" + LayoutText(p.d);
}

// The matmul descriptor's attributes and the four layouts as arguments, for standalone replay
// of a captured matmul ("Atype", "Arows", "Acols", "lda", "Aorder", "Abatch", "Astride", ...).
void AddLtProblemArguments(const LtProblem& p, std::vector<format::Argument>* args) {
  args->push_back(SignedArgument("computeType", p.desc.compute));
  args->push_back(SignedArgument("scaleType", p.desc.scale));
  args->push_back(SignedArgument("pointerMode", p.desc.pointer_mode));
  args->push_back(TextArgument("transa", OperationName(p.desc.trans_a)));
  args->push_back(TextArgument("transb", OperationName(p.desc.trans_b)));
  args->push_back(UnsignedArgument("epilogue", p.desc.epilogue));
  const struct {
    const char* name;
    const char* ld;
    const LtLayout& layout;
  } layouts[] = {{"A", "lda", p.a}, {"B", "ldb", p.b}, {"C", "ldc", p.c}, {"D", "ldd", p.d}};
  for (const auto& [name, ld, l] : layouts) {
    const std::string n = name;
    args->push_back(SignedArgument(n + "type", static_cast<int64_t>(l.type)));
    args->push_back(UnsignedArgument(n + "rows", l.rows));
    args->push_back(UnsignedArgument(n + "cols", l.cols));
    args->push_back(SignedArgument(ld, l.ld));
    args->push_back(SignedArgument(n + "order", l.order));
    args->push_back(SignedArgument(n + "batch", l.batch));
    args->push_back(SignedArgument(n + "stride", l.stride));
  }
}

template <typename T>
std::optional<T> AlgoConfig(const cublasLtMatmulAlgo_t* algo,
                            cublasLtMatmulAlgoConfigAttributes_t attribute) {
  const auto get = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulAlgoConfigGetAttribute);
  T value{};
  size_t written = 0;
  if (get == nullptr || get(algo, attribute, &value, sizeof(T), &written) != CUBLAS_STATUS_SUCCESS) {
    return std::nullopt;
  }
  return value;
}

bool OutOfPlaceSplitK(uint32_t slices, uint32_t scheme) {
  return slices > 1 && (scheme & (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                  CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)) != 0;
}

// A cuBLASLt algo and its configuration as the library reports it, read on the calling thread
// (the library is not called from the encoder's): LtChoiceOf makes the recorded choice of it.
struct LtAlgoFacts {
  cublasLtMatmulAlgo_t algo;
  std::optional<int32_t> id;
  std::optional<uint32_t> tile, slices, scheme, stages;
};

LtAlgoFacts ReadLtAlgo(const cublasLtMatmulAlgo_t& algo) {
  return {algo,
          AlgoConfig<int32_t>(&algo, CUBLASLT_ALGO_CONFIG_ID),
          AlgoConfig<uint32_t>(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
          AlgoConfig<uint32_t>(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
          AlgoConfig<uint32_t>(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
          AlgoConfig<uint32_t>(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID)};
}

AlgorithmChoice LtChoiceOf(const LtAlgoFacts& f, ChoiceSource source) {
  AlgorithmChoice choice;
  choice.library = "cublasLt";
  choice.opaque.assign(reinterpret_cast<const char*>(&f.algo), sizeof(f.algo));
  choice.source = source;
  if (f.id) choice.id = *f.id;
  for (const auto& [attribute, value] : {std::pair{CUBLASLT_ALGO_CONFIG_TILE_ID, f.tile},
                                         std::pair{CUBLASLT_ALGO_CONFIG_SPLITK_NUM, f.slices},
                                         std::pair{CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, f.scheme},
                                         std::pair{CUBLASLT_ALGO_CONFIG_STAGES_ID, f.stages}}) {
    if (value) choice.knobs.push_back({attribute, *value});
  }
  if (f.slices && f.scheme) {
    choice.determinism = OutOfPlaceSplitK(*f.slices, *f.scheme) ? Determinism::kNondeterministic
                                                                : Determinism::kDeterministic;
    choice.name = "algo " + std::to_string(choice.id) + " tile " +
                  std::to_string(f.tile.value_or(0)) + " splitK " + std::to_string(*f.slices) +
                  " reduction " + std::to_string(*f.scheme);
  } else {
    choice.name = "algo " + std::to_string(choice.id);
  }
  return choice;
}

AlgorithmChoice LtChoice(const cublasLtMatmulAlgo_t& algo, ChoiceSource source) {
  return LtChoiceOf(ReadLtAlgo(algo), source);
}

// A cuBLASLt matmul's record besides its header (GemmFacts's way): AddLtMatmulArguments makes
// its arguments and algorithm, on the calling thread or, metadata only, on the encoder's.
struct LtMatmulFacts {
  LtProblem problem;
  ScalarFact alpha, beta;
  format::DevicePointer a, b, c, d, workspace, bias;  // bias: when the epilogue has one
  uint64_t workspace_bytes;
  bool chosen;       // an algo runs (else the library's implicit heuristic choice)
  LtAlgoFacts algo;  // when chosen: the one that runs (the policy's, if it replaced it)
  ChoiceSource source;
};

void AddLtMatmulArguments(const LtMatmulFacts& f, OpRecord& op) {
  const LtProblem& problem = f.problem;
  AddArgument(op, "fingerprint", LtFingerprint(problem));
  const uint64_t m = problem.d.rows, n = problem.d.cols;
  const uint64_t k = problem.desc.trans_a == CUBLAS_OP_N ? problem.a.cols : problem.a.rows;
  AddArgument(op, "m", m);
  AddArgument(op, "n", n);
  AddArgument(op, "k", k);
  AddScalar(op, "alpha", f.alpha);
  AddScalar(op, "beta", f.beta);
  AddArgument(op, "A", f.a);
  AddArgument(op, "B", f.b);
  AddArgument(op, "C", f.c);
  AddArgument(op, "D", f.d);
  AddArgument(op, "workspace", f.workspace);
  AddArgument(op, "workspaceSizeInBytes", f.workspace_bytes);
  if (problem.desc.bias != 0) AddArgument(op, "bias", f.bias);
  if (f.chosen) {
    op.algorithm = LtChoiceOf(f.algo, f.source);
  } else {
    AlgorithmChoice implicit;
    implicit.library = "cublasLt";
    implicit.name = "implicit heuristic (null algo)";
    implicit.source = ChoiceSource::kHeuristic;
    op.algorithm = implicit;
  }
}

bool Nondeterministic(const cublasLtMatmulAlgo_t& algo) {
  const auto slices = AlgoConfig<uint32_t>(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  const auto scheme = AlgoConfig<uint32_t>(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  return slices && scheme && OutOfPlaceSplitK(*slices, *scheme);
}

// The heuristic's first algo without an out-of-place split-K reduction that fits
// `workspace_bytes`, asked for through the real library with a preference of our own.
std::optional<cublasLtMatmulAlgo_t> DeterministicAlgo(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    size_t workspace_bytes) {
  const auto create = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulPreferenceCreate);
  const auto set = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulPreferenceSetAttribute);
  const auto destroy = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulPreferenceDestroy);
  const auto heuristic = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulAlgoGetHeuristic);
  if (create == nullptr || set == nullptr || destroy == nullptr || heuristic == nullptr) {
    return std::nullopt;
  }
  cublasLtMatmulPreference_t preference = nullptr;
  if (create(&preference) != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  const uint64_t max_workspace = workspace_bytes;
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_INPLACE;
  set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace));
  set(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes));
  constexpr int kAsked = 8;
  cublasLtMatmulHeuristicResult_t results[kAsked] = {};
  int returned = 0;
  const cublasStatus_t status =
      heuristic(handle, desc, a, b, c, d != nullptr ? d : c, preference, kAsked, results, &returned);
  destroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS && !Nondeterministic(results[i].algo)) {
      return results[i].algo;
    }
  }
  return std::nullopt;
}

}  // namespace
}  // namespace ndt::tracer

using ndt::tracer::Address;
using ndt::tracer::CublasState;
using ndt::tracer::Extent;
using ndt::tracer::GemmCall;
using ndt::tracer::kCublas;
using ndt::tracer::kCublasLt;
using ndt::tracer::PolicyMode;
using ndt::tracer::RealCall;
using ndt::tracer::RunLibraryHook;
using ndt::tracer::Session;

extern "C" {

// ---- cuBLAS handle setup --------------------------------------------------------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  const auto real = NDT_REAL_LIBRARY(kCublas, cublasCreate_v2);
  return RunLibraryHook(
      "cublasCreate_v2", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return real(handle); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        ndt::format::OpRecord op = session.BeginOp(ndt::format::OpKind::kOther,
                                                   "cublasCreate_v2", session.StreamId(0, false));
        const cublasStatus_t status = call.Run([&] { return real(handle); });
        if (status == CUBLAS_STATUS_SUCCESS && handle != nullptr) {
          op.args.push_back(ndt::tracer::UnsignedArgument("handle",
                                                          CublasState::Get().HandleId(*handle)));
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  const auto real = NDT_REAL_LIBRARY(kCublas, cublasDestroy_v2);
  return RunLibraryHook(
      "cublasDestroy_v2", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return real(handle); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        ndt::format::OpRecord op =
            ndt::tracer::BeginHandleOp(session, "cublasDestroy_v2", handle, nullptr);
        const cublasStatus_t status = call.Run([&] { return real(handle); });
        const std::vector<CUdeviceptr> released = CublasState::Get().Forget(handle);
        using FreeFn = CUresult (*)(CUdeviceptr);
        const auto free = reinterpret_cast<FreeFn>(
            ndt::tracer::RealDriverFunction(ndt::tracer::Hook::k_cuMemFree_v2));
        if (status == CUBLAS_STATUS_SUCCESS && free != nullptr) {
          for (CUdeviceptr workspace : released) free(workspace);
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY(kCublas, cublasSetStream_v2);
  return RunLibraryHook(
      "cublasSetStream_v2", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return real(handle, stream); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        ndt::tracer::RawOp& op =
            ndt::tracer::BeginRawHandleOp(session, "cublasSetStream_v2", handle, stream);
        op.AddUnsigned("stream", op.stream_id);
        const cublasStatus_t status = call.Run([&] { return real(handle, stream); });
        // As the real library: a new stream goes back to the default workspace pool.
        if (status == CUBLAS_STATUS_SUCCESS) CublasState::Get().SetWorkspaceBytes(handle, 0);
        if (status == CUBLAS_STATUS_SUCCESS && session.policy().mode == PolicyMode::kEnforce) {
          ndt::tracer::GiveWorkspace(session, op.sequence, handle, stream, op.stream_id);
        }
        session.EndRawOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  const auto real = NDT_REAL_LIBRARY(kCublas, cublasSetWorkspace_v2);
  return RunLibraryHook(
      "cublasSetWorkspace_v2", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return real(handle, workspace, bytes); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        ndt::tracer::RawOp& op = ndt::tracer::BeginRawHandleOp(
            session, "cublasSetWorkspace_v2", handle, ndt::tracer::HandleStream(handle));
        op.AddPointer("workspace", session.Canonical(Address(workspace)));
        op.AddUnsigned("bytes", bytes);
        const cublasStatus_t status = call.Run([&] { return real(handle, workspace, bytes); });
        if (status == CUBLAS_STATUS_SUCCESS) CublasState::Get().SetWorkspaceBytes(handle, bytes);
        session.EndRawOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  const auto real = NDT_REAL_LIBRARY(kCublas, cublasSetAtomicsMode);
  return RunLibraryHook(
      "cublasSetAtomicsMode", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return real(handle, mode); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        ndt::format::OpRecord op = ndt::tracer::BeginHandleOp(
            session, "cublasSetAtomicsMode", handle, ndt::tracer::HandleStream(handle));
        op.args.push_back(ndt::tracer::TextArgument(
            "mode", mode == CUBLAS_ATOMICS_ALLOWED ? "CUBLAS_ATOMICS_ALLOWED"
                                                   : "CUBLAS_ATOMICS_NOT_ALLOWED"));
        cublasAtomicsMode_t applied = mode;
        if (mode == CUBLAS_ATOMICS_ALLOWED && session.policy().mode == PolicyMode::kEnforce) {
          applied = CUBLAS_ATOMICS_NOT_ALLOWED;
          session.Decide({op.sequence, "cublas",
                          "forced cublasSetAtomicsMode(CUBLAS_ATOMICS_ALLOWED) to "
                          "CUBLAS_ATOMICS_NOT_ALLOWED",
                          std::nullopt, std::nullopt, true});
        }
        const cublasStatus_t status = call.Run([&] { return real(handle, applied); });
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  const auto real = NDT_REAL_LIBRARY(kCublas, cublasSetMathMode);
  return RunLibraryHook(
      "cublasSetMathMode", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return real(handle, mode); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        ndt::tracer::RawOp& op = ndt::tracer::BeginRawHandleOp(session, "cublasSetMathMode", handle,
                                                               ndt::tracer::HandleStream(handle));
        op.AddSigned("mode", static_cast<int>(mode));
        const cublasStatus_t status = call.Run([&] { return real(handle, mode); });
        session.EndRawOp(op, static_cast<int32_t>(status));
        return status;
      });
}

// ---- cuBLAS GEMMs -------------------------------------------------------------------------

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  return ndt::tracer::HookTypedGemm("cublasSgemm_v2", NDT_REAL_LIBRARY(kCublas, cublasSgemm_v2),
                                    handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                    ldc);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const double* alpha,
                              const double* a, int lda, const double* b, int ldb,
                              const double* beta, double* c, int ldc) {
  return ndt::tracer::HookTypedGemm("cublasDgemm_v2", NDT_REAL_LIBRARY(kCublas, cublasDgemm_v2),
                                    handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                    ldc);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute_type,
                            cublasGemmAlgo_t algo) {
  // cublas_api.h overloads cublasGemmEx for C++ (a cudaDataType computeType): name the
  // exported one by its type.
  using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void*, const void*, cudaDataType, int,
                                      const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  static std::atomic<void*> slot{nullptr};
  if (slot.load(std::memory_order_acquire) == nullptr) {
    slot.store(ndt::tracer::RealLibraryFunction(kCublas, "cublasGemmEx"),
               std::memory_order_release);
  }
  const auto real = reinterpret_cast<GemmExFn>(slot.load(std::memory_order_acquire));
  auto call_real = [&](int chosen) {
    return real(handle, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c,
                c_type, ldc, compute_type, static_cast<cublasGemmAlgo_t>(chosen));
  };
  return RunLibraryHook(
      "cublasGemmEx", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return call_real(algo); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const GemmCall g{"cublasGemmEx", handle, transa, transb, m, n, k, alpha, a, a_type, lda,
                         b, b_type, ldb, beta, c, c_type, ldc, static_cast<int>(compute_type),
                         static_cast<int>(algo), true, 0, 0, 0, 0};
        return ndt::tracer::RecordGemm(session, call, g, call_real);
      });
}

// ---- cuBLAS batched GEMMs, level 1 and 2 ------------------------------------------------

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* a, int lda,
                                         long long int strideA, const float* b, int ldb,
                                         long long int strideB, const float* beta, float* c,
                                         int ldc, long long int strideC, int batchCount) {
  return ndt::tracer::HookTypedGemmStridedBatched(
      "cublasSgemmStridedBatched", NDT_REAL_LIBRARY(kCublas, cublasSgemmStridedBatched), handle,
      transa, transb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC,
      batchCount);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const double* alpha, const double* a, int lda,
                                         long long int strideA, const double* b, int ldb,
                                         long long int strideB, const double* beta, double* c,
                                         int ldc, long long int strideC, int batchCount) {
  return ndt::tracer::HookTypedGemmStridedBatched(
      "cublasDgemmStridedBatched", NDT_REAL_LIBRARY(kCublas, cublasDgemmStridedBatched), handle,
      transa, transb, m, n, k, alpha, a, lda, strideA, b, ldb, strideB, beta, c, ldc, strideC,
      batchCount);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  // Overloaded in C++ like cublasGemmEx: name the exported one by its type.
  using Fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                int, const void*, const void*, cudaDataType, int, long long int,
                                const void*, cudaDataType, int, long long int, const void*, void*,
                                cudaDataType, int, long long int, int, cublasComputeType_t,
                                cublasGemmAlgo_t);
  static std::atomic<void*> slot{nullptr};
  if (slot.load(std::memory_order_acquire) == nullptr) {
    slot.store(ndt::tracer::RealLibraryFunction(kCublas, "cublasGemmStridedBatchedEx"),
               std::memory_order_release);
  }
  const auto real = reinterpret_cast<Fn>(slot.load(std::memory_order_acquire));
  auto call_real = [&](int chosen) {
    return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType,
                static_cast<cublasGemmAlgo_t>(chosen));
  };
  return RunLibraryHook(
      "cublasGemmStridedBatchedEx", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return call_real(algo); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        const GemmCall g{"cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A,
                         Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                         static_cast<int>(computeType), static_cast<int>(algo), true, batchCount,
                         strideA, strideB, strideC};
        return ndt::tracer::RecordGemm(session, call, g, call_real);
      });
}

cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const float* alpha, const float* const Aarray[], int lda,
                                  const float* const Barray[], int ldb, const float* beta,
                                  float* const Carray[], int ldc, int batchCount) {
  return ndt::tracer::HookGemmBatched(
      "cublasSgemmBatched", NDT_REAL_LIBRARY(kCublas, cublasSgemmBatched), handle, transa, transb,
      m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray, ldc, batchCount);
}

cublasStatus_t cublasDgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const double* alpha, const double* const Aarray[], int lda,
                                  const double* const Barray[], int ldb, const double* beta,
                                  double* const Carray[], int ldc, int batchCount) {
  return ndt::tracer::HookGemmBatched(
      "cublasDgemmBatched", NDT_REAL_LIBRARY(kCublas, cublasDgemmBatched), handle, transa, transb,
      m, n, k, alpha, Aarray, lda, Barray, ldb, beta, Carray, ldc, batchCount);
}

cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                              const float* alpha, const float* a, int lda, const float* x,
                              int incx, const float* beta, float* y, int incy) {
  return ndt::tracer::HookGemv("cublasSgemv_v2", NDT_REAL_LIBRARY(kCublas, cublasSgemv_v2), handle,
                               trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

cublasStatus_t cublasDgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                              const double* alpha, const double* a, int lda, const double* x,
                              int incx, const double* beta, double* y, int incy) {
  return ndt::tracer::HookGemv("cublasDgemv_v2", NDT_REAL_LIBRARY(kCublas, cublasDgemv_v2), handle,
                               trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

cublasStatus_t cublasSaxpy_v2(cublasHandle_t handle, int n, const float* alpha, const float* x,
                              int incx, float* y, int incy) {
  return ndt::tracer::HookAxpy("cublasSaxpy_v2", NDT_REAL_LIBRARY(kCublas, cublasSaxpy_v2), handle,
                               n, alpha, x, incx, y, incy);
}

cublasStatus_t cublasDaxpy_v2(cublasHandle_t handle, int n, const double* alpha, const double* x,
                              int incx, double* y, int incy) {
  return ndt::tracer::HookAxpy("cublasDaxpy_v2", NDT_REAL_LIBRARY(kCublas, cublasDaxpy_v2), handle,
                               n, alpha, x, incx, y, incy);
}

cublasStatus_t cublasSscal_v2(cublasHandle_t handle, int n, const float* alpha, float* x,
                              int incx) {
  return ndt::tracer::HookScal("cublasSscal_v2", NDT_REAL_LIBRARY(kCublas, cublasSscal_v2), handle,
                               n, alpha, x, incx);
}

cublasStatus_t cublasDscal_v2(cublasHandle_t handle, int n, const double* alpha, double* x,
                              int incx) {
  return ndt::tracer::HookScal("cublasDscal_v2", NDT_REAL_LIBRARY(kCublas, cublasDscal_v2), handle,
                               n, alpha, x, incx);
}

cublasStatus_t cublasSdot_v2(cublasHandle_t handle, int n, const float* x, int incx,
                             const float* y, int incy, float* result) {
  return ndt::tracer::HookDot("cublasSdot_v2", NDT_REAL_LIBRARY(kCublas, cublasSdot_v2), handle, n,
                              x, incx, y, incy, result);
}

cublasStatus_t cublasDdot_v2(cublasHandle_t handle, int n, const double* x, int incx,
                             const double* y, int incy, double* result) {
  return ndt::tracer::HookDot("cublasDdot_v2", NDT_REAL_LIBRARY(kCublas, cublasDdot_v2), handle, n,
                              x, incx, y, incy, result);
}

// Level 1 reductions, copies and swaps, and geam.
#define NDT_REDUCE_HOOK(name, T, R)                                                            \
  cublasStatus_t name(cublasHandle_t handle, int n, const T* x, int incx, R* result) {         \
    return ndt::tracer::HookReduce(#name, NDT_REAL_LIBRARY(kCublas, name), handle, n, x, incx, \
                                   result);                                                    \
  }
NDT_REDUCE_HOOK(cublasSnrm2_v2, float, float)
NDT_REDUCE_HOOK(cublasDnrm2_v2, double, double)
NDT_REDUCE_HOOK(cublasSasum_v2, float, float)
NDT_REDUCE_HOOK(cublasDasum_v2, double, double)
NDT_REDUCE_HOOK(cublasIsamax_v2, float, int)
NDT_REDUCE_HOOK(cublasIdamax_v2, double, int)
NDT_REDUCE_HOOK(cublasIsamin_v2, float, int)
NDT_REDUCE_HOOK(cublasIdamin_v2, double, int)
#undef NDT_REDUCE_HOOK

cublasStatus_t cublasScopy_v2(cublasHandle_t handle, int n, const float* x, int incx, float* y,
                              int incy) {
  return ndt::tracer::HookCopy("cublasScopy_v2", NDT_REAL_LIBRARY(kCublas, cublasScopy_v2), handle,
                               n, const_cast<float*>(x), incx, y, incy, false);
}

cublasStatus_t cublasDcopy_v2(cublasHandle_t handle, int n, const double* x, int incx, double* y,
                              int incy) {
  return ndt::tracer::HookCopy("cublasDcopy_v2", NDT_REAL_LIBRARY(kCublas, cublasDcopy_v2), handle,
                               n, const_cast<double*>(x), incx, y, incy, false);
}

cublasStatus_t cublasSswap_v2(cublasHandle_t handle, int n, float* x, int incx, float* y,
                              int incy) {
  return ndt::tracer::HookCopy("cublasSswap_v2", NDT_REAL_LIBRARY(kCublas, cublasSswap_v2), handle,
                               n, x, incx, y, incy, true);
}

cublasStatus_t cublasDswap_v2(cublasHandle_t handle, int n, double* x, int incx, double* y,
                              int incy) {
  return ndt::tracer::HookCopy("cublasDswap_v2", NDT_REAL_LIBRARY(kCublas, cublasDswap_v2), handle,
                               n, x, incx, y, incy, true);
}

cublasStatus_t cublasSgeam(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, const float* alpha,
                           const float* a, int lda, const float* beta, const float* b, int ldb,
                           float* c, int ldc) {
  return ndt::tracer::HookGeam("cublasSgeam", NDT_REAL_LIBRARY(kCublas, cublasSgeam), handle,
                               transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}

cublasStatus_t cublasDgeam(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, const double* alpha,
                           const double* a, int lda, const double* beta, const double* b, int ldb,
                           double* c, int ldc) {
  return ndt::tracer::HookGeam("cublasDgeam", NDT_REAL_LIBRARY(kCublas, cublasDgeam), handle,
                               transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc);
}

// ---- cuBLASLt -----------------------------------------------------------------------------

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  const auto real = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulAlgoGetHeuristic);
  auto call_real = [&](int count, cublasLtMatmulHeuristicResult_t* into) {
    return real(handle, desc, a_desc, b_desc, c_desc, d_desc, preference, count, into, returned);
  };
  return RunLibraryHook(
      "cublasLtMatmulAlgoGetHeuristic", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return call_real(requested, results); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        using namespace ndt::tracer;  // NOLINT(google-build-using-namespace)
        const LtProblem problem = ReadProblem(desc, a_desc, b_desc, c_desc, d_desc);
        ndt::format::OpRecord op = session.BeginOp(ndt::format::OpKind::kOther,
                                                   "cublasLtMatmulAlgoGetHeuristic",
                                                   session.StreamId(0, false));
        op.args.push_back(TextArgument("fingerprint", LtFingerprint(problem)));
        op.args.push_back(SignedArgument("requested", requested));
        const bool filter = session.policy().mode == PolicyMode::kEnforce && requested > 0 &&
                            results != nullptr && returned != nullptr;
        cublasStatus_t status;
        if (!filter) {
          status = call.Run([&] { return call_real(requested, results); });
        } else {
          // Ask for more, keep those without an out-of-place split-K reduction.
          const int asked = requested < 16 ? 16 : requested;
          std::vector<cublasLtMatmulHeuristicResult_t> all(static_cast<size_t>(asked));
          status = call.Run([&] { return call_real(asked, all.data()); });
          if (status == CUBLAS_STATUS_SUCCESS) {
            int kept = 0, dropped = 0;
            std::optional<ndt::format::AlgorithmChoice> first_dropped;
            for (int i = 0; i < *returned; ++i) {
              if (Nondeterministic(all[static_cast<size_t>(i)].algo)) {
                if (!first_dropped) {
                  first_dropped = LtChoice(all[static_cast<size_t>(i)].algo,
                                           ndt::format::ChoiceSource::kHeuristic);
                }
                ++dropped;
              } else if (kept < requested) {
                results[kept++] = all[static_cast<size_t>(i)];
              }
            }
            *returned = kept;
            if (dropped > 0) {
              session.Decide({op.sequence, "cublasLt",
                              "dropped " + std::to_string(dropped) +
                                  " out-of-place split-K algos from "
                                  "cublasLtMatmulAlgoGetHeuristic results",
                              first_dropped, std::nullopt, true});
            }
            if (kept == 0) status = CUBLAS_STATUS_NOT_SUPPORTED;
          }
        }
        if (status == CUBLAS_STATUS_SUCCESS && returned != nullptr && results != nullptr) {
          op.args.push_back(SignedArgument("returned", *returned));
          for (int i = 0; i < *returned; ++i) {
            const cublasLtMatmulHeuristicResult_t& result = results[i];
            const std::string name = "algo" + std::to_string(i);
            ndt::format::Argument bytes;
            bytes.name = name;
            bytes.value = ndt::format::Argument::Bytes{
                std::string(reinterpret_cast<const char*>(&result.algo), sizeof(result.algo))};
            op.args.push_back(std::move(bytes));
            op.args.push_back(
                TextArgument(name + " config", LtChoice(result.algo, ndt::format::ChoiceSource::kHeuristic).name));
            op.args.push_back(UnsignedArgument(name + " workspace", result.workspaceSize));
          }
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* a, cublasLtMatrixLayout_t a_desc,
                              const void* b, cublasLtMatrixLayout_t b_desc, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const auto real = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmul);
  auto call_real = [&](const cublasLtMatmulAlgo_t* chosen) {
    return real(handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, chosen,
                workspace, workspace_bytes, stream);
  };
  return RunLibraryHook(
      "cublasLtMatmul", real != nullptr, CUBLAS_STATUS_NOT_INITIALIZED,
      [&] { return call_real(algo); },
      [&](Session& session, RealCall<cublasStatus_t>& call) {
        using namespace ndt::tracer;  // NOLINT(google-build-using-namespace)
        using ndt::format::ChoiceSource;
        const LtProblem problem = ReadProblem(desc, a_desc, b_desc, c_desc, d_desc);
        const uint32_t stream_id = session.StreamId(Address(stream), false);
        // Metadata only (no digest, nothing captured): the record is built off this thread.
        const bool raw = LibraryOpOffThread(session);
        RawOp* raw_op = raw ? &session.BeginRawOp(ndt::format::OpKind::kCublasLtMatmul,
                                                  "cublasLtMatmul", stream_id)
                            : nullptr;
        ndt::format::OpRecord op;
        if (!raw) {
          op = session.BeginOp(ndt::format::OpKind::kCublasLtMatmul, "cublasLtMatmul", stream_id);
        }
        const uint64_t sequence = raw ? raw_op->sequence : op.sequence;
        std::optional<cublasLtMatmulAlgo_t> chosen;
        if (algo != nullptr) chosen = *algo;
        ChoiceSource source = ChoiceSource::kRequested;
        std::optional<ndt::format::AlgorithmChoice> requested;
        if (chosen) requested = LtChoice(*chosen, source);

        const PolicyMode mode = session.policy().mode;
        if (mode == PolicyMode::kEnforce && (!chosen || Nondeterministic(*chosen))) {
          std::optional<cublasLtMatmulAlgo_t> replacement = DeterministicAlgo(
              handle, desc, a_desc, b_desc, c_desc, d_desc, workspace_bytes);
          const std::string what = chosen ? "the out-of-place split-K algo passed to cublasLtMatmul"
                                          : "cublasLtMatmul's implicit heuristic choice (null algo)";
          if (replacement) {
            chosen = replacement;
            source = ChoiceSource::kEnforced;
            session.Decide({sequence, "cublasLt",
                            "replaced " + what + " by the heuristic's first deterministic algo",
                            requested, LtChoice(*chosen, source), true});
          } else {
            session.Decide({sequence, "cublasLt",
                            "cannot replace " + what + ": no deterministic algo within " +
                                std::to_string(workspace_bytes) + " bytes of workspace",
                            requested, std::nullopt, false});
          }
        } else if (mode == PolicyMode::kPin && session.pins() != nullptr) {
          const std::string fingerprint = LtFingerprint(problem);
          const ndt::format::AlgorithmChoice* recorded = session.pins()->Choice(fingerprint);
          PolicyDecisionRecord decision{sequence, "cublasLt", "", requested, std::nullopt, false};
          if (recorded == nullptr || recorded->library != "cublasLt" ||
              recorded->opaque.size() != sizeof(cublasLtMatmulAlgo_t)) {
            decision.action =
                "cannot pin cublasLtMatmul: no 64-byte algo recorded for \"" + fingerprint + "\"";
          } else if (std::string why = session.pins()->Mismatch(session.header(), "cublasLt");
                     !why.empty()) {
            decision.action = "cannot pin cublasLtMatmul to the recorded " + recorded->name +
                              ": " + why;
          } else {
            cublasLtMatmulAlgo_t pinned;
            std::memcpy(&pinned, recorded->opaque.data(), sizeof(pinned));
            cublasLtMatmulHeuristicResult_t check{};
            const auto algo_check = NDT_REAL_LIBRARY(kCublasLt, cublasLtMatmulAlgoCheck);
            const cublasStatus_t checked =
                algo_check == nullptr
                    ? CUBLAS_STATUS_NOT_SUPPORTED
                    : algo_check(handle, desc, a_desc, b_desc, c_desc,
                                 d_desc != nullptr ? d_desc : c_desc, &pinned, &check);
            decision.to_choice = LtChoice(pinned, ChoiceSource::kPinned);
            if (checked != CUBLAS_STATUS_SUCCESS) {
              decision.action = "cannot pin cublasLtMatmul to the recorded " + recorded->name +
                                ": cublasLtMatmulAlgoCheck returned " +
                                std::to_string(static_cast<int>(checked));
            } else if (check.workspaceSize > workspace_bytes) {
              decision.action = "cannot pin cublasLtMatmul to the recorded " + recorded->name +
                                ": workspace too small (it needs " +
                                std::to_string(check.workspaceSize) + " bytes, the program gives " +
                                std::to_string(workspace_bytes) + ")";
            } else if (!chosen || std::memcmp(&*chosen, &pinned, sizeof(pinned)) != 0) {
              chosen = pinned;
              source = ChoiceSource::kPinned;
              decision.action = "pinned cublasLtMatmul to the recorded " + recorded->name;
              decision.applied = true;
            }
          }
          if (!decision.action.empty()) session.Decide(decision);
        }

        const bool host_scalars = problem.desc.pointer_mode == CUBLASLT_POINTER_MODE_HOST;
        const LtMatmulFacts facts{problem,
                                  ReadScalar(alpha, problem.desc.scale, host_scalars),
                                  ReadScalar(beta, problem.desc.scale, host_scalars),
                                  session.Canonical(Address(a)),
                                  session.Canonical(Address(b)),
                                  session.Canonical(Address(c)),
                                  session.Canonical(Address(d)),
                                  session.Canonical(Address(workspace)),
                                  session.Canonical(problem.desc.bias),
                                  workspace_bytes,
                                  chosen.has_value(),
                                  chosen ? ReadLtAlgo(*chosen) : LtAlgoFacts{},
                                  source};
        if (raw) {
          raw_op->SetFacts<&AddLtMatmulArguments>(facts);
          const cublasStatus_t status =
              call.Run([&] { return call_real(chosen ? &*chosen : nullptr); });
          session.EndRawOp(*raw_op, static_cast<int32_t>(status));
          return status;
        }
        AddLtMatmulArguments(facts, op);

        std::vector<Extent> inputs = {
            {"A", Address(a), LayoutBytes(problem.a), DTypeOf(static_cast<int>(problem.a.type))},
            {"B", Address(b), LayoutBytes(problem.b), DTypeOf(static_cast<int>(problem.b.type))},
        };
        const std::optional<double> beta_value =
            host_scalars ? HostScalar(beta, problem.desc.scale) : std::nullopt;
        if (!beta_value || *beta_value != 0) {
          inputs.push_back({"C", Address(c), LayoutBytes(problem.c),
                            DTypeOf(static_cast<int>(problem.c.type))});
        }
        const std::optional<LtBias> bias = BiasOf(problem, problem.desc.bias);
        if (bias && bias->input) inputs.push_back(bias->extent);
        AddDeviceScalars(problem.desc.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE,
                         problem.desc.scale, {{"alpha", alpha}, {"beta", beta}}, &inputs);
        op.inputs = DigestExtents(session, Address(stream), inputs);
        const bool capture = CaptureWanted(op);
        if (capture) {
          AddLtProblemArguments(problem, &op.args);
          CaptureExtents(session, Address(stream), inputs, "in", &op);
        }
        const cublasStatus_t status =
            call.Run([&] { return call_real(chosen ? &*chosen : nullptr); });
        if (status == CUBLAS_STATUS_SUCCESS) {
          std::vector<Extent> outputs = {
              {"D", Address(d), LayoutBytes(problem.d), DTypeOf(static_cast<int>(problem.d.type))}};
          if (bias && !bias->input) outputs.push_back(bias->extent);
          op.outputs = DigestExtents(session, Address(stream), outputs);
          if (capture) CaptureExtents(session, Address(stream), outputs, "out", &op);
        }
        session.EndOp(op, static_cast<int32_t>(status));
        return status;
      });
}

}  // extern "C"
