// The fix-hint tables. Two kinds of rows:
//
// - Kernel names. The rows are derived from PyTorch's CUDA sources (aten/src/ATen/native/cuda/,
//   transformers/cuda/ for attention) for every op the docstring of
//   torch.use_deterministic_algorithms names (torch/__init__.py, read at commit 0027c65; a
//   later copy, dc098c4, moves ReplicationPad1d/3d to the first list and drops kthvalue), and for
//   the deterministic kernels of the same families. A launch reports the demangled name, e.g.
//     void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, true,
//         at::native::(anonymous namespace)::ReduceAdd>(...)
//     void at::native::_scatter_gather_elementwise_kernel<128, 4,
//         at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<
//         at::native::ReduceAdd>(at::TensorIterator&, long, long, long,
//         at::native::ReduceAdd const&)::{lambda(int)#1}>(int, ...)
//   so a row is a set of substrings that must all occur (compared without case): a kernel's
//   own name, and where one kernel serves several ops the template argument or the enclosing
//   function that separates them (the functor ReduceAdd / ReduceMultiply / TensorAssign, the
//   `true`/`false` of is_scatter_like or HasWeights, `put_kernel(` in the lambda's name). The
//   first matching row wins; a deterministic sibling whose name contains a suspect's pattern
//   comes before it, a suspect whose name contains a sibling's pattern comes before that.
//   Names checked against real launches are in tests/unit/fix_hints_test.cc. Where the exact
//   demangled spelling could not be checked (template arguments of CUB's and flash-attention's
//   kernels vary by version) a row matches the stable part only, as its comment says.
// - Library ops by kind (cuDNN, cuBLAS, cuBLASLt, cuRAND, NCCL, host copies), with the facts
//   from the libraries' documentation and what ndtrace's policy really does (tracer/README.md).
//
// A hint's fix must make the op reproducible. For ops in the docstring's first list that is
// torch.use_deterministic_algorithms(True); for those in the second list PyTorch raises
// instead, so the fix is what PyTorch offers (another formulation, the CPU) or says nothing.
#include "replayer/fix_hints.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>
#include <vector>

#include "replayer/fix_hints_cudnn_rnn.h"
#include "replayer/op_compare.h"

namespace ndt::replay {
namespace {

constexpr const char* kRaises =
    "PyTorch has no deterministic CUDA implementation of this op: under "
    "torch.use_deterministic_algorithms(True) it raises a RuntimeError instead. ";

// The suspects: one hint per framework op (KernelHintCount() counts them).
enum HintId : int {
  kIndexAdd,
  kIndexReduceProd,
  kScatterAdd,
  kScatterProd,
  kScatterAssign,
  kIndexPut,
  kIndexCopy,
  kPut,
  kEmbeddingBagMax,
  kCtcLoss,
  kAdaptiveAvgPool,
  kAdaptiveMaxPool,
  kAvgPool3d,
  kMaxPool3d,
  kFractionalMaxPool,
  kMaxUnpool,
  kInterpolate,
  kGridSample,
  kReflectionPad,
  kReplicationPad,
  kNllLoss2d,
  kHistc,
  kBincountWeights,
  kMedian,
  kKthvalue,
  kCumsum,
  kFlashAttentionBackward,
  kMemEfficientAttentionBackward,
  kHintCount,
  kDeterministic = -1,  // a row for a deterministic sibling
};

struct KernelHint {
  const char* framework_op;
  const char* mechanism;
  std::string fix;
};

const std::array<KernelHint, kHintCount>& KernelHints() {
  static const std::array<KernelHint, kHintCount> hints = {{
      // kIndexAdd
      {"torch.Tensor.index_add_ / torch.index_add (also the backward of torch.index_select and "
       "torch.repeat_interleave; index_reduce_(reduce='mean') runs the same kernel)",
       "each source slice is added into its destination with gpuAtomicAdd/fastAtomicAdd: "
       "slices with the same index are summed in an order that changes from run to run",
       "torch.use_deterministic_algorithms(True): PyTorch then computes index_add as "
       "index_put_(accumulate=True), which sorts the indices and sums in a fixed order "
       "(index_reduce_ is not covered: it has no deterministic CUDA path)"},
      // kIndexReduceProd
      {"torch.Tensor.index_reduce_(reduce='prod')",
       "products into the same destination are formed with gpuAtomicMul (a compare-and-swap "
       "loop) in an order that changes from run to run",
       "PyTorch has no deterministic CUDA path for it (torch.use_deterministic_algorithms does "
       "not change it): make the indices unique, or run it on the CPU"},
      // kScatterAdd
      {"torch.Tensor.scatter_add_ / scatter_reduce_(reduce='sum' or 'mean') / the backward of "
       "torch.gather (recent PyTorch also runs index_add_ along dim 0 here)",
       "values scattered to the same element are added with fastAtomicAdd, in an order that "
       "changes from run to run",
       "torch.use_deterministic_algorithms(True): PyTorch then scatters through "
       "index_put_(accumulate=True), which sorts the indices and sums in a fixed order"},
      // kScatterProd
      {"torch.Tensor.scatter_reduce_(reduce='prod') (also scatter_(..., reduce='multiply') "
       "with a tensor src)",
       "values scattered to the same element are multiplied with gpuAtomicMul (a "
       "compare-and-swap loop) in an order that changes from run to run",
       std::string(kRaises) +
           "Make the indices unique, or run this op on the CPU"},
      // kScatterAssign
      {"torch.Tensor.scatter_ / torch.scatter with a tensor src",
       "when the index has duplicates, racing threads write the same element: which value "
       "lands changes from run to run",
       "torch.use_deterministic_algorithms(True): PyTorch then scatters through index_put_, "
       "which sorts the indices and writes in a fixed order; or make the indices unique"},
      // kIndexPut
      {"torch.Tensor.index_put_ / advanced-indexing assignment x[idx] = v (accumulate=False)",
       "when the indices have duplicates, racing threads write the same element: which value "
       "lands changes from run to run",
       "torch.use_deterministic_algorithms(True): PyTorch then runs its sort-based kernel "
       "(index_put_with_sort), which writes duplicates in a fixed order; or make the indices "
       "unique"},
      // kIndexCopy
      {"torch.Tensor.index_copy_",
       "when the index has duplicates, racing threads write the same slice: which one lands "
       "changes from run to run",
       "torch.use_deterministic_algorithms(True): PyTorch then copies through index_put_ with "
       "sorted indices; or make the indices unique"},
      // kPut
      {"torch.Tensor.put_",
       "duplicate indices race: plain writes (accumulate=False: the last writer wins) or "
       "gpuAtomicAdd (accumulate=True: the summation order changes)",
       std::string(kRaises) +
           "For accumulate=True use x.view(-1).index_put_((index.view(-1),), "
           "source.view(-1), accumulate=True), whose CUDA kernel sorts the indices and is "
           "deterministic; for accumulate=False make the indices unique"},
      // kEmbeddingBagMax
      {"torch.nn.EmbeddingBag / F.embedding_bag backward with mode='max'",
       "the gradient of each bag's maximum is added into the weight gradient with "
       "gpuAtomicAdd: rows chosen by several bags are summed in an order that changes",
       std::string(kRaises) +
           "mode='sum' and mode='mean' have a deterministic backward (a sorted segment sum); "
           "otherwise run it on the CPU"},
      // kCtcLoss
      {"torch.nn.CTCLoss / F.ctc_loss backward (PyTorch's native CUDA kernels)",
       "ctc_loss_backward_collect_nonblank_gpu_kernel adds the gradient terms of target "
       "labels with gpuAtomicAdd; repeated labels are summed in an order that changes",
       std::string(kRaises) + "Compute the loss on the CPU"},
      // kAdaptiveAvgPool
      {"torch.nn.AdaptiveAvgPool2d / AdaptiveAvgPool3d backward",
       "each output gradient is added into its input window with atomics; overlapping "
       "windows are summed in an order that changes from run to run",
       std::string(kRaises) +
           "When each input size is a multiple of the output size, F.avg_pool2d with "
           "kernel_size = stride = input // output computes the same values and its backward "
           "is deterministic (F.avg_pool3d's backward over such windows has no atomics either, "
           "though PyTorch raises for it too). Otherwise run it on the CPU"},
      // kAdaptiveMaxPool
      {"torch.nn.AdaptiveMaxPool2d / AdaptiveMaxPool3d backward",
       "each output gradient is added with atomics into the input element that was its "
       "maximum; an element that is the maximum of several windows gets its sum in a "
       "changing order",
       std::string(kRaises) +
           "When each input size is a multiple of the output size, F.max_pool2d with "
           "kernel_size = stride = input // output computes the same values and MaxPool2d's "
           "backward is deterministic; otherwise run it on the CPU"},
      // kAvgPool3d
      {"torch.nn.AvgPool3d backward with overlapping windows (stride < kernel_size)",
       "avg_pool3d_cuda_update_grad_input_atomic adds each output gradient into overlapping "
       "windows with atomics",
       std::string(kRaises) +
           "Windows that do not overlap (stride >= kernel_size) take a kernel without "
           "atomics (PyTorch still raises for it); otherwise run it on the CPU"},
      // kMaxPool3d
      {"torch.nn.MaxPool3d backward",
       "gradients are added with atomics into the positions of the maxima; a position that "
       "is the maximum of several windows gets its sum in a changing order",
       std::string(kRaises) + "Run it on the CPU"},
      // kFractionalMaxPool
      {"torch.nn.FractionalMaxPool2d / FractionalMaxPool3d backward",
       "gradients are added with atomics into the positions of the maxima, which overlapping "
       "pooling regions can share",
       std::string(kRaises) + "Run it on the CPU"},
      // kMaxUnpool
      {"torch.nn.MaxUnpool1d / MaxUnpool2d / MaxUnpool3d",
       "values whose indices coincide are written by racing threads: which one lands changes "
       "from run to run",
       std::string(kRaises) +
           "Give it indices without duplicates (those of a MaxPool whose windows do not "
           "overlap), or run it on the CPU"},
      // kInterpolate
      {"torch.nn.functional.interpolate / nn.Upsample backward, mode='linear', 'bilinear', "
       "'bicubic' or 'trilinear' (also antialias=True)",
       "each output gradient is added into its source pixels with atomics, in an order that "
       "changes from run to run",
       std::string(kRaises) +
           "mode='nearest' or 'nearest-exact' has a deterministic backward; otherwise run "
           "the interpolation on the CPU"},
      // kGridSample
      {"torch.nn.functional.grid_sample backward",
       "gradients are added into grad_input with atomics (safe_add_2d/3d)",
       std::string(kRaises) + "Run it on the CPU"},
      // kReflectionPad
      {"torch.nn.ReflectionPad1d/2d/3d backward (F.pad mode='reflect')",
       "positions that are reflected onto receive several gradients, added with atomics",
       std::string(kRaises) + "Run it on the CPU"},
      // kReplicationPad
      {"torch.nn.ReplicationPad1d/2d/3d backward (F.pad mode='replicate')",
       "the edge positions receive many gradients, added with atomics",
       "torch.use_deterministic_algorithms(True): F.pad(mode='replicate') (which "
       "nn.ReplicationPad*d calls) then pads through a decomposition whose backward uses "
       "index_put_ with sorted indices (the docstring lists 1d, 2d and 3d in recent "
       "PyTorch, 2d only in older releases)"},
      // kNllLoss2d
      {"torch.nn.NLLLoss / F.cross_entropy of inputs with spatial dimensions (N, C, d1, ...) "
       "and reduction='mean' or 'sum'",
       "nll_loss2d_forward_kernel adds each block's partial sum into the loss and the total "
       "weight with atomics",
       std::string(kRaises) +
           "Compute it with reduction='none' and reduce the result yourself (a sum; for "
           "'mean' divide by the sum of the targets' class weights): that kernel has no "
           "atomics and torch.sum is deterministic"},
      // kHistc
      {"torch.histc (floating-point input)",
       "the bins are floating-point counters incremented with atomics (kernelHistogram1D); "
       "PyTorch documents it as nondeterministic (increments of 1 stay exact while a bin "
       "holds fewer than 2^24 counts in float32)",
       std::string(kRaises) +
           "Run it on the CPU, or compute integer bin indices and count them with an integer "
           "op"},
      // kBincountWeights
      {"torch.bincount with weights",
       "the weights are added into the bins with atomics (kernelHistogram1D of "
       "CUDA_tensor_histogram<..., true>), in an order that changes from run to run",
       std::string(kRaises) +
           "torch.zeros(n, device=...).index_put_((x,), weights, accumulate=True) computes "
           "the same sums with sorted indices, deterministically"},
      // kMedian
      {"torch.median / torch.nanmedian along a dimension (values and indices)",
       "among equal values, which index gatherMedian returns depends on thread timing (the "
       "values themselves are deterministic)",
       std::string(kRaises) +
           "If only the values are needed they are reproducible; otherwise compute the "
           "indices on the CPU"},
      // kKthvalue
      {"torch.kthvalue (PyTorch releases whose torch.use_deterministic_algorithms docstring "
       "lists it)",
       "among equal values, which index gatherKthValue returns depends on thread timing; "
       "newer releases return the smallest such index",
       "Older releases raise under torch.use_deterministic_algorithms(True); the values are "
       "reproducible, and a newer PyTorch returns reproducible indices"},
      // kCumsum (the scan op and CUB's namespace vary by version: matched on the kernel name
      // and a floating-point value type)
      {"torch.cumsum of a floating-point or complex CUDA tensor (CUB's device scan; other "
       "floating-point scans through CUB, such as torch.cumprod, run the same kernel)",
       "CUB's single-pass scan combines the partial sums of earlier tiles as they become "
       "available (decoupled look-back), so their grouping changes from run to run",
       std::string(kRaises) + "Run it on the CPU"},
      // kFlashAttentionBackward (the same kernels run in both modes: the name cannot say
      // whether the deterministic mode was on)
      {"torch.nn.functional.scaled_dot_product_attention backward, flash-attention backend "
       "(the flash-attn package's kernels have the same names)",
       "the gradient of the queries is accumulated across key blocks with atomic adds",
       "torch.use_deterministic_algorithms(True) with warn_only=False: PyTorch then runs the "
       "flash backward in its deterministic mode (warn_only=True only warns); or choose "
       "another backend with torch.nn.attention.sdpa_kernel(SDPBackend.MATH). With the "
       "flash-attn package pass deterministic=True"},
      // kMemEfficientAttentionBackward
      {"torch.nn.functional.scaled_dot_product_attention backward, memory-efficient backend "
       "(CUTLASS fmha kernels)",
       "with more than one key split (num_splits_key > 1) the gradients are accumulated "
       "across splits with atomic adds",
       "torch.use_deterministic_algorithms(True) with warn_only=False: PyTorch then uses a "
       "single key split, which is deterministic (warn_only=True only warns)"},
  }};
  return hints;
}

// The value types CUB's scan runs on, for "is this a floating-point scan".
bool HasFloatingType(std::string_view lower) {
  for (std::string_view type : {"float", "double", "c10::half", "c10::bfloat16", "c10::complex",
                                "__half", "__nv_bfloat16"}) {
    if (lower.find(type) != std::string_view::npos) return true;
  }
  return false;
}

// The top-level template arguments after `marker` (which ends with '<'), trimmed.
std::vector<std::string_view> TemplateArguments(std::string_view lower, std::string_view marker) {
  std::vector<std::string_view> args;
  const size_t at = lower.find(marker);
  if (at == std::string_view::npos) return args;
  size_t begin = at + marker.size();
  int depth = 0;
  for (size_t i = begin; i < lower.size(); ++i) {
    const char c = lower[i];
    if (c == '<' || c == '(') {
      ++depth;
    } else if ((c == '>' || c == ')') && depth > 0) {
      --depth;
    } else if ((c == ',' || c == '>') && depth == 0) {
      std::string_view arg = lower.substr(begin, i - begin);
      while (!arg.empty() && arg.front() == ' ') arg.remove_prefix(1);
      while (!arg.empty() && arg.back() == ' ') arg.remove_suffix(1);
      args.push_back(arg);
      if (c == '>') break;
      begin = i + 1;
    }
  }
  return args;
}

// CUDA_tensor_histogram<output_t, input_t, HasWeights> names the op of a kernelHistogram1D
// launch: weights -> bincount with weights; no weights and a floating output -> histc;
// integer counts (bincount without weights, histc of integers) are exact.
bool IsBincountWithWeights(std::string_view lower) {
  const auto args = TemplateArguments(lower, "cuda_tensor_histogram<");
  return args.size() == 3 && args[2] == "true";
}
bool IsFloatingHistc(std::string_view lower) {
  const auto args = TemplateArguments(lower, "cuda_tensor_histogram<");
  return args.size() == 3 && args[2] == "false" &&
         (args[0] == "float" || args[0] == "double");
}

struct KernelRule {
  std::array<std::string_view, 3> all_of;  // lower case; every non-empty one must occur
  int hint;                                // a HintId, or kDeterministic
  const char* deterministic_op;            // kDeterministic rows: what the kernel computes
  bool (*refine)(std::string_view lower) = nullptr;  // an extra condition on the name
};

// First match wins (see the top of this file for the ordering rule).
constexpr KernelRule kKernelRules[] = {
    // Indexing.cu: index_add (ReduceAdd; index_reduce 'mean' too), index_reduce. Older
    // releases (the THC-era Indexing.cu) had index_add kernels of their own, indexAdd*Index.
    {{"indexfunc", "reduceadd", ""}, kIndexAdd, nullptr},
    {{"indexaddsmallindex", "", ""}, kIndexAdd, nullptr},
    {{"indexaddlargeindex", "", ""}, kIndexAdd, nullptr},
    {{"indexfunc", "reducemultiply", ""}, kIndexReduceProd, nullptr},
    {{"indexfunc", "reducemaximum", ""}, kDeterministic,
     "torch.Tensor.index_reduce_(reduce='amax') (the order does not change a maximum)"},
    {{"indexfunc", "reduceminimum", ""}, kDeterministic,
     "torch.Tensor.index_reduce_(reduce='amin') (the order does not change a minimum)"},
    {{"indexselect", "", ""}, kDeterministic,
     "torch.index_select forward (each output element is read from one input element)"},
    // ScatterGatherKernel.cu: the functor names the op; scatter_fill writes one scalar.
    {{"_cuda_scatter_fill_internal_kernel", "", ""}, kDeterministic,
     "torch.Tensor.scatter_ with a scalar value (every duplicate applies the same value, "
     "so the order does not matter)"},
    {{"scatter_", "reduceadd", ""}, kScatterAdd, nullptr},
    {{"scatter_", "reducemean", ""}, kScatterAdd, nullptr},
    {{"scatter_", "reducemultiply", ""}, kScatterProd, nullptr},
    {{"scatter_", "reducemaximum", ""}, kDeterministic,
     "torch.Tensor.scatter_reduce_(reduce='amax') (the order does not change a maximum)"},
    {{"scatter_", "reduceminimum", ""}, kDeterministic,
     "torch.Tensor.scatter_reduce_(reduce='amin') (the order does not change a minimum)"},
    {{"_cuda_scatter_gather_internal_kernel<false", "", ""}, kDeterministic,
     "torch.gather forward (each output element is read from one input element)"},
    {{"scatter_", "tensorassign", ""}, kScatterAssign, nullptr},
    // Indexing.cu: the sort-based kernels of index_put_(accumulate=True) and of the
    // deterministic paths of index_put_, index_add_, index_copy_ and scatter.
    {{"indexing_backward_kernel", "", ""}, kDeterministic,
     "index_put_ with sorted indices (accumulate=True on CUDA, and the deterministic paths "
     "of index_put_, index_add_, index_copy_ and scatter)"},
    // IndexKernel.cu: TensorIterator lambdas, named by their enclosing function.
    {{"index_put_kernel_impl", "", ""}, kIndexPut, nullptr},
    {{"index_copy_kernel_impl", "", ""}, kIndexCopy, nullptr},
    {{"::put_kernel(", "", ""}, kPut, nullptr},
    {{"::take_kernel(", "", ""}, kDeterministic, "torch.take (a gather)"},
    {{"index_kernel_impl", "", ""}, kDeterministic,
     "advanced-indexing read x[idx] (a gather)"},
    {{"index_fill_kernel_impl", "", ""}, kDeterministic,
     "torch.Tensor.index_fill_ (every duplicate writes the same value)"},
    // EmbeddingBag.cu, EmbeddingBackwardKernel.cu.
    {{"embeddingbag_accgradparameterskernel_max", "", ""}, kEmbeddingBagMax, nullptr},
    {{"embeddingbag_updateoutputkernel", "", ""}, kDeterministic,
     "torch.nn.EmbeddingBag forward (any mode, with or without per_sample_weights)"},
    {{"_embedding_bag_per_sample_weights_backward_kernel", "", ""}, kDeterministic,
     "torch.nn.EmbeddingBag backward of per_sample_weights"},
    {{"compute_grad_weight", "", ""}, kDeterministic,
     "torch.nn.Embedding / EmbeddingBag(mode='sum' or 'mean') backward (a sorted segment "
     "sum)"},
    {{"sum_and_scatter", "", ""}, kDeterministic,
     "torch.nn.Embedding / EmbeddingBag(mode='sum' or 'mean') backward (a sorted segment "
     "sum)"},
    // LossCTC.cu.
    {{"ctc_loss_backward_collect_nonblank_gpu_kernel", "", ""}, kCtcLoss, nullptr},
    {{"ctc_loss_", "", ""}, kDeterministic,
     "torch.nn.CTCLoss forward (log alpha), log beta, the blank gradient or zero padding"},
    // AdaptiveAveragePooling.cu, AdaptiveAveragePooling3d.cu, AdaptiveMaxPooling2d/3d.cu.
    {{"atomic_adaptive_average_gradinput", "", ""}, kAdaptiveAvgPool, nullptr},
    {{"atomicadaptiveaveragegradinput", "", ""}, kAdaptiveAvgPool, nullptr},
    {{"atomicadaptivemaxgradinput", "", ""}, kAdaptiveMaxPool, nullptr},
    {{"adaptive_average_", "", ""}, kDeterministic,
     "torch.nn.AdaptiveAvgPool2d forward, or its backward without atomics"},
    {{"adaptiveaverage", "", ""}, kDeterministic,
     "torch.nn.AdaptiveAvgPool3d forward, or its backward without atomics"},
    {{"adaptivemax", "", ""}, kDeterministic,
     "torch.nn.AdaptiveMaxPool2d/3d forward, or its backward without atomics"},
    // AveragePool3d.cu, DilatedMaxPool3d.cu, FractionalMaxPool2d/3d.cu, MaxUnpooling.cu.
    {{"avg_pool3d_cuda_update_grad_input_atomic", "", ""}, kAvgPool3d, nullptr},
    {{"avg_pool3d_", "", ""}, kDeterministic,
     "torch.nn.AvgPool3d forward, or its backward over windows that do not overlap"},
    {{"max_pool3d_with_indices_backward", "", ""}, kMaxPool3d, nullptr},
    {{"max_pool3d_with_indices", "", ""}, kDeterministic, "torch.nn.MaxPool3d forward"},
    {{"fractional_max_pool", "backward", ""}, kFractionalMaxPool, nullptr},
    {{"fractional_max_pool", "", ""}, kDeterministic, "torch.nn.FractionalMaxPool forward"},
    {{"max_unpooling", "forward", ""}, kMaxUnpool, nullptr},
    {{"max_unpooling", "", ""}, kDeterministic,
     "torch.nn.MaxUnpool backward (a gather)"},
    // UpSample*.cu: the backward of the linear modes accumulates; nearest reads.
    {{"upsample_linear1d_out_frame_backward", "", ""}, kInterpolate, nullptr},
    {{"upsample_bilinear2d_backward", "", ""}, kInterpolate, nullptr},
    {{"upsample_bicubic2d_backward", "", ""}, kInterpolate, nullptr},
    {{"upsample_trilinear3d_backward", "", ""}, kInterpolate, nullptr},
    {{"upsample_gen2d_aa_backward", "", ""}, kInterpolate, nullptr},
    {{"upsample_", "", ""}, kDeterministic,
     "torch.nn.functional.interpolate forward, or its backward with mode='nearest' / "
     "'nearest-exact'"},
    // GridSampler.cu, ReflectionPad.cu, ReplicationPadding.cu.
    {{"grid_sampler_", "backward", ""}, kGridSample, nullptr},
    {{"grid_sampler_", "", ""}, kDeterministic, "torch.nn.functional.grid_sample forward"},
    {{"reflection_pad", "backward", ""}, kReflectionPad, nullptr},
    {{"reflection_pad", "", ""}, kDeterministic, "torch.nn.ReflectionPad forward"},
    {{"replication_pad", "backward", ""}, kReplicationPad, nullptr},
    {{"replication_pad", "", ""}, kDeterministic, "torch.nn.ReplicationPad forward"},
    // NLLLoss2d.cu, Loss.cu: only the 2d forward with a reduction uses atomics.
    {{"nll_loss2d_forward_kernel", "", ""}, kNllLoss2d, nullptr},
    {{"nll_loss", "", ""}, kDeterministic,
     "torch.nn.NLLLoss without spatial dimensions, with reduction='none', or its backward"},
    // SummaryOps.cu: the op is in the template arguments of CUDA_tensor_histogram.
    {{"kernelhistogram1d", "", ""}, kBincountWeights, nullptr, IsBincountWithWeights},
    {{"kernelhistogram1d", "", ""}, kHistc, nullptr, IsFloatingHistc},
    {{"kernelhistogram1d", "", ""}, kDeterministic,
     "torch.bincount without weights or torch.histc of integers (integer counts are exact)"},
    // Sorting.cu.
    {{"gathermedian", "", ""}, kMedian, nullptr},
    {{"gatherkthvalue", "", ""}, kKthvalue, nullptr},
    // CUB's scan (PyTorch wraps CUB in at_cuda_detail::; the namespace and the policy
    // arguments vary by CUB version). DeviceScanInitKernel only initialises tile states.
    {{"devicescankernel", "", ""}, kCumsum, nullptr, HasFloatingType},
    {{"devicescankernel", "", ""}, kDeterministic,
     "a CUB scan of integers (torch.cumsum of integers, nonzero, ...: integer sums are exact)"},
    {{"devicescaninitkernel", "", ""}, kDeterministic,
     "the initialisation of a CUB scan's tile states"},
    {{"tensor_kernel_scan_", "", ""}, kDeterministic,
     "PyTorch's own block scan along a dimension of a multi-dimensional tensor (torch.cumsum, "
     "cumprod, ...: partial results combined in a fixed order)"},
    // transformers/cuda: flash attention (namespace pytorch_flash:: in PyTorch, flash:: in the
    // flash-attn package) and memory-efficient attention (fmha_cutlassB_<dtype>_..._sm<N>).
    {{"flash_bwd_dq_dk_dv_loop", "", ""}, kFlashAttentionBackward, nullptr},
    {{"flash_bwd_", "", ""}, kDeterministic,
     "the flash-attention backward's pre- and post-processing (dot(dO, O), conversion of "
     "the accumulated dQ)"},
    {{"flash_fwd", "", ""}, kDeterministic,
     "torch.nn.functional.scaled_dot_product_attention forward (flash)"},
    {{"fmha_cutlassb", "", ""}, kMemEfficientAttentionBackward, nullptr},
    {{"fmha_cutlassf", "", ""}, kDeterministic,
     "torch.nn.functional.scaled_dot_product_attention forward (memory-efficient)"},
};

std::string Lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

const KernelRule* FindKernelRule(std::string_view name) {
  const std::string lower = Lower(name);
  for (const KernelRule& rule : kKernelRules) {
    bool all = true;
    for (std::string_view pattern : rule.all_of) {
      if (!pattern.empty() && lower.find(pattern) == std::string::npos) {
        all = false;
        break;
      }
    }
    if (all && (!rule.refine || rule.refine(lower))) return &rule;
  }
  return nullptr;
}

FixHint Hint(std::string framework_op, std::string mechanism, std::string fix) {
  return FixHint{std::move(framework_op), std::move(mechanism), std::move(fix)};
}

FixHint DeterministicKernelHint(const char* op) {
  return Hint(std::string(op) + " (a deterministic kernel, not a suspect)",
              "it computes each output from its inputs in a fixed order (no atomics, no "
              "racing writes), so the same inputs give the same outputs",
              "look before it: an input that differs in bytes ndtrace did not digest, memory it "
              "read before anything wrote it (torch.empty), or a kernel on another stream "
              "writing the same memory without synchronisation; ndtrace bisect narrows the "
              "window");
}

bool IsAutotuned(const format::OpRecord& op) {
  return op.algorithm && (op.algorithm->name == "CUBLAS_GEMM_AUTOTUNE" ||
                          op.algorithm->source == format::ChoiceSource::kBenchmark);
}

std::optional<FixHint> CublasHint(const format::OpRecord& op, DivergenceClass klass) {
  if (op.kind == format::OpKind::kCublasGemm) {
    if (IsAutotuned(op)) {
      return Hint("torch.matmul / torch.nn.Linear or a direct cublasGemmEx (cuBLAS)",
                  "the program passed CUBLAS_GEMM_AUTOTUNE: cuBLAS times the candidate "
                  "algorithms once per handle and keeps the fastest, so each process can run "
                  "a different algorithm with a different summation order",
                  "pass a fixed algorithm (CUBLAS_GEMM_DEFAULT or a CUBLAS_GEMM_ALGO<n>) "
                  "instead of CUBLAS_GEMM_AUTOTUNE; ndtrace run --deterministic replaces "
                  "CUBLAS_GEMM_AUTOTUNE by CUBLAS_GEMM_DEFAULT (--pin cannot: an autotuned "
                  "reference does not record which algorithm ran)");
    }
    if (klass == DivergenceClass::kAlgorithmSelection) {
      return Hint("torch.matmul / torch.nn.Linear or a direct cublasGemmEx (cuBLAS)",
                  "the program asked cuBLAS for a different algorithm in each run",
                  "pass the same algorithm in every run; ndtrace run --pin TRACE passes the "
                  "algorithm recorded in TRACE for the same problem (same GPU and cuBLAS "
                  "version)");
    }
    const std::string* atomics = TextOf(op, "atomics");
    if (atomics && *atomics == "allowed") {
      return Hint("a cuBLAS routine run with atomics allowed",
                  "cublasSetAtomicsMode(CUBLAS_ATOMICS_ALLOWED) lets cuBLAS pick routines that "
                  "accumulate with atomics, whose results the cuBLAS documentation does not "
                  "guarantee to be reproducible",
                  "leave the handle at CUBLAS_ATOMICS_NOT_ALLOWED (the default); ndtrace run "
                  "--deterministic forces it");
    }
    return Hint("torch.matmul / torch.nn.Linear or a direct cuBLAS GEMM",
                "cuBLAS promises bit-wise equal results for one toolkit version and GPU "
                "architecture and SM count only while one stream is active: with several "
                "concurrent streams sharing a handle it may pick other internal workspaces "
                "and implementations",
                "give each stream its own workspace (cublasSetWorkspace) or its own handle, or "
                "set CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8) before the first cuBLAS call; "
                "ndtrace run --deterministic sets CUBLAS_WORKSPACE_CONFIG=:4096:8 when unset "
                "and gives each (handle, stream) a workspace of its own");
  }
  // cuBLASLt
  if (klass == DivergenceClass::kAlgorithmSelection) {
    return Hint("torch.matmul / torch.nn.Linear (cuBLASLt)",
                "the program passed cublasLtMatmul a different algorithm in each run (chosen by "
                "timing candidates, e.g. PyTorch's TunableOp, or by a heuristic query with "
                "other preferences)",
                "choose the algorithm without timing (the first result of "
                "cublasLtMatmulAlgoGetHeuristic with fixed preferences; in PyTorch leave "
                "PYTORCH_TUNABLEOP_ENABLED unset); or ndtrace run --pin TRACE, which passes the "
                "algorithm recorded in TRACE for the same problem (same GPU and cuBLAS "
                "version; a pin reproduces the choice, so record TRACE with --deterministic)");
  }
  return Hint("torch.matmul / torch.nn.Linear (cuBLASLt)",
              "the algorithm splits K and reduces the partial sums out of place "
              "(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE / OUTPUT_TYPE), whose order can change",
              "ask the heuristic only for algorithms without out-of-place split-K "
              "(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = NONE | INPLACE); ndtrace run "
              "--deterministic removes such algorithms from the heuristic's results and "
              "replaces one passed to cublasLtMatmul by the first deterministic one");
}

std::optional<FixHint> LibraryHint(const format::OpRecord& op, DivergenceClass klass) {
  using format::OpKind;
  switch (op.kind) {
    case OpKind::kCudnnConvolution:
    case OpKind::kCudnnBackendExecute:
      if (klass == DivergenceClass::kAlgorithmSelection) {
        return Hint("torch.nn.Conv*d / ConvTranspose*d (cuDNN)",
                    "cuDNN ran a different algorithm or engine in each run: with "
                    "torch.backends.cudnn.benchmark=True the fastest by measured time is "
                    "taken, and timings vary (deterministic algorithms differ from one another "
                    "in their results too)",
                    "torch.backends.cudnn.benchmark=False (cuDNN's heuristic then picks the "
                    "same algorithm every run); or ndtrace run --pin TRACE keeps benchmark "
                    "speed with the choices recorded in TRACE (a pin reproduces the choice: "
                    "record TRACE with deterministic algorithms); ndtrace run --deterministic "
                    "ranks benchmark results by cuDNN's heuristic instead of time");
      }
      if (op.kind == OpKind::kCudnnConvolution) {
        return Hint("torch.nn.Conv*d / ConvTranspose*d (cuDNN)",
                    "the algorithm is one cuDNN documents as nondeterministic "
                    "(CUDNN_NON_DETERMINISTIC: it accumulates with atomics)",
                    "torch.backends.cudnn.deterministic=True or "
                    "torch.use_deterministic_algorithms(True); ndtrace run --deterministic "
                    "replaces it by the first deterministic algorithm whose workspace fits");
      }
      return Hint("torch.nn.Conv*d / ConvTranspose*d (cuDNN)",
                  "the engine's numerical notes include CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC "
                  "(atomics or split reductions)",
                  "torch.backends.cudnn.deterministic=True or "
                  "torch.use_deterministic_algorithms(True); ndtrace run --deterministic keeps "
                  "engines with that note out");
    case OpKind::kCublasGemm:
    case OpKind::kCublasLtMatmul:
      return CublasHint(op, klass);
    case OpKind::kCurandGenerate:
      return Hint("cuRAND host-API generation (curandGenerate*; PyTorch's CUDA random ops do "
                  "not use it: they draw Philox numbers in their own kernels)",
                  "the generator's seed, offset or ordering differs between runs, or its "
                  "ordering is CURAND_ORDERING_PSEUDO_DYNAMIC, which adapts the sequence to "
                  "the device",
                  "set the same seed (curandSetPseudoRandomGeneratorSeed) and offset in every "
                  "run and a fixed ordering (curandSetGeneratorOrdering, not PSEUDO_DYNAMIC); "
                  "ndtrace run --deterministic replaces PSEUDO_DYNAMIC, ndtrace run --pin "
                  "TRACE forces the seed, offset and ordering recorded in TRACE");
    case OpKind::kNcclCollective:
      return Hint("torch.distributed collectives (NCCL)",
                  "NCCL picks the algorithm (Ring, Tree, NVLS, CollNet, ...), protocol and "
                  "channel count per call from the message size and topology; each choice "
                  "adds in another order, and NVLS reductions are not deterministic between "
                  "calls",
                  "fix the choice before the communicator is created: NCCL_ALGO=Ring, "
                  "NCCL_PROTO=Simple, NCCL_MIN_NCHANNELS=NCCL_MAX_NCHANNELS, "
                  "NCCL_NVLS_ENABLE=0, NCCL_COLLNET_ENABLE=0 (ndtrace run --deterministic sets "
                  "those the program left unset), and keep the NCCL version, rank-to-GPU "
                  "mapping and message sizes (DDP bucket sizes) the same; NCCL itself "
                  "documents no determinism guarantee");
    case OpKind::kMemcpy:
      if (klass == DivergenceClass::kPropagated) return HostDataHint(false);
      return std::nullopt;
    case OpKind::kOther:
      if (op.name == "cudnnPoolingBackward" && klass == DivergenceClass::kNondeterministicOp) {
        return Hint(
            "max pooling backward through cuDNN (cudnnPoolingBackward: C++ code on "
            "cuDNN's legacy API, Caffe, TensorFlow; PyTorch's MaxPool*d use their own "
            "kernels)",
            "with CUDNN_POOLING_MAX each window's gradient is added at its maximum "
            "with atomics; where windows overlap (stride smaller than the window) the "
            "additions race, and cuDNN documents the routine as not reproducible",
            "CUDNN_POOLING_MAX_DETERMINISTIC in cudnnSetPooling2dDescriptor (the same "
            "forward result; TF_CUDNN_DETERMINISTIC=1 in TensorFlow); ndtrace run "
            "--deterministic runs the backward call with it");
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

FixHint HostDataHint(bool managed) {
  if (managed) {
    return Hint("the data the program writes into managed memory on the host (cudaMallocManaged)",
                "the host wrote different bytes into memory the GPU then read in place: no copy "
                "carried them, and the runs had already diverged on the CPU",
                "seed every generator the host side uses (std::mt19937 with a fixed seed, not "
                "std::random_device; numpy.random.seed, random.seed), and keep the host's "
                "writes in a fixed order (one thread, or threads joined before the launch)");
  }
  return Hint("the data the program copies to the GPU (data loading, CPU RNG)",
              "the host bytes differ before the GPU sees them",
              "seed data loading (DataLoader generator and worker_init_fn), torch.manual_seed, "
              "PYTHONHASHSEED");
}

FixHint PythonDataHint() {
  return Hint(
      "a tensor made from Python data (torch.tensor / torch.from_numpy of Python or NumPy "
      "values, a file read, a DataLoader worker's batch)",
      "its bytes differ before any recorded PyTorch op wrote them: the runs diverged in "
      "Python (an unseeded random or numpy.random, set or dict order of strings, a "
      "directory listing, a worker's timing)",
      "seed Python's and NumPy's generators too (random.seed, numpy.random.seed), give "
      "DataLoader a generator and a worker_init_fn that seeds them per worker, set "
      "PYTHONHASHSEED=0 for set and dict order of strings, sort file lists");
}

FixHint StreamRaceHint() {
  return Hint(
      "work on two streams with nothing ordering them (a race between streams: a copy "
      "or side stream, torch.cuda.stream(...))",
      "the reading stream may run before, during or after the write, so what it reads "
      "depends on timing",
      "record an event on the writing stream after the write and make the reading "
      "stream wait for it (cudaEventRecord + cudaStreamWaitEvent; PyTorch: "
      "torch.cuda.current_stream().wait_stream(s), and tensor.record_stream for memory "
      "used there), or synchronise the writing stream before issuing the read");
}

bool IsRandomAtenOp(std::string_view name) {
  static constexpr std::string_view kRandom[] = {
      "aten::rand",
      "aten::rand_like",
      "aten::randn",
      "aten::randn_like",
      "aten::randint",
      "aten::randint_like",
      "aten::randperm",
      "aten::bernoulli",
      "aten::bernoulli_",
      "aten::normal",
      "aten::normal_",
      "aten::uniform_",
      "aten::random_",
      "aten::exponential_",
      "aten::geometric_",
      "aten::log_normal_",
      "aten::cauchy_",
      "aten::multinomial",
      "aten::native_dropout",
      "aten::dropout",
      "aten::feature_dropout",
      "aten::alpha_dropout",
      "aten::poisson",
      "aten::binomial",
      "aten::rrelu_with_noise",
      "aten::_standard_gamma",
      "aten::_sample_dirichlet",
      "aten::_fused_dropout",
  };
  return std::find(std::begin(kRandom), std::end(kRandom), name) != std::end(kRandom);
}

const char* DivergenceClassName(DivergenceClass c) {
  switch (c) {
    case DivergenceClass::kNondeterministicOp: return "nondeterministic_op";
    case DivergenceClass::kRngState: return "rng_state";
    case DivergenceClass::kAlgorithmSelection: return "algorithm_selection";
    case DivergenceClass::kPropagated: return "propagated";
    case DivergenceClass::kUncovered: return "uncovered";
  }
  return "unknown";
}

namespace {

// PyTorch's aten op names (the names emit_nvtx and the dispatcher give, overload left out) of
// the ops whose CUDA kernels are the table's rows: the ops torch.use_deterministic_algorithms
// lists. An op name says which op ran whatever kernel template it launched, so it is looked up
// first when a report knows it.
struct AtenHint {
  std::string_view op;
  HintId hint;
};
constexpr AtenHint kAtenHints[] = {
    {"aten::index_add_", kIndexAdd},
    {"aten::index_add", kIndexAdd},
    {"aten::index_select_backward", kIndexAdd},
    {"aten::index_reduce_", kIndexReduceProd},
    {"aten::index_reduce", kIndexReduceProd},
    {"aten::scatter_add_", kScatterAdd},
    {"aten::scatter_add", kScatterAdd},
    {"aten::scatter_reduce_", kScatterAdd},
    {"aten::scatter_reduce", kScatterAdd},
    {"aten::gather_backward", kScatterAdd},
    {"aten::scatter_", kScatterAssign},
    {"aten::scatter", kScatterAssign},
    {"aten::index_put_", kIndexPut},
    {"aten::index_put", kIndexPut},
    {"aten::_index_put_impl_", kIndexPut},
    {"aten::index_copy_", kIndexCopy},
    {"aten::index_copy", kIndexCopy},
    {"aten::put_", kPut},
    {"aten::put", kPut},
    {"aten::_embedding_bag_backward", kEmbeddingBagMax},
    {"aten::_embedding_bag_dense_backward", kEmbeddingBagMax},
    {"aten::_ctc_loss_backward", kCtcLoss},
    {"aten::adaptive_avg_pool2d_backward", kAdaptiveAvgPool},
    {"aten::_adaptive_avg_pool2d_backward", kAdaptiveAvgPool},
    {"aten::adaptive_avg_pool3d_backward", kAdaptiveAvgPool},
    {"aten::_adaptive_avg_pool3d_backward", kAdaptiveAvgPool},
    {"aten::adaptive_max_pool2d_backward", kAdaptiveMaxPool},
    {"aten::adaptive_max_pool3d_backward", kAdaptiveMaxPool},
    {"aten::avg_pool3d_backward", kAvgPool3d},
    {"aten::max_pool3d_with_indices_backward", kMaxPool3d},
    {"aten::fractional_max_pool2d_backward", kFractionalMaxPool},
    {"aten::fractional_max_pool3d_backward", kFractionalMaxPool},
    {"aten::max_unpool2d", kMaxUnpool},
    {"aten::max_unpool3d", kMaxUnpool},
    {"aten::upsample_linear1d_backward", kInterpolate},
    {"aten::upsample_bilinear2d_backward", kInterpolate},
    {"aten::upsample_bicubic2d_backward", kInterpolate},
    {"aten::upsample_trilinear3d_backward", kInterpolate},
    {"aten::grid_sampler_2d_backward", kGridSample},
    {"aten::grid_sampler_3d_backward", kGridSample},
    {"aten::reflection_pad1d_backward", kReflectionPad},
    {"aten::reflection_pad2d_backward", kReflectionPad},
    {"aten::reflection_pad3d_backward", kReflectionPad},
    {"aten::replication_pad1d_backward", kReplicationPad},
    {"aten::replication_pad2d_backward", kReplicationPad},
    {"aten::replication_pad3d_backward", kReplicationPad},
    {"aten::nll_loss2d_forward", kNllLoss2d},
    {"aten::histc", kHistc},
    {"aten::bincount", kBincountWeights},
    {"aten::median", kMedian},
    {"aten::nanmedian", kMedian},
    {"aten::kthvalue", kKthvalue},
    {"aten::cumsum", kCumsum},
    {"aten::cumsum_", kCumsum},
    {"aten::_scaled_dot_product_flash_attention_backward", kFlashAttentionBackward},
    {"aten::_flash_attention_backward", kFlashAttentionBackward},
    {"aten::_scaled_dot_product_efficient_attention_backward", kMemEfficientAttentionBackward},
    {"aten::_efficient_attention_backward", kMemEfficientAttentionBackward},
};

}  // namespace

std::optional<FixHint> FindFrameworkOpHint(std::string_view framework_op) {
  for (const AtenHint& row : kAtenHints) {
    if (row.op == framework_op) {
      const KernelHint& hint = KernelHints()[row.hint];
      return Hint(hint.framework_op, hint.mechanism, hint.fix);
    }
  }
  return std::nullopt;
}

size_t FrameworkOpHintCount() { return std::size(kAtenHints); }

std::optional<FixHint> FindFixHint(const format::OpRecord& op, DivergenceClass klass,
                                   std::string_view framework_op) {
  // The op that ran, when the report knows it, before any guess from the kernel's name.
  if (klass == DivergenceClass::kNondeterministicOp && !framework_op.empty()) {
    if (auto hint = FindFrameworkOpHint(framework_op)) return hint;
  }
  // cuDNN RNN and dropout ops: their own entry (fix_hints_cudnn_rnn.cc).
  if (auto hint = CudnnRnnFixHint(op, klass)) return hint;
  if (klass == DivergenceClass::kRngState && op.kind == format::OpKind::kGraphLaunch) {
    return Hint(
        "random ops replayed in a CUDA graph (torch.cuda.graphs: dropout, torch.rand*, "
        "...)",
        "the replay read a different Philox seed or offset: CUDAGraph.replay() writes "
        "the generator's seed and offset at that moment into the graph's state words",
        "seed with torch.manual_seed before the graph is captured and replayed (each "
        "replay takes the generator's current seed and offset, not those of the "
        "capture) and keep the random ops and replays before this one identical "
        "across runs");
  }
  if (klass == DivergenceClass::kRngState && op.kind == format::OpKind::kFrameworkOp) {
    const bool shuffle = op.name == "aten::randperm";
    return Hint(
        shuffle ? "torch.randperm (a DataLoader's shuffle draws its order with it)"
                : "a PyTorch random op (torch.rand*, dropout, nn.init, torch.multinomial, ...)",
        "it drew different numbers from identical inputs: the generator it draws from "
        "(PyTorch's default CPU generator, a CUDA generator, or one the program made) "
        "started from a different seed or position",
        std::string(shuffle ? "DataLoader(..., generator=torch.Generator().manual_seed(SEED)), "
                              "or "
                            : "") +
            "torch.manual_seed(SEED) before the first random op (it seeds the CPU and "
            "every CUDA generator), a torch.Generator the program made (a DataLoader's "
            "generator=) seeded with manual_seed(SEED), not seed(), and the same random "
            "ops before this one in every run");
  }
  if (klass == DivergenceClass::kRngState && op.kind != format::OpKind::kCurandGenerate) {
    return Hint("a random op (dropout, torch.rand*, ...)",
                "it consumed a different Philox seed or offset",
                "seed with torch.manual_seed and keep the number of random ops before this "
                "one identical across runs");
  }
  if (auto hint = LibraryHint(op, klass)) return hint;
  if (op.kind == format::OpKind::kFrameworkOp && klass == DivergenceClass::kNondeterministicOp) {
    return Hint("(a PyTorch op not in ndtrace's table)",
                "its output tensors differ from identical input tensors: typically a kernel "
                "that accumulates with atomics, or a race",
                "torch.use_deterministic_algorithms(True) either makes PyTorch's own ops "
                "deterministic or raises an error naming the op; a custom op must fix its "
                "own kernels");
  }
  if (op.kind == format::OpKind::kKernelLaunch) {
    if (const KernelRule* rule = FindKernelRule(op.name)) {
      if (rule->hint == kDeterministic) return DeterministicKernelHint(rule->deterministic_op);
      const KernelHint& hint = KernelHints()[rule->hint];
      return Hint(hint.framework_op, hint.mechanism, hint.fix);
    }
    if (klass == DivergenceClass::kNondeterministicOp) {
      return Hint("(a kernel not in ndtrace's table)",
                  "same inputs, different outputs: typically atomics or a race",
                  "if it belongs to a PyTorch op, torch.use_deterministic_algorithms(True) "
                  "either fixes it or raises an error naming the op");
    }
  }
  return std::nullopt;
}

size_t KernelHintCount() { return kHintCount; }

}  // namespace ndt::replay
