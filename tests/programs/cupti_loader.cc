// Loads a CUPTI client module (cupti_module.cc) with dlopen(RTLD_LOCAL), as Python loads
// PyTorch, and runs it: the module profiles its own memsets.
//
//   cupti_loader MODULE [--early]
//
// Prints "cupti memsets N"; exit 0 when the module counted every memset it made while its
// profiler was on (6 with --early, 5 without), 1 otherwise, 2 on bad arguments.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "--early") != 0)) {
    std::fprintf(stderr, "usage: cupti_loader MODULE [--early]\n");
    return 2;
  }
  const bool early = argc == 3;
  void* module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    std::fprintf(stderr, "cupti_loader: %s\n", dlerror());
    return 1;
  }
  using Run = int (*)(int, int);
  const auto run = reinterpret_cast<Run>(dlsym(module, "ndt_cupti_module_run"));
  if (run == nullptr) {
    std::fprintf(stderr, "cupti_loader: no ndt_cupti_module_run in %s\n", argv[1]);
    return 1;
  }
  constexpr int kSets = 5;
  const int counted = run(early ? 1 : 0, kSets);
  std::printf("cupti memsets %d\n", counted);
  return counted == kSets + (early ? 1 : 0) ? 0 : 1;
}
