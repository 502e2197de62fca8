// Host implementations of the kernels in tests/programs/. Each one computes what its __global__
// twin computes on a GPU; the CUDA kernels are grid-stride loops, so the result does not depend
// on the launch geometry and the host versions simply cover every element.
//
// To add a kernel: write the __global__ function in tests/programs/, take its mangled name from
// the PTX (`nvcc -ptx`, the `.entry` line) with its parameter offsets and sizes (the `.param`
// lines), add a Run* function below and a row to kHostKernels. tests/standin/README.md has the
// long version.
#include "standin_kernels.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <latch>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "kernels/digest_v1_core.h"
#include "standin_atomic.h"

namespace ndt::standin {
namespace {

// VectorAdd(const float* a, const float* b, float* c, int n): c[i] = a[i] + b[i].
constexpr ParamSlot kVectorAddParams[] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}};

bool RunVectorAdd(const LaunchGeometry&, const KernelArgs& args) {
  const int n = args.Value<int>(3);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  const float* a = args.DeviceArray<const float>(0, count);
  const float* b = args.DeviceArray<const float>(1, count);
  float* c = args.DeviceArray<float>(2, count);
  if (a == nullptr || b == nullptr || c == nullptr) return false;
  for (std::size_t i = 0; i < count; ++i) c[i] = a[i] + b[i];
  return true;
}

// RacySum(const float* values, float* sums, int n, int bins): sums[i % bins] += values[i] with
// atomicAdd. Genuinely nondeterministic here as on a GPU: kRacyThreads threads take contiguous
// quarters of `values`, start together and race on the same few cells. Float addition is not
// associative, so a different order of additions gives different bits. On many cores the race
// alone reorders them; so that it also does on one core (where threads would otherwise take
// turns in the same pattern every run), each thread yields the processor after a random
// number of additions, drawn from std::random_device.
constexpr ParamSlot kRacySumParams[] = {{0, 8}, {8, 8}, {16, 4}, {20, 4}};
constexpr int kRacyThreads = 4;
constexpr unsigned kRacyMaxRun = 1024;  // additions between yields: 1 to this, at random

bool RunRacySum(const LaunchGeometry&, const KernelArgs& args) {
  const int n = args.Value<int>(2);
  const int bins = args.Value<int>(3);
  if (n <= 0) return true;
  if (bins <= 0) return false;  // i % 0 is undefined on a GPU; the stand-in reports a fault
  const auto count = static_cast<std::size_t>(n);
  const auto bin_count = static_cast<std::size_t>(bins);
  const float* values = args.DeviceArray<const float>(0, count);
  float* sums = args.DeviceArray<float>(1, bin_count);
  if (values == nullptr || sums == nullptr) return false;

  auto add_range = [values, sums, bin_count, count](int t) {
    const std::size_t begin = count * static_cast<std::size_t>(t) / kRacyThreads;
    const std::size_t end = count * static_cast<std::size_t>(t + 1) / kRacyThreads;
    std::minstd_rand random(std::random_device{}());
    unsigned until_yield = random() % kRacyMaxRun + 1;
    for (std::size_t i = begin; i < end; ++i) {
      AtomicAddFloat(&sums[i % bin_count], values[i]);
      if (--until_yield == 0) {
        std::this_thread::yield();
        until_yield = random() % kRacyMaxRun + 1;
      }
    }
  };
  std::latch start(kRacyThreads);
  std::vector<int> not_started;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kRacyThreads; ++t) {
      try {
        threads.emplace_back([&start, &add_range, t] {
          start.arrive_and_wait();
          add_range(t);
        });
      } catch (const std::system_error&) {  // no thread to spare: do that quarter below
        not_started.push_back(t);
        start.count_down();
      }
    }
  }  // the jthreads join here
  for (int t : not_started) add_range(t);
  return true;
}

// ScaleOffset(unsigned* data, unsigned mul, unsigned add, int n): data[i] = data[i] * mul + add
// (unsigned wrap-around, so the result is exact on every device).
constexpr ParamSlot kScaleOffsetParams[] = {{0, 8}, {8, 4}, {12, 4}, {16, 4}};

bool RunScaleOffset(const LaunchGeometry&, const KernelArgs& args) {
  const auto mul = args.Value<std::uint32_t>(1);
  const auto add = args.Value<std::uint32_t>(2);
  const int n = args.Value<int>(3);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  std::uint32_t* data = args.DeviceArray<std::uint32_t>(0, count);
  if (data == nullptr) return false;
  for (std::size_t i = 0; i < count; ++i) data[i] = data[i] * mul + add;
  return true;
}

// Step(float* data, int n, float add): data[i] = data[i] * 0.5f + add (exact for the values the
// workers program uses).
constexpr ParamSlot kStepParams[] = {{0, 8}, {8, 4}, {12, 4}};

bool RunStep(const LaunchGeometry&, const KernelArgs& args) {
  const int n = args.Value<int>(1);
  const float add = args.Value<float>(2);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  float* data = args.DeviceArray<float>(0, count);
  if (data == nullptr) return false;
  for (std::size_t i = 0; i < count; ++i) data[i] = data[i] * 0.5f + add;
  return true;
}

// DropoutLike(at::PhiloxCudaState state, const float* in, float* out, int n): keeps in[i] * 2
// where a hash of (seed, offset + i) has its low bit set (philox_dropout.cu). The state is
// (seed_, offset_) by value, or, when captured_ (the graph-captured form), (*seed_,
// *offset_ + offset_intragraph_) read through the two device pointers.
constexpr ParamSlot kDropoutLikeParams[] = {{0, 24}, {24, 8}, {32, 8}, {40, 4}};

bool RunDropoutLike(const LaunchGeometry&, const KernelArgs& args) {
  struct PhiloxState {
    std::uint64_t seed;  // or an int64_t* when captured
    std::uint64_t offset;
    std::uint32_t offset_intragraph;
    bool captured;
  };
  const auto state = args.Value<PhiloxState>(0);
  std::uint64_t seed = state.seed;
  std::uint64_t offset = state.offset;
  if (state.captured) {
    const std::int64_t* seed_word =
        args.DevicePointer(reinterpret_cast<const std::int64_t*>(state.seed), 1);
    const std::int64_t* offset_word =
        args.DevicePointer(reinterpret_cast<const std::int64_t*>(state.offset), 1);
    if (seed_word == nullptr || offset_word == nullptr) return false;
    seed = static_cast<std::uint64_t>(*seed_word);
    offset = static_cast<std::uint64_t>(*offset_word) + state.offset_intragraph;
  }
  const int n = args.Value<int>(3);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  const float* in = args.DeviceArray<const float>(1, count);
  float* out = args.DeviceArray<float>(2, count);
  if (in == nullptr || out == nullptr) return false;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t x = seed ^ ((offset + i) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    out[i] = (static_cast<std::uint32_t>(x) & 1u) != 0 ? in[i] * 2.0f : 0.0f;
  }
  return true;
}

// Fill(int64_t* data, int64_t value, int n): data[i] = value (philox_dropout.cu, as PyTorch's
// fill_ writes the graph's seed and offset words before a replay).
constexpr ParamSlot kFillParams[] = {{0, 8}, {8, 8}, {16, 4}};

bool RunFill(const LaunchGeometry&, const KernelArgs& args) {
  const auto value = args.Value<std::int64_t>(1);
  const int n = args.Value<int>(2);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  std::int64_t* data = args.DeviceArray<std::int64_t>(0, count);
  if (data == nullptr) return false;
  for (std::size_t i = 0; i < count; ++i) data[i] = value;
  return true;
}

// standin_library_entry(LibraryParams): the kernel the stand-in libraries launch from inside
// their calls (standin_library_driver.h, LaunchLibraryKernel); their work runs on the host.
constexpr ParamSlot kLibraryEntryParams[] = {{0, 40}};

bool RunLibraryEntry(const LaunchGeometry&, const KernelArgs&) {
  return true;
}

// GatherRows(const float* const* rows, float* out, int row_length, int row_count):
// out[i] = 2 * rows[i / row_length][i % row_length], each row pointer read from device memory.
constexpr ParamSlot kGatherRowsParams[] = {{0, 8}, {8, 8}, {16, 4}, {20, 4}};

bool RunGatherRows(const LaunchGeometry&, const KernelArgs& args) {
  const int row_length = args.Value<int>(2);
  const int row_count = args.Value<int>(3);
  if (row_length <= 0 || row_count <= 0) return true;
  const auto length = static_cast<std::size_t>(row_length);
  const auto count = static_cast<std::size_t>(row_count);
  const float* const* rows = args.DeviceArray<const float* const>(0, count);
  float* out = args.DeviceArray<float>(1, length * count);
  if (rows == nullptr || out == nullptr) return false;
  for (std::size_t r = 0; r < count; ++r) {
    const float* row = args.DevicePointer(rows[r], length);
    if (row == nullptr) return false;
    for (std::size_t i = 0; i < length; ++i) out[r * length + i] = 2.0f * row[i];
  }
  return true;
}

// ndtrace's own digest kernels (kernels/digest_v1.cu), so that the code launching them runs on
// the stand-in too. ndt_digest_v1(data, bytes, scratch, partials, out, ticket): out = the digest
// of the bytes and, when partials is not 0, their f32 summary (the whole grid's work at once, so
// the scratch stays zero; the sum in element order, where a GPU adds in its own fixed order),
// then the ticket. ndt_digest_v1_zero(words, count): words[0..count) = 0.
constexpr ParamSlot kDigestParams[] = {{0, 8}, {8, 8}, {16, 8}, {24, 8}, {32, 8}, {40, 8}};
constexpr ParamSlot kDigestZeroParams[] = {{0, 8}, {8, 8}};

bool RunDigestZero(const LaunchGeometry&, const KernelArgs& args) {
  const auto count = args.Value<std::uint64_t>(1);
  std::uint64_t* words = count == 0 ? nullptr : args.DeviceArray<std::uint64_t>(0, count);
  if (count != 0 && words == nullptr) return false;
  for (std::uint64_t i = 0; i < count; ++i) words[i] = 0;
  return true;
}

bool RunDigest(const LaunchGeometry&, const KernelArgs& args) {
  namespace digest = ndt::kernels::digest_v1;
  const auto bytes = args.Value<std::uint64_t>(1);
  const auto* data = bytes == 0 ? nullptr : args.DeviceArray<const unsigned char>(0, bytes);
  const bool summarize = args.Value<std::uint64_t>(3) != 0;
  std::uint64_t* out = args.DeviceArray<std::uint64_t>(4, digest::kOutWords);
  if ((bytes != 0 && data == nullptr) ||
      args.DeviceArray<std::uint64_t>(2, digest::kScratchWords) == nullptr || out == nullptr ||
      (summarize && args.DeviceArray<double>(3, digest::kMaxGrid) == nullptr)) {
    return false;
  }
  std::uint64_t sums[2] = {0, 0};
  digest::F32Summary summary = digest::F32Summary::Empty();
  for (std::uint64_t j = 0; j < (bytes + 15) / 16; ++j) {
    std::uint64_t a = 0, b = 0;
    if (16 * j + 16 <= bytes) {  // a whole block: its two little-endian words, as the GPU loads
      std::memcpy(&a, data + 16 * j, 8);
      std::memcpy(&b, data + 16 * j + 8, 8);
    } else {
      digest::LoadBlockBytes(data, bytes, j, &a, &b);
    }
    sums[0] += digest::Term(0, a, b, j);
    sums[1] += digest::Term(1, a, b, j);
    if (!summarize) continue;
    const std::uint32_t floats[4] = {
        static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(a >> 32),
        static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32)};
    for (std::uint64_t k = 0; k < 4 && 16 * j + 4 * k + 4 <= bytes; ++k) summary.Add(floats[k]);
  }
  out[0] = digest::Finish(0, sums[0], bytes);
  out[1] = digest::Finish(1, sums[1], bytes);
  std::memcpy(&out[2], &summary.sum, sizeof summary.sum);
  out[3] = summary.min_key | static_cast<std::uint64_t>(summary.max_key) << 32;
  out[4] = summary.nan;
  out[5] = summary.inf;
  out[6] = summarize ? 1 : 0;
  out[digest::kOutTicket] = args.Value<std::uint64_t>(5);
  return true;
}

// ---- The corpus kernels (tests/corpus/corpus_kernels.cuh) ----------------------------------

// Runs `add(i)` for i in [0, count) from kRacyThreads threads over contiguous quarters, each
// yielding after a random number of additions: the racing order of float atomicAdd.
template <typename Add>
void RaceAdditions(std::size_t count, Add add) {
  auto range = [count, &add](int t) {
    const std::size_t begin = count * static_cast<std::size_t>(t) / kRacyThreads;
    const std::size_t end = count * static_cast<std::size_t>(t + 1) / kRacyThreads;
    std::minstd_rand random(std::random_device{}());
    unsigned until_yield = random() % 64 + 1;
    for (std::size_t i = begin; i < end; ++i) {
      add(i);
      if (--until_yield == 0) {
        std::this_thread::yield();
        until_yield = random() % 64 + 1;
      }
    }
  };
  std::latch start(kRacyThreads);
  std::vector<int> not_started;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kRacyThreads; ++t) {
      try {
        threads.emplace_back([&start, &range, t] {
          start.arrive_and_wait();
          range(t);
        });
      } catch (const std::system_error&) {
        not_started.push_back(t);
        start.count_down();
      }
    }
  }
  for (int t : not_started) range(t);
}

// CorpusAxpby(float a, const float* x, float b, float* y, int n): y = a x + b y.
constexpr ParamSlot kCorpusAxpbyParams[] = {{0, 4}, {8, 8}, {16, 4}, {24, 8}, {32, 4}};

bool RunCorpusAxpby(const LaunchGeometry&, const KernelArgs& args) {
  const int n = args.Value<int>(4);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  const float a = args.Value<float>(0);
  const float b = args.Value<float>(2);
  const float* x = args.DeviceArray<const float>(1, count);
  float* y = args.DeviceArray<float>(3, count);
  if (x == nullptr || y == nullptr) return false;
  for (std::size_t i = 0; i < count; ++i) y[i] = a * x[i] + b * y[i];
  return true;
}

// The (m, v, out, rows, cols) kernels: CorpusMatVec, CorpusColumnDot[Atomic].
constexpr ParamSlot kCorpusMatrixVectorParams[] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}, {28, 4}};

struct MatrixVector {
  const float* m = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
};

// False for a bad range; rows or cols 0 leaves the pointers null (nothing to do).
bool ReadMatrixVector(const KernelArgs& args, bool v_has_rows, bool out_has_rows,
                      MatrixVector* mv) {
  const int rows = args.Value<int>(3);
  const int cols = args.Value<int>(4);
  if (rows <= 0 || cols <= 0) return true;
  mv->rows = static_cast<std::size_t>(rows);
  mv->cols = static_cast<std::size_t>(cols);
  mv->m = args.DeviceArray<const float>(0, mv->rows * mv->cols);
  mv->v = args.DeviceArray<const float>(1, v_has_rows ? mv->rows : mv->cols);
  mv->out = args.DeviceArray<float>(2, out_has_rows ? mv->rows : mv->cols);
  return mv->m != nullptr && mv->v != nullptr && mv->out != nullptr;
}

bool RunCorpusMatVec(const LaunchGeometry&, const KernelArgs& args) {
  MatrixVector mv;
  if (!ReadMatrixVector(args, false, true, &mv)) return false;
  for (std::size_t r = 0; r < mv.rows; ++r) {
    float sum = 0.0f;
    for (std::size_t c = 0; c < mv.cols; ++c) sum += mv.m[r * mv.cols + c] * mv.v[c];
    mv.out[r] = sum;
  }
  return true;
}

bool RunCorpusColumnDot(const LaunchGeometry&, const KernelArgs& args) {
  MatrixVector mv;
  if (!ReadMatrixVector(args, true, false, &mv)) return false;
  for (std::size_t c = 0; c < mv.cols; ++c) {
    float sum = 0.0f;
    for (std::size_t r = 0; r < mv.rows; ++r) sum += mv.m[r * mv.cols + c] * mv.v[r];
    mv.out[c] = sum;
  }
  return true;
}

bool RunCorpusColumnDotAtomic(const LaunchGeometry&, const KernelArgs& args) {
  MatrixVector mv;
  if (!ReadMatrixVector(args, true, false, &mv)) return false;
  RaceAdditions(mv.rows * mv.cols, [&mv](std::size_t i) {
    AtomicAddFloat(&mv.out[i % mv.cols], mv.m[i] * mv.v[i / mv.cols]);
  });
  return true;
}

// CorpusRowSum(const float* m, float* out, int rows, int cols).
constexpr ParamSlot kCorpusRowSumParams[] = {{0, 8}, {8, 8}, {16, 4}, {20, 4}};

bool RunCorpusRowSum(const LaunchGeometry&, const KernelArgs& args) {
  const int rows = args.Value<int>(2);
  const int cols = args.Value<int>(3);
  if (rows <= 0 || cols <= 0) return true;
  const auto r_count = static_cast<std::size_t>(rows), c_count = static_cast<std::size_t>(cols);
  const float* m = args.DeviceArray<const float>(0, r_count * c_count);
  float* out = args.DeviceArray<float>(1, r_count);
  if (m == nullptr || out == nullptr) return false;
  for (std::size_t r = 0; r < r_count; ++r) {
    float sum = 0.0f;
    for (std::size_t c = 0; c < c_count; ++c) sum += m[r * c_count + c];
    out[r] = sum;
  }
  return true;
}

// CorpusScatterAdd(const float* values, const int* index, float* out, int n): racing; and
// CorpusSegmentSum(values, index, out, n, bins): ordered. An index outside [0, bins) of the
// output is a fault; ScatterAdd's output extent is the largest index + 1.
constexpr ParamSlot kCorpusScatterAddParams[] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}};
constexpr ParamSlot kCorpusSegmentSumParams[] = {{0, 8}, {8, 8}, {16, 8}, {24, 4}, {28, 4}};

bool RunCorpusScatterAdd(const LaunchGeometry&, const KernelArgs& args) {
  const int n = args.Value<int>(3);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  const float* values = args.DeviceArray<const float>(0, count);
  const int* index = args.DeviceArray<const int>(1, count);
  if (values == nullptr || index == nullptr) return false;
  int largest = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (index[i] < 0) return false;
    largest = std::max(largest, index[i]);
  }
  float* out = args.DeviceArray<float>(2, static_cast<std::size_t>(largest) + 1);
  if (out == nullptr) return false;
  RaceAdditions(count, [=](std::size_t i) { AtomicAddFloat(&out[index[i]], values[i]); });
  return true;
}

bool RunCorpusSegmentSum(const LaunchGeometry&, const KernelArgs& args) {
  const int n = args.Value<int>(3);
  const int bins = args.Value<int>(4);
  if (bins <= 0) return true;
  const auto count = static_cast<std::size_t>(n > 0 ? n : 0);
  const auto bin_count = static_cast<std::size_t>(bins);
  const float* values = args.DeviceArray<const float>(0, count);
  const int* index = args.DeviceArray<const int>(1, count);
  float* out = args.DeviceArray<float>(2, bin_count);
  if ((count > 0 && (values == nullptr || index == nullptr)) || out == nullptr) return false;
  for (std::size_t b = 0; b < bin_count; ++b) {
    float sum = 0.0f;
    for (std::size_t i = 0; i < count; ++i) {
      if (index[i] == static_cast<int>(b)) sum += values[i];
    }
    out[b] = sum;
  }
  return true;
}

// CorpusDropout(const float* x, const float* u, float p, float* y, int n).
constexpr ParamSlot kCorpusDropoutParams[] = {{0, 8}, {8, 8}, {16, 4}, {24, 8}, {32, 4}};

bool RunCorpusDropout(const LaunchGeometry&, const KernelArgs& args) {
  const int n = args.Value<int>(4);
  if (n <= 0) return true;
  const auto count = static_cast<std::size_t>(n);
  const float* x = args.DeviceArray<const float>(0, count);
  const float* u = args.DeviceArray<const float>(1, count);
  const float p = args.Value<float>(2);
  float* y = args.DeviceArray<float>(3, count);
  if (x == nullptr || u == nullptr || y == nullptr) return false;
  for (std::size_t i = 0; i < count; ++i) y[i] = u[i] < p ? 0.0f : x[i] / (1.0f - p);
  return true;
}

constexpr HostKernel kHostKernels[] = {
    {"_Z11CorpusAxpbyfPKffPfi", kCorpusAxpbyParams, RunCorpusAxpby},
    {"_Z12CorpusMatVecPKfS0_Pfii", kCorpusMatrixVectorParams, RunCorpusMatVec},
    {"_Z12CorpusRowSumPKfPfii", kCorpusRowSumParams, RunCorpusRowSum},
    {"_Z15CorpusColumnDotPKfS0_Pfii", kCorpusMatrixVectorParams, RunCorpusColumnDot},
    {"_Z21CorpusColumnDotAtomicPKfS0_Pfii", kCorpusMatrixVectorParams, RunCorpusColumnDotAtomic},
    {"_Z16CorpusScatterAddPKfPKiPfi", kCorpusScatterAddParams, RunCorpusScatterAdd},
    {"_Z16CorpusSegmentSumPKfPKiPfii", kCorpusSegmentSumParams, RunCorpusSegmentSum},
    {"_Z13CorpusDropoutPKfS0_fPfi", kCorpusDropoutParams, RunCorpusDropout},
    {"_Z9VectorAddPKfS0_Pfi", kVectorAddParams, RunVectorAdd},
    {"_Z7RacySumPKfPfii", kRacySumParams, RunRacySum},
    {"_Z11ScaleOffsetPjjji", kScaleOffsetParams, RunScaleOffset},
    {"_Z4StepPfif", kStepParams, RunStep},
    {"ndt_digest_v1", kDigestParams, RunDigest},
    {"ndt_digest_v1_zero", kDigestZeroParams, RunDigestZero},
    {"_Z11DropoutLikeN2at15PhiloxCudaStateEPKfPfi", kDropoutLikeParams, RunDropoutLike},
    {"_Z4FillPlli", kFillParams, RunFill},
    {"_Z21standin_library_entry13LibraryParams", kLibraryEntryParams, RunLibraryEntry},
    {"_Z10GatherRowsPKPKfPfii", kGatherRowsParams, RunGatherRows},
};

}  // namespace

const HostKernel* FindHostKernel(std::string_view mangled_name) {
  for (const HostKernel& kernel : kHostKernels) {
    if (kernel.mangled_name == mangled_name) return &kernel;
  }
  return nullptr;
}

std::span<const HostKernel> AllHostKernels() {
  return kHostKernels;
}

}  // namespace ndt::standin
