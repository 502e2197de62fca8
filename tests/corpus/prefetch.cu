// prefetch: a data prefetcher as training scripts write one (the "data_prefetcher" of NVIDIA's
// apex examples, PyTorch's pin_memory + non_blocking copies): the next batch is copied to the
// GPU from pinned memory on a stream of the prefetcher's own while the step runs; the compute
// stream then copies it into the model's input buffer, sums it with cuBLAS and reads the sum
// back. The compute stream waits for an event the prefetcher records after its copy
// (torch.cuda.current_stream().wait_stream(prefetch_stream)).
// --plant: that wait is forgotten: the compute stream's copy may read the batch while the
// prefetcher's copy still writes it (a race between streams; on the stand-in with asynchronous
// streams each stream's work runs on a thread of its own, so it shows as on a GPU).
#include <cublas_v2.h>

#include <vector>

#include "corpus_common.h"
#include "corpus_libraries.h"

namespace {

constexpr size_t kBatch = size_t{4} << 20;  // floats: a 16 MiB batch
constexpr int kSteps = 3;

}  // namespace

int main(int argc, char** argv) {
  const bool plant = corpus::HasFlag(argc, argv, "--plant");
  CORPUS_CHECK(cudaSetDevice(0));
  cudaStream_t prefetch_stream, compute;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&prefetch_stream, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cudaEvent_t copied;
  CORPUS_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  cublasHandle_t handle;
  BLAS_CHECK(cublasCreate(&handle));
  BLAS_CHECK(cublasSetStream(handle, compute));

  float *host_batch, *d_staged, *d_input;
  CORPUS_CHECK(cudaMallocHost(&host_batch, kBatch * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_staged, kBatch * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&d_input, kBatch * sizeof(float)));
  CORPUS_CHECK(cudaMemsetAsync(d_staged, 0, kBatch * sizeof(float), prefetch_stream));
  CORPUS_CHECK(cudaStreamSynchronize(prefetch_stream));
  std::vector<float> sums;
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kBatch; ++i) host_batch[i] = static_cast<float>((i * 7 + step) % 13);
    CORPUS_CHECK(cudaMemcpyAsync(d_staged, host_batch, kBatch * sizeof(float),
                                 cudaMemcpyHostToDevice, prefetch_stream));
    CORPUS_CHECK(cudaEventRecord(copied, prefetch_stream));
    if (!plant) CORPUS_CHECK(cudaStreamWaitEvent(compute, copied, 0));
    CORPUS_CHECK(cudaMemcpyAsync(d_input, d_staged, kBatch * sizeof(float),
                                 cudaMemcpyDeviceToDevice, compute));
    float sum = 0;
    BLAS_CHECK(cublasSasum(handle, static_cast<int>(kBatch), d_input, 1, &sum));  // waits
    sums.push_back(sum);
    std::printf("step %d: sum %.1f\n", step, sum);
    // The next step's batch overwrites the pinned buffer: the prefetcher's copy must be done.
    CORPUS_CHECK(cudaStreamSynchronize(prefetch_stream));
  }
  ndt::programs::PrintChecksum(sums.data(), sums.size() * sizeof(float));
  CORPUS_CHECK(cudaFree(d_input));
  CORPUS_CHECK(cudaFree(d_staged));
  CORPUS_CHECK(cudaFreeHost(host_batch));
  BLAS_CHECK(cublasDestroy(handle));
  CORPUS_CHECK(cudaEventDestroy(copied));
  CORPUS_CHECK(cudaStreamDestroy(compute));
  CORPUS_CHECK(cudaStreamDestroy(prefetch_stream));
  return 0;
}
