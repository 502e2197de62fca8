// Digest v1 on the GPU against a device-to-device copy of the same buffer, in the same run:
// the kernel reads each byte once, a copy reads and writes it, so the target (DESIGN.md) is
// digest bandwidth >= 80 % of copy bandwidth (copy bandwidth counted as bytes read + written).
//
// Needs a GPU: without a CUDA driver or device it prints "skipped" and exits 0; on the stand-in
// device it refuses to report (a CPU is not a GPU).
//
// Usage: bench_digest_gpu [MiB]   (default 1024)
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/digest_v1_core.h"
#include "kernels/digest_v1_gpu.h"

namespace {

using GetProc = ndt::kernels::DigestV1Gpu::GetProcAddressFn;

template <typename Fn>
Fn Proc(GetProc get_proc, const char* name) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  get_proc(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (fn == nullptr) {
    std::printf("skipped: the driver lacks %s\n", name);
    std::exit(0);
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  const size_t bytes = mib << 20;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::printf("skipped: no CUDA driver\n");
    return 0;
  }
  auto get_proc = reinterpret_cast<GetProc>(dlsym(driver, "cuGetProcAddress_v2"));
  auto init = Proc<CUresult (*)(unsigned)>(get_proc, "cuInit");
  CUdevice device = 0;
  CUcontext context = nullptr;
  char name[256] = {};
  if (init(0) != CUDA_SUCCESS ||
      Proc<CUresult (*)(CUdevice*, int)>(get_proc, "cuDeviceGet")(&device, 0) != CUDA_SUCCESS ||
      Proc<CUresult (*)(CUcontext*, CUdevice)>(get_proc, "cuDevicePrimaryCtxRetain")(
          &context, device) != CUDA_SUCCESS ||
      Proc<CUresult (*)(CUcontext)>(get_proc, "cuCtxSetCurrent")(context) != CUDA_SUCCESS) {
    std::printf("skipped: no usable CUDA device\n");
    return 0;
  }
  Proc<CUresult (*)(char*, int, CUdevice)>(get_proc, "cuDeviceGetName")(name, 255, device);
  if (std::strcmp(name, "ndtrace stand-in device") == 0) {
    std::printf("skipped: the stand-in device is not a GPU\n");
    return 0;
  }
  auto alloc = Proc<CUresult (*)(CUdeviceptr*, size_t)>(get_proc, "cuMemAlloc");
  auto memset = Proc<CUresult (*)(CUdeviceptr, unsigned char, size_t)>(get_proc, "cuMemsetD8");
  auto copy = Proc<CUresult (*)(CUdeviceptr, CUdeviceptr, size_t)>(get_proc, "cuMemcpyDtoD");
  auto event_create = Proc<CUresult (*)(CUevent*, unsigned)>(get_proc, "cuEventCreate");
  auto event_record = Proc<CUresult (*)(CUevent, CUstream)>(get_proc, "cuEventRecord");
  auto event_sync = Proc<CUresult (*)(CUevent)>(get_proc, "cuEventSynchronize");
  auto elapsed = Proc<CUresult (*)(float*, CUevent, CUevent)>(get_proc, "cuEventElapsedTime");
  ndt::kernels::DigestV1Gpu gpu;
  std::string error;
  namespace digest = ndt::kernels::digest_v1;
  CUdeviceptr source = 0, target = 0, scratch = 0, partials = 0, out = 0;
  if (!gpu.Load(get_proc, &error) || alloc(&source, bytes) != CUDA_SUCCESS ||
      alloc(&target, bytes) != CUDA_SUCCESS ||
      alloc(&scratch, digest::kScratchWords * 8) != CUDA_SUCCESS ||
      alloc(&partials, digest::kMaxGrid * sizeof(double)) != CUDA_SUCCESS ||
      alloc(&out, digest::kOutWords * 8) != CUDA_SUCCESS ||
      memset(source, 7, bytes) != CUDA_SUCCESS ||
      memset(scratch, 0, digest::kScratchWords * 8) != CUDA_SUCCESS) {
    std::printf("error: setup failed %s\n", error.c_str());
    return 3;
  }
  CUevent start = nullptr, stop = nullptr;
  event_create(&start, 0);
  event_create(&stop, 0);
  const auto best_ms = [&](auto&& work) {
    float best = 1e30f;
    for (int round = 0; round < 10; ++round) {
      event_record(start, nullptr);
      work();
      event_record(stop, nullptr);
      event_sync(stop);
      float ms = 0;
      elapsed(&ms, start, stop);
      if (round > 0) best = std::min(best, ms);  // round 0 warms up
    }
    return best;
  };
  uint64_t ticket = 0;
  const float digest_ms =
      best_ms([&] { gpu.Enqueue(source, bytes, scratch, 0, out, ++ticket, nullptr); });
  const float summary_ms =
      best_ms([&] { gpu.Enqueue(source, bytes, scratch, partials, out, ++ticket, nullptr); });
  const float copy_ms = best_ms([&] { copy(target, source, bytes); });
  const double digest_gbs = bytes / (digest_ms * 1e6);
  const double summary_gbs = bytes / (summary_ms * 1e6);
  const double copy_gbs = 2.0 * bytes / (copy_ms * 1e6);  // read + write
  std::printf("device %s, %zu MiB\n", name, mib);
  std::printf("digest kernel     %8.3f ms  %8.1f GB/s read\n", digest_ms, digest_gbs);
  std::printf("with f32 summary  %8.3f ms  %8.1f GB/s read\n", summary_ms, summary_gbs);
  std::printf("copy DtoD         %8.3f ms  %8.1f GB/s read+written\n", copy_ms, copy_gbs);
  std::printf("ratio %.2f (digest read bandwidth / copy bandwidth; target >= 0.80)\n",
              digest_gbs / copy_gbs);
  std::printf("ratio %.2f with the f32 summary\n", summary_gbs / copy_gbs);
  return 0;
}
