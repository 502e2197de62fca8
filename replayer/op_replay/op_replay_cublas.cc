// Standalone replay of cuBLAS GEMMs (cublasSgemm_v2, cublasGemmEx) and cuBLASLt matmuls
// (cublasLtMatmul): the handle, descriptors and layouts are rebuilt from the op's recorded
// arguments, its captured matrices uploaded, and the recorded algo run K times through the real
// libcublas.so.13 / libcublasLt.so.13; with --try-deterministic, the alternatives the tracer's
// deterministic policy accepts (tracer/hooks_cublas.cc) are run too:
//  - cuBLAS: atomics not allowed and not CUBLAS_GEMM_AUTOTUNE (a choice made by timing) is
//    deterministic; the alternatives are CUBLAS_GEMM_DEFAULT and the explicit algos (ALGO0..23,
//    and the tensor-op ones when the recorded algo was one), each with atomics not allowed;
//  - cuBLASLt: an algo without an out-of-place split-K reduction (SPLITK_NUM > 1 with reduction
//    scheme COMPUTE_TYPE or OUTPUT_TYPE, whose partial sums meet in any order) is deterministic;
//    the alternatives are the heuristic's such algos within the recorded workspace.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "libfacts/cublas_scalars.h"
#include "replayer/op_replay/op_replay_internal.h"

namespace ndt::replay::internal {
namespace {

// ---- the libraries --------------------------------------------------------------------------

// cublas_api.h overloads cublasGemmEx for C++; the exported one takes a cublasComputeType_t.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);

struct Cublas {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetMathMode) set_math = nullptr;
  decltype(&::cublasSetAtomicsMode) set_atomics = nullptr;
  decltype(&::cublasSetPointerMode_v2) set_pointer_mode = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&::cublasSgemm_v2) sgemm = nullptr;
  decltype(&::cublasDgemm_v2) dgemm = nullptr;
  GemmExFn gemm_ex = nullptr;
};

// clang-format off
#define NDT_CUBLASLT_FUNCTIONS(X)                                                                \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)  \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                          \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                     \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulAlgoConfigGetAttribute) X(cublasLtMatmul)
// clang-format on

struct CublasLt {
#define NDT_CUBLASLT_SLOT(name) decltype(&::name) name = nullptr;
  NDT_CUBLASLT_FUNCTIONS(NDT_CUBLASLT_SLOT)
#undef NDT_CUBLASLT_SLOT
};

StatusOr<const Cublas*> LoadCublas() {
  return LoadOnce<Cublas>("libcublas.so.13", [](void* library, Cublas* c, std::string* missing) {
    Resolve(library, "cublasCreate_v2", &c->create, missing);
    Resolve(library, "cublasDestroy_v2", &c->destroy, missing);
    Resolve(library, "cublasSetMathMode", &c->set_math, missing);
    Resolve(library, "cublasSetAtomicsMode", &c->set_atomics, missing);
    Resolve(library, "cublasSetPointerMode_v2", &c->set_pointer_mode, missing);
    Resolve(library, "cublasSetWorkspace_v2", &c->set_workspace, missing);
    Resolve(library, "cublasSgemm_v2", &c->sgemm, missing);
    Resolve(library, "cublasDgemm_v2", &c->dgemm, missing);
    Resolve(library, "cublasGemmEx", &c->gemm_ex, missing);
  });
}

StatusOr<const CublasLt*> LoadCublasLt() {
  return LoadOnce<CublasLt>("libcublasLt.so.13",
                            [](void* library, CublasLt* lt, std::string* missing) {
#define NDT_CUBLASLT_RESOLVE(name) Resolve(library, #name, &lt->name, missing);
                              NDT_CUBLASLT_FUNCTIONS(NDT_CUBLASLT_RESOLVE)
#undef NDT_CUBLASLT_RESOLVE
                            });
}

std::string StatusText(const char* api, cublasStatus_t status) {
  static const std::map<cublasStatus_t, const char*> kNames = {
      {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED"},
      {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED"},
      {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE"},
      {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH"},
      {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR"},
      {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED"},
      {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR"},
      {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED"},
      {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR"}};
  const auto found = kNames.find(status);
  return found != kNames.end() ? fmt::format("{}: {}", api, found->second)
                               : fmt::format("{}: cuBLAS status {}", api, static_cast<int>(status));
}

// ---- the recorded arguments -----------------------------------------------------------------

// Reads the op's arguments by name, collecting the names of those absent or of another type.
class Arguments {
 public:
  explicit Arguments(const format::OpRecord& op) : op_(op) {}

  template <typename T>
  T Get(const char* name, T fallback = T{}) {
    const format::Argument* argument = FindArgument(op_, name);
    const T* value = argument == nullptr ? nullptr : std::get_if<T>(&argument->value);
    if (value == nullptr) {
      missing_ += fmt::format("{}{}", missing_.empty() ? "" : ", ", name);
      return fallback;
    }
    return *value;
  }
  // A dimension: a signed or unsigned argument in [0, 2^31).
  int64_t Dimension(const char* name) {
    const format::Argument* argument = FindArgument(op_, name);
    int64_t value = -1;
    if (argument != nullptr) {
      if (const auto* s = std::get_if<int64_t>(&argument->value)) value = *s;
      if (const auto* u = std::get_if<uint64_t>(&argument->value)) {
        value = *u <= INT32_MAX ? static_cast<int64_t>(*u) : -1;
      }
    }
    if (value < 0 || value > INT32_MAX) {
      missing_ += fmt::format("{}{}", missing_.empty() ? "" : ", ", name);
      return 0;
    }
    return value;
  }
  void Missing(const std::string& what) {
    missing_ += fmt::format("{}{}", missing_.empty() ? "" : ", ", what);
  }
  // Fails naming every argument that was absent or unusable.
  Status Check(const char* what) const {
    if (missing_.empty()) return Status::Ok();
    return Status::Error(fmt::format("op {} lacks what is needed to rebuild its {}: {}",
                                     op_.sequence, what, missing_));
  }

 private:
  const format::OpRecord& op_;
  std::string missing_;
};

// The CUDA data types replay knows, by the DType the tracer records each as.
constexpr std::pair<format::DType, cudaDataType> kCudaTypes[] = {
    {format::DType::kF64, CUDA_R_64F},        {format::DType::kF32, CUDA_R_32F},
    {format::DType::kF16, CUDA_R_16F},        {format::DType::kBF16, CUDA_R_16BF},
    {format::DType::kF8E4M3, CUDA_R_8F_E4M3}, {format::DType::kF8E5M2, CUDA_R_8F_E5M2},
    {format::DType::kI32, CUDA_R_32I},        {format::DType::kI8, CUDA_R_8I},
    {format::DType::kU8, CUDA_R_8U}};

// The cudaDataType a type name of the tracer's stands for ("f32", ...).
std::optional<cudaDataType> DataType(const std::string& text) {
  const std::optional<format::DType> dtype = format::ParseDType(text);
  for (const auto& [known, type] : kCudaTypes) {
    if (dtype == known) return type;
  }
  return std::nullopt;
}

uint64_t ElementBytes(cudaDataType type) {
  for (const auto& [known, cuda] : kCudaTypes) {
    if (cuda == type) return format::DTypeBytes(known);
  }
  return 0;
}

const char* DtypeText(cudaDataType type) {
  return type == CUDA_R_32F ? "f32" : type == CUDA_R_64F ? "f64" : "";
}

// Buffers larger than this are refused: no capture holds more (the reader's limit on a blob).
constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 32;

// The bytes a column-major rows x cols matrix with leading dimension ld spans; UINT64_MAX when
// that does not fit 64 bits.
uint64_t MatrixBytes(uint64_t rows, uint64_t cols, uint64_t ld, uint64_t element) {
  if (rows == 0 || cols == 0 || element == 0) return 0;
  uint64_t span = 0, bytes = 0;
  if (__builtin_mul_overflow(cols - 1, ld, &span) || __builtin_add_overflow(span, rows, &span) ||
      __builtin_mul_overflow(span, element, &bytes)) {
    return UINT64_MAX;
  }
  return bytes;
}

// Fails when a buffer of the op is larger than any capture can be.
Status CheckSizes(const format::OpRecord& op, std::initializer_list<uint64_t> sizes) {
  for (const uint64_t bytes : sizes) {
    if (bytes > kMaxBufferBytes) {
      return Status::Error(fmt::format(
          "op {}: its arguments describe a buffer of {} bytes, more than a capture holds",
          op.sequence, bytes));
    }
  }
  return Status::Ok();
}

// A host scalar of `scale` type (f32, f64, i32) holding `value`, as the library reads it.
class Scalar {
 public:
  static std::optional<Scalar> Of(double value, int scale) {
    Scalar s;
    if (scale == CUDA_R_32F) {
      const float f = static_cast<float>(value);
      std::memcpy(s.bytes_, &f, sizeof(f));
    } else if (scale == CUDA_R_64F) {
      std::memcpy(s.bytes_, &value, sizeof(value));
    } else if (scale == CUDA_R_32I) {
      const auto i = static_cast<int32_t>(value);
      std::memcpy(s.bytes_, &i, sizeof(i));
    } else {
      return std::nullopt;
    }
    return s;
  }
  const void* data() const { return bytes_; }

 private:
  alignas(8) unsigned char bytes_[8] = {};
};

// The recorded alpha and beta: host values the tracer could read.
Status ReadScalars(const format::OpRecord& op, int scale, std::optional<Scalar>* alpha,
                   std::optional<Scalar>* beta, double* beta_value) {
  const format::Argument* a = FindArgument(op, "alpha");
  const format::Argument* b = FindArgument(op, "beta");
  const double* a_value = a == nullptr ? nullptr : std::get_if<double>(&a->value);
  const double* b_value = b == nullptr ? nullptr : std::get_if<double>(&b->value);
  if (a_value == nullptr || b_value == nullptr) {
    return Status::Error(fmt::format(
        "op {}: its alpha and beta were not recorded as host values (device pointer mode, or a "
        "scale type the tracer does not read): standalone replay needs them",
        op.sequence));
  }
  *alpha = Scalar::Of(*a_value, scale);
  *beta = Scalar::Of(*b_value, scale);
  if (!*alpha || !*beta) {
    return Status::Error(fmt::format(
        "op {}: scale type {} is not replayed yet (f32, f64 and i32 are)", op.sequence, scale));
  }
  *beta_value = *b_value;
  return Status::Ok();
}

// Uploads each captured buffer of `roles` ("in", the ones the call reads), failing when a
// needed one was not captured; `zeros` lists the roles whose bytes start as zeros instead (an
// output the call overwrites).
Status ReadInputs(format::TraceReader& reader, const format::OpRecord& op,
                  const std::vector<std::pair<std::string, uint64_t>>& roles,
                  const std::vector<bool>& needed, ReplayBuffers* buffers) {
  buffers->buffers.resize(roles.size());
  for (size_t i = 0; i < roles.size(); ++i) {
    const auto& [role, bytes] = roles[i];
    if (!needed[i]) {
      buffers->buffers[i].initial.assign(bytes, '\0');
      continue;
    }
    StatusOr<std::optional<std::string>> input = ReadCaptured(reader, op, "in", role, bytes);
    if (!input.ok()) return input.status();
    if (!*input) {
      return Status::Error(
          fmt::format("op {} was captured without its input {}", op.sequence, role));
    }
    buffers->buffers[i].initial = std::move(**input);
  }
  return Status::Ok();
}

// ---- cuBLAS GEMMs ---------------------------------------------------------------------------

std::string GemmAlgoName(int64_t algo) {
  if (algo == CUBLAS_GEMM_DEFAULT) return "CUBLAS_GEMM_DEFAULT";
  if (algo == CUBLAS_GEMM_DEFAULT_TENSOR_OP) return "CUBLAS_GEMM_DEFAULT_TENSOR_OP";
  if (algo == CUBLAS_GEMM_AUTOTUNE) return "CUBLAS_GEMM_AUTOTUNE";
  if (algo >= CUBLAS_GEMM_ALGO0_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP) {
    return fmt::format("CUBLAS_GEMM_ALGO{}_TENSOR_OP", algo - CUBLAS_GEMM_ALGO0_TENSOR_OP);
  }
  return fmt::format("CUBLAS_GEMM_ALGO{}", algo);
}

bool TensorOpAlgo(int64_t algo) {
  return algo == CUBLAS_GEMM_DEFAULT_TENSOR_OP ||
         (algo >= CUBLAS_GEMM_ALGO0_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

cublasOperation_t Operation(const std::string& text) {
  return text == "T" ? CUBLAS_OP_T : text == "C" ? CUBLAS_OP_C : CUBLAS_OP_N;
}

// A recorded GEMM, rebuilt from the op's arguments.
struct Gemm {
  enum class Api : uint8_t { kSgemm, kDgemm, kGemmEx };
  Api api = Api::kGemmEx;  // the function recorded
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  cudaDataType a_type = CUDA_R_32F, b_type = CUDA_R_32F, c_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  std::optional<Scalar> alpha, beta;
  double beta_value = 0;
  int64_t algo = CUBLAS_GEMM_DEFAULT;  // the algo that ran
  bool atomics = false;
  int math = CUBLAS_DEFAULT_MATH;
  uint64_t workspace_bytes = 0;   // 0: the library's default workspace
  uint64_t sizes[3] = {0, 0, 0};  // A, B, C
};

StatusOr<Gemm> DescribeGemm(const format::OpRecord& op) {
  Gemm g;
  g.api = op.name == "cublasSgemm_v2"   ? Gemm::Api::kSgemm
          : op.name == "cublasDgemm_v2" ? Gemm::Api::kDgemm
                                        : Gemm::Api::kGemmEx;
  Arguments args(op);
  g.m = static_cast<int>(args.Dimension("m"));
  g.n = static_cast<int>(args.Dimension("n"));
  g.k = static_cast<int>(args.Dimension("k"));
  g.lda = static_cast<int>(args.Dimension("lda"));
  g.ldb = static_cast<int>(args.Dimension("ldb"));
  g.ldc = static_cast<int>(args.Dimension("ldc"));
  g.trans_a = Operation(args.Get<std::string>("transa"));
  g.trans_b = Operation(args.Get<std::string>("transb"));
  cudaDataType* types[3] = {&g.a_type, &g.b_type, &g.c_type};
  const char* type_names[3] = {"Atype", "Btype", "Ctype"};
  for (int i = 0; i < 3; ++i) {
    const std::string text = args.Get<std::string>(type_names[i]);
    if (const std::optional<cudaDataType> type = DataType(text); type && ElementBytes(*type)) {
      *types[i] = *type;
    } else if (!text.empty()) {
      args.Missing(fmt::format("{} (type '{}' is not replayed)", type_names[i], text));
    }
  }
  // cublasSgemm_v2 and cublasDgemm_v2 take no compute type: through cublasGemmEx (another
  // algo) they compute in their data's precision.
  int compute = -1;
  if (g.api == Gemm::Api::kGemmEx) {
    compute = static_cast<int>(args.Get<int64_t>("computeType"));
    g.compute = static_cast<cublasComputeType_t>(compute);
  } else if (g.api == Gemm::Api::kDgemm) {
    g.compute = CUBLAS_COMPUTE_64F;
  }
  g.atomics = args.Get<std::string>("atomics") == "allowed";
  g.math = static_cast<int>(args.Get<int64_t>("mathMode"));
  g.workspace_bytes = args.Get<uint64_t>("workspaceBytes");
  if (!op.algorithm) args.Missing("algorithm");
  if (Status status = args.Check("GEMM"); !status.ok()) return status;
  g.algo = op.algorithm->id;
  const int scale_type = libfacts::ScaleTypeOfCompute(compute, g.c_type);
  if (Status status = ReadScalars(op, scale_type, &g.alpha, &g.beta, &g.beta_value);
      !status.ok()) {
    return status;
  }
  const bool ta = g.trans_a != CUBLAS_OP_N, tb = g.trans_b != CUBLAS_OP_N;
  g.sizes[0] = MatrixBytes(ta ? g.k : g.m, ta ? g.m : g.k, g.lda, ElementBytes(g.a_type));
  g.sizes[1] = MatrixBytes(tb ? g.n : g.k, tb ? g.k : g.n, g.ldb, ElementBytes(g.b_type));
  g.sizes[2] = MatrixBytes(g.m, g.n, g.ldc, ElementBytes(g.c_type));
  if (g.sizes[2] == 0) {
    return Status::Error(
        fmt::format("op {} computes nothing (m = {}, n = {})", op.sequence, g.m, g.n));
  }
  if (Status status = CheckSizes(op, {g.sizes[0], g.sizes[1], g.sizes[2]}); !status.ok()) {
    return status;
  }
  return g;
}

// A cuBLAS handle set up as the recorded one was, destroyed with it.
class GemmHandle {
 public:
  explicit GemmHandle(const Cublas& cublas) : cublas_(cublas) {}
  GemmHandle(const GemmHandle&) = delete;
  GemmHandle& operator=(const GemmHandle&) = delete;
  ~GemmHandle() {
    if (handle_ != nullptr) cublas_.destroy(handle_);
  }

  // nullopt when set up, else why not.
  std::optional<std::string> Setup(const Gemm& g, bool atomics, void* workspace) {
    cublasStatus_t status = cublas_.create(&handle_);
    if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasCreate_v2", status);
    status = cublas_.set_math(handle_, static_cast<cublasMath_t>(g.math));
    if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasSetMathMode", status);
    status =
        cublas_.set_atomics(handle_, atomics ? CUBLAS_ATOMICS_ALLOWED : CUBLAS_ATOMICS_NOT_ALLOWED);
    if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasSetAtomicsMode", status);
    status = cublas_.set_pointer_mode(handle_, CUBLAS_POINTER_MODE_HOST);
    if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasSetPointerMode_v2", status);
    if (g.workspace_bytes > 0) {
      status = cublas_.set_workspace(handle_, workspace, g.workspace_bytes);
      if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasSetWorkspace_v2", status);
    }
    return std::nullopt;
  }

  // One GEMM on buffers A, B, C: through the recorded function when `as_typed` and it was
  // cublasSgemm_v2 or cublasDgemm_v2, else through cublasGemmEx with `algo`.
  std::optional<std::string> Run(const Gemm& g, bool as_typed, int64_t algo,
                                 void* const buffers[3]) const {
    cublasStatus_t status;
    if (as_typed && g.api == Gemm::Api::kDgemm) {
      status = cublas_.dgemm(
          handle_, g.trans_a, g.trans_b, g.m, g.n, g.k, static_cast<const double*>(g.alpha->data()),
          static_cast<const double*>(buffers[0]), g.lda, static_cast<const double*>(buffers[1]),
          g.ldb, static_cast<const double*>(g.beta->data()), static_cast<double*>(buffers[2]),
          g.ldc);
      if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasDgemm_v2", status);
    } else if (as_typed && g.api == Gemm::Api::kSgemm) {
      status = cublas_.sgemm(
          handle_, g.trans_a, g.trans_b, g.m, g.n, g.k, static_cast<const float*>(g.alpha->data()),
          static_cast<const float*>(buffers[0]), g.lda, static_cast<const float*>(buffers[1]),
          g.ldb, static_cast<const float*>(g.beta->data()), static_cast<float*>(buffers[2]), g.ldc);
      if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasSgemm_v2", status);
    } else {
      status =
          cublas_.gemm_ex(handle_, g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha->data(), buffers[0],
                          g.a_type, g.lda, buffers[1], g.b_type, g.ldb, g.beta->data(), buffers[2],
                          g.c_type, g.ldc, g.compute, static_cast<cublasGemmAlgo_t>(algo));
      if (status != CUBLAS_STATUS_SUCCESS) return StatusText("cublasGemmEx", status);
    }
    return std::nullopt;
  }

 private:
  const Cublas& cublas_;
  cublasHandle_t handle_ = nullptr;
};

bool HandlesGemm(const format::OpRecord& op) {
  return op.kind == format::OpKind::kCublasGemm &&
         (op.name == "cublasSgemm_v2" || op.name == "cublasDgemm_v2" || op.name == "cublasGemmEx");
}

StatusOr<OpReplayReport> ReplayGemm(format::TraceReader& reader, const format::OpRecord& op,
                                    const OpReplayOptions& options) {
  StatusOr<Gemm> described = DescribeGemm(op);
  if (!described.ok()) return described.status();
  const Gemm& g = *described;

  ReplayBuffers buffers;
  buffers.output = 2;
  buffers.output_bytes = g.sizes[2];
  buffers.output_dtype = DtypeText(g.c_type);
  // beta = 0: C is overwritten by the call; zeros keep every run alike.
  if (Status status =
          ReadInputs(reader, op, {{"A", g.sizes[0]}, {"B", g.sizes[1]}, {"C", g.sizes[2]}},
                     {true, true, g.beta_value != 0}, &buffers);
      !status.ok()) {
    return status;
  }
  StatusOr<std::optional<std::string>> output = ReadCaptured(reader, op, "out", "C", g.sizes[2]);
  if (!output.ok()) return output.status();
  buffers.recorded_output = std::move(*output);

  StatusOr<const Driver*> loaded_driver = LoadDriver();
  if (!loaded_driver.ok()) return loaded_driver.status();
  const Driver& driver = **loaded_driver;
  StatusOr<const Cublas*> loaded_cublas = LoadCublas();
  if (!loaded_cublas.ok()) return loaded_cublas.status();
  const Cublas& cublas = **loaded_cublas;
  if (Status status = UseDevice(driver, op.device_ordinal); !status.ok()) return status;

  std::vector<DeviceBuffer> memory;
  for (const uint64_t bytes : {g.sizes[0], g.sizes[1], g.sizes[2], g.workspace_bytes}) {
    StatusOr<DeviceBuffer> buffer = Allocate(driver, bytes);
    if (!buffer.ok()) return buffer.status();
    memory.push_back(std::move(*buffer));
  }
  for (int i = 0; i < 3; ++i) buffers.buffers[i].address = memory[i].address();
  void* const pointers[3] = {memory[0].pointer(), memory[1].pointer(), memory[2].pointer()};
  void* const workspace = memory[3].pointer();

  OpReplayReport report;
  const std::string* fingerprint = TextOf(op, "fingerprint");
  report.problem = fingerprint != nullptr ? *fingerprint : op.name;
  report.output_role = "C";
  report.output_bytes = g.sizes[2];

  // One candidate: `algo` with or without atomics, as recorded (cublasSgemm_v2 or
  // cublasDgemm_v2 for one) or through cublasGemmEx.
  const auto run_candidate = [&](AlgorithmRuns runs, bool as_recorded,
                                 bool atomics) -> StatusOr<AlgorithmRuns> {
    const int64_t algo = runs.algo;
    const bool as_typed = as_recorded && g.api != Gemm::Api::kGemmEx;
    // CUBLAS_GEMM_AUTOTUNE chooses by timing once per handle: a fresh handle for every run
    // makes it choose again, as a new process would.
    const bool handle_per_run = algo == CUBLAS_GEMM_AUTOTUNE;
    std::optional<GemmHandle> handle;
    const auto setup = [&]() -> std::optional<std::string> {
      handle.emplace(cublas);
      return handle->Setup(g, atomics, workspace);
    };
    if (!handle_per_run) {
      if (std::optional<std::string> failure = setup()) {
        if (as_recorded) return Status::Error(*failure);
        runs.skipped = *failure;
        return runs;
      }
    }
    return RunCandidate(driver, buffers, std::move(runs), options.repeat,
                        [&]() -> std::optional<std::string> {
                          if (handle_per_run) {
                            if (std::optional<std::string> failure = setup()) return failure;
                          }
                          return handle->Run(g, as_typed, algo, pointers);
                        });
  };

  AlgorithmRuns recorded;
  recorded.algo = g.algo;
  recorded.name = op.algorithm->name.empty() ? GemmAlgoName(g.algo) : op.algorithm->name;
  recorded.determinism = op.algorithm->determinism;
  recorded.recorded = true;
  StatusOr<AlgorithmRuns> ran = run_candidate(std::move(recorded), true, g.atomics);
  if (!ran.ok()) {
    return ran.status().Prefixed(
        fmt::format("replaying op {} with {}", op.sequence, op.algorithm->name));
  }
  report.algorithms.push_back(std::move(*ran));

  if (options.try_deterministic) {
    // Deterministic by the tracer's policy: atomics not allowed, an algo not chosen by timing.
    const bool recorded_deterministic = !g.atomics && g.algo != CUBLAS_GEMM_AUTOTUNE;
    std::vector<int64_t> algos = {CUBLAS_GEMM_DEFAULT};
    for (int64_t algo = CUBLAS_GEMM_ALGO0; algo <= CUBLAS_GEMM_ALGO23; ++algo)
      algos.push_back(algo);
    if (TensorOpAlgo(g.algo)) {
      algos.push_back(CUBLAS_GEMM_DEFAULT_TENSOR_OP);
      for (int64_t algo = CUBLAS_GEMM_ALGO0_TENSOR_OP; algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP;
           ++algo) {
        algos.push_back(algo);
      }
    }
    for (const int64_t algo : algos) {
      if (recorded_deterministic && algo == g.algo) continue;
      AlgorithmRuns alternative;
      alternative.algo = algo;
      alternative.name = GemmAlgoName(algo) + " (atomics not allowed)";
      alternative.determinism = format::Determinism::kDeterministic;
      StatusOr<AlgorithmRuns> tried = run_candidate(std::move(alternative), false, false);
      if (!tried.ok()) {
        return tried.status().Prefixed(
            fmt::format("replaying op {} with {}", op.sequence, GemmAlgoName(algo)));
      }
      report.algorithms.push_back(std::move(*tried));
    }
  }
  return report;
}

// ---- cuBLASLt matmuls -------------------------------------------------------------------------

struct Layout {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
  uint64_t bytes = 0;  // every batch
};

// A recorded matmul, rebuilt from the op's arguments.
struct Matmul {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType scale = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  Layout a, b, c, d;
  std::optional<Scalar> alpha, beta;
  double beta_value = 0;
  bool in_place = false;  // C and D are one buffer
  uint64_t workspace_bytes = 0;
  std::optional<cublasLtMatmulAlgo_t> algo;  // null: the library's implicit heuristic choice
};

StatusOr<Matmul> DescribeMatmul(const format::OpRecord& op) {
  Matmul mm;
  Arguments args(op);
  mm.compute = static_cast<cublasComputeType_t>(args.Get<int64_t>("computeType"));
  mm.scale = static_cast<cudaDataType>(args.Get<int64_t>("scaleType"));
  const int64_t pointer_mode = args.Get<int64_t>("pointerMode");
  mm.trans_a = Operation(args.Get<std::string>("transa"));
  mm.trans_b = Operation(args.Get<std::string>("transb"));
  const uint64_t epilogue = args.Get<uint64_t>("epilogue");
  mm.workspace_bytes = args.Get<uint64_t>("workspaceSizeInBytes");
  const struct {
    const char* name;
    const char* ld;
    Layout* layout;
  } layouts[] = {
      {"A", "lda", &mm.a}, {"B", "ldb", &mm.b}, {"C", "ldc", &mm.c}, {"D", "ldd", &mm.d}};
  for (const auto& [name, ld, l] : layouts) {
    const std::string n = name;
    l->type = static_cast<cudaDataType>(args.Get<int64_t>((n + "type").c_str()));
    l->rows = static_cast<uint64_t>(args.Dimension((n + "rows").c_str()));
    l->cols = static_cast<uint64_t>(args.Dimension((n + "cols").c_str()));
    l->ld = args.Dimension(ld);
    l->order = static_cast<int32_t>(args.Get<int64_t>((n + "order").c_str()));
    l->batch = static_cast<int32_t>(args.Get<int64_t>((n + "batch").c_str(), 1));
    l->stride = args.Get<int64_t>((n + "stride").c_str());
    const uint64_t element = ElementBytes(l->type);
    if (element == 0)
      args.Missing(fmt::format("{}type (cuda type {} is not replayed)", n, l->type));
    if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW) {
      args.Missing(fmt::format("{}order ({} is not replayed yet)", n, l->order));
    }
    if (l->batch < 1 || l->batch > 65535 || l->stride < 0 || l->stride > INT32_MAX) {
      args.Missing(fmt::format("{}batch/{}stride", n, n));
    }
    l->bytes = l->order == CUBLASLT_ORDER_ROW
                   ? MatrixBytes(l->cols, l->rows, static_cast<uint64_t>(l->ld), element)
                   : MatrixBytes(l->rows, l->cols, static_cast<uint64_t>(l->ld), element);
    if (l->bytes > 0 && l->bytes <= kMaxBufferBytes && l->batch > 1) {
      l->bytes += static_cast<uint64_t>(l->batch - 1) * static_cast<uint64_t>(l->stride) * element;
    }
  }
  if (!op.algorithm) args.Missing("algorithm");
  if (Status status = args.Check("matmul"); !status.ok()) return status;
  if (pointer_mode != CUBLASLT_POINTER_MODE_HOST) {
    return Status::Error(
        fmt::format("op {}: pointer mode {} (scalars on the device) is not replayed yet",
                    op.sequence, pointer_mode));
  }
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    return Status::Error(fmt::format(
        "op {}: epilogue {} (bias, activation or auxiliary buffers) is not replayed yet",
        op.sequence, epilogue));
  }
  if (mm.d.bytes == 0) return Status::Error(fmt::format("op {} computes nothing", op.sequence));
  if (Status status = CheckSizes(op, {mm.a.bytes, mm.b.bytes, mm.c.bytes, mm.d.bytes});
      !status.ok()) {
    return status;
  }
  if (Status status = ReadScalars(op, mm.scale, &mm.alpha, &mm.beta, &mm.beta_value);
      !status.ok()) {
    return status;
  }
  if (!op.algorithm->opaque.empty()) {
    if (op.algorithm->opaque.size() != sizeof(cublasLtMatmulAlgo_t)) {
      return Status::Error(fmt::format("op {}: its recorded algo holds {} bytes, not {}",
                                       op.sequence, op.algorithm->opaque.size(),
                                       sizeof(cublasLtMatmulAlgo_t)));
    }
    cublasLtMatmulAlgo_t algo;
    std::memcpy(&algo, op.algorithm->opaque.data(), sizeof(algo));
    mm.algo = algo;
  }
  const format::Argument* c = FindArgument(op, "C");
  const format::Argument* d = FindArgument(op, "D");
  mm.in_place = c != nullptr && d != nullptr && c->value == d->value && mm.c.bytes == mm.d.bytes &&
                mm.c.ld == mm.d.ld;
  return mm;
}

// The descriptors of one matmul, destroyed with it.
class MatmulDescriptors {
 public:
  explicit MatmulDescriptors(const CublasLt& lt) : lt_(lt) {}
  MatmulDescriptors(const MatmulDescriptors&) = delete;
  MatmulDescriptors& operator=(const MatmulDescriptors&) = delete;
  ~MatmulDescriptors() {
    for (cublasLtMatrixLayout_t layout : layouts) {
      if (layout != nullptr) lt_.cublasLtMatrixLayoutDestroy(layout);
    }
    if (desc != nullptr) lt_.cublasLtMatmulDescDestroy(desc);
    if (handle != nullptr) lt_.cublasLtDestroy(handle);
  }

  Status Build(const Matmul& mm) {
    const auto check = [](const char* api, cublasStatus_t status) {
      return status == CUBLAS_STATUS_SUCCESS ? Status::Ok()
                                             : Status::Error(StatusText(api, status));
    };
    Status status = check("cublasLtCreate", lt_.cublasLtCreate(&handle));
    if (status.ok()) {
      status = check("cublasLtMatmulDescCreate",
                     lt_.cublasLtMatmulDescCreate(&desc, mm.compute, mm.scale));
    }
    for (const auto& [attribute, value] :
         {std::pair{CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(mm.trans_a)},
          std::pair{CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(mm.trans_b)}}) {
      if (!status.ok()) break;
      status = check("cublasLtMatmulDescSetAttribute",
                     lt_.cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
    }
    const Layout* sources[4] = {&mm.a, &mm.b, &mm.c, &mm.d};
    for (int i = 0; i < 4 && status.ok(); ++i) {
      const Layout& l = *sources[i];
      status = check("cublasLtMatrixLayoutCreate",
                     lt_.cublasLtMatrixLayoutCreate(&layouts[i], l.type, l.rows, l.cols, l.ld));
      const auto set = [&](cublasLtMatrixLayoutAttribute_t attribute, const auto& value) {
        if (status.ok()) {
          status = check(
              "cublasLtMatrixLayoutSetAttribute",
              lt_.cublasLtMatrixLayoutSetAttribute(layouts[i], attribute, &value, sizeof(value)));
        }
      };
      if (l.order != CUBLASLT_ORDER_COL) set(CUBLASLT_MATRIX_LAYOUT_ORDER, l.order);
      if (l.batch != 1) {
        set(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, l.batch);
        set(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, l.stride);
      }
    }
    return status;
  }

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layouts[4] = {nullptr, nullptr, nullptr, nullptr};  // A, B, C, D

 private:
  const CublasLt& lt_;
};

// An algo's configuration, read through the library, and whether the tracer's deterministic
// policy accepts it.
struct AlgoConfig {
  int64_t id = -1;
  std::string name;
  format::Determinism determinism = format::Determinism::kUnknown;
};

AlgoConfig DescribeAlgo(const CublasLt& lt, const cublasLtMatmulAlgo_t& algo) {
  const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute) -> std::optional<uint32_t> {
    uint32_t value = 0;
    size_t written = 0;
    if (lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value),
                                                &written) != CUBLAS_STATUS_SUCCESS) {
      return std::nullopt;
    }
    return value;
  };
  AlgoConfig config;
  if (const auto id = get(CUBLASLT_ALGO_CONFIG_ID)) config.id = static_cast<int32_t>(*id);
  const auto tile = get(CUBLASLT_ALGO_CONFIG_TILE_ID);
  const auto slices = get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  const auto scheme = get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  if (slices && scheme) {
    const bool out_of_place =
        *slices > 1 && (*scheme & (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                   CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)) != 0;
    config.determinism =
        out_of_place ? format::Determinism::kNondeterministic : format::Determinism::kDeterministic;
    config.name = fmt::format("algo {} tile {} splitK {} reduction {}", config.id, tile.value_or(0),
                              *slices, *scheme);
  } else {
    config.name = fmt::format("algo {}", config.id);
  }
  return config;
}

bool HandlesMatmul(const format::OpRecord& op) {
  return op.kind == format::OpKind::kCublasLtMatmul && op.name == "cublasLtMatmul";
}

StatusOr<OpReplayReport> ReplayMatmul(format::TraceReader& reader, const format::OpRecord& op,
                                      const OpReplayOptions& options) {
  StatusOr<Matmul> described = DescribeMatmul(op);
  if (!described.ok()) return described.status();
  const Matmul& mm = *described;

  // Buffers A, B, D, and C apart from D unless the call was in place or does not read C.
  const bool separate_c = !mm.in_place && mm.beta_value != 0;
  ReplayBuffers buffers;
  std::vector<std::pair<std::string, uint64_t>> roles = {{"A", mm.a.bytes}, {"B", mm.b.bytes}};
  if (separate_c) roles.emplace_back("C", mm.c.bytes);
  roles.emplace_back(mm.in_place ? "C" : "D", mm.d.bytes);
  std::vector<bool> needed(roles.size(), true);
  needed.back() = mm.in_place && mm.beta_value != 0;
  if (Status status = ReadInputs(reader, op, roles, needed, &buffers); !status.ok()) return status;
  buffers.output = roles.size() - 1;
  buffers.output_bytes = mm.d.bytes;
  buffers.output_dtype = DtypeText(mm.d.type);
  StatusOr<std::optional<std::string>> output = ReadCaptured(reader, op, "out", "D", mm.d.bytes);
  if (!output.ok()) return output.status();
  buffers.recorded_output = std::move(*output);

  StatusOr<const Driver*> loaded_driver = LoadDriver();
  if (!loaded_driver.ok()) return loaded_driver.status();
  const Driver& driver = **loaded_driver;
  StatusOr<const CublasLt*> loaded_lt = LoadCublasLt();
  if (!loaded_lt.ok()) return loaded_lt.status();
  const CublasLt& lt = **loaded_lt;
  if (Status status = UseDevice(driver, op.device_ordinal); !status.ok()) return status;

  MatmulDescriptors descriptors(lt);
  if (Status status = descriptors.Build(mm); !status.ok()) {
    return status.Prefixed(fmt::format("rebuilding op {}", op.sequence));
  }
  std::vector<DeviceBuffer> memory;
  for (const auto& [role, bytes] : roles) {
    StatusOr<DeviceBuffer> buffer = Allocate(driver, bytes);
    if (!buffer.ok()) return buffer.status();
    buffers.buffers[memory.size()].address = buffer->address();
    memory.push_back(std::move(*buffer));
  }
  StatusOr<DeviceBuffer> workspace = Allocate(driver, mm.workspace_bytes);
  if (!workspace.ok()) return workspace.status();
  void* const a = memory[0].pointer();
  void* const b = memory[1].pointer();
  void* const d = memory.back().pointer();
  void* const c = separate_c ? memory[2].pointer() : d;

  OpReplayReport report;
  const std::string* fingerprint = TextOf(op, "fingerprint");
  report.problem = fingerprint != nullptr ? *fingerprint : op.name;
  report.output_role = "D";
  report.output_bytes = mm.d.bytes;

  const auto run_algo = [&](AlgorithmRuns runs, const cublasLtMatmulAlgo_t* algo) {
    return RunCandidate(
        driver, buffers, std::move(runs), options.repeat, [&]() -> std::optional<std::string> {
          const cublasStatus_t status =
              lt.cublasLtMatmul(descriptors.handle, descriptors.desc, mm.alpha->data(), a,
                                descriptors.layouts[0], b, descriptors.layouts[1], mm.beta->data(),
                                c, descriptors.layouts[2], d, descriptors.layouts[3], algo,
                                mm.workspace_bytes == 0 ? nullptr : workspace->pointer(),
                                mm.workspace_bytes, nullptr);
          if (status == CUBLAS_STATUS_SUCCESS) return std::nullopt;
          return StatusText("cublasLtMatmul", status);
        });
  };

  AlgorithmRuns recorded;
  recorded.algo = op.algorithm->id;
  recorded.name = op.algorithm->name;
  recorded.determinism = op.algorithm->determinism;
  recorded.recorded = true;
  StatusOr<AlgorithmRuns> ran = run_algo(std::move(recorded), mm.algo ? &*mm.algo : nullptr);
  if (!ran.ok()) {
    return ran.status().Prefixed(
        fmt::format("replaying op {} with {}", op.sequence, op.algorithm->name));
  }
  report.algorithms.push_back(std::move(*ran));
  if (!options.try_deterministic) return report;

  // The heuristic's algos within the recorded workspace that the deterministic policy accepts.
  cublasLtMatmulPreference_t preference = nullptr;
  if (const cublasStatus_t status = lt.cublasLtMatmulPreferenceCreate(&preference);
      status != CUBLAS_STATUS_SUCCESS) {
    return Status::Error(StatusText("cublasLtMatmulPreferenceCreate", status));
  }
  const uint64_t max_workspace = mm.workspace_bytes;
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &max_workspace, sizeof(max_workspace));
  constexpr int kAsked = 16;
  cublasLtMatmulHeuristicResult_t results[kAsked] = {};
  int returned = 0;
  const cublasStatus_t heuristic = lt.cublasLtMatmulAlgoGetHeuristic(
      descriptors.handle, descriptors.desc, descriptors.layouts[0], descriptors.layouts[1],
      descriptors.layouts[2], descriptors.layouts[3], preference, kAsked, results, &returned);
  lt.cublasLtMatmulPreferenceDestroy(preference);
  if (heuristic != CUBLAS_STATUS_SUCCESS) returned = 0;
  for (int i = 0; i < std::min(returned, kAsked); ++i) {
    const cublasLtMatmulAlgo_t& algo = results[i].algo;
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (mm.algo && std::memcmp(&algo, &*mm.algo, sizeof(algo)) == 0) continue;
    const AlgoConfig config = DescribeAlgo(lt, algo);
    if (config.determinism != format::Determinism::kDeterministic) continue;
    AlgorithmRuns alternative;
    alternative.algo = config.id;
    alternative.name = config.name;
    alternative.determinism = config.determinism;
    StatusOr<AlgorithmRuns> tried = run_algo(std::move(alternative), &algo);
    if (!tried.ok()) {
      return tried.status().Prefixed(
          fmt::format("replaying op {} with {}", op.sequence, config.name));
    }
    report.algorithms.push_back(std::move(*tried));
  }
  return report;
}

}  // namespace

const Replayer kCublasReplayer = {HandlesGemm, ReplayGemm};
const Replayer kCublasLtReplayer = {HandlesMatmul, ReplayMatmul};

}  // namespace ndt::replay::internal
