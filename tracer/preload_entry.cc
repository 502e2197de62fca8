// The dynamic-linker side of libndtrace.so: the real dlsym/dlvsym, the dispatchers behind
// our exported dlsym/dlvsym (dlsym_trampoline.S), and the exported cuGetProcAddress hooks.
//
// Finding the real dlsym. We export dlsym and dlvsym, and an unversioned definition binds
// versioned references, so even `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34")` written here
// would call our own dlvsym. Instead we read libc.so.6's dynamic symbol table directly: its
// link map (dlopen RTLD_NOLOAD + dlinfo, neither of which we interpose) gives the dynamic
// section, whose GNU hash table, symbol table and version definitions give the address of
// `dlsym@GLIBC_2.34` (falling back to `dlsym@GLIBC_2.2.5`), and the same for dlvsym. This is
// the lookup `dlvsym(RTLD_NEXT, ...)` would have done, minus the interposition.
// Every driver function declared here is one libndtrace.so may export: default visibility
// (the build hides everything else; libndtrace.map picks the exports).
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "tracer/driver_table.h"
#include "tracer/library_support.h"
#include "tracer/real_dl.h"
#include "tracer/recorder.h"

extern "C" {
// Read by dlsym_trampoline.S; written once by ndt_resolve_real_dl.
void* ndt_real_dlsym = nullptr;
void* ndt_real_dlvsym = nullptr;
void ndt_resolve_real_dl();
void* ndt_dlsym_dispatch(void* handle, const char* name);
void* ndt_dlvsym_dispatch(void* handle, const char* name, const char* version);
}

namespace ndt::tracer {
namespace {

uint32_t GnuHash(const char* name) {
  uint32_t h = 5381;
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(name); *p != 0; ++p) {
    h = h * 33 + *p;
  }
  return h;
}

// The address of `name@version` defined in the object of `map`, or null.
void* LookupVersioned(const link_map* map, const char* name, const char* version) {
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const ElfW(Half)* versym = nullptr;
  const char* verdef = nullptr;
  const auto address = [map](ElfW(Addr) pointer) {
    // glibc relocates most d_ptr entries of a loaded object in place; be robust to both.
    return pointer < map->l_addr ? pointer + map->l_addr : pointer;
  };
  for (const ElfW(Dyn)* dyn = map->l_ld; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB:
        symtab = reinterpret_cast<const ElfW(Sym)*>(address(dyn->d_un.d_ptr));
        break;
      case DT_STRTAB:
        strtab = reinterpret_cast<const char*>(address(dyn->d_un.d_ptr));
        break;
      case DT_GNU_HASH:
        gnu_hash = reinterpret_cast<const uint32_t*>(address(dyn->d_un.d_ptr));
        break;
      case DT_VERSYM:
        versym = reinterpret_cast<const ElfW(Half)*>(address(dyn->d_un.d_ptr));
        break;
      case DT_VERDEF:
        verdef = reinterpret_cast<const char*>(address(dyn->d_un.d_ptr));
        break;
      default:
        break;
    }
  }
  if (symtab == nullptr || strtab == nullptr || gnu_hash == nullptr) return nullptr;
  const uint32_t buckets = gnu_hash[0];
  const uint32_t symbol_offset = gnu_hash[1];
  const uint32_t bloom_words = gnu_hash[2];
  const auto* bucket = gnu_hash + 4 + bloom_words * (sizeof(ElfW(Addr)) / 4);
  const uint32_t* chain = bucket + buckets;
  const uint32_t hash = GnuHash(name);
  uint32_t index = bucket[hash % buckets];
  if (index < symbol_offset) return nullptr;
  for (;; ++index) {
    const uint32_t chain_hash = chain[index - symbol_offset];
    const ElfW(Sym)& symbol = symtab[index];
    if ((chain_hash | 1) == (hash | 1) && symbol.st_shndx != SHN_UNDEF &&
        std::strcmp(strtab + symbol.st_name, name) == 0) {
      bool version_matches = versym == nullptr || verdef == nullptr;
      if (!version_matches) {
        const ElfW(Half) wanted = versym[index] & 0x7fff;
        for (const char* entry = verdef; entry != nullptr;) {
          const auto* def = reinterpret_cast<const ElfW(Verdef)*>(entry);
          if (def->vd_ndx == wanted) {
            const auto* aux = reinterpret_cast<const ElfW(Verdaux)*>(entry + def->vd_aux);
            version_matches = std::strcmp(strtab + aux->vda_name, version) == 0;
            break;
          }
          entry = def->vd_next == 0 ? nullptr : entry + def->vd_next;
        }
      }
      if (version_matches) return reinterpret_cast<void*>(map->l_addr + symbol.st_value);
    }
    if ((chain_hash & 1) != 0) break;
  }
  return nullptr;
}

void* LookupLibc(const link_map* map, const char* name) {
  void* found = LookupVersioned(map, name, "GLIBC_2.34");
  return found != nullptr ? found : LookupVersioned(map, name, "GLIBC_2.2.5");
}

bool StartsWithCu(const char* name) {
  return name != nullptr && name[0] == 'c' && name[1] == 'u';
}

}  // namespace

DlsymFn RealDlsym() {
  if (__atomic_load_n(&ndt_real_dlsym, __ATOMIC_ACQUIRE) == nullptr) ndt_resolve_real_dl();
  return reinterpret_cast<DlsymFn>(__atomic_load_n(&ndt_real_dlsym, __ATOMIC_ACQUIRE));
}

DlvsymFn RealDlvsym() {
  if (__atomic_load_n(&ndt_real_dlvsym, __ATOMIC_ACQUIRE) == nullptr) ndt_resolve_real_dl();
  return reinterpret_cast<DlvsymFn>(__atomic_load_n(&ndt_real_dlvsym, __ATOMIC_ACQUIRE));
}

}  // namespace ndt::tracer

using ndt::tracer::RealDlsym;
using ndt::tracer::RealDlvsym;

// Idempotent and race-free: concurrent callers compute and store the same values.
extern "C" void ndt_resolve_real_dl() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) return;
  link_map* map = nullptr;
  if (dlinfo(libc, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr) {
    void* real_dlsym = ndt::tracer::LookupLibc(map, "dlsym");
    void* real_dlvsym = ndt::tracer::LookupLibc(map, "dlvsym");
    __atomic_store_n(&ndt_real_dlvsym, real_dlvsym, __ATOMIC_RELEASE);
    __atomic_store_n(&ndt_real_dlsym, real_dlsym, __ATOMIC_RELEASE);
  }
  dlclose(libc);
}

namespace ndt::tracer {
namespace {

// libndtrace.so's own handle, for looking up our exported hooks by name.
void* SelfHandle() {
  static std::atomic<void*> handle{nullptr};
  void* self = handle.load(std::memory_order_acquire);
  if (self == nullptr) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&ndt_dlsym_dispatch), &info) != 0 &&
        info.dli_fname != nullptr) {
      self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
      handle.store(self, std::memory_order_release);
    }
  }
  return self;
}

// What a lookup that found `found` for `name` hands out: for a driver function, our wrapper of
// that ABI variant; for a library function found through a handle of its library (a plugin
// that dlopens libcublas.so.13 RTLD_LOCAL and looks each function up), our exported hook of
// the same name, when that hook would call exactly `found`. Everything else unchanged.
void* Interposed(void* found, const char* name, DlsymFn real) {
  if (found == nullptr) return found;
  if (const char* soname = LibrarySonameFor(name); soname != nullptr) {
    void* self = SelfHandle();
    void* hook = self == nullptr ? nullptr : real(self, name);
    if (hook == nullptr || hook == found) return found;
    return RealLibraryFunction(soname, name) == found ? hook : found;
  }
  return StartsWithCu(name) ? WrapperForRealPointer(found) : found;
}

}  // namespace
}  // namespace ndt::tracer

// dlsym for every handle but RTLD_NEXT: the real lookup, then what we interpose for it.
// Reached by a tail jump, so it must not depend on its return address.
extern "C" void* ndt_dlsym_dispatch(void* handle, const char* name) {
  ndt::tracer::DlsymFn real = RealDlsym();
  if (real == nullptr) return nullptr;
  return ndt::tracer::Interposed(real(handle, name), name, real);
}

extern "C" void* ndt_dlvsym_dispatch(void* handle, const char* name, const char* version) {
  ndt::tracer::DlvsymFn real = RealDlvsym();
  if (real == nullptr) return nullptr;
  return ndt::tracer::Interposed(real(handle, name, version), name, RealDlsym());
}

// ---- cuGetProcAddress ------------------------------------------------------------------

namespace {

using GetProcAddressV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                        CUdriverProcAddressQueryResult*);
using GetProcAddressV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);

// What a lookup hands out: our wrapper of the variant the driver chose; for the name
// "cuGetProcAddress" itself, our hook of the ABI the caller's version selects, so that later
// lookups stay hooked.
void MapLookup(void** pfn) {
  if (pfn == nullptr || *pfn == nullptr) return;
  // The real cuGetProcAddress (either ABI) maps to ours, everything hooked to its wrapper.
  *pfn = ndt::tracer::WrapperForRealPointer(*pfn);
}

}  // namespace

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbol_status) {
  try {
    auto real = reinterpret_cast<GetProcAddressV2Fn>(ndt::tracer::RealGetProcAddressV2());
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    const CUresult result = real(symbol, pfn, cuda_version, flags, symbol_status);
    if (result == CUDA_SUCCESS) MapLookup(pfn);
    return result;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

#undef cuGetProcAddress
extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol,
                                                                            void** pfn,
                                                                            int cuda_version,
                                                                            cuuint64_t flags) {
  try {
    auto real = reinterpret_cast<GetProcAddressV1Fn>(ndt::tracer::RealGetProcAddressV1());
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    const CUresult result = real(symbol, pfn, cuda_version, flags);
    if (result == CUDA_SUCCESS) MapLookup(pfn);
    return result;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}
