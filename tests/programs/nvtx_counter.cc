// A minimal NVTX injection library standing in for another tool's (Nsight's): it counts the
// range pushes, pops and domain pushes it receives and, at exit, writes
// "pushes P pops Q domain_pushes D domains N" to the file NVTX_COUNTER_OUT names. The tests
// point NVTX_INJECTION64_PATH at it before `ndtrace record` to check that ndtrace chains the
// injection it finds instead of taking its place.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<int> g_pushes{0}, g_pops{0}, g_domain_pushes{0}, g_domains{0};

int PushA(const char*) {
  return g_pushes++;
}
int PushW(const wchar_t*) {
  return g_pushes++;
}
int PushEx(const nvtxEventAttributes_t*) {
  return g_pushes++;
}
int Pop() {
  return --g_pops;
}
int DomainPushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t*) {
  // The handle must be one this library made (ndtrace hands each tool its own).
  if (domain != reinterpret_cast<nvtxDomainHandle_t>(&g_domains)) std::abort();
  return g_domain_pushes++;
}
int DomainPop(nvtxDomainHandle_t) {
  return 0;
}
nvtxDomainHandle_t DomainCreateA(const char*) {
  ++g_domains;
  return reinterpret_cast<nvtxDomainHandle_t>(&g_domains);
}

void Report() {
  const char* path = std::getenv("NVTX_COUNTER_OUT");
  if (path == nullptr) return;
  if (FILE* out = std::fopen(path, "w")) {
    std::fprintf(out, "pushes %d pops %d domain_pushes %d domains %d\n", g_pushes.load(),
                 -g_pops.load(), g_domain_pushes.load(), g_domains.load());
    std::fclose(out);
  }
}

void Set(NvtxFunctionTable table, unsigned size, int id, NvtxFunctionPointer function) {
  if (static_cast<unsigned>(id) < size && table[id] != nullptr) *table[id] = function;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) {
    return 0;
  }
  Set(core, core_size, NVTX_CBID_CORE_RangePushA, reinterpret_cast<NvtxFunctionPointer>(&PushA));
  Set(core, core_size, NVTX_CBID_CORE_RangePushW, reinterpret_cast<NvtxFunctionPointer>(&PushW));
  Set(core, core_size, NVTX_CBID_CORE_RangePushEx, reinterpret_cast<NvtxFunctionPointer>(&PushEx));
  Set(core, core_size, NVTX_CBID_CORE_RangePop, reinterpret_cast<NvtxFunctionPointer>(&Pop));
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx,
      reinterpret_cast<NvtxFunctionPointer>(&DomainPushEx));
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop,
      reinterpret_cast<NvtxFunctionPointer>(&DomainPop));
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA,
      reinterpret_cast<NvtxFunctionPointer>(&DomainCreateA));
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit(Report);
  }
  return 1;
}
