// The stand-in cuDNN's RNN API (cudnn_adv.h, cuDNN 9) and its dropout descriptor, as PyTorch's
// nn.LSTM / nn.GRU / nn.RNN drive them: cudnnSetRNNDescriptor_v8, cudnnSetRNNDataDescriptor,
// cudnnGetRNNWeightSpaceSize, cudnnGetRNNTempSpaceSizes, cudnnRNNForward (inference and training,
// with reserve space), cudnnRNNBackwardData_v8 and cudnnRNNBackwardWeights_v8; the 3-d tensor
// descriptors of the hidden and cell states (cudnnSetTensorNdDescriptor); the dropout descriptor
// (cudnnDropoutGetStatesSize, cudnnSetDropoutDescriptor, cudnnRestoreDropoutDescriptor).
//
// Supported: float data and math precision, unidirectional, linear input, double bias (PyTorch's
// layout), projection size = hidden size, every sequence of a batch full length, the three data
// layouts; anything else is CUDNN_STATUS_NOT_SUPPORTED. The weight space is the stand-in's own
// layout (cuDNN's is opaque): per layer W (gates·H × in), R (gates·H × H), bW, bR, gates in
// cuDNN's order (LSTM i, f, g, o; GRU r, z, h'). Each call synchronises the handle's stream and
// computes on the host.
//
// Determinism (a stand-in choice, README.md): every algorithm computes the same formulas; in
// cudnnRNNBackwardWeights_v8 CUDNN_RNN_ALGO_STANDARD adds each weight's terms in a fixed order,
// while the three CUDNN_RNN_ALGO_PERSIST_* algorithms split the (time step, batch) terms over 4
// threads that add them into the weight gradients with racing float atomics: nondeterministic.
// cuDNN itself documents no RNN algorithm as nondeterministic.
#include <cuda.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "standin_atomic.h"
#include "standin_cudnn_internal.h"

struct cudnnDropoutStruct {
  float probability = 0;
  void* states = nullptr;
  size_t states_bytes = 0;
  unsigned long long seed = 0;
  bool set = false;
};

struct cudnnRNNStruct {
  cudnnRNNAlgo_t algo = CUDNN_RNN_ALGO_STANDARD;
  cudnnRNNMode_t mode = CUDNN_LSTM;
  cudnnRNNBiasMode_t bias = CUDNN_RNN_DOUBLE_BIAS;
  cudnnDirectionMode_t direction = CUDNN_UNIDIRECTIONAL;
  cudnnRNNInputMode_t input_mode = CUDNN_LINEAR_INPUT;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnDataType_t math_prec = CUDNN_DATA_FLOAT;
  cudnnMathType_t math_type = CUDNN_DEFAULT_MATH;
  int32_t input_size = 0;
  int32_t hidden_size = 0;
  int32_t proj_size = 0;
  int32_t layers = 0;
  cudnnDropoutDescriptor_t dropout = nullptr;
  uint32_t aux_flags = 0;
  int built_batch = 0;  // cudnnBuildRNNDynamic
  bool set = false;
};

struct cudnnRNNDataStruct {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnRNNDataLayout_t layout = CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
  int max_seq = 0;
  int batch = 0;
  int vector = 0;
  std::vector<int> lengths;
  bool set = false;
};

namespace ndt::standin {
namespace {

constexpr size_t kDropoutStatesBytes = 64;
constexpr uint64_t kDropoutMagic = 0x6e64745f64726f70;  // "ndt_drop"
constexpr int kRacingThreads = 4;

// The dropout states buffer: a magic word, the key drawn from the seed, and a counter that
// every training forward with dropout advances (as a GPU generator's state advances).
struct DropoutStates {
  uint64_t magic;
  uint64_t key;
  uint64_t counter;
};

uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float Sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

// One RNN problem: the descriptor's facts and the batch's shape.
struct Shape {
  const cudnnRNNStruct* rnn = nullptr;
  int gates = 1;
  int hidden = 0;
  int layers = 0;
  int seq = 0;
  int batch = 0;
  int input = 0;
  cudnnRNNDataLayout_t layout = CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
  float dropout = 0;

  int In(int layer) const { return layer == 0 ? input : hidden; }
  // Floats of one layer's weights: W, R, bW, bR.
  size_t LayerWeights(int layer) const {
    return static_cast<size_t>(gates) * hidden * (In(layer) + hidden + 2);
  }
  size_t WeightOffset(int layer) const {
    size_t offset = 0;
    for (int l = 0; l < layer; ++l) offset += LayerWeights(l);
    return offset;
  }
  size_t WeightCount() const { return WeightOffset(layers); }
  // Floats of one (layer, t, n) record of the reserve space: activations (gates·H), GRU's
  // recurrent term (H), c (H), h (H), dropout mask (H), then backward data's gradients of the
  // gates' input (gates·H) and recurrent (gates·H) pre-activations.
  size_t RecordFloats() const { return static_cast<size_t>(3 * gates + 4) * hidden; }
  size_t ReserveFloats() const {
    return RecordFloats() * static_cast<size_t>(layers) * seq * batch;
  }
  size_t Record(int layer, int t, int n) const {
    return ((static_cast<size_t>(layer) * seq + t) * batch + n) * RecordFloats();
  }
  // Index of element 0 of (t, n) in a data tensor of `vector` floats per element.
  size_t Data(int t, int n, int vector) const {
    const size_t row = layout == CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED
                           ? static_cast<size_t>(n) * seq + t
                           : static_cast<size_t>(t) * batch + n;
    return row * vector;
  }
  size_t State(int layer, int n) const { return (static_cast<size_t>(layer) * batch + n) * hidden; }
};

// The offsets inside a reserve record.
struct RecordLayout {
  size_t acts, extra, c, h, mask, dw_pre, dr_pre;
  explicit RecordLayout(const Shape& s) {
    const size_t gh = static_cast<size_t>(s.gates) * s.hidden;
    acts = 0;
    extra = gh;
    c = extra + s.hidden;
    h = c + s.hidden;
    mask = h + s.hidden;
    dw_pre = mask + s.hidden;
    dr_pre = dw_pre + gh;
  }
};

cudnnStatus_t Describe(const cudnnRNNStruct* rnn, const cudnnRNNDataStruct* x, Shape* shape) {
  if (rnn == nullptr || !rnn->set || x == nullptr || !x->set) return CUDNN_STATUS_BAD_PARAM;
  if (rnn->dtype != CUDNN_DATA_FLOAT || rnn->math_prec != CUDNN_DATA_FLOAT ||
      x->dtype != CUDNN_DATA_FLOAT || rnn->direction != CUDNN_UNIDIRECTIONAL ||
      rnn->input_mode != CUDNN_LINEAR_INPUT || rnn->bias != CUDNN_RNN_DOUBLE_BIAS ||
      rnn->proj_size != rnn->hidden_size) {
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (x->vector != rnn->input_size) return CUDNN_STATUS_BAD_PARAM;
  for (int length : x->lengths) {
    if (length != x->max_seq) return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (rnn->algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC && rnn->built_batch != x->batch) {
    return CUDNN_STATUS_NOT_SUPPORTED;  // cudnnBuildRNNDynamic was not called for this batch
  }
  shape->rnn = rnn;
  shape->gates = rnn->mode == CUDNN_LSTM ? 4 : rnn->mode == CUDNN_GRU ? 3 : 1;
  shape->hidden = rnn->hidden_size;
  shape->layers = rnn->layers;
  shape->seq = x->max_seq;
  shape->batch = x->batch;
  shape->input = rnn->input_size;
  shape->layout = x->layout;
  shape->dropout = rnn->dropout != nullptr && rnn->dropout->set ? rnn->dropout->probability : 0;
  return CUDNN_STATUS_SUCCESS;
}

size_t Workspace(const Shape& s) {
  const size_t bytes = static_cast<size_t>(s.batch) * s.gates * s.hidden * sizeof(float);
  return s.rnn->algo == CUDNN_RNN_ALGO_STANDARD ? bytes : 2 * bytes;
}

// The weights of one layer, views into the weight space.
struct LayerWeights {
  const float* w;   // gates·H × in
  const float* r;   // gates·H × H
  const float* bw;  // gates·H
  const float* br;  // gates·H
};

LayerWeights WeightsOf(const Shape& s, const float* space, int layer) {
  const float* base = space + s.WeightOffset(layer);
  const size_t gh = static_cast<size_t>(s.gates) * s.hidden;
  LayerWeights lw;
  lw.w = base;
  lw.r = lw.w + gh * s.In(layer);
  lw.bw = lw.r + gh * s.hidden;
  lw.br = lw.bw + gh;
  return lw;
}

// The input of `layer` at (t, n): x, or the layer below's h times its dropout mask.
void LayerInput(const Shape& s, const RecordLayout& rl, const float* x, const float* reserve,
                int layer, int t, int n, float* out) {
  if (layer == 0) {
    std::copy_n(x + s.Data(t, n, s.input), s.input, out);
    return;
  }
  const float* below = reserve + s.Record(layer - 1, t, n);
  for (int k = 0; k < s.hidden; ++k) out[k] = below[rl.h + k] * below[rl.mask + k];
}

// h (or c) of `layer` before step t for batch element n: the initial state at t = 0.
const float* Previous(const Shape& s, const RecordLayout& rl, const float* reserve,
                      const float* initial, const std::vector<float>& zeros, int layer, int t,
                      int n, bool cell) {
  if (t > 0) return reserve + s.Record(layer, t - 1, n) + (cell ? rl.c : rl.h);
  return initial != nullptr ? initial + s.State(layer, n) : zeros.data();
}

cudnnStatus_t Forward(const Shape& s, bool training, const float* x, float* y, const float* hx,
                      float* hy, const float* cx, float* cy, const float* weights,
                      float* reserve_out) {
  const RecordLayout rl(s);
  std::vector<float> local;
  float* reserve = reserve_out;
  if (!training) {
    local.assign(s.ReserveFloats(), 0.0f);
    reserve = local.data();
  }
  // Dropout between layers, in training only: each mask element kept with 1 - p, scaled.
  DropoutStates* states = nullptr;
  if (training && s.dropout > 0 && s.layers > 1) {
    states = static_cast<DropoutStates*>(s.rnn->dropout->states);
    if (states == nullptr || s.rnn->dropout->states_bytes < sizeof(DropoutStates) ||
        states->magic != kDropoutMagic) {
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  const std::vector<float> zeros(static_cast<size_t>(s.hidden), 0.0f);
  const int gh = s.gates * s.hidden;
  std::vector<float> in(static_cast<size_t>(std::max(s.input, s.hidden)));
  std::vector<float> pw(gh), pr(gh);
  for (int l = 0; l < s.layers; ++l) {
    const LayerWeights lw = WeightsOf(s, weights, l);
    const int in_size = s.In(l);
    for (int t = 0; t < s.seq; ++t) {
      for (int n = 0; n < s.batch; ++n) {
        LayerInput(s, rl, x, reserve, l, t, n, in.data());
        const float* h_prev = Previous(s, rl, reserve, hx, zeros, l, t, n, false);
        const float* c_prev = Previous(s, rl, reserve, cx, zeros, l, t, n, true);
        for (int g = 0; g < gh; ++g) {
          float a = lw.bw[g], b = lw.br[g];
          for (int k = 0; k < in_size; ++k) a += lw.w[static_cast<size_t>(g) * in_size + k] * in[k];
          for (int k = 0; k < s.hidden; ++k)
            b += lw.r[static_cast<size_t>(g) * s.hidden + k] * h_prev[k];
          pw[g] = a;
          pr[g] = b;
        }
        float* rec = reserve + s.Record(l, t, n);
        const int H = s.hidden;
        for (int k = 0; k < H; ++k) {
          float h = 0, c = 0;
          switch (s.rnn->mode) {
            case CUDNN_LSTM: {
              const float i = Sigmoid(pw[k] + pr[k]), f = Sigmoid(pw[H + k] + pr[H + k]);
              const float g = std::tanh(pw[2 * H + k] + pr[2 * H + k]);
              const float o = Sigmoid(pw[3 * H + k] + pr[3 * H + k]);
              c = f * c_prev[k] + i * g;
              h = o * std::tanh(c);
              rec[rl.acts + k] = i;
              rec[rl.acts + H + k] = f;
              rec[rl.acts + 2 * H + k] = g;
              rec[rl.acts + 3 * H + k] = o;
              break;
            }
            case CUDNN_GRU: {
              const float r = Sigmoid(pw[k] + pr[k]), z = Sigmoid(pw[H + k] + pr[H + k]);
              const float u = pr[2 * H + k];
              const float hh = std::tanh(pw[2 * H + k] + r * u);
              h = (1 - z) * hh + z * h_prev[k];
              rec[rl.acts + k] = r;
              rec[rl.acts + H + k] = z;
              rec[rl.acts + 2 * H + k] = hh;
              rec[rl.extra + k] = u;
              break;
            }
            case CUDNN_RNN_TANH:
              h = std::tanh(pw[k] + pr[k]);
              rec[rl.acts + k] = h;
              break;
            default:  // CUDNN_RNN_RELU
              h = std::max(0.0f, pw[k] + pr[k]);
              rec[rl.acts + k] = h;
              break;
          }
          rec[rl.c + k] = c;
          rec[rl.h + k] = h;
          float keep = 1.0f;
          if (states != nullptr && l + 1 < s.layers) {
            const uint64_t element = (static_cast<uint64_t>(l * s.seq + t) * s.batch + n) * H + k;
            const uint64_t bits =
                Mix(states->key ^ Mix(states->counter * 0x100000001b3ull + element));
            const float uniform = static_cast<float>(bits >> 40) / static_cast<float>(1 << 24);
            keep = uniform < s.dropout ? 0.0f : 1.0f / (1.0f - s.dropout);
          }
          rec[rl.mask + k] = keep;
        }
      }
    }
  }
  const int top = s.layers - 1;
  for (int t = 0; t < s.seq; ++t) {
    for (int n = 0; n < s.batch; ++n) {
      std::copy_n(reserve + s.Record(top, t, n) + rl.h, s.hidden, y + s.Data(t, n, s.hidden));
    }
  }
  for (int l = 0; l < s.layers; ++l) {
    for (int n = 0; n < s.batch; ++n) {
      const float* last = reserve + s.Record(l, s.seq - 1, n);
      if (hy != nullptr) std::copy_n(last + rl.h, s.hidden, hy + s.State(l, n));
      if (cy != nullptr && s.rnn->mode == CUDNN_LSTM) {
        std::copy_n(last + rl.c, s.hidden, cy + s.State(l, n));
      }
    }
  }
  if (states != nullptr) ++states->counter;
  return CUDNN_STATUS_SUCCESS;
}

void BackwardData(const Shape& s, const float* dy, float* dx, const float* hx, const float* dhy,
                  float* dhx, const float* cx, const float* dcy, float* dcx, const float* weights,
                  float* reserve) {
  const RecordLayout rl(s);
  const std::vector<float> zeros(static_cast<size_t>(s.hidden), 0.0f);
  const int H = s.hidden, gh = s.gates * H;
  const size_t steps = static_cast<size_t>(s.seq) * s.batch;
  // The gradient reaching the current layer's h from above, per (t, n).
  std::vector<float> dh_up(steps * H);
  for (int t = 0; t < s.seq; ++t)
    for (int n = 0; n < s.batch; ++n)
      std::copy_n(dy + s.Data(t, n, H), H,
                  dh_up.data() + (static_cast<size_t>(t) * s.batch + n) * H);
  std::vector<float> din;
  std::vector<float> dh_next(static_cast<size_t>(s.batch) * H), dc_next(dh_next.size());
  for (int l = s.layers - 1; l >= 0; --l) {
    const LayerWeights lw = WeightsOf(s, weights, l);
    const int in_size = s.In(l);
    din.assign(steps * in_size, 0.0f);
    for (int n = 0; n < s.batch; ++n) {
      for (int k = 0; k < H; ++k) {
        dh_next[static_cast<size_t>(n) * H + k] = dhy ? dhy[s.State(l, n) + k] : 0.0f;
        dc_next[static_cast<size_t>(n) * H + k] = dcy ? dcy[s.State(l, n) + k] : 0.0f;
      }
    }
    for (int t = s.seq - 1; t >= 0; --t) {
      for (int n = 0; n < s.batch; ++n) {
        float* rec = reserve + s.Record(l, t, n);
        const float* h_prev = Previous(s, rl, reserve, hx, zeros, l, t, n, false);
        const float* c_prev = Previous(s, rl, reserve, cx, zeros, l, t, n, true);
        float* dhn = dh_next.data() + static_cast<size_t>(n) * H;
        float* dcn = dc_next.data() + static_cast<size_t>(n) * H;
        const float* up = dh_up.data() + (static_cast<size_t>(t) * s.batch + n) * H;
        float* dwp = rec + rl.dw_pre;
        float* drp = rec + rl.dr_pre;
        std::vector<float> direct(H, 0.0f);  // dh_prev terms that bypass R
        for (int k = 0; k < H; ++k) {
          const float dh = up[k] + dhn[k];
          const float* a = rec + rl.acts;
          switch (s.rnn->mode) {
            case CUDNN_LSTM: {
              const float i = a[k], f = a[H + k], g = a[2 * H + k], o = a[3 * H + k];
              const float tc = std::tanh(rec[rl.c + k]);
              const float dc = dcn[k] + dh * o * (1 - tc * tc);
              dwp[k] = dc * g * i * (1 - i);
              dwp[H + k] = dc * c_prev[k] * f * (1 - f);
              dwp[2 * H + k] = dc * i * (1 - g * g);
              dwp[3 * H + k] = dh * tc * o * (1 - o);
              for (int q = 0; q < 4; ++q) drp[q * H + k] = dwp[q * H + k];
              dcn[k] = dc * f;
              break;
            }
            case CUDNN_GRU: {
              const float r = a[k], z = a[H + k], hh = a[2 * H + k], u = rec[rl.extra + k];
              const float dpre_h = dh * (1 - z) * (1 - hh * hh);
              const float dpre_z = dh * (h_prev[k] - hh) * z * (1 - z);
              const float dpre_r = dpre_h * u * r * (1 - r);
              dwp[k] = dpre_r;
              dwp[H + k] = dpre_z;
              dwp[2 * H + k] = dpre_h;
              drp[k] = dpre_r;
              drp[H + k] = dpre_z;
              drp[2 * H + k] = dpre_h * r;
              direct[k] = dh * z;
              break;
            }
            case CUDNN_RNN_TANH:
              dwp[k] = drp[k] = dh * (1 - a[k] * a[k]);
              break;
            default:
              dwp[k] = drp[k] = a[k] > 0 ? dh : 0.0f;
              break;
          }
        }
        for (int k = 0; k < H; ++k) {
          float sum = direct[k];
          for (int g = 0; g < gh; ++g) sum += lw.r[static_cast<size_t>(g) * H + k] * drp[g];
          dhn[k] = sum;
        }
        float* di = din.data() + (static_cast<size_t>(t) * s.batch + n) * in_size;
        for (int k = 0; k < in_size; ++k) {
          float sum = 0;
          for (int g = 0; g < gh; ++g) sum += lw.w[static_cast<size_t>(g) * in_size + k] * dwp[g];
          di[k] = sum;
        }
      }
    }
    for (int n = 0; n < s.batch; ++n) {
      if (dhx != nullptr)
        std::copy_n(dh_next.data() + static_cast<size_t>(n) * H, H, dhx + s.State(l, n));
      if (dcx != nullptr && s.rnn->mode == CUDNN_LSTM) {
        std::copy_n(dc_next.data() + static_cast<size_t>(n) * H, H, dcx + s.State(l, n));
      }
    }
    if (l > 0) {  // through the dropout mask of the layer below
      for (int t = 0; t < s.seq; ++t)
        for (int n = 0; n < s.batch; ++n) {
          const float* below = reserve + s.Record(l - 1, t, n);
          const size_t at = (static_cast<size_t>(t) * s.batch + n) * H;
          for (int k = 0; k < H; ++k) dh_up[at + k] = din[at + k] * below[rl.mask + k];
        }
    } else {
      for (int t = 0; t < s.seq; ++t)
        for (int n = 0; n < s.batch; ++n)
          std::copy_n(din.data() + (static_cast<size_t>(t) * s.batch + n) * s.input, s.input,
                      dx + s.Data(t, n, s.input));
    }
  }
}

// dweights += the weight gradients, term by term per (layer, t, n).
void BackwardWeights(const Shape& s, const float* x, const float* hx, float* dweights,
                     const float* reserve) {
  const RecordLayout rl(s);
  const std::vector<float> zeros(static_cast<size_t>(s.hidden), 0.0f);
  const int H = s.hidden, gh = s.gates * H;
  const int64_t terms = int64_t{s.seq} * s.batch;
  // The terms of (layer, term index) added into `out` by `add`.
  const auto accumulate = [&](int l, int64_t term, std::vector<float>& in,
                              const std::function<void(float*, float)>& add) {
    const int t = static_cast<int>(term / s.batch), n = static_cast<int>(term % s.batch);
    const int in_size = s.In(l);
    LayerInput(s, rl, x, reserve, l, t, n, in.data());
    const float* h_prev = Previous(s, rl, reserve, hx, zeros, l, t, n, false);
    const float* rec = reserve + s.Record(l, t, n);
    float* base = dweights + s.WeightOffset(l);
    float* dw = base;
    float* dr = dw + static_cast<size_t>(gh) * in_size;
    float* dbw = dr + static_cast<size_t>(gh) * H;
    float* dbr = dbw + gh;
    for (int g = 0; g < gh; ++g) {
      const float a = rec[rl.dw_pre + g], b = rec[rl.dr_pre + g];
      for (int k = 0; k < in_size; ++k) add(&dw[static_cast<size_t>(g) * in_size + k], a * in[k]);
      for (int k = 0; k < H; ++k) add(&dr[static_cast<size_t>(g) * H + k], b * h_prev[k]);
      add(&dbw[g], a);
      add(&dbr[g], b);
    }
  };
  if (s.rnn->algo == CUDNN_RNN_ALGO_STANDARD) {
    // Fixed order: each weight's terms summed in (t, n) order, then added once.
    std::vector<float> in(static_cast<size_t>(std::max(s.input, s.hidden)));
    for (int l = 0; l < s.layers; ++l) {
      std::vector<float> sum(s.LayerWeights(l), 0.0f);
      float* layer_base = dweights + s.WeightOffset(l);
      for (int64_t term = 0; term < terms; ++term) {
        accumulate(l, term, in, [&](float* cell, float value) { sum[cell - layer_base] += value; });
      }
      for (size_t i = 0; i < sum.size(); ++i) layer_base[i] += sum[i];
    }
    return;
  }
  // PERSIST_*: the terms are split over racing threads that add straight into dweights.
  RunRacing(kRacingThreads, [&](int thread, int threads, const std::function<void()>& yield) {
    std::vector<float> in(static_cast<size_t>(std::max(s.input, s.hidden)));
    for (int l = 0; l < s.layers; ++l) {
      for (int64_t term = terms * thread / threads; term < terms * (thread + 1) / threads; ++term) {
        accumulate(l, term, in, [&](float* cell, float value) {
          AtomicAddFloat(cell, value);
          yield();
        });
      }
    }
  });
}

}  // namespace
}  // namespace ndt::standin

using ndt::standin::DropoutStates;
using ndt::standin::kDropoutMagic;
using ndt::standin::kDropoutStatesBytes;
using ndt::standin::Shape;

extern "C" {

// ---- 3-d tensors (hidden and cell states) ----

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t desc, cudnnDataType_t dtype,
                                         int nb_dims, const int dims[], const int strides[]) {
  if (desc == nullptr || dims == nullptr || strides == nullptr || nb_dims < 3 || nb_dims > 4) {
    return nb_dims > 4 ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_BAD_PARAM;
  }
  for (int i = 0; i < nb_dims; ++i) {
    if (dims[i] <= 0 || strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  }
  desc->dtype = dtype;
  for (int i = 0; i < 4; ++i) {
    desc->dims[i] = i < nb_dims ? dims[i] : 1;
    desc->strides[i] = i < nb_dims ? strides[i] : 1;
  }
  desc->nb_dims = nb_dims;
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t desc, int requested,
                                         cudnnDataType_t* dtype, int* nb_dims, int dims[],
                                         int strides[]) {
  if (desc == nullptr || !desc->set || dtype == nullptr || nb_dims == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *dtype = desc->dtype;
  *nb_dims = desc->nb_dims;
  for (int i = 0; i < std::min(requested, desc->nb_dims); ++i) {
    if (dims != nullptr) dims[i] = desc->dims[i];
    if (strides != nullptr) strides[i] = desc->strides[i];
  }
  return CUDNN_STATUS_SUCCESS;
}

// ---- dropout ----

cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnDropoutStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t* bytes) {
  if (handle == nullptr || bytes == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *bytes = kDropoutStatesBytes;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
                                        float dropout, void* states, size_t states_bytes,
                                        unsigned long long seed) {
  if (desc == nullptr || handle == nullptr || dropout < 0 || dropout >= 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (states != nullptr) {
    if (states_bytes < kDropoutStatesBytes) return CUDNN_STATUS_INVALID_VALUE;
    if (const cudnnStatus_t status = ndt::standin::SynchronizeHandle(handle);
        status != CUDNN_STATUS_SUCCESS) {
      return status;
    }
    std::memset(states, 0, states_bytes);
    DropoutStates initial{kDropoutMagic, ndt::standin::Mix(seed), 0};
    std::memcpy(states, &initial, sizeof initial);
  }
  *desc = cudnnDropoutStruct{dropout, states, states_bytes, seed, true};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
                                            float dropout, void* states, size_t states_bytes,
                                            unsigned long long seed) {
  if (desc == nullptr || handle == nullptr || dropout < 0 || dropout >= 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *desc = cudnnDropoutStruct{dropout, states, states_bytes, seed, true};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
                                        float* dropout, void** states, unsigned long long* seed) {
  if (desc == nullptr || handle == nullptr || !desc->set) return CUDNN_STATUS_BAD_PARAM;
  if (dropout != nullptr) *dropout = desc->probability;
  if (states != nullptr) *states = desc->states;
  if (seed != nullptr) *seed = desc->seed;
  return CUDNN_STATUS_SUCCESS;
}

// ---- RNN descriptors ----

cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnRNNStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetRNNDescriptor_v8(
    cudnnRNNDescriptor_t desc, cudnnRNNAlgo_t algo, cudnnRNNMode_t mode, cudnnRNNBiasMode_t bias,
    cudnnDirectionMode_t direction, cudnnRNNInputMode_t input_mode, cudnnDataType_t dtype,
    cudnnDataType_t math_prec, cudnnMathType_t math_type, int32_t input_size, int32_t hidden_size,
    int32_t proj_size, int32_t layers, cudnnDropoutDescriptor_t dropout, uint32_t aux_flags) {
  if (desc == nullptr || algo < CUDNN_RNN_ALGO_STANDARD || algo >= CUDNN_RNN_ALGO_COUNT ||
      mode < CUDNN_RNN_RELU || mode > CUDNN_GRU || input_size <= 0 || hidden_size <= 0 ||
      proj_size <= 0 || layers <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  cudnnRNNStruct set;
  set.algo = algo;
  set.mode = mode;
  set.bias = bias;
  set.direction = direction;
  set.input_mode = input_mode;
  set.dtype = dtype;
  set.math_prec = math_prec;
  set.math_type = math_type;
  set.input_size = input_size;
  set.hidden_size = hidden_size;
  set.proj_size = proj_size;
  set.layers = layers;
  set.dropout = dropout;
  set.aux_flags = aux_flags;
  set.set = true;
  *desc = set;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, cudnnRNNAlgo_t* algo,
                                       cudnnRNNMode_t* mode, cudnnRNNBiasMode_t* bias,
                                       cudnnDirectionMode_t* direction,
                                       cudnnRNNInputMode_t* input_mode, cudnnDataType_t* dtype,
                                       cudnnDataType_t* math_prec, cudnnMathType_t* math_type,
                                       int32_t* input_size, int32_t* hidden_size,
                                       int32_t* proj_size, int32_t* layers,
                                       cudnnDropoutDescriptor_t* dropout, uint32_t* aux_flags) {
  if (desc == nullptr || !desc->set) return CUDNN_STATUS_BAD_PARAM;
  if (algo) *algo = desc->algo;
  if (mode) *mode = desc->mode;
  if (bias) *bias = desc->bias;
  if (direction) *direction = desc->direction;
  if (input_mode) *input_mode = desc->input_mode;
  if (dtype) *dtype = desc->dtype;
  if (math_prec) *math_prec = desc->math_prec;
  if (math_type) *math_type = desc->math_type;
  if (input_size) *input_size = desc->input_size;
  if (hidden_size) *hidden_size = desc->hidden_size;
  if (proj_size) *proj_size = desc->proj_size;
  if (layers) *layers = desc->layers;
  if (dropout) *dropout = desc->dropout;
  if (aux_flags) *aux_flags = desc->aux_flags;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBuildRNNDynamic(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int batch) {
  if (handle == nullptr || desc == nullptr || !desc->set || batch <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (desc->algo != CUDNN_RNN_ALGO_PERSIST_DYNAMIC) return CUDNN_STATUS_BAD_PARAM;
  desc->built_batch = batch;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnRNNDataStruct();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, cudnnDataType_t dtype,
                                        cudnnRNNDataLayout_t layout, int max_seq, int batch,
                                        int vector, const int lengths[], void* /*padding_fill*/) {
  if (desc == nullptr || lengths == nullptr || max_seq <= 0 || batch <= 0 || vector <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  for (int n = 0; n < batch; ++n) {
    if (lengths[n] <= 0 || lengths[n] > max_seq) return CUDNN_STATUS_BAD_PARAM;
  }
  desc->dtype = dtype;
  desc->layout = layout;
  desc->max_seq = max_seq;
  desc->batch = batch;
  desc->vector = vector;
  desc->lengths.assign(lengths, lengths + batch);
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, cudnnDataType_t* dtype,
                                        cudnnRNNDataLayout_t* layout, int* max_seq, int* batch,
                                        int* vector, int requested, int lengths[],
                                        void* /*padding_fill*/) {
  if (desc == nullptr || !desc->set) return CUDNN_STATUS_BAD_PARAM;
  if (dtype) *dtype = desc->dtype;
  if (layout) *layout = desc->layout;
  if (max_seq) *max_seq = desc->max_seq;
  if (batch) *batch = desc->batch;
  if (vector) *vector = desc->vector;
  for (int n = 0; lengths != nullptr && n < std::min(requested, desc->batch); ++n) {
    lengths[n] = desc->lengths[n];
  }
  return CUDNN_STATUS_SUCCESS;
}

// ---- sizes ----

cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                         size_t* bytes) {
  if (handle == nullptr || desc == nullptr || !desc->set || bytes == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  Shape s;
  s.rnn = desc;
  s.gates = desc->mode == CUDNN_LSTM ? 4 : desc->mode == CUDNN_GRU ? 3 : 1;
  s.hidden = desc->hidden_size;
  s.layers = desc->layers;
  s.input = desc->input_size;
  *bytes = s.WeightCount() * sizeof(float);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                        cudnnForwardMode_t mode, cudnnRNNDataDescriptor_t x_desc,
                                        size_t* workspace_bytes, size_t* reserve_bytes) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  Shape s;
  if (const cudnnStatus_t status = ndt::standin::Describe(desc, x_desc, &s);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  if (workspace_bytes != nullptr) *workspace_bytes = ndt::standin::Workspace(s);
  if (reserve_bytes != nullptr) {
    *reserve_bytes = mode == CUDNN_FWD_MODE_TRAINING ? s.ReserveFloats() * sizeof(float) : 0;
  }
  return CUDNN_STATUS_SUCCESS;
}

// ---- the calls ----

namespace {

// Checks what every call shares: the shapes, the weight space, workspace and (training) reserve
// sizes, and the output's vector size.
cudnnStatus_t Prepare(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                      cudnnRNNDataDescriptor_t x_desc, cudnnRNNDataDescriptor_t y_desc,
                      size_t weight_bytes, size_t workspace_bytes, size_t reserve_bytes,
                      bool needs_reserve, Shape* s) {
  if (handle == nullptr || y_desc == nullptr || !y_desc->set) return CUDNN_STATUS_BAD_PARAM;
  if (const cudnnStatus_t status = ndt::standin::Describe(desc, x_desc, s);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  if (y_desc->vector != s->hidden || y_desc->max_seq != s->seq || y_desc->batch != s->batch) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (weight_bytes < s->WeightCount() * sizeof(float) ||
      workspace_bytes < ndt::standin::Workspace(*s) ||
      (needs_reserve && reserve_bytes < s->ReserveFloats() * sizeof(float))) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return ndt::standin::SynchronizeHandle(handle);
}

}  // namespace

cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                              cudnnForwardMode_t mode, const int32_t /*dev_seq_lengths*/[],
                              cudnnRNNDataDescriptor_t x_desc, const void* x,
                              cudnnRNNDataDescriptor_t y_desc, void* y,
                              cudnnTensorDescriptor_t /*h_desc*/, const void* hx, void* hy,
                              cudnnTensorDescriptor_t /*c_desc*/, const void* cx, void* cy,
                              size_t weight_bytes, const void* weights, size_t workspace_bytes,
                              void* /*workspace*/, size_t reserve_bytes, void* reserve) {
  const bool training = mode == CUDNN_FWD_MODE_TRAINING;
  Shape s;
  if (const cudnnStatus_t status = Prepare(handle, desc, x_desc, y_desc, weight_bytes,
                                           workspace_bytes, reserve_bytes, training, &s);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  if (x == nullptr || y == nullptr || weights == nullptr || (training && reserve == nullptr)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return ndt::standin::Forward(s, training, static_cast<const float*>(x), static_cast<float*>(y),
                               static_cast<const float*>(hx), static_cast<float*>(hy),
                               static_cast<const float*>(cx), static_cast<float*>(cy),
                               static_cast<const float*>(weights), static_cast<float*>(reserve));
}

cudnnStatus_t cudnnRNNBackwardData_v8(
    cudnnHandle_t handle, cudnnRNNDescriptor_t desc, const int32_t /*dev_seq_lengths*/[],
    cudnnRNNDataDescriptor_t y_desc, const void* y, const void* dy, cudnnRNNDataDescriptor_t x_desc,
    void* dx, cudnnTensorDescriptor_t /*h_desc*/, const void* hx, const void* dhy, void* dhx,
    cudnnTensorDescriptor_t /*c_desc*/, const void* cx, const void* dcy, void* dcx,
    size_t weight_bytes, const void* weights, size_t workspace_bytes, void* /*workspace*/,
    size_t reserve_bytes, void* reserve) {
  Shape s;
  if (const cudnnStatus_t status = Prepare(handle, desc, x_desc, y_desc, weight_bytes,
                                           workspace_bytes, reserve_bytes, true, &s);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  if (y == nullptr || dy == nullptr || dx == nullptr || weights == nullptr || reserve == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  ndt::standin::BackwardData(s, static_cast<const float*>(dy), static_cast<float*>(dx),
                             static_cast<const float*>(hx), static_cast<const float*>(dhy),
                             static_cast<float*>(dhx), static_cast<const float*>(cx),
                             static_cast<const float*>(dcy), static_cast<float*>(dcx),
                             static_cast<const float*>(weights), static_cast<float*>(reserve));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnRNNBackwardWeights_v8(
    cudnnHandle_t handle, cudnnRNNDescriptor_t desc, cudnnWgradMode_t add_grad,
    const int32_t /*dev_seq_lengths*/[], cudnnRNNDataDescriptor_t x_desc, const void* x,
    cudnnTensorDescriptor_t /*h_desc*/, const void* hx, cudnnRNNDataDescriptor_t y_desc,
    const void* y, size_t weight_bytes, void* dweights, size_t workspace_bytes, void* /*workspace*/,
    size_t reserve_bytes, void* reserve) {
  Shape s;
  if (const cudnnStatus_t status = Prepare(handle, desc, x_desc, y_desc, weight_bytes,
                                           workspace_bytes, reserve_bytes, true, &s);
      status != CUDNN_STATUS_SUCCESS) {
    return status;
  }
  if (x == nullptr || y == nullptr || dweights == nullptr || reserve == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  float* dw = static_cast<float*>(dweights);
  if (add_grad == CUDNN_WGRAD_MODE_SET) std::fill_n(dw, s.WeightCount(), 0.0f);
  ndt::standin::BackwardWeights(s, static_cast<const float*>(x), static_cast<const float*>(hx), dw,
                                static_cast<const float*>(reserve));
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
