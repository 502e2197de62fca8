// The GPU digest kernels (kernels/digest_v1.cu) against the CPU reference (kernels/digest_v1.cc),
// through the CUDA driver API of whatever libcuda.so.1 the loader finds: a GPU's driver (CTest
// label `gpu`), or the stand-in device's (label `standin`, where the kernels run as host
// implementations: that checks the launch plumbing, never the GPU code).
//
// Checks the test vectors of formats/README.md and random buffers of many sizes, at offsets
// 0, 1 and 8 bytes from an allocation's start, with several grid and block sizes: every digest
// must equal DigestV1 of the same bytes, and every f32 summary taken with it (each other launch)
// the host's: the same counts, min and max, and a sum within rounding of the host's (the GPU
// adds in another order); the same buffer summarised twice gives the same sum, bit for bit. Exit 0
// all equal, 1 a mismatch, 77 no usable driver or device (skip).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/digest_v1.h"
#include "kernels/digest_v1_core.h"
#include "kernels/digest_v1_gpu.h"

namespace {

constexpr int kSkip = 77;

template <typename Fn>
Fn Proc(ndt::kernels::DigestV1Gpu::GetProcAddressFn get_proc, const char* name) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  if (get_proc(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

namespace digest = ndt::kernels::digest_v1;

// The summary as the kernel defines it (digest_v1_core.h), added up in element order, and the
// sum of the finite values' magnitudes (the scale of the sum's rounding).
struct Summary {
  digest::F32Summary summary = digest::F32Summary::Empty();
  double sum_abs = 0;
};

Summary HostSummary(const std::vector<unsigned char>& bytes) {
  Summary host;
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    uint32_t bits;
    std::memcpy(&bits, bytes.data() + i, 4);
    host.summary.Add(bits);
    if (digest::F32Class(bits) == 0) host.sum_abs += std::fabs(digest::F32Value(bits));
  }
  return host;
}

}  // namespace

int main() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::printf("skipped: no CUDA driver (%s)\n", dlerror());
    return kSkip;
  }
  auto get_proc = reinterpret_cast<ndt::kernels::DigestV1Gpu::GetProcAddressFn>(
      dlsym(driver, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) return kSkip;
  auto init = Proc<CUresult (*)(unsigned)>(get_proc, "cuInit");
  auto device_get = Proc<CUresult (*)(CUdevice*, int)>(get_proc, "cuDeviceGet");
  auto retain = Proc<CUresult (*)(CUcontext*, CUdevice)>(get_proc, "cuDevicePrimaryCtxRetain");
  auto set_current = Proc<CUresult (*)(CUcontext)>(get_proc, "cuCtxSetCurrent");
  auto alloc = Proc<CUresult (*)(CUdeviceptr*, size_t)>(get_proc, "cuMemAlloc");
  auto memset = Proc<CUresult (*)(CUdeviceptr, unsigned char, size_t)>(get_proc, "cuMemsetD8");
  auto to_device = Proc<CUresult (*)(CUdeviceptr, const void*, size_t)>(get_proc, "cuMemcpyHtoD");
  auto to_host = Proc<CUresult (*)(void*, CUdeviceptr, size_t)>(get_proc, "cuMemcpyDtoH");
  // At CUDA 13, "cuCtxSynchronize" is cuCtxSynchronize_v2, which takes the context.
  auto synchronize = Proc<PFN_cuCtxSynchronize_v13000>(get_proc, "cuCtxSynchronize");
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (init == nullptr || init(0) != CUDA_SUCCESS || device_get(&device, 0) != CUDA_SUCCESS ||
      retain(&context, device) != CUDA_SUCCESS || set_current(context) != CUDA_SUCCESS) {
    std::printf("skipped: no usable CUDA device\n");
    return kSkip;
  }
  ndt::kernels::DigestV1Gpu gpu;
  std::string error;
  if (!gpu.Load(get_proc, &error)) {
    std::printf("error: %s\n", error.c_str());
    return 1;
  }

  constexpr size_t kMaxBytes = (64u << 20) + 8 + 5;
  CUdeviceptr buffer = 0, scratch = 0, partials = 0, out = 0;
  constexpr size_t kScratchBytes = digest::kScratchWords * 8;
  if (alloc(&buffer, kMaxBytes) != CUDA_SUCCESS || alloc(&scratch, kScratchBytes) != CUDA_SUCCESS ||
      alloc(&partials, digest::kMaxGrid * sizeof(double)) != CUDA_SUCCESS ||
      alloc(&out, digest::kOutWords * 8) != CUDA_SUCCESS ||
      memset(scratch, 0, kScratchBytes) != CUDA_SUCCESS) {
    std::printf("error: cannot allocate device memory\n");
    return 1;
  }
  std::vector<unsigned char> host(kMaxBytes);
  std::mt19937_64 random(20261121);
  for (auto& byte : host) byte = static_cast<unsigned char>(random());

  struct Case {
    std::string name;
    std::vector<unsigned char> bytes;
  };
  std::vector<Case> cases = {{"empty", {}},
                             {"abc", {'a', 'b', 'c'}},
                             {"16 zeros", std::vector<unsigned char>(16)},
                             {"17 zeros", std::vector<unsigned char>(17)}};
  std::vector<unsigned char> ramp(256);
  for (int i = 0; i < 256; ++i) ramp[i] = static_cast<unsigned char>(i);
  cases.push_back({"00..ff", ramp});
  std::vector<unsigned char> mib(1 << 20);
  for (size_t i = 0; i < mib.size(); ++i) {
    mib[i] = static_cast<unsigned char>((static_cast<uint64_t>(i) * 2654435761u) >> 24);
  }
  cases.push_back({"1 MiB pattern", mib});
  for (size_t size : {size_t{1}, size_t{15}, size_t{31}, size_t{4097}, size_t{1} << 16,
                      (size_t{1} << 20) + 3, size_t{64} << 20}) {
    cases.push_back({"random " + std::to_string(size),
                     std::vector<unsigned char>(host.begin(), host.begin() + size)});
  }

  int failures = 0, checked = 0;
  uint64_t ticket = 0;
  for (const Case& c : cases) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{8}}) {
      if (!c.bytes.empty() &&
          to_device(buffer + offset, c.bytes.data(), c.bytes.size()) != CUDA_SUCCESS) {
        std::printf("error: copy failed\n");
        return 1;
      }
      const ndt::kernels::Digest128 expected =
          ndt::kernels::DigestV1(c.bytes.data(), c.bytes.size());
      const Summary host_summary = HostSummary(c.bytes);
      double first_sum = 0;
      bool summarised_once = false;
      for (auto [grid, block] : {std::pair{0u, 256u}, std::pair{1u, 32u}, std::pair{7u, 96u},
                                 std::pair{528u, 1024u}, std::pair{0u, 256u}}) {
        const bool summarise = ticket % 2 == 0;
        ++ticket;
        CUresult status = gpu.Enqueue(buffer + offset, c.bytes.size(), scratch,
                                      summarise ? partials : 0, out, ticket, nullptr, grid, block);
        if (status == CUDA_SUCCESS) status = synchronize(nullptr);
        if (status != CUDA_SUCCESS) {
          std::printf("error: the digest kernel failed with CUresult %d (%s, offset %zu)\n",
                      static_cast<int>(status), c.name.c_str(), offset);
          return 1;
        }
        unsigned long long result[digest::kOutWords] = {};
        to_host(result, out, sizeof(result));
        ++checked;
        if (result[0] != expected.lo || result[1] != expected.hi ||
            result[digest::kOutTicket] != ticket || result[6] != (summarise ? 1u : 0u)) {
          ++failures;
          std::printf("MISMATCH %s offset %zu grid %u block %u: gpu %016llx%016llx cpu %s\n",
                      c.name.c_str(), offset, grid, block, result[0], result[1],
                      ndt::kernels::ToHex(expected).c_str());
          continue;
        }
        if (!summarise) continue;
        double sum;
        std::memcpy(&sum, &result[2], sizeof sum);
        const digest::F32Summary& cpu = host_summary.summary;
        const bool counts = result[4] == cpu.nan && result[5] == cpu.inf &&
                            result[3] == (cpu.min_key | static_cast<uint64_t>(cpu.max_key) << 32);
        const bool close = std::fabs(sum - cpu.sum) <= 1e-8 * host_summary.sum_abs;
        // The same grid gives the same order: the 1st and 5th launches (both grid 0) agree.
        const bool repeatable = !summarised_once || grid != 0 || sum == first_sum;
        if (grid == 0 && !summarised_once) {
          first_sum = sum;
          summarised_once = true;
        }
        if (!counts || !close || !repeatable) {
          ++failures;
          std::printf(
              "SUMMARY MISMATCH %s offset %zu grid %u block %u: gpu nan %llu inf %llu keys "
              "%016llx sum %.17g; cpu nan %llu inf %llu keys %08x%08x sum %.17g\n",
              c.name.c_str(), offset, grid, block, result[4], result[5], result[3], sum,
              static_cast<unsigned long long>(cpu.nan), static_cast<unsigned long long>(cpu.inf),
              cpu.max_key, cpu.min_key, cpu.sum);
        }
      }
    }
  }
  std::printf("%d passed, %d failed\n", checked - failures, failures);
  return failures == 0 ? 0 : 1;
}
