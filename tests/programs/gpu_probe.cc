// Decides whether the `gpu` tests can run: exits 0 when libcuda.so.1 is a real CUDA driver with
// at least one device, and 77 (CTest's SKIP_RETURN_CODE for those tests) when there is no
// driver, no device, or the library found is the ndtrace stand-in. Prints why either way.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace {

constexpr int kSkip = 77;
constexpr char kStandinName[] = "ndtrace stand-in device";

using InitFn = int (*)(unsigned);
using DeviceGetCountFn = int (*)(int*);
using DeviceGetNameFn = int (*)(char*, int, int);

}  // namespace

int main() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::printf("gpu_probe: no CUDA driver: %s\n", dlerror());
    return kSkip;
  }
  const auto init = reinterpret_cast<InitFn>(dlsym(driver, "cuInit"));
  const auto get_count = reinterpret_cast<DeviceGetCountFn>(dlsym(driver, "cuDeviceGetCount"));
  const auto get_name = reinterpret_cast<DeviceGetNameFn>(dlsym(driver, "cuDeviceGetName"));
  if (init == nullptr || get_count == nullptr || get_name == nullptr) {
    std::printf("gpu_probe: libcuda.so.1 lacks cuInit/cuDeviceGetCount/cuDeviceGetName\n");
    return kSkip;
  }
  if (const int r = init(0); r != 0) {
    std::printf("gpu_probe: cuInit failed with CUresult %d: no usable GPU\n", r);
    return kSkip;
  }
  int count = 0;
  if (get_count(&count) != 0 || count == 0) {
    std::printf("gpu_probe: no CUDA device\n");
    return kSkip;
  }
  char name[256] = {};
  if (get_name(name, sizeof(name), 0) != 0) name[0] = '\0';
  if (std::strcmp(name, kStandinName) == 0) {
    std::printf("gpu_probe: libcuda.so.1 is the ndtrace stand-in, not a GPU driver\n");
    return kSkip;
  }
  std::printf("gpu_probe: %d device(s), device 0: %s\n", count, name);
  return 0;
}
