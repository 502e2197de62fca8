// The stand-in libcudnn.so.9, legacy half: handles, version and error strings, 4-d tensor /
// filter / convolution descriptors, and the 2-d convolution API (forward, backward data,
// backward filter) with its algorithm queries. tests/standin/README.md lists every function.
//
// Every algorithm computes the real convolution on the host once the handle's stream has
// finished its work. Algorithms differ where the real ones do in ways a test can see:
//   - determinism, as cuDNN documents it: BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0 / ALGO_3 are
//     nondeterministic and implemented as racing threads adding floats atomically into the
//     output; every other algorithm is a fixed-order loop, bit-reproducible;
//   - rounding: deterministic algorithms split each reduction into a fixed, algorithm-dependent
//     number of partial sums, so two algorithms usually differ in the last bits;
//   - workspace: each algorithm needs its own amount (some none), derived from the shapes;
//   - support: DIRECT (forward) and WINOGRAD (backward filter) are never supported, the
//     Winograd variants only for 3x3 filters at stride 1 and dilation 1.
// The Find* "benchmark" runs every supported algorithm on scratch buffers it allocates with
// cuMemAlloc, and reports a time that is a per-algorithm cost model scaled by random noise
// (std::random_device), so the fastest algorithm varies from run to run, like real timings of
// algorithms whose speeds are close.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <latch>
#include <mutex>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

#include "standin_activity.h"
#include "standin_cudnn_internal.h"
#include "standin_immortal.h"
#include "standin_atomic.h"

struct cudnnFilterStruct {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int dims[4] = {0, 0, 0, 0};  // k, c, r, s
  bool set = false;
};

struct cudnnConvolutionStruct {
  int pad[2] = {0, 0};
  int stride[2] = {1, 1};
  int dilation[2] = {1, 1};
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  int groups = 1;
  bool set = false;
};

namespace ndt::standin {

// ---- shared with the backend half (standin_cudnn_internal.h) --------------------------------

namespace {

CudnnDriver LoadCudnnDriver() {
  CudnnDriver driver;
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace, as with the real cuDNN.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return driver;
  const auto get_proc_address =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(library, "cuGetProcAddress_v2"));
  if (get_proc_address == nullptr) return driver;
  const auto resolve = [&](const char* name, auto* slot) {
    void* function = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (get_proc_address(name, &function, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status) ==
            CUDA_SUCCESS &&
        status == CU_GET_PROC_ADDRESS_SUCCESS) {
      *slot = reinterpret_cast<std::remove_reference_t<decltype(*slot)>>(function);
    }
  };
  // The stand-in driver's own synchronise, out of a tracer's sight, as in
  // standin_library_driver.h: the real cuDNN's calls are asynchronous.
  driver.stream_synchronize = reinterpret_cast<decltype(driver.stream_synchronize)>(
      dlsym(library, "ndt_standin_stream_synchronize"));
  if (driver.stream_synchronize == nullptr) {
    resolve("cuStreamSynchronize", &driver.stream_synchronize);
  }
  resolve("cuMemAlloc", &driver.mem_alloc);
  resolve("cuMemFree", &driver.mem_free);
  return driver;
}

}  // namespace

const CudnnDriver& CudnnDriverFunctions() {
  static Immortal<CudnnDriver> driver(LoadCudnnDriver());
  return *driver;
}

cudnnStatus_t SynchronizeHandle(cudnnHandle_t handle) {
  const CudnnDriver& driver = CudnnDriverFunctions();
  if (driver.stream_synchronize == nullptr) return CUDNN_STATUS_EXECUTION_FAILED;
  return driver.stream_synchronize(handle->stream) == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS
                                                                   : CUDNN_STATUS_EXECUTION_FAILED;
}

void RunRacing(
    int threads,
    const std::function<void(int thread, int threads, const std::function<void()>& yield)>& work) {
  constexpr unsigned kMaxRun = 256;  // calls of yield() between yields: 1 to this, at random
  const auto run = [&work, threads](int t) {
    std::minstd_rand random(std::random_device{}());
    unsigned until_yield = random() % kMaxRun + 1;
    const std::function<void()> yield = [&random, &until_yield] {
      if (--until_yield == 0) {
        std::this_thread::yield();
        until_yield = random() % kMaxRun + 1;
      }
    };
    work(t, threads, yield);
  };
  std::latch start(threads);
  std::vector<int> not_started;
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t) {
      try {
        pool.emplace_back([&start, &run, t] {
          start.arrive_and_wait();
          run(t);
        });
      } catch (const std::system_error&) {  // no thread to spare: run that share below
        not_started.push_back(t);
        start.count_down();
      }
    }
  }  // the jthreads join here
  for (int t : not_started) run(t);
}

// ---- the convolution ------------------------------------------------------------------------

namespace {

constexpr int kRacingThreads = 4;

// One convolution problem, from its descriptors.
struct Problem {
  int n = 0, c = 0, h = 0, w = 0;  // x
  int k = 0, r = 0, s = 0;         // w: k x c x r x s
  int p = 0, q = 0;                // y: n x k x p x q
  int x_strides[4] = {};
  int y_strides[4] = {};
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  bool flip = false;  // CUDNN_CONVOLUTION: the filter is applied flipped

  int64_t XIndex(int in, int ic, int ih, int iw) const {
    return int64_t{in} * x_strides[0] + int64_t{ic} * x_strides[1] + int64_t{ih} * x_strides[2] +
           int64_t{iw} * x_strides[3];
  }
  int64_t YIndex(int in, int ik, int ip, int iq) const {
    return int64_t{in} * y_strides[0] + int64_t{ik} * y_strides[1] + int64_t{ip} * y_strides[2] +
           int64_t{iq} * y_strides[3];
  }
  int64_t WIndex(int ik, int ic, int ir, int is) const {
    if (flip) {
      ir = r - 1 - ir;
      is = s - 1 - is;
    }
    return ((int64_t{ik} * c + ic) * r + ir) * s + is;
  }
  // Input row/column read by output (ip, iq) through filter tap (ir, is).
  int InRow(int ip, int ir) const { return ip * stride_h - pad_h + ir * dil_h; }
  int InCol(int iq, int is) const { return iq * stride_w - pad_w + is * dil_w; }
  bool Winograd() const {
    return r == 3 && s == 3 && stride_h == 1 && stride_w == 1 && dil_h == 1 && dil_w == 1;
  }
  int64_t XCount() const { return int64_t{n} * c * h * w; }
  int64_t YCount() const { return int64_t{n} * k * p * q; }
  int64_t WCount() const { return int64_t{k} * c * r * s; }
};

int OutputSize(int input, int pad, int filter, int stride, int dilation) {
  return 1 + (input + 2 * pad - ((filter - 1) * dilation + 1)) / stride;
}

bool DescribeProblem(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                     cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, Problem* problem,
                     cudnnStatus_t* status) {
  *status = CUDNN_STATUS_BAD_PARAM;
  if (x == nullptr || w == nullptr || conv == nullptr || y == nullptr || !x->set || !w->set ||
      !conv->set || !y->set) {
    return false;
  }
  if (x->dtype != CUDNN_DATA_FLOAT || w->dtype != CUDNN_DATA_FLOAT ||
      y->dtype != CUDNN_DATA_FLOAT || conv->compute != CUDNN_DATA_FLOAT ||
      w->format != CUDNN_TENSOR_NCHW || conv->groups != 1) {
    *status = CUDNN_STATUS_NOT_SUPPORTED;
    return false;
  }
  Problem& p = *problem;
  p.n = x->dims[0];
  p.c = x->dims[1];
  p.h = x->dims[2];
  p.w = x->dims[3];
  p.k = w->dims[0];
  p.r = w->dims[2];
  p.s = w->dims[3];
  std::copy(x->strides, x->strides + 4, p.x_strides);
  std::copy(y->strides, y->strides + 4, p.y_strides);
  p.pad_h = conv->pad[0];
  p.pad_w = conv->pad[1];
  p.stride_h = conv->stride[0];
  p.stride_w = conv->stride[1];
  p.dil_h = conv->dilation[0];
  p.dil_w = conv->dilation[1];
  p.flip = conv->mode == CUDNN_CONVOLUTION;
  p.p = OutputSize(p.h, p.pad_h, p.r, p.stride_h, p.dil_h);
  p.q = OutputSize(p.w, p.pad_w, p.s, p.stride_w, p.dil_w);
  if (w->dims[1] != p.c || y->dims[0] != p.n || y->dims[1] != p.k || y->dims[2] != p.p ||
      y->dims[3] != p.q || p.p <= 0 || p.q <= 0) {
    return false;
  }
  *status = CUDNN_STATUS_SUCCESS;
  return true;
}

enum class Direction { kForward, kBackwardData, kBackwardFilter };

// What one algorithm of one direction is, for this stand-in.
struct AlgoTraits {
  bool deterministic = true;
  bool supported = true;
  size_t workspace = 0;
  int partial_sums = 1;  // deterministic algorithms: partial sums per reduction
  float cost_ms = 1.0f;  // the benchmark's cost model before noise
};

AlgoTraits Traits(Direction direction, int algo, const Problem& p) {
  AlgoTraits t;
  const size_t f = sizeof(float);
  const size_t xs = static_cast<size_t>(p.XCount()) * f;
  const size_t ys = static_cast<size_t>(p.YCount()) * f;
  const size_t ws = static_cast<size_t>(p.WCount()) * f;
  const size_t fft = static_cast<size_t>(p.n + p.k) * static_cast<size_t>(p.c + p.k) *
                     static_cast<size_t>(p.h + p.r) * static_cast<size_t>(p.w + p.s) * 2 * f;
  const size_t tile = static_cast<size_t>(p.c + p.k) * 32 * 32 * 2 * f;
  t.partial_sums = algo % 4 + 1;
  t.cost_ms = 1.0f + 0.05f * static_cast<float>(algo);
  switch (direction) {
    case Direction::kForward:
      switch (algo) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
          break;
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
          t.workspace = ws / 2 + 256;
          break;
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
          t.workspace = xs * static_cast<size_t>(p.r * p.s);
          break;
        case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
          t.supported = false;
          break;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
          t.workspace = fft;
          break;
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
          t.workspace = tile;
          break;
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
          t.supported = p.Winograd();
          break;
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
          t.supported = p.Winograd();
          t.workspace = (xs + ys) * 2;
          break;
        default:
          t.supported = false;
      }
      break;
    case Direction::kBackwardData:
      switch (algo) {
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0:
          t.deterministic = false;
          break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
          t.workspace = ys / 2 + 256;
          break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
          t.workspace = fft;
          break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
          t.workspace = tile;
          break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD:
          t.supported = p.Winograd();
          break;
        case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
          t.supported = p.Winograd();
          t.workspace = (xs + ys) * 2;
          break;
        default:
          t.supported = false;
      }
      break;
    case Direction::kBackwardFilter:
      switch (algo) {
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0:
          t.deterministic = false;
          break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:  // im2col of x
          t.workspace = xs * static_cast<size_t>(p.r * p.s);
          break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT:
          t.workspace = fft;
          break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
          t.deterministic = false;
          t.workspace = ws;
          break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD:
          t.supported = false;
          break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
          t.supported = p.Winograd();
          t.workspace = (xs + ys) * 2;
          break;
        case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
          t.workspace = tile;
          break;
        default:
          t.supported = false;
      }
      break;
  }
  return t;
}

int AlgoCount(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    case Direction::kBackwardData:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    case Direction::kBackwardFilter:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  }
  return 0;
}

// The heuristic (Get*_v7) order: fixed per direction; unsupported ones follow.
std::vector<int> HeuristicOrder(Direction direction) {
  switch (direction) {
    case Direction::kForward:
      return {1, 0, 2, 7, 6, 5, 4, 3};
    case Direction::kBackwardData:
      return {1, 0, 4, 5, 3, 2};
    case Direction::kBackwardFilter:
      return {0, 1, 3, 5, 6, 2, 4};
  }
  return {};
}

// out = alpha * result + beta * out (out not read when beta == 0).
void Blend(float alpha, float beta, float result, float* out) {
  *out = beta == 0.0f ? alpha * result : alpha * result + beta * *out;
}

// Deterministic sums over a reduction split into `parts` interleaved partial sums.
class SplitSum {
 public:
  explicit SplitSum(int parts) : parts_(parts) {}
  void Add(float value) { partial_[index_++ % parts_] += value; }
  float Total() const {
    float total = 0.0f;
    for (int i = 0; i < parts_; ++i) total += partial_[i];
    return total;
  }

 private:
  int parts_;
  int index_ = 0;
  float partial_[4] = {0, 0, 0, 0};
};

void Forward(const Problem& p, const AlgoTraits& t, float alpha, const float* x, const float* w,
             float beta, float* y) {
  for (int in = 0; in < p.n; ++in)
    for (int ik = 0; ik < p.k; ++ik)
      for (int ip = 0; ip < p.p; ++ip)
        for (int iq = 0; iq < p.q; ++iq) {
          SplitSum sum(t.partial_sums);
          for (int ic = 0; ic < p.c; ++ic)
            for (int ir = 0; ir < p.r; ++ir) {
              const int ih = p.InRow(ip, ir);
              if (ih < 0 || ih >= p.h) continue;
              for (int is = 0; is < p.s; ++is) {
                const int iw = p.InCol(iq, is);
                if (iw < 0 || iw >= p.w) continue;
                sum.Add(x[p.XIndex(in, ic, ih, iw)] * w[p.WIndex(ik, ic, ir, is)]);
              }
            }
          Blend(alpha, beta, sum.Total(), &y[p.YIndex(in, ik, ip, iq)]);
        }
}

// dx = alpha * conv^T(dy, w) + beta * dx.
void BackwardData(const Problem& p, const AlgoTraits& t, float alpha, const float* w,
                  const float* dy, float beta, float* dx) {
  if (t.deterministic) {
    for (int in = 0; in < p.n; ++in)
      for (int ic = 0; ic < p.c; ++ic)
        for (int ih = 0; ih < p.h; ++ih)
          for (int iw = 0; iw < p.w; ++iw) {
            SplitSum sum(t.partial_sums);
            for (int ik = 0; ik < p.k; ++ik)
              for (int ir = 0; ir < p.r; ++ir) {
                const int row = ih + p.pad_h - ir * p.dil_h;
                if (row < 0 || row % p.stride_h != 0 || row / p.stride_h >= p.p) continue;
                for (int is = 0; is < p.s; ++is) {
                  const int col = iw + p.pad_w - is * p.dil_w;
                  if (col < 0 || col % p.stride_w != 0 || col / p.stride_w >= p.q) continue;
                  sum.Add(dy[p.YIndex(in, ik, row / p.stride_h, col / p.stride_w)] *
                          w[p.WIndex(ik, ic, ir, is)]);
                }
              }
            Blend(alpha, beta, sum.Total(), &dx[p.XIndex(in, ic, ih, iw)]);
          }
    return;
  }
  // ALGO_0: every (n, k, p, q) of dy scatters into dx with atomic additions, racing.
  std::vector<float> result(static_cast<size_t>(p.XCount()), 0.0f);
  const auto dense = [&p](int in, int ic, int ih, int iw) {
    return ((static_cast<size_t>(in) * p.c + ic) * p.h + ih) * p.w + iw;
  };
  const int64_t outputs = p.YCount();
  RunRacing(kRacingThreads, [&](int thread, int threads, const std::function<void()>& yield) {
    const int64_t begin = outputs * thread / threads;
    const int64_t end = outputs * (thread + 1) / threads;
    for (int64_t o = begin; o < end; ++o) {
      const int iq = static_cast<int>(o % p.q);
      const int ip = static_cast<int>(o / p.q % p.p);
      const int ik = static_cast<int>(o / (int64_t{p.q} * p.p) % p.k);
      const int in = static_cast<int>(o / (int64_t{p.q} * p.p * p.k));
      const float g = dy[p.YIndex(in, ik, ip, iq)];
      for (int ic = 0; ic < p.c; ++ic)
        for (int ir = 0; ir < p.r; ++ir) {
          const int ih = p.InRow(ip, ir);
          if (ih < 0 || ih >= p.h) continue;
          for (int is = 0; is < p.s; ++is) {
            const int iw = p.InCol(iq, is);
            if (iw < 0 || iw >= p.w) continue;
            AtomicAddFloat(&result[dense(in, ic, ih, iw)], g * w[p.WIndex(ik, ic, ir, is)]);
          }
        }
      yield();
    }
  });
  for (int in = 0; in < p.n; ++in)
    for (int ic = 0; ic < p.c; ++ic)
      for (int ih = 0; ih < p.h; ++ih)
        for (int iw = 0; iw < p.w; ++iw) {
          Blend(alpha, beta, result[dense(in, ic, ih, iw)], &dx[p.XIndex(in, ic, ih, iw)]);
        }
}

// dw = alpha * correlation(x, dy) + beta * dw.
void BackwardFilter(const Problem& p, const AlgoTraits& t, float alpha, const float* x,
                    const float* dy, float beta, float* dw) {
  // The filter index in dw's dense k x c x r x s layout for tap (ir, is) as applied.
  const auto tap = [&p](int ik, int ic, int ir, int is) { return p.WIndex(ik, ic, ir, is); };
  if (t.deterministic) {
    for (int ik = 0; ik < p.k; ++ik)
      for (int ic = 0; ic < p.c; ++ic)
        for (int ir = 0; ir < p.r; ++ir)
          for (int is = 0; is < p.s; ++is) {
            SplitSum sum(t.partial_sums);
            for (int in = 0; in < p.n; ++in)
              for (int ip = 0; ip < p.p; ++ip) {
                const int ih = p.InRow(ip, ir);
                if (ih < 0 || ih >= p.h) continue;
                for (int iq = 0; iq < p.q; ++iq) {
                  const int iw = p.InCol(iq, is);
                  if (iw < 0 || iw >= p.w) continue;
                  sum.Add(x[p.XIndex(in, ic, ih, iw)] * dy[p.YIndex(in, ik, ip, iq)]);
                }
              }
            Blend(alpha, beta, sum.Total(), &dw[tap(ik, ic, ir, is)]);
          }
    return;
  }
  // ALGO_0 / ALGO_3: every (n, p, q) adds its products into all of dw atomically, racing.
  std::vector<float> result(static_cast<size_t>(p.WCount()), 0.0f);
  const int64_t positions = int64_t{p.n} * p.p * p.q;
  RunRacing(kRacingThreads, [&](int thread, int threads, const std::function<void()>& yield) {
    const int64_t begin = positions * thread / threads;
    const int64_t end = positions * (thread + 1) / threads;
    for (int64_t o = begin; o < end; ++o) {
      const int iq = static_cast<int>(o % p.q);
      const int ip = static_cast<int>(o / p.q % p.p);
      const int in = static_cast<int>(o / (int64_t{p.q} * p.p));
      for (int ik = 0; ik < p.k; ++ik) {
        const float g = dy[p.YIndex(in, ik, ip, iq)];
        for (int ic = 0; ic < p.c; ++ic)
          for (int ir = 0; ir < p.r; ++ir) {
            const int ih = p.InRow(ip, ir);
            if (ih < 0 || ih >= p.h) continue;
            for (int is = 0; is < p.s; ++is) {
              const int iw = p.InCol(iq, is);
              if (iw < 0 || iw >= p.w) continue;
              AtomicAddFloat(&result[static_cast<size_t>(tap(ik, ic, ir, is))],
                             g * x[p.XIndex(in, ic, ih, iw)]);
            }
          }
      }
      yield();
    }
  });
  for (size_t i = 0; i < result.size(); ++i) Blend(alpha, beta, result[i], &dw[i]);
}

cudnnDeterminism_t ToDeterminism(const AlgoTraits& t) {
  return t.deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
}

// A perf entry of any direction (the three Perf_t structs share one layout but not one type).
struct PerfEntry {
  int algo = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  float time = -1.0f;
  size_t memory = 0;
  cudnnDeterminism_t determinism = CUDNN_DETERMINISTIC;
};

template <typename Perf, typename Algo>
void WritePerf(const std::vector<PerfEntry>& entries, int requested, int* returned, Perf* results) {
  const int count = std::min(requested, static_cast<int>(entries.size()));
  for (int i = 0; i < count; ++i) {
    Perf perf{};
    perf.algo = static_cast<Algo>(entries[static_cast<size_t>(i)].algo);
    perf.status = entries[static_cast<size_t>(i)].status;
    perf.time = entries[static_cast<size_t>(i)].time;
    perf.memory = entries[static_cast<size_t>(i)].memory;
    perf.determinism = entries[static_cast<size_t>(i)].determinism;
    perf.mathType = CUDNN_DEFAULT_MATH;
    results[i] = perf;
  }
  *returned = count;
}

std::vector<PerfEntry> Heuristic(Direction direction, const Problem& p) {
  std::vector<PerfEntry> supported, unsupported;
  for (int algo : HeuristicOrder(direction)) {
    const AlgoTraits t = Traits(direction, algo, p);
    PerfEntry entry{algo, CUDNN_STATUS_SUCCESS, -1.0f, t.workspace, ToDeterminism(t)};
    if (!t.supported) {
      entry.status = CUDNN_STATUS_NOT_SUPPORTED;
      entry.memory = 0;
      unsupported.push_back(entry);
    } else {
      supported.push_back(entry);
    }
  }
  supported.insert(supported.end(), unsupported.begin(), unsupported.end());
  return supported;
}

// Device memory from the driver for the benchmark's scratch buffers, freed on destruction.
class Scratch {
 public:
  ~Scratch() {
    const CudnnDriver& driver = CudnnDriverFunctions();
    for (CUdeviceptr pointer : pointers_) {
      if (driver.mem_free != nullptr) driver.mem_free(pointer);
    }
  }
  float* Floats(int64_t count) {
    const CudnnDriver& driver = CudnnDriverFunctions();
    CUdeviceptr pointer = 0;
    if (driver.mem_alloc == nullptr ||
        driver.mem_alloc(&pointer, static_cast<size_t>(std::max<int64_t>(count, 1)) *
                                       sizeof(float)) != CUDA_SUCCESS) {
      return nullptr;
    }
    pointers_.push_back(pointer);
    return reinterpret_cast<float*>(pointer);
  }

 private:
  std::vector<CUdeviceptr> pointers_;
};

// The program's buffers for a Find*Ex benchmark (the output is overwritten) and how much
// workspace it offers; null buffers: the benchmark allocates zero-filled scratch buffers.
struct BenchmarkBuffers {
  float* x = nullptr;  // dx for backward data
  float* w = nullptr;  // dw for backward filter
  float* y = nullptr;  // dy for the backward directions
  size_t workspace_bytes = SIZE_MAX;
};

// The benchmark: runs each supported algorithm once and reports them fastest first by a noisy
// time; unsupported ones (and, with the program's buffers, those whose workspace does not fit
// the one offered) follow with CUDNN_STATUS_NOT_SUPPORTED.
cudnnStatus_t Benchmark(cudnnHandle_t handle, Direction direction, const Problem& p,
                        const BenchmarkBuffers& given, std::vector<PerfEntry>* entries) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t status = SynchronizeHandle(handle); status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  Scratch scratch;
  Problem problem = p;
  BenchmarkBuffers buffers = given;
  if (buffers.x == nullptr) {
    buffers.x = scratch.Floats(p.XCount());
    buffers.w = scratch.Floats(p.WCount());
    buffers.y = scratch.Floats(p.YCount());
    if (buffers.x == nullptr || buffers.w == nullptr || buffers.y == nullptr) {
      return CUDNN_STATUS_ALLOC_FAILED;
    }
    // The dense layouts the scratch buffers have.
    const int x_dense[4] = {p.c * p.h * p.w, p.h * p.w, p.w, 1};
    const int y_dense[4] = {p.k * p.p * p.q, p.p * p.q, p.q, 1};
    std::copy(x_dense, x_dense + 4, problem.x_strides);
    std::copy(y_dense, y_dense + 4, problem.y_strides);
  }
  std::minstd_rand random(std::random_device{}());
  std::uniform_real_distribution<float> noise(0.6f, 1.4f);
  std::vector<PerfEntry> unsupported;
  for (int algo = 0; algo < AlgoCount(direction); ++algo) {
    const AlgoTraits t = Traits(direction, algo, p);
    PerfEntry entry{algo, CUDNN_STATUS_SUCCESS, -1.0f, t.workspace, ToDeterminism(t)};
    if (!t.supported || t.workspace > buffers.workspace_bytes) {
      entry.status = CUDNN_STATUS_NOT_SUPPORTED;
      entry.memory = 0;
      unsupported.push_back(entry);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    switch (direction) {
      case Direction::kForward:
        Forward(problem, t, 1.0f, buffers.x, buffers.w, 0.0f, buffers.y);
        break;
      case Direction::kBackwardData:
        BackwardData(problem, t, 1.0f, buffers.w, buffers.y, 0.0f, buffers.x);
        break;
      case Direction::kBackwardFilter:
        BackwardFilter(problem, t, 1.0f, buffers.x, buffers.y, 0.0f, buffers.w);
        break;
    }
    const std::chrono::duration<float, std::milli> measured =
        std::chrono::steady_clock::now() - start;
    entry.time = (t.cost_ms + measured.count()) * noise(random);
    entries->push_back(entry);
  }
  std::stable_sort(entries->begin(), entries->end(),
                   [](const PerfEntry& a, const PerfEntry& b) { return a.time < b.time; });
  entries->insert(entries->end(), unsupported.begin(), unsupported.end());
  return CUDNN_STATUS_SUCCESS;
}

float Scalar(const void* value) {
  float result = 0.0f;
  std::memcpy(&result, value, sizeof(float));
  return result;
}

// Find*Algorithm (`buffers` empty) and Find*AlgorithmEx.
template <typename Perf, typename Algo>
cudnnStatus_t Find(cudnnHandle_t handle, Direction direction, cudnnTensorDescriptor_t x,
                   cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                   cudnnTensorDescriptor_t y, int requested, int* returned, Perf* results,
                   const BenchmarkBuffers& buffers = {}) {
  Problem p;
  cudnnStatus_t status;
  if (!DescribeProblem(x, w, conv, y, &p, &status)) return status;
  if (returned == nullptr || results == nullptr || requested <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (buffers.workspace_bytes != SIZE_MAX &&
      (buffers.x == nullptr || buffers.w == nullptr || buffers.y == nullptr)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  std::vector<PerfEntry> entries;
  if (status = Benchmark(handle, direction, p, buffers, &entries); status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  WritePerf<Perf, Algo>(entries, requested, returned, results);
  return CUDNN_STATUS_SUCCESS;
}

template <typename Perf, typename Algo>
cudnnStatus_t GetV7(cudnnHandle_t handle, Direction direction, cudnnTensorDescriptor_t x,
                    cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                    cudnnTensorDescriptor_t y, int requested, int* returned, Perf* results) {
  Problem p;
  cudnnStatus_t status;
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!DescribeProblem(x, w, conv, y, &p, &status)) return status;
  if (returned == nullptr || results == nullptr || requested <= 0) return CUDNN_STATUS_BAD_PARAM;
  WritePerf<Perf, Algo>(Heuristic(direction, p), requested, returned, results);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t WorkspaceSize(Direction direction, cudnnTensorDescriptor_t x,
                            cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                            cudnnTensorDescriptor_t y, int algo, size_t* bytes) {
  Problem p;
  cudnnStatus_t status;
  if (!DescribeProblem(x, w, conv, y, &p, &status)) return status;
  if (bytes == nullptr || algo < 0 || algo >= AlgoCount(direction)) return CUDNN_STATUS_BAD_PARAM;
  const AlgoTraits t = Traits(direction, algo, p);
  if (!t.supported) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = t.workspace;
  return CUDNN_STATUS_SUCCESS;
}

// The checks and the synchronisation every convolution call makes before computing.
cudnnStatus_t Prepare(cudnnHandle_t handle, Direction direction, cudnnTensorDescriptor_t x,
                      cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                      cudnnTensorDescriptor_t y, int algo, const void* workspace,
                      size_t workspace_bytes, std::initializer_list<const void*> pointers,
                      Problem* p, AlgoTraits* t) {
  cudnnStatus_t status;
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!DescribeProblem(x, w, conv, y, p, &status)) return status;
  for (const void* pointer : pointers) {
    if (pointer == nullptr) return CUDNN_STATUS_BAD_PARAM;
  }
  if (algo < 0 || algo >= AlgoCount(direction)) return CUDNN_STATUS_BAD_PARAM;
  *t = Traits(direction, algo, *p);
  if (!t->supported) return CUDNN_STATUS_NOT_SUPPORTED;
  if (workspace_bytes < t->workspace || (t->workspace > 0 && workspace == nullptr)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return SynchronizeHandle(handle);
}

// The program's buffers; a null workspace offers none.
BenchmarkBuffers ExBuffers(const void* x, const void* w, const void* y, const void* workspace,
                           size_t workspace_bytes) {
  BenchmarkBuffers buffers;
  buffers.x = static_cast<float*>(const_cast<void*>(x));
  buffers.w = static_cast<float*>(const_cast<void*>(w));
  buffers.y = static_cast<float*>(const_cast<void*>(y));
  buffers.workspace_bytes = workspace == nullptr ? 0 : workspace_bytes;
  return buffers;
}

}  // namespace
}  // namespace ndt::standin

using ndt::standin::Direction;

extern "C" {

size_t cudnnGetVersion(void) {
  return CUDNN_VERSION;
}

size_t cudnnGetCudartVersion(void) {
  return CUDA_VERSION;
}

size_t cudnnGetMaxDeviceVersion(void) {
  return 900;  // the SM version as major * 100 + minor * 10: the stand-in device is a 9.0
}

cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case MAJOR_VERSION:
      *value = CUDNN_MAJOR;
      return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION:
      *value = CUDNN_MINOR;
      return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL:
      *value = CUDNN_PATCHLEVEL;
      return CUDNN_STATUS_SUCCESS;
  }
  return CUDNN_STATUS_BAD_PARAM;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR:
      return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
    case CUDNN_STATUS_ALLOC_FAILED:
      return "CUDNN_STATUS_ALLOC_FAILED";
    default:
      break;
  }
  return "CUDNN_STATUS_UNKNOWN";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  const ndt::standin::CudnnDriver& driver = ndt::standin::CudnnDriverFunctions();
  if (driver.stream_synchronize == nullptr || driver.mem_alloc == nullptr ||
      driver.mem_free == nullptr) {
    return CUDNN_STATUS_NOT_INITIALIZED;
  }
  *handle = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr || stream == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

// ---- descriptors ----

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnTensorStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t desc, cudnnDataType_t dtype,
                                           int n, int c, int h, int w, int n_stride, int c_stride,
                                           int h_stride, int w_stride) {
  if (desc == nullptr || n <= 0 || c <= 0 || h <= 0 || w <= 0 || n_stride <= 0 || c_stride <= 0 ||
      h_stride <= 0 || w_stride <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  desc->dtype = dtype;
  const int dims[4] = {n, c, h, w};
  const int strides[4] = {n_stride, c_stride, h_stride, w_stride};
  std::copy(dims, dims + 4, desc->dims);
  std::copy(strides, strides + 4, desc->strides);
  desc->nb_dims = 4;
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dtype, int n, int c, int h, int w) {
  if (format == CUDNN_TENSOR_NCHW) {
    return cudnnSetTensor4dDescriptorEx(desc, dtype, n, c, h, w, c * h * w, h * w, w, 1);
  }
  if (format == CUDNN_TENSOR_NHWC) {
    return cudnnSetTensor4dDescriptorEx(desc, dtype, n, c, h, w, c * h * w, 1, w * c, c);
  }
  return CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t desc, cudnnDataType_t* dtype,
                                         int* n, int* c, int* h, int* w, int* n_stride,
                                         int* c_stride, int* h_stride, int* w_stride) {
  if (desc == nullptr || !desc->set) return CUDNN_STATUS_BAD_PARAM;
  *dtype = desc->dtype;
  *n = desc->dims[0];
  *c = desc->dims[1];
  *h = desc->dims[2];
  *w = desc->dims[3];
  *n_stride = desc->strides[0];
  *c_stride = desc->strides[1];
  *h_stride = desc->strides[2];
  *w_stride = desc->strides[3];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnFilterStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t dtype,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (desc == nullptr || k <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  desc->dtype = dtype;
  desc->format = format;
  const int dims[4] = {k, c, h, w};
  std::copy(dims, dims + 4, desc->dims);
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t desc, cudnnDataType_t* dtype,
                                         cudnnTensorFormat_t* format, int* k, int* c, int* h,
                                         int* w) {
  if (desc == nullptr || !desc->set) return CUDNN_STATUS_BAD_PARAM;
  *dtype = desc->dtype;
  *format = desc->format;
  *k = desc->dims[0];
  *c = desc->dims[1];
  *h = desc->dims[2];
  *w = desc->dims[3];
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnConvolutionStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (desc == nullptr || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 ||
      dilation_w <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  desc->pad[0] = pad_h;
  desc->pad[1] = pad_w;
  desc->stride[0] = u;
  desc->stride[1] = v;
  desc->dilation[0] = dilation_h;
  desc->dilation[1] = dilation_w;
  desc->mode = mode;
  desc->compute = compute;
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dDescriptor(const cudnnConvolutionDescriptor_t desc, int* pad_h,
                                              int* pad_w, int* u, int* v, int* dilation_h,
                                              int* dilation_w, cudnnConvolutionMode_t* mode,
                                              cudnnDataType_t* compute) {
  if (desc == nullptr || !desc->set) return CUDNN_STATUS_BAD_PARAM;
  *pad_h = desc->pad[0];
  *pad_w = desc->pad[1];
  *u = desc->stride[0];
  *v = desc->stride[1];
  *dilation_h = desc->dilation[0];
  *dilation_w = desc->dilation[1];
  *mode = desc->mode;
  *compute = desc->compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  desc->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t desc,
                                          cudnnMathType_t* math) {
  if (desc == nullptr || math == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *math = desc->math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groups) {
  if (desc == nullptr || groups <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (groups != 1) return CUDNN_STATUS_NOT_SUPPORTED;
  desc->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int* n, int* c,
                                                    int* h, int* width) {
  if (conv == nullptr || x == nullptr || w == nullptr || !conv->set || !x->set || !w->set ||
      w->dims[1] != x->dims[1]) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const int out_h = ndt::standin::OutputSize(x->dims[2], conv->pad[0], w->dims[2], conv->stride[0],
                                             conv->dilation[0]);
  const int out_w = ndt::standin::OutputSize(x->dims[3], conv->pad[1], w->dims[3], conv->stride[1],
                                             conv->dilation[1]);
  if (out_h <= 0 || out_w <= 0) return CUDNN_STATUS_BAD_PARAM;
  *n = x->dims[0];
  *c = w->dims[0];
  *h = out_h;
  *width = out_w;
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithm queries ----

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t, int* count) {
  if (count == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t, int* count) {
  if (count == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t, int* count) {
  if (count == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  return ndt::standin::GetV7<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      handle, Direction::kForward, x, w, conv, y, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  return ndt::standin::GetV7<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      handle, Direction::kBackwardData, dx, w, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  return ndt::standin::GetV7<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      handle, Direction::kBackwardFilter, x, dw, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, const int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  return ndt::standin::Find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      handle, Direction::kForward, x, w, conv, y, requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  return ndt::standin::Find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      handle, Direction::kBackwardData, dx, w, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  return ndt::standin::Find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      handle, Direction::kBackwardFilter, x, dw, conv, dy, requested, returned, results);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc, const void* x,
    const cudnnFilterDescriptor_t w_desc, const void* w, const cudnnConvolutionDescriptor_t conv,
    const cudnnTensorDescriptor_t y_desc, void* y, const int requested, int* returned,
    cudnnConvolutionFwdAlgoPerf_t* results, void* workspace, size_t workspace_bytes) {
  return ndt::standin::Find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      handle, Direction::kForward, x_desc, w_desc, conv, y_desc, requested, returned, results,
      ndt::standin::ExBuffers(x, w, y, workspace, workspace_bytes));
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w_desc, const void* w,
    const cudnnTensorDescriptor_t dy_desc, const void* dy, const cudnnConvolutionDescriptor_t conv,
    const cudnnTensorDescriptor_t dx_desc, void* dx, const int requested, int* returned,
    cudnnConvolutionBwdDataAlgoPerf_t* results, void* workspace, size_t workspace_bytes) {
  return ndt::standin::Find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      handle, Direction::kBackwardData, dx_desc, w_desc, conv, dy_desc, requested, returned,
      results, ndt::standin::ExBuffers(dx, w, dy, workspace, workspace_bytes));
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x_desc, const void* x,
    const cudnnTensorDescriptor_t dy_desc, const void* dy, const cudnnConvolutionDescriptor_t conv,
    const cudnnFilterDescriptor_t dw_desc, void* dw, const int requested, int* returned,
    cudnnConvolutionBwdFilterAlgoPerf_t* results, void* workspace, size_t workspace_bytes) {
  return ndt::standin::Find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      handle, Direction::kBackwardFilter, x_desc, dw_desc, conv, dy_desc, requested, returned,
      results, ndt::standin::ExBuffers(x, dw, dy, workspace, workspace_bytes));
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y,
    cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
  return ndt::standin::WorkspaceSize(Direction::kForward, x, w, conv, y, algo, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx,
    cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  return ndt::standin::WorkspaceSize(Direction::kBackwardData, dx, w, conv, dy, algo, bytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  return ndt::standin::WorkspaceSize(Direction::kBackwardFilter, x, dw, conv, dy, algo, bytes);
}

// ---- the convolutions ----

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t x_desc, const void* x,
                                      const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void* workspace,
                                      size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  ndt::standin::Problem p;
  ndt::standin::AlgoTraits t;
  if (const cudnnStatus_t status =
          ndt::standin::Prepare(handle, Direction::kForward, x_desc, w_desc, conv, y_desc, algo,
                                workspace, workspace_bytes, {alpha, x, w, beta, y}, &p, &t);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  AsKernel(handle->stream, [&] {
    ndt::standin::Forward(p, t, ndt::standin::Scalar(alpha), static_cast<const float*>(x),
                          static_cast<const float*>(w), ndt::standin::Scalar(beta),
                          static_cast<float*>(y));
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t w_desc, const void* w,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dx_desc, void* dx) {
  ndt::standin::Problem p;
  ndt::standin::AlgoTraits t;
  if (const cudnnStatus_t status =
          ndt::standin::Prepare(handle, Direction::kBackwardData, dx_desc, w_desc, conv, dy_desc,
                                algo, workspace, workspace_bytes, {alpha, w, dy, beta, dx}, &p, &t);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  AsKernel(handle->stream, [&] {
    ndt::standin::BackwardData(p, t, ndt::standin::Scalar(alpha), static_cast<const float*>(w),
                               static_cast<const float*>(dy), ndt::standin::Scalar(beta),
                               static_cast<float*>(dx));
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  ndt::standin::Problem p;
  ndt::standin::AlgoTraits t;
  if (const cudnnStatus_t status =
          ndt::standin::Prepare(handle, Direction::kBackwardFilter, x_desc, dw_desc, conv, dy_desc,
                                algo, workspace, workspace_bytes, {alpha, x, dy, beta, dw}, &p, &t);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  AsKernel(handle->stream, [&] {
    ndt::standin::BackwardFilter(p, t, ndt::standin::Scalar(alpha), static_cast<const float*>(x),
                                 static_cast<const float*>(dy), ndt::standin::Scalar(beta),
                                 static_cast<float*>(dw));
  });
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
