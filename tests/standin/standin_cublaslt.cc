// The stand-in libcublasLt.so.13: handles, the matmul, matrix-layout and preference descriptors,
// heuristics and cublasLtMatmul for 32-bit float column-major matrices, computed on the host
// (README.md, "The stand-in cuBLASLt").
//
// Like the real library it reaches the driver only through dlopen("libcuda.so.1") and
// cuGetProcAddress_v2, and synchronises the matmul's stream before it computes (device memory
// is host memory on the stand-in device).
//
// Descriptors keep their state inside the opaque structs the header defines (so the *Init
// functions a program may use on stack storage would work the same way). The 64-byte
// cublasLtMatmulAlgo_t holds: data[0] the algo id (CUBLASLT_ALGO_CONFIG_ID), data[1] the tile
// id, data[2] the split-K slice count, data[3] the reduction scheme, data[4] kAlgoTag. Three
// algos exist:
//   id 0  one pass over k, no split                    deterministic, no workspace
//   id 1  split-K 2, CUBLASLT_REDUCTION_SCHEME_INPLACE  deterministic (slices added in order)
//   id 2  split-K 4, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: out-of-place reduction in the
//         workspace (m * n floats), 4 threads adding their partial sums with atomic float
//         additions in racing order -> nondeterministic
// The heuristic ranks id 2 first when k >= 4 * max(m, n) (deep-k problems, where a real
// library also prefers split-K) and last otherwise, after filtering by the preference's
// reduction-scheme mask and maximum workspace.
#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <latch>
#include <new>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "standin_atomic.h"
#include "standin_cublas_status.h"
#include "standin_library_driver.h"

struct cublasLtContext {
  int unused = 0;
};

namespace {

constexpr uint64_t kAlgoTag = 0x4c65636172746e64ull;  // "ndtraceL"
constexpr uint32_t kDescriptorTag = 0x6e64744cu;

// ---- descriptors: state stored in the opaque structs, attributes by (offset, size) ---------

struct DescState {
  uint32_t tag;
  int32_t compute_type;
  int32_t scale_type;
  int32_t pointer_mode;
  int32_t trans_a;
  int32_t trans_b;
  int32_t trans_c;
  int32_t fill_mode;
  uint32_t epilogue;
  int32_t bias_type;
  uint64_t bias_pointer;
  int64_t bias_stride;
};
static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t));

struct LayoutState {
  uint32_t tag;
  uint32_t type;
  int32_t order;
  int32_t batch_count;
  uint64_t rows;
  uint64_t cols;
  int64_t ld;
  int64_t batch_stride;
};
static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t));

struct PreferenceState {
  uint32_t tag;
  uint32_t search_mode;
  uint32_t reduction_mask;
  uint32_t unused;
  uint64_t max_workspace;
};
static_assert(sizeof(PreferenceState) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

struct Field {
  int attribute;
  size_t offset;
  size_t size;
};

constexpr Field kDescFields[] = {
    {CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, offsetof(DescState, compute_type), 4},
    {CUBLASLT_MATMUL_DESC_SCALE_TYPE, offsetof(DescState, scale_type), 4},
    {CUBLASLT_MATMUL_DESC_POINTER_MODE, offsetof(DescState, pointer_mode), 4},
    {CUBLASLT_MATMUL_DESC_TRANSA, offsetof(DescState, trans_a), 4},
    {CUBLASLT_MATMUL_DESC_TRANSB, offsetof(DescState, trans_b), 4},
    {CUBLASLT_MATMUL_DESC_TRANSC, offsetof(DescState, trans_c), 4},
    {CUBLASLT_MATMUL_DESC_FILL_MODE, offsetof(DescState, fill_mode), 4},
    {CUBLASLT_MATMUL_DESC_EPILOGUE, offsetof(DescState, epilogue), 4},
    {CUBLASLT_MATMUL_DESC_BIAS_POINTER, offsetof(DescState, bias_pointer), 8},
    {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, offsetof(DescState, bias_stride), 8},
    {CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, offsetof(DescState, bias_type), 4},
};
constexpr Field kLayoutFields[] = {
    {CUBLASLT_MATRIX_LAYOUT_TYPE, offsetof(LayoutState, type), 4},
    {CUBLASLT_MATRIX_LAYOUT_ORDER, offsetof(LayoutState, order), 4},
    {CUBLASLT_MATRIX_LAYOUT_ROWS, offsetof(LayoutState, rows), 8},
    {CUBLASLT_MATRIX_LAYOUT_COLS, offsetof(LayoutState, cols), 8},
    {CUBLASLT_MATRIX_LAYOUT_LD, offsetof(LayoutState, ld), 8},
    {CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, offsetof(LayoutState, batch_count), 4},
    {CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, offsetof(LayoutState, batch_stride), 8},
};
constexpr Field kPreferenceFields[] = {
    {CUBLASLT_MATMUL_PREF_SEARCH_MODE, offsetof(PreferenceState, search_mode), 4},
    {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, offsetof(PreferenceState, max_workspace), 8},
    {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, offsetof(PreferenceState, reduction_mask), 4},
};

template <typename State, typename Opaque>
State* StateOf(Opaque* opaque) {
  if (opaque == nullptr) return nullptr;
  auto* state = reinterpret_cast<State*>(opaque->data);
  return state->tag == kDescriptorTag ? state : nullptr;
}

// Attributes the stand-in does not model are accepted by Set and ignored (documented in
// README.md); Get reports them as invalid.
template <typename State, size_t N>
cublasStatus_t SetField(State* state, const Field (&fields)[N], int attribute, const void* buf,
                        size_t size) {
  if (state == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  for (const Field& field : fields) {
    if (field.attribute != attribute) continue;
    if (size != field.size) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(reinterpret_cast<char*>(state) + field.offset, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_SUCCESS;
}

template <typename State, size_t N>
cublasStatus_t GetField(const State* state, const Field (&fields)[N], int attribute, void* buf,
                        size_t size, size_t* written) {
  if (state == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  for (const Field& field : fields) {
    if (field.attribute != attribute) continue;
    if (size == 0 && written != nullptr) {
      *written = field.size;
      return CUBLAS_STATUS_SUCCESS;
    }
    if (buf == nullptr || size < field.size) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, reinterpret_cast<const char*>(state) + field.offset, field.size);
    if (written != nullptr) *written = field.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// ---- the problem and the algos --------------------------------------------------------------

struct Problem {
  bool trans_a = false;
  bool trans_b = false;
  bool relu = false;            // CUBLASLT_EPILOGUE_RELU[_BIAS]: max(0, .) last
  const float* bias = nullptr;  // CUBLASLT_EPILOGUE[_RELU]_BIAS: bias[i] added to row i
  uint64_t m = 0, n = 0, k = 0;
  const LayoutState* a = nullptr;
  const LayoutState* b = nullptr;
  const LayoutState* c = nullptr;
  const LayoutState* d = nullptr;
};

bool SupportedLayout(const LayoutState* layout) {
  return layout != nullptr && layout->type == CUDA_R_32F && layout->order == CUBLASLT_ORDER_COL &&
         layout->batch_count == 1 && layout->ld >= static_cast<int64_t>(std::max<uint64_t>(layout->rows, 1));
}

// The problem the descriptors describe: INVALID_VALUE when their shapes disagree,
// NOT_SUPPORTED for what the stand-in does not compute.
cublasStatus_t Describe(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
                        cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc,
                        cublasLtMatrixLayout_t d_desc, Problem* problem) {
  const DescState* op = StateOf<DescState>(desc);
  Problem p;
  p.a = StateOf<LayoutState>(a_desc);
  p.b = StateOf<LayoutState>(b_desc);
  p.c = StateOf<LayoutState>(c_desc);
  p.d = d_desc != nullptr ? StateOf<LayoutState>(d_desc) : p.c;
  if (op == nullptr || p.a == nullptr || p.b == nullptr || p.c == nullptr || p.d == nullptr) {
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  const bool compute_ok = op->compute_type == CUBLAS_COMPUTE_32F ||
                          op->compute_type == CUBLAS_COMPUTE_32F_PEDANTIC ||
                          op->compute_type == CUBLAS_COMPUTE_32F_FAST_TF32;
  // Epilogues: none, a bias vector (D's rows, f32) added to every column, ReLU, or both.
  const bool epilogue_ok =
      op->epilogue == CUBLASLT_EPILOGUE_DEFAULT || op->epilogue == CUBLASLT_EPILOGUE_RELU ||
      ((op->epilogue == CUBLASLT_EPILOGUE_BIAS || op->epilogue == CUBLASLT_EPILOGUE_RELU_BIAS) &&
       (op->bias_type == -1 || op->bias_type == CUDA_R_32F));
  if (!compute_ok || op->scale_type != CUDA_R_32F || !epilogue_ok ||
      op->pointer_mode != CUBLASLT_POINTER_MODE_HOST || op->trans_c != CUBLAS_OP_N ||
      !SupportedLayout(p.a) || !SupportedLayout(p.b) || !SupportedLayout(p.c) ||
      !SupportedLayout(p.d)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  p.trans_a = op->trans_a != CUBLAS_OP_N;
  p.trans_b = op->trans_b != CUBLAS_OP_N;
  p.relu = (op->epilogue & CUBLASLT_EPILOGUE_RELU) != 0;
  if ((op->epilogue & CUBLASLT_EPILOGUE_BIAS) != 0) {
    p.bias = reinterpret_cast<const float*>(op->bias_pointer);
    if (p.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  }
  p.m = p.d->rows;
  p.n = p.d->cols;
  p.k = p.trans_a ? p.a->rows : p.a->cols;
  const uint64_t a_m = p.trans_a ? p.a->cols : p.a->rows;
  const uint64_t b_k = p.trans_b ? p.b->cols : p.b->rows;
  const uint64_t b_n = p.trans_b ? p.b->rows : p.b->cols;
  if (a_m != p.m || b_k != p.k || b_n != p.n || p.c->rows != p.m || p.c->cols != p.n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *problem = p;
  return CUBLAS_STATUS_SUCCESS;
}

struct AlgoShape {
  int32_t id;
  uint32_t tile;
  uint32_t slices;
  uint32_t scheme;
};
constexpr AlgoShape kAlgos[] = {
    {0, 1, 1, CUBLASLT_REDUCTION_SCHEME_NONE},
    {1, 2, 2, CUBLASLT_REDUCTION_SCHEME_INPLACE},
    {2, 3, 4, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE},
};

cublasLtMatmulAlgo_t Encode(const AlgoShape& shape) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[0] = static_cast<uint64_t>(shape.id);
  algo.data[1] = shape.tile;
  algo.data[2] = shape.slices;
  algo.data[3] = shape.scheme;
  algo.data[4] = kAlgoTag;
  return algo;
}

// The algo `algo` encodes, or null when it is not one of ours.
const AlgoShape* Decode(const cublasLtMatmulAlgo_t* algo) {
  if (algo == nullptr || algo->data[4] != kAlgoTag) return nullptr;
  for (const AlgoShape& shape : kAlgos) {
    if (algo->data[0] == static_cast<uint64_t>(shape.id) && algo->data[1] == shape.tile &&
        algo->data[2] == shape.slices && algo->data[3] == shape.scheme) {
      return &shape;
    }
  }
  return nullptr;
}

size_t WorkspaceBytes(const AlgoShape& shape, const Problem& p) {
  return shape.scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? p.m * p.n * sizeof(float) : 0;
}

// The heuristic's ranking for `p`, before filtering.
std::vector<const AlgoShape*> Ranked(const Problem& p) {
  std::vector<const AlgoShape*> ranked = {&kAlgos[0], &kAlgos[1], &kAlgos[2]};
  if (p.k >= 4 * std::max(p.m, p.n)) std::rotate(ranked.begin(), ranked.begin() + 2, ranked.end());
  return ranked;
}

// ---- computing ------------------------------------------------------------------------------

struct Operands {
  const Problem* p = nullptr;
  const float* a = nullptr;
  const float* b = nullptr;
  const float* c = nullptr;
  float* d = nullptr;
  float alpha = 1;
  float beta = 0;

  float A(uint64_t i, uint64_t l) const {
    return p->trans_a ? a[l + i * p->a->ld] : a[i + l * p->a->ld];
  }
  float B(uint64_t l, uint64_t j) const {
    return p->trans_b ? b[j + l * p->b->ld] : b[l + j * p->b->ld];
  }
  float Partial(uint64_t i, uint64_t j, uint64_t k0, uint64_t k1) const {
    float sum = 0;
    for (uint64_t l = k0; l < k1; ++l) sum += A(i, l) * B(l, j);
    return sum;
  }
  uint64_t SliceBegin(uint64_t slice, uint64_t slices) const { return p->k * slice / slices; }
  void Store(uint64_t i, uint64_t j, float product) const {
    const float scaled = alpha * product;
    float value = beta == 0 ? scaled : scaled + beta * c[i + j * p->c->ld];
    if (p->bias != nullptr) value += p->bias[i];
    if (p->relu && !(value > 0)) value = 0;
    d[i + j * p->d->ld] = value;
  }
};

void RunOrdered(const Operands& o, uint64_t slices) {
  for (uint64_t j = 0; j < o.p->n; ++j) {
    for (uint64_t i = 0; i < o.p->m; ++i) {
      float total = 0;
      for (uint64_t s = 0; s < slices; ++s) {
        total += o.Partial(i, j, o.SliceBegin(s, slices), o.SliceBegin(s + 1, slices));
      }
      o.Store(i, j, total);
    }
  }
}

using ndt::standin::AtomicAddFloat;

constexpr unsigned kMaxAddsBetweenYields = 16;

// Out-of-place split-K: `slices` threads add their partial sums into `accumulator` (the
// workspace, m * n floats) with atomic float additions in racing order, yielding after a random
// number of additions so that the order differs run to run even on one core.
void RunRacing(const Operands& o, uint64_t slices, float* accumulator) {
  const uint64_t cells = o.p->m * o.p->n;
  std::fill(accumulator, accumulator + cells, 0.0f);
  auto slice = [&o, accumulator, cells, slices](uint64_t s) {
    std::vector<float> partial(cells);
    const uint64_t k0 = o.SliceBegin(s, slices), k1 = o.SliceBegin(s + 1, slices);
    for (uint64_t j = 0; j < o.p->n; ++j) {
      for (uint64_t i = 0; i < o.p->m; ++i) partial[i + j * o.p->m] = o.Partial(i, j, k0, k1);
    }
    std::minstd_rand random(std::random_device{}());
    unsigned until_yield = random() % kMaxAddsBetweenYields + 1;
    for (uint64_t cell = 0; cell < cells; ++cell) {
      AtomicAddFloat(&accumulator[cell], partial[cell]);
      if (--until_yield == 0) {
        std::this_thread::yield();
        until_yield = random() % kMaxAddsBetweenYields + 1;
      }
    }
  };
  std::latch start(static_cast<std::ptrdiff_t>(slices));
  std::vector<uint64_t> not_started;
  {
    std::vector<std::jthread> threads;
    for (uint64_t s = 0; s < slices; ++s) {
      try {
        threads.emplace_back([&start, &slice, s] {
          start.arrive_and_wait();
          slice(s);
        });
      } catch (const std::system_error&) {
        not_started.push_back(s);
        start.count_down();
      }
    }
  }
  for (uint64_t s : not_started) slice(s);
  for (uint64_t j = 0; j < o.p->n; ++j) {
    for (uint64_t i = 0; i < o.p->m; ++i) o.Store(i, j, accumulator[i + j * o.p->m]);
  }
}

size_t ExtentBytes(const LayoutState* layout) {
  if (layout->rows == 0 || layout->cols == 0) return 0;
  return ((layout->cols - 1) * static_cast<uint64_t>(layout->ld) + layout->rows) * sizeof(float);
}

// The heuristic: up to `requested` algos for `p` allowed by `pref` (null: every scheme, no
// workspace limit).
int Heuristic(const Problem& p, const PreferenceState* pref, int requested,
              cublasLtMatmulHeuristicResult_t* results) {
  int returned = 0;
  for (const AlgoShape* shape : Ranked(p)) {
    if (returned >= requested) break;
    const size_t workspace = WorkspaceBytes(*shape, p);
    if (pref != nullptr && ((shape->scheme & ~pref->reduction_mask) != 0 ||
                            workspace > pref->max_workspace)) {
      continue;
    }
    cublasLtMatmulHeuristicResult_t& result = results[returned++];
    std::memset(&result, 0, sizeof(result));
    result.algo = Encode(*shape);
    result.workspaceSize = workspace;
    result.state = CUBLAS_STATUS_SUCCESS;
    result.wavesCount = 1.0f;
  }
  return returned;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (TheDriver().stream_synchronize == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new (std::nothrow) cublasLtContext();
  return *handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion(void) {
  return CUBLAS_VERSION;
}

size_t cublasLtGetCudartVersion(void) {
  return CUDA_VERSION;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  return ndt::standin::CublasStatusName(status);
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  return ndt::standin::CublasStatusString(status);
}

cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  return ndt::standin::CublasProperty(type, value);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                        cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* opaque = new (std::nothrow) cublasLtMatmulDescOpaque_t{};
  if (opaque == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  const DescState state{kDescriptorTag,
                        compute_type,
                        scale_type,
                        CUBLASLT_POINTER_MODE_HOST,
                        CUBLAS_OP_N,
                        CUBLAS_OP_N,
                        CUBLAS_OP_N,
                        CUBLAS_FILL_MODE_FULL,
                        CUBLASLT_EPILOGUE_DEFAULT,
                        -1,
                        0,
                        0};
  std::memcpy(opaque->data, &state, sizeof(state));
  *desc = opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buf, size_t size) {
  return SetField(StateOf<DescState>(desc), kDescFields, attribute, buf, size);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute, void* buf,
                                              size_t size, size_t* written) {
  return GetField(StateOf<DescState>(desc), kDescFields, attribute, buf, size, written);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* opaque = new (std::nothrow) cublasLtMatrixLayoutOpaque_t{};
  if (opaque == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  const LayoutState state{kDescriptorTag, static_cast<uint32_t>(type), CUBLASLT_ORDER_COL, 1,
                          rows, cols, ld, 0};
  std::memcpy(opaque->data, &state, sizeof(state));
  *layout = opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* buf, size_t size) {
  return SetField(StateOf<LayoutState>(layout), kLayoutFields, attribute, buf, size);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                void* buf, size_t size, size_t* written) {
  return GetField(StateOf<LayoutState>(layout), kLayoutFields, attribute, buf, size, written);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* opaque = new (std::nothrow) cublasLtMatmulPreferenceOpaque_t{};
  if (opaque == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  const PreferenceState state{kDescriptorTag, 0, CUBLASLT_REDUCTION_SCHEME_MASK, 0, 0};
  std::memcpy(opaque->data, &state, sizeof(state));
  *pref = opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buf, size_t size) {
  return SetField(StateOf<PreferenceState>(pref), kPreferenceFields, attribute, buf, size);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    void* buf, size_t size, size_t* written) {
  return GetField(StateOf<PreferenceState>(pref), kPreferenceFields, attribute, buf, size,
                  written);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0 || results == nullptr || returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Problem p;
  if (cublasStatus_t status = Describe(desc, a_desc, b_desc, c_desc, d_desc, &p);
      status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  const PreferenceState* preference = StateOf<PreferenceState>(pref);
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = Heuristic(p, preference, requested, results);
  return *returned > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                       cublasLtMatrixLayout_t a_desc,
                                       cublasLtMatrixLayout_t b_desc,
                                       cublasLtMatrixLayout_t c_desc,
                                       cublasLtMatrixLayout_t d_desc,
                                       const cublasLtMatmulAlgo_t* algo,
                                       cublasLtMatmulHeuristicResult_t* result) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Problem p;
  if (cublasStatus_t status = Describe(desc, a_desc, b_desc, c_desc, d_desc, &p);
      status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  const AlgoShape* shape = Decode(algo);
  if (shape == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(result, 0, sizeof(*result));
  result->algo = *algo;
  result->workspaceSize = WorkspaceBytes(*shape, p);
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = 1.0f;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attribute,
                                                    void* buf, size_t size, size_t* written) {
  const AlgoShape* shape = Decode(algo);
  if (shape == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t value = 0;
  size_t value_size = 4;
  switch (attribute) {
    case CUBLASLT_ALGO_CONFIG_ID:
      value = static_cast<uint32_t>(shape->id);
      break;
    case CUBLASLT_ALGO_CONFIG_TILE_ID:
      value = shape->tile;
      break;
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM:
      value = shape->slices;
      break;
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
      value = shape->scheme;
      break;
    case CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING:
    case CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION:
    case CUBLASLT_ALGO_CONFIG_STAGES_ID:
      break;
    case CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID:
    case CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID:
      value_size = 2;
      break;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (size == 0 && written != nullptr) {
    *written = value_size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || size < value_size) return CUBLAS_STATUS_INVALID_VALUE;
  if (value_size == 2) {
    const auto narrow = static_cast<uint16_t>(value);
    std::memcpy(buf, &narrow, 2);
  } else {
    std::memcpy(buf, &value, 4);
  }
  if (written != nullptr) *written = value_size;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha, const void* a, cublasLtMatrixLayout_t a_desc,
                              const void* b, cublasLtMatrixLayout_t b_desc, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Problem p;
  if (cublasStatus_t status = Describe(desc, a_desc, b_desc, c_desc, d_desc, &p);
      status != CUBLAS_STATUS_SUCCESS) {
    return status;
  }
  const AlgoShape* shape = nullptr;
  if (algo == nullptr) {
    // As the real library: an implicit heuristic query within the workspace given.
    PreferenceState implicit{kDescriptorTag, 0, CUBLASLT_REDUCTION_SCHEME_MASK, 0,
                             workspace_bytes};
    cublasLtMatmulHeuristicResult_t first;
    if (Heuristic(p, &implicit, 1, &first) == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    shape = Decode(&first.algo);
  } else {
    shape = Decode(algo);
    if (shape == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  }
  const size_t needed = WorkspaceBytes(*shape, p);
  if (needed > workspace_bytes) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  const Driver& driver = TheDriver();
  if (driver.stream_synchronize == nullptr ||
      driver.stream_synchronize(reinterpret_cast<CUstream>(stream)) != CUDA_SUCCESS) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  Operands o;
  o.p = &p;
  std::memcpy(&o.alpha, alpha, sizeof(float));
  std::memcpy(&o.beta, beta, sizeof(float));
  const size_t a_bytes = ExtentBytes(p.a), b_bytes = ExtentBytes(p.b);
  if ((a_bytes > 0 && !IsDeviceRange(a, a_bytes)) || (b_bytes > 0 && !IsDeviceRange(b, b_bytes)) ||
      (o.beta != 0 && !IsDeviceRange(c, ExtentBytes(p.c))) || !IsDeviceRange(d, ExtentBytes(p.d)) ||
      (needed > 0 && !IsDeviceRange(workspace, needed)) ||
      (p.bias != nullptr && !IsDeviceRange(p.bias, p.m * sizeof(float)))) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  o.a = static_cast<const float*>(a);
  o.b = static_cast<const float*>(b);
  o.c = static_cast<const float*>(c);
  o.d = static_cast<float*>(d);
  try {
    if (shape->scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) {
      RunRacing(o, shape->slices, static_cast<float*>(workspace));
    } else {
      RunOrdered(o, shape->slices);
    }
  } catch (const std::bad_alloc&) {
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
