// The fix-hint table against demangled kernel names as launches of PyTorch's CUDA kernels
// report them (namespaces, template arguments and lambdas spelled as the Itanium demangler
// writes them; long parameter lists shortened where they do not matter), and the library
// hints against what the libraries document.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "replayer/fix_hints.h"

namespace ndt::replay {
namespace {

using format::AlgorithmChoice;
using format::Argument;
using format::OpKind;
using format::OpRecord;

OpRecord Kernel(std::string name) {
  OpRecord op;
  op.kind = OpKind::kKernelLaunch;
  op.name = std::move(name);
  return op;
}

// What the hint must say about the op.
enum class Expect {
  kFixedByFlag,    // the docstring's first list: torch.use_deterministic_algorithms(True) fixes it
  kRaises,         // the second list: PyTorch raises; the fix is another formulation or the CPU
  kOther,          // a suspect PyTorch does not list (the fix says what works instead)
  kDeterministic,  // a deterministic sibling: no nondeterminism hint
};

struct Row {
  const char* name;
  const char* op;  // a substring of the hint's framework_op
  Expect expect;
};

// The scatter/gather kernels: one launcher, the functor and is_scatter_like name the op.
#define NDT_SCATTER(KIND, TYPE, FUNCTOR)                                                        \
  "void at::native::_scatter_gather_elementwise_kernel<128, 4, "                              \
  "at::native::_cuda_scatter_gather_internal_kernel<" KIND ", " TYPE                          \
  ">::operator()<at::native::" FUNCTOR ">(at::TensorIterator&, long, long, long, "             \
  "at::native::" FUNCTOR " const&)::{lambda(int)#1}>(int, "                                    \
  "at::native::_cuda_scatter_gather_internal_kernel<" KIND ", " TYPE                          \
  ">::operator()<at::native::" FUNCTOR ">(at::TensorIterator&, long, long, long, "             \
  "at::native::" FUNCTOR " const&)::{lambda(int)#1})"

#define NDT_HISTOGRAM(OUT, IN, WEIGHTS, LAMBDA)                                                 \
  "void at::cuda::kernelHistogram1D<" OUT ", " IN ", long, 1, 2, -1, "                        \
  "(at::cuda::CUDAHistogramMemoryType)0, at::cuda::CUDA_tensor_histogram<" OUT ", " IN ", "   \
  WEIGHTS ">(at::Tensor, at::Tensor, at::Tensor, long, long, long, at::TensorArgType, "        \
  "at::TensorArgType, at::TensorArgType)::{lambda(long)#" LAMBDA "}>(at::cuda::detail::"       \
  "TensorInfo<" OUT ", long>, at::cuda::detail::TensorInfo<" OUT ", long>, at::cuda::detail::" \
  "TensorInfo<" IN " const, long>, long, long, long, long, at::cuda::CUDA_tensor_histogram<"   \
  OUT ", " IN ", " WEIGHTS ">(at::Tensor, at::Tensor, at::Tensor, long, long, long, "          \
  "at::TensorArgType, at::TensorArgType, at::TensorArgType)::{lambda(long)#" LAMBDA "})"

#define NDT_GPU_INDEX(FUNCTION)                                                                 \
  "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<"           \
  "at::native::" FUNCTION "<at::native::OpaqueType<4> >(at::TensorIterator&, "                \
  "c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>("         \
  "at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::" FUNCTION  \
  "<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>, "                   \
  "c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&, bool)::{lambda(int)#1}>(" \
  "long, ...)"

const Row kRows[] = {
    // Indexing.cu
    {"void at::native::indexFuncSmallIndex<float, long, unsigned int, 2, 2, -2, "
     "at::native::(anonymous namespace)::ReduceAdd>(at::cuda::detail::TensorInfo<float, "
     "unsigned int>, at::cuda::detail::TensorInfo<float const, unsigned int>, "
     "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, long, "
     "long, at::native::(anonymous namespace)::ReduceAdd const&, float)",
     "index_add_", Expect::kFixedByFlag},
    {"void at::native::indexFuncLargeIndex<c10::Half, long, unsigned int, -1, -1, -1, true, "
     "at::native::(anonymous namespace)::ReduceAdd>(...)",
     "index_add_", Expect::kFixedByFlag},
    {"void indexAddLargeIndex<float, long, unsigned int, 2, 2, -2, true>("
     "at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<float, "
     "unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, "
     "unsigned int, long)",
     "index_add_", Expect::kFixedByFlag},
    {"void at::native::indexFuncLargeIndex<float, long, unsigned int, 2, 2, -2, false, "
     "at::native::(anonymous namespace)::ReduceMultiply>(...)",
     "index_reduce_(reduce='prod')", Expect::kOther},
    {"void at::native::indexFuncSmallIndex<float, long, unsigned int, 1, 1, -2, "
     "at::native::(anonymous namespace)::ReduceMaximum>(...)",
     "index_reduce_(reduce='amax')", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::indexSelectSmallIndex<float, long, unsigned int, "
     "2, 2, -2>(at::cuda::detail::TensorInfo<float, unsigned int>, "
     "at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<long "
     "const, unsigned int>, int, int, unsigned int, long)",
     "index_select", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, "
     "-1, -1, -1, true>(...)",
     "index_select", Expect::kDeterministic},
    {"void (anonymous namespace)::indexing_backward_kernel<float, 4>(long const*, long const*, "
     "float const*, float*, long, long, long, long, bool)",
     "index_put_ with sorted indices", Expect::kDeterministic},
    {"void (anonymous namespace)::indexing_backward_kernel_stride_1<c10::BFloat16>(long const*, "
     "long const*, c10::BFloat16 const*, c10::BFloat16*, long, long, long, long, bool)",
     "index_put_ with sorted indices", Expect::kDeterministic},
    // ScatterGatherKernel.cu
    {NDT_SCATTER("true", "float", "ReduceAdd"), "scatter_add_", Expect::kFixedByFlag},
    {"void at::native::_scatter_gather_elementwise_kernel<128, 4, "
     "at::native::_cuda_scatter_large_index_internal_kernel<float>::operator()<"
     "at::native::ReduceAdd>(at::TensorIterator&, long, long, c10::ArrayRef<long>, "
     "c10::ArrayRef<long>, c10::ArrayRef<long>, c10::ArrayRef<long>, long, "
     "at::native::ReduceAdd const&)::{lambda(int)#1}>(int, ...)",
     "scatter_add_", Expect::kFixedByFlag},
    {NDT_SCATTER("true", "c10::Half", "ReduceMean"), "scatter_reduce_(reduce='sum' or 'mean')",
     Expect::kFixedByFlag},
    {NDT_SCATTER("true", "double", "ReduceMultiply"), "scatter_reduce_(reduce='prod')",
     Expect::kRaises},
    {NDT_SCATTER("true", "float", "ReduceMaximum"), "scatter_reduce_(reduce='amax')",
     Expect::kDeterministic},
    {NDT_SCATTER("true", "float", "ReduceMinimum"), "scatter_reduce_(reduce='amin')",
     Expect::kDeterministic},
    {NDT_SCATTER("false", "at::native::OpaqueType<4>", "TensorAssign"), "torch.gather forward",
     Expect::kDeterministic},
    {NDT_SCATTER("true", "at::native::OpaqueType<4>", "TensorAssign"),
     "torch.Tensor.scatter_ / torch.scatter with a tensor src", Expect::kFixedByFlag},
    {"void at::native::_scatter_gather_elementwise_kernel<128, 4, "
     "at::native::_cuda_scatter_fill_internal_kernel<at::native::OpaqueType<4> >::operator()<"
     "at::native::TensorAssign>(at::TensorIterator&, at::native::OpaqueType<4>, long, long, "
     "long, at::native::TensorAssign const&)::{lambda(int)#1}>(int, ...)",
     "scatter_ with a scalar value", Expect::kDeterministic},
    {"void at::native::_scatter_gather_elementwise_kernel<128, 4, "
     "at::native::_cuda_scatter_fill_internal_kernel<float>::operator()<at::native::ReduceAdd>("
     "at::TensorIterator&, float, long, long, long, at::native::ReduceAdd const&)::"
     "{lambda(int)#1}>(int, ...)",
     "scatter_ with a scalar value", Expect::kDeterministic},
    // IndexKernel.cu
    {NDT_GPU_INDEX("index_put_kernel_impl"), "index_put_", Expect::kFixedByFlag},
    {NDT_GPU_INDEX("index_kernel_impl"), "advanced-indexing read", Expect::kDeterministic},
    {"void at::native::elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<"
     "at::native::OpaqueType<4> >(at::TensorIterator&, long, long, long)::{lambda(int)#1}>("
     "int, at::native::index_copy_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, "
     "long, long, long)::{lambda(int)#1})",
     "index_copy_", Expect::kFixedByFlag},
    {"void at::native::index_elementwise_kernel<128, 4, at::native::cuda_take_put_kernel<float, "
     "at::native::put_kernel(at::TensorIterator&, at::TensorBase const&, bool)::{lambda()#1}::"
     "operator()() const::{lambda()#7}::operator()() const::{lambda(float&, float const*)#2}>("
     "at::TensorIterator&, at::TensorBase const&, ...)::{lambda(int)#1}>(long, ...)",
     "torch.Tensor.put_", Expect::kRaises},
    {"void at::native::index_elementwise_kernel<128, 4, at::native::cuda_take_put_kernel<float, "
     "at::native::take_kernel(at::TensorIterator&, at::TensorBase const&)::{lambda()#1}::"
     "operator()() const::{lambda()#7}::operator()() const::{lambda(float&, float const*)#1}>("
     "at::TensorIterator&, at::TensorBase const&, ...)::{lambda(int)#1}>(long, ...)",
     "torch.take", Expect::kDeterministic},
    // EmbeddingBag.cu, EmbeddingBackwardKernel.cu
    {"void at::native::(anonymous namespace)::EmbeddingBag_accGradParametersKernel_max<float, "
     "long>(long const*, float const*, float*, long, long, long, long)",
     "EmbeddingBag", Expect::kRaises},
    {"void at::native::(anonymous namespace)::EmbeddingBag_updateOutputKernel_sum_mean<float, "
     "long>(long const*, float const*, long const*, float*, long, long, long, long, long, int, "
     "float const*, long, long)",
     "EmbeddingBag forward", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::_embedding_bag_per_sample_weights_backward_kernel"
     "<float, long>(float const*, long, long, float const*, long, long, long const*, long "
     "const*, long const*, long, long, float*, long, long)",
     "per_sample_weights", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::compute_grad_weight_bags<float, long>(long "
     "const*, float const*, long const*, long, long, long, long const*, long const*, bool, "
     "float const*, long, long*, long const*, long, at::acc_type<float, true>*, long)",
     "EmbeddingBag(mode='sum' or 'mean') backward", Expect::kDeterministic},
    // LossCTC.cu
    {"void at::native::(anonymous namespace)::ctc_loss_backward_collect_nonblank_gpu_kernel<"
     "float, long>(float*, float const*, long, float const*, float const*, float const*, long "
     "const*, long const*, long const*, float const*, long, long, long, long, long, long, long, "
     "long, long, long, long, long, long const*, long, long, bool)",
     "CTCLoss", Expect::kRaises},
    {"void at::native::(anonymous namespace)::ctc_loss_backward_log_beta_gpu_kernel<float, "
     "long>(...)",
     "CTCLoss forward", Expect::kDeterministic},
    // AdaptiveAveragePooling*.cu, AdaptiveMaxPooling*.cu
    {"void at::native::(anonymous namespace)::atomic_adaptive_average_gradinput<float>(float*, "
     "float const*, int, int, int, int)",
     "AdaptiveAvgPool2d", Expect::kRaises},
    {"void at::native::(anonymous namespace)::atomicadaptiveaveragegradinput<c10::Half>("
     "c10::Half*, c10::Half const*, int, int, int, int, int, int, long)",
     "AdaptiveAvgPool3d", Expect::kRaises},
    {"void at::native::(anonymous namespace)::adaptive_average_pool<float>(float const*, "
     "float*, int, int, int, int, long, long, long)",
     "AdaptiveAvgPool2d forward", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::adaptive_average_gradinput_nhwc<int, float>("
     "float*, float const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int)",
     "AdaptiveAvgPool2d forward, or its backward without atomics", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::atomicadaptivemaxgradinput<float>(float*, float "
     "const*, long const*, int, int, int, int)",
     "AdaptiveMaxPool2d", Expect::kRaises},
    {"void at::native::(anonymous namespace)::adaptivemaxpool<float>(float const*, float*, "
     "long*, int, int, int, int, long, long, long)",
     "AdaptiveMaxPool2d/3d forward", Expect::kDeterministic},
    // AveragePool3d.cu, DilatedMaxPool3d.cu, FractionalMaxPool*.cu, MaxUnpooling.cu
    {"void at::native::(anonymous namespace)::avg_pool3d_cuda_update_grad_input_atomic<float, "
     "float>(at::GenericPackedTensorAccessor<float const, 4ul, at::DefaultPtrTraits, long>, "
     "at::GenericPackedTensorAccessor<float, 4ul, at::DefaultPtrTraits, long>, int, int, int, "
     "int, int, int, int, int, int, bool, int, int, long)",
     "AvgPool3d", Expect::kRaises},
    {"void at::native::(anonymous namespace)::avg_pool3d_cuda_update_grad_input<float, float>("
     "at::GenericPackedTensorAccessor<float const, 4ul, at::DefaultPtrTraits, long>, "
     "at::GenericPackedTensorAccessor<float, 4ul, at::DefaultPtrTraits, long>, int, int, int, "
     "int, int, int, int, int, int, bool, int, int)",
     "AvgPool3d forward, or its backward over windows that do not overlap",
     Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::max_pool3d_with_indices_backward_single_out_frame"
     "<float>(float*, float const*, long const*, int, int, int, int, int, int, int, int, int, "
     "int, int, int, int, int, int, int, int, int, bool)",
     "MaxPool3d backward", Expect::kRaises},
    {"void at::native::(anonymous namespace)::max_pool3d_with_indices_single_out_frame<float>("
     "float const*, at::GenericPackedTensorAccessor<float, 4ul, at::DefaultPtrTraits, long>, "
     "at::GenericPackedTensorAccessor<long, 4ul, at::DefaultPtrTraits, long>, int, int, int, int, "
     "int, int, int, int, int, int, int, int, int, int, int, int, int, bool)",
     "MaxPool3d forward", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::fractional_max_pool2d_backward_out_cuda_frame<"
     "float>(at::GenericPackedTensorAccessor<float, 4ul, at::DefaultPtrTraits, long>, "
     "at::GenericPackedTensorAccessor<float const, 4ul, at::DefaultPtrTraits, long>, "
     "at::GenericPackedTensorAccessor<long const, 4ul, at::DefaultPtrTraits, long>)",
     "FractionalMaxPool2d", Expect::kRaises},
    {"void at::native::(anonymous namespace)::fractional_max_pool3d_backward_out_frame<double>("
     "...)",
     "FractionalMaxPool3d", Expect::kRaises},
    {"void at::native::max_unpooling2d_forward_kernel<float>(long, float const*, long const*, "
     "long, long, long, long, long, float*)",
     "MaxUnpool", Expect::kRaises},
    {"void at::native::max_unpooling3d_forward_kernel<c10::BFloat16>(...)", "MaxUnpool",
     Expect::kRaises},
    // UpSample*.cu
    {"void at::native::(anonymous namespace)::upsample_bilinear2d_backward_out_frame<float, "
     "float>(unsigned long, int, int, int, int, int, int, float, float, bool, float*, float "
     "const*)",
     "interpolate", Expect::kRaises},
    {"void at::native::(anonymous namespace)::upsample_bilinear2d_backward_nhwc_out_frame<"
     "c10::Half, float>(...)",
     "interpolate", Expect::kRaises},
    {"void at::native::(anonymous namespace)::upsample_linear1d_out_frame_backward<float, "
     "float>(int, float, bool, at::GenericPackedTensorAccessor<float, 3ul, at::DefaultPtrTraits, "
     "long>, at::GenericPackedTensorAccessor<float const, 3ul, at::DefaultPtrTraits, long>)",
     "interpolate", Expect::kRaises},
    {"void at::native::(anonymous namespace)::upsample_bicubic2d_backward_out_frame<float, "
     "float>(...)",
     "interpolate", Expect::kRaises},
    {"void at::native::(anonymous namespace)::upsample_trilinear3d_backward_out_frame<float, "
     "float>(...)",
     "interpolate", Expect::kRaises},
    {"void at::native::(anonymous namespace)::upsample_gen2d_aa_backward_out_frame<float, "
     "float, at::native::upsample_antialias::BilinearFilterFunctor>(...)",
     "interpolate", Expect::kRaises},
    {"void at::native::(anonymous namespace)::upsample_nearest2d_backward_out_frame<float, "
     "&at::native::nearest_neighbor_bw_compute_source_index>(float const*, unsigned long, "
     "unsigned long, unsigned long, unsigned long, unsigned long, float*, float, float)",
     "mode='nearest'", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::upsample_bilinear2d_out_frame<float, float>(int, "
     "float, float, bool, at::GenericPackedTensorAccessor<float const, 4ul, "
     "at::DefaultPtrTraits, long>, at::GenericPackedTensorAccessor<float, 4ul, "
     "at::DefaultPtrTraits, long>)",
     "interpolate forward", Expect::kDeterministic},
    // GridSampler.cu, ReflectionPad.cu, ReplicationPadding.cu
    {"void at::native::grid_sampler_2d_backward_kernel<float, int>(int, "
     "at::cuda::detail::TensorInfo<float, int>, at::cuda::detail::TensorInfo<float, int>, "
     "at::cuda::detail::TensorInfo<float, int>, at::cuda::detail::TensorInfo<float, int>, "
     "at::cuda::detail::TensorInfo<float, int>, at::cuda::detail::TensorInfo<float, int>, "
     "at::native::detail::GridSamplerInterpolation, at::native::detail::GridSamplerPadding, "
     "bool, int, bool)",
     "grid_sample backward", Expect::kRaises},
    {"void at::native::grid_sampler_3d_backward_kernel<double, long>(...)",
     "grid_sample backward", Expect::kRaises},
    {"void at::native::grid_sampler_2d_kernel<float, int>(int, "
     "at::cuda::detail::TensorInfo<float const, int>, at::cuda::detail::TensorInfo<float const, "
     "int>, at::cuda::detail::TensorInfo<float, int>, "
     "at::native::detail::GridSamplerInterpolation, at::native::detail::GridSamplerPadding, "
     "bool)",
     "grid_sample forward", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::reflection_pad2d_backward_out_kernel<float>("
     "float*, float const*, long, long, int, int, int, int, int, int)",
     "ReflectionPad1d/2d/3d backward", Expect::kRaises},
    {"void at::native::(anonymous namespace)::reflection_pad1d_out_kernel<float>(float const*, "
     "float*, long, long, long, long)",
     "ReflectionPad forward", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::replication_pad_backward_kernel<float>("
     "at::GenericPackedTensorAccessor<float, 4ul, at::DefaultPtrTraits, long>, "
     "at::GenericPackedTensorAccessor<float const, 4ul, at::DefaultPtrTraits, long>, int, int, "
     "int, int, int, int)",
     "ReplicationPad1d/2d/3d backward", Expect::kFixedByFlag},
    {"void at::native::(anonymous namespace)::replication_pad_forward_kernel2d<float>("
     "at::GenericPackedTensorAccessor<float const, 4ul, at::DefaultPtrTraits, long>, "
     "at::GenericPackedTensorAccessor<float, 4ul, at::DefaultPtrTraits, long>, int, int, int, "
     "int, int, int)",
     "ReplicationPad forward", Expect::kDeterministic},
    // NLLLoss2d.cu, Loss.cu
    {"void at::native::(anonymous namespace)::nll_loss2d_forward_kernel<float, float, long>("
     "float*, float*, float const*, long const*, float const*, int, int, int, int, long)",
     "NLLLoss", Expect::kRaises},
    {"void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
     "float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, "
     "long, long)",
     "NLLLoss without spatial dimensions", Expect::kDeterministic},
    {"void at::native::(anonymous namespace)::nll_loss2d_forward_no_reduce_kernel<float, long>("
     "...)",
     "reduction='none'", Expect::kDeterministic},
    // SummaryOps.cu
    {NDT_HISTOGRAM("float", "long", "true", "1"), "torch.bincount with weights", Expect::kRaises},
    {NDT_HISTOGRAM("double", "unsigned char", "true", "1"), "torch.bincount with weights",
     Expect::kRaises},
    {NDT_HISTOGRAM("long", "long", "false", "2"), "torch.bincount without weights",
     Expect::kDeterministic},
    {NDT_HISTOGRAM("float", "float", "false", "2"), "torch.histc", Expect::kRaises},
    {NDT_HISTOGRAM("int", "int", "false", "2"), "torch.histc of integers",
     Expect::kDeterministic},
    // Sorting.cu
    {"void at::native::(anonymous namespace)::gatherMedian<float, unsigned int, 2>("
     "at::cuda::detail::TensorInfo<float, unsigned int>, at::cuda::detail::TensorInfo<long, "
     "unsigned int>, at::cuda::detail::TensorInfo<float const, unsigned int>, unsigned int, "
     "unsigned int, unsigned int, bool)",
     "torch.median", Expect::kRaises},
    {"void at::native::(anonymous namespace)::gatherKthValue<float, unsigned int, -1>(...)",
     "torch.kthvalue", Expect::kOther},
    // CUB scans (torch.cumsum)
    {"void at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::DeviceScanPolicy<float, "
     "std::plus<float> >::Policy900, float const*, float*, at_cuda_detail::cub::ScanTileState<"
     "float, true>, std::plus<float>, at_cuda_detail::cub::NullType, int, float>(float const*, "
     "float*, at_cuda_detail::cub::ScanTileState<float, true>, int, std::plus<float>, "
     "at_cuda_detail::cub::NullType, int)",
     "torch.cumsum", Expect::kRaises},
    {"void at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::DeviceScanPolicy<long, "
     "std::plus<long> >::Policy900, long const*, long*, at_cuda_detail::cub::ScanTileState<long, "
     "true>, std::plus<long>, at_cuda_detail::cub::NullType, int, long>(...)",
     "a CUB scan of integers", Expect::kDeterministic},
    {"void at_cuda_detail::cub::DeviceScanInitKernel<at_cuda_detail::cub::ScanTileState<float, "
     "true> >(at_cuda_detail::cub::ScanTileState<float, true>, int)",
     "tile states", Expect::kDeterministic},
    {"void at::native::tensor_kernel_scan_innermost_dim<float, 16, 32>(float*, float const*, "
     "unsigned int, unsigned int, float, std::plus<float>)",
     "block scan", Expect::kDeterministic},
    // transformers/cuda: flash and memory-efficient attention
    {"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<"
     "pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, "
     "cutlass::bfloat16_t> >, false, true, false, false, false, true, false>("
     "pytorch_flash::Flash_bwd_params)",
     "flash-attention backend", Expect::kFixedByFlag},
    {"void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, "
     "128, 128, 8, 2, 4, 4, false, false, cutlass::half_t, Flash_kernel_traits<64, 128, 128, "
     "8, cutlass::half_t> >, false, false, false, false, false, true, false>(Flash_bwd_params)",
     "flash-attention backend", Expect::kFixedByFlag},
    {"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, "
     "pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, "
     "cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params)",
     "pre- and post-processing", Expect::kDeterministic},
    {"void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, "
     "64, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, "
     "64, 4, cutlass::bfloat16_t> >, false, true, false, false, false, true, false, false>("
     "pytorch_flash::Flash_fwd_params)",
     "scaled_dot_product_attention forward (flash)", Expect::kDeterministic},
    {"fmha_cutlassB_f16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
     "cutlass::arch::Sm80, cutlass::half_t, true, false, true, 64, 64, 64, false>::Params)",
     "memory-efficient backend", Expect::kFixedByFlag},
    {"fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
     "cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
     "scaled_dot_product_attention forward (memory-efficient)", Expect::kDeterministic},
};

constexpr const char* kFlagFixes = "torch.use_deterministic_algorithms(True)";

TEST_CASE("real demangled kernel names get the hint of the PyTorch op they implement",
          "[hints]") {
  for (const Row& row : kRows) {
    INFO(row.name);
    const auto hint = FindFixHint(Kernel(row.name), DivergenceClass::kNondeterministicOp);
    REQUIRE(hint.has_value());
    CHECK_THAT(hint->framework_op, Catch::Contains(row.op));
    CHECK_THAT(hint->framework_op, !Catch::Contains("not in ndtrace's table"));
    switch (row.expect) {
      case Expect::kFixedByFlag:
        CHECK_THAT(hint->fix, Catch::StartsWith(std::string(kFlagFixes)));
        CHECK_THAT(hint->framework_op, !Catch::Contains("deterministic kernel"));
        break;
      case Expect::kRaises:
        CHECK_THAT(hint->fix, Catch::Contains("raises"));
        CHECK_THAT(hint->fix, !Catch::StartsWith(std::string(kFlagFixes)));
        break;
      case Expect::kOther:
        CHECK_THAT(hint->fix, !Catch::StartsWith(std::string(kFlagFixes)));
        CHECK_THAT(hint->framework_op, !Catch::Contains("deterministic kernel"));
        break;
      case Expect::kDeterministic:
        CHECK_THAT(hint->framework_op, Catch::Contains("a deterministic kernel, not a suspect"));
        CHECK_THAT(hint->mechanism, Catch::Contains("same inputs give the same outputs"));
        CHECK_THAT(hint->fix, !Catch::Contains(kFlagFixes));
        break;
    }
  }
}

TEST_CASE("kernel names are matched without regard to case", "[hints]") {
  const auto upper = FindFixHint(
      Kernel("void at::native::(anonymous namespace)::ATOMICADAPTIVEMAXGRADINPUT<float>(...)"),
      DivergenceClass::kNondeterministicOp);
  REQUIRE(upper.has_value());
  CHECK_THAT(upper->framework_op, Catch::Contains("AdaptiveMaxPool2d"));
}

TEST_CASE("every kernel hint of the table is reached by a real kernel name", "[hints]") {
  std::set<std::string> suspects;
  for (const Row& row : kRows) {
    if (row.expect == Expect::kDeterministic) continue;
    suspects.insert(FindFixHint(Kernel(row.name), DivergenceClass::kNondeterministicOp)
                        ->framework_op);
  }
  CHECK(suspects.size() == KernelHintCount());
}

TEST_CASE("a kernel ndtrace does not know gets the generic hint only when it diverged itself",
          "[hints]") {
  const OpRecord op = Kernel("void RacySum(float const*, float*, int, int)");
  const auto own = FindFixHint(op, DivergenceClass::kNondeterministicOp);
  REQUIRE(own.has_value());
  CHECK_THAT(own->framework_op, Catch::Contains("not in ndtrace's table"));
  CHECK_FALSE(FindFixHint(op, DivergenceClass::kAlgorithmSelection).has_value());
}

OpRecord Gemm(std::string algo_name, format::ChoiceSource source, const char* atomics) {
  OpRecord op;
  op.kind = OpKind::kCublasGemm;
  op.name = "cublasGemmEx";
  op.args = {{"atomics", std::string(atomics)}};
  op.algorithm = AlgorithmChoice{"cublas", algo_name == "CUBLAS_GEMM_AUTOTUNE" ? 999 : -1,
                                 std::move(algo_name), {}, "",
                                 format::Determinism::kDeterministic, source};
  return op;
}

TEST_CASE("an autotuned cuBLAS GEMM is fixed by a fixed algorithm, not by the workspace "
          "configuration",
          "[hints]") {
  const OpRecord op =
      Gemm("CUBLAS_GEMM_AUTOTUNE", format::ChoiceSource::kBenchmark, "not allowed");
  for (DivergenceClass klass :
       {DivergenceClass::kNondeterministicOp, DivergenceClass::kAlgorithmSelection}) {
    const auto hint = FindFixHint(op, klass);
    REQUIRE(hint.has_value());
    CHECK_THAT(hint->mechanism, Catch::Contains("CUBLAS_GEMM_AUTOTUNE"));
    CHECK_THAT(hint->fix, Catch::Contains("CUBLAS_GEMM_DEFAULT") &&
                              Catch::Contains("ndtrace run --deterministic"));
    CHECK_THAT(hint->fix, !Catch::Contains("CUBLAS_WORKSPACE_CONFIG"));
  }
}

TEST_CASE("a cuBLAS GEMM with atomics allowed is fixed by disallowing them", "[hints]") {
  const auto hint = FindFixHint(Gemm("CUBLAS_GEMM_DEFAULT", format::ChoiceSource::kRequested,
                                     "allowed"),
                                DivergenceClass::kNondeterministicOp);
  REQUIRE(hint.has_value());
  CHECK_THAT(hint->fix, Catch::Contains("CUBLAS_ATOMICS_NOT_ALLOWED"));
  CHECK_THAT(hint->fix, !Catch::Contains("CUBLAS_WORKSPACE_CONFIG"));
}

TEST_CASE("the workspace configuration is the hint for cuBLAS's multi-stream nondeterminism",
          "[hints]") {
  const auto hint = FindFixHint(Gemm("CUBLAS_GEMM_DEFAULT", format::ChoiceSource::kRequested,
                                     "not allowed"),
                                DivergenceClass::kNondeterministicOp);
  REQUIRE(hint.has_value());
  CHECK_THAT(hint->mechanism, Catch::Contains("stream"));
  CHECK_THAT(hint->fix, Catch::Contains("CUBLAS_WORKSPACE_CONFIG=:4096:8") &&
                            Catch::Contains("cublasSetWorkspace"));
  const auto chosen = FindFixHint(Gemm("CUBLAS_GEMM_ALGO3", format::ChoiceSource::kRequested,
                                       "not allowed"),
                                  DivergenceClass::kAlgorithmSelection);
  REQUIRE(chosen.has_value());
  CHECK_THAT(chosen->fix, Catch::Contains("--pin") && !Catch::Contains("CUBLAS_WORKSPACE_CONFIG"));
}

TEST_CASE("cuBLASLt hints name split-K for a result and pinning for a choice", "[hints]") {
  OpRecord op;
  op.kind = OpKind::kCublasLtMatmul;
  op.name = "cublasLtMatmul";
  const auto result = FindFixHint(op, DivergenceClass::kNondeterministicOp);
  REQUIRE(result.has_value());
  CHECK_THAT(result->fix, Catch::Contains("CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK") &&
                              Catch::Contains("--deterministic"));
  const auto choice = FindFixHint(op, DivergenceClass::kAlgorithmSelection);
  REQUIRE(choice.has_value());
  CHECK_THAT(choice->fix, Catch::Contains("--pin TRACE") && Catch::Contains("TUNABLEOP"));
}

TEST_CASE("cuDNN hints: deterministic algorithms for a result, no benchmarking for a choice",
          "[hints]") {
  OpRecord conv;
  conv.kind = OpKind::kCudnnConvolution;
  conv.name = "cudnnConvolutionBackwardFilter";
  const auto result = FindFixHint(conv, DivergenceClass::kNondeterministicOp);
  REQUIRE(result.has_value());
  CHECK_THAT(result->fix, Catch::Contains("torch.backends.cudnn.deterministic=True") &&
                              Catch::Contains("--deterministic"));
  const auto choice = FindFixHint(conv, DivergenceClass::kAlgorithmSelection);
  REQUIRE(choice.has_value());
  CHECK_THAT(choice->fix, Catch::Contains("torch.backends.cudnn.benchmark=False") &&
                              Catch::Contains("--pin TRACE"));
  OpRecord plan;
  plan.kind = OpKind::kCudnnBackendExecute;
  plan.name = "cudnnBackendExecute";
  const auto engine = FindFixHint(plan, DivergenceClass::kNondeterministicOp);
  REQUIRE(engine.has_value());
  CHECK_THAT(engine->mechanism, Catch::Contains("CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC"));
}

TEST_CASE("cuDNN's max pooling backward: the deterministic pooling mode, for a result only",
          "[hints]") {
  OpRecord op;
  op.kind = OpKind::kOther;
  op.name = "cudnnPoolingBackward";
  const auto hint = FindFixHint(op, DivergenceClass::kNondeterministicOp);
  REQUIRE(hint.has_value());
  CHECK_THAT(hint->mechanism, Catch::Contains("CUDNN_POOLING_MAX") && Catch::Contains("atomics"));
  CHECK_THAT(hint->fix, Catch::Contains("CUDNN_POOLING_MAX_DETERMINISTIC") &&
                            Catch::Contains("--deterministic"));
  // It only read data that already differed: nothing to fix in the call.
  CHECK_FALSE(FindFixHint(op, DivergenceClass::kPropagated).has_value());
  op.name = "cudnnPoolingForward";
  CHECK_FALSE(FindFixHint(op, DivergenceClass::kNondeterministicOp).has_value());
}

TEST_CASE("the cuRAND hint names the host API, not PyTorch's random ops", "[hints]") {
  OpRecord op;
  op.kind = OpKind::kCurandGenerate;
  op.name = "curandGenerateUniform";
  const auto hint = FindFixHint(op, DivergenceClass::kRngState);
  REQUIRE(hint.has_value());
  CHECK_THAT(hint->framework_op, Catch::Contains("do not use it"));
  CHECK_THAT(hint->fix, Catch::Contains("curandSetPseudoRandomGeneratorSeed") &&
                            Catch::Contains("PSEUDO_DYNAMIC") && Catch::Contains("--pin TRACE"));
}

TEST_CASE("the NCCL hint fixes algorithm, protocol and channels and says what else must hold",
          "[hints]") {
  OpRecord op;
  op.kind = OpKind::kNcclCollective;
  op.name = "ncclAllReduce";
  const auto hint = FindFixHint(op, DivergenceClass::kNondeterministicOp);
  REQUIRE(hint.has_value());
  for (const char* text : {"NCCL_ALGO=Ring", "NCCL_PROTO=Simple", "NCCL_MAX_NCHANNELS",
                           "NCCL_NVLS_ENABLE=0", "rank-to-GPU", "bucket"}) {
    CHECK_THAT(hint->fix, Catch::Contains(text));
  }
}

TEST_CASE("a host copy gets a hint only when the host data differed", "[hints]") {
  OpRecord op;
  op.kind = OpKind::kMemcpy;
  op.name = "cuMemcpyHtoD_v2";
  const auto hint = FindFixHint(op, DivergenceClass::kPropagated);
  REQUIRE(hint.has_value());
  CHECK_THAT(hint->fix, Catch::Contains("DataLoader"));
  CHECK_FALSE(FindFixHint(op, DivergenceClass::kNondeterministicOp).has_value());
}

}  // namespace
}  // namespace ndt::replay
