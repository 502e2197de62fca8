// The stand-in libcurand.so.10: pseudorandom generators of the cuRAND host API computed on the
// host with a real Philox4x32-10 (README.md, "The stand-in cuRAND").
//
// Like the real library it reaches the driver only through dlopen("libcuda.so.1") and
// cuGetProcAddress_v2, and synchronises the generator's stream before it writes: device memory
// is host memory on the stand-in device, so the "kernel" is a host loop run after the work
// before it on the stream has finished.
//
// The sequence: value k (k = 0, 1, ...) of a generator is word k % 4 of Philox4x32-10 applied to
// the 128-bit counter k / 4 with the 64-bit key `seed`, whatever pseudorandom type it was created
// as (XORWOW, Philox, MRG32k3a, MTGP32, MT19937). A generate call of n 32-bit results (raw bits,
// floats) writes values offset .. offset + n - 1 and advances the offset by n; one of n doubles
// takes two values per double (2n) for XORWOW and Philox, as cuRAND's doubles of those are made
// of two 32-bit draws (curand_uniform.h's _curand_uniform_double_hq), one (n) for the others. The
// results depend only on (seed, offset, ordering, n), never on the call history. Orderings:
//  - PSEUDO_DEFAULT, PSEUDO_BEST, PSEUDO_LEGACY: output i is value offset + i;
//  - PSEUDO_SEEDED: the same, with the key scrambled (another sequence for the same seed);
//  - PSEUDO_DYNAMIC: "adjusted to the device": the n values are dealt to the device's SM count
//    of lanes (cuDeviceGetAttribute), so the output order depends on the device.
// These are not real cuRAND's numbers bit for bit; they honour the same state.
#include <cuda.h>
#include <curand.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <new>
#include <type_traits>

#include "standin_library_driver.h"

struct curandGenerator_st {
  curandRngType_t type = CURAND_RNG_PSEUDO_PHILOX4_32_10;
  unsigned long long seed = 0;
  unsigned long long offset = 0;
  curandOrdering_t ordering = CURAND_ORDERING_PSEUDO_DEFAULT;
  cudaStream_t stream = nullptr;
};

namespace {

// The current device's SM count (PSEUDO_DYNAMIC's lanes); 1 when the driver cannot say.
unsigned DeviceLanes() {
  const Driver& driver = TheDriver();
  CUdevice device = 0;
  int count = 0;
  if (driver.ctx_get_device == nullptr || driver.device_attribute == nullptr ||
      driver.ctx_get_device(&device, nullptr) != CUDA_SUCCESS ||
      driver.device_attribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) !=
          CUDA_SUCCESS ||
      count <= 0) {
    return 1;
  }
  return static_cast<unsigned>(count);
}

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
struct Block {
  uint32_t word[4];
};

Block Philox4x32x10(uint64_t counter, uint64_t key64) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0};
  uint32_t k[2] = {static_cast<uint32_t>(key64), static_cast<uint32_t>(key64 >> 32)};
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t next[4] = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0],
                              static_cast<uint32_t>(p1),
                              static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1],
                              static_cast<uint32_t>(p0)};
    for (int i = 0; i < 4; ++i) c[i] = next[i];
    k[0] += kW0;
    k[1] += kW1;
  }
  return Block{{c[0], c[1], c[2], c[3]}};
}

// Value `index` of the generator's sequence.
uint32_t SequenceValue(const curandGenerator_st& generator, uint64_t index) {
  uint64_t key = generator.seed;
  if (generator.ordering == CURAND_ORDERING_PSEUDO_SEEDED) key ^= 0x5EEDED5EEDED5EEDull;
  return Philox4x32x10(index / 4, key).word[index % 4];
}

// Hands the generator's next n raw values, in its ordering, to sink(i, value); advances it.
template <typename Sink>
void Draw(curandGenerator_st& generator, size_t n, Sink sink) {
  const uint64_t base = generator.offset;
  if (generator.ordering == CURAND_ORDERING_PSEUDO_DYNAMIC) {
    const uint64_t lanes = DeviceLanes();
    const uint64_t per_lane = (n + lanes - 1) / lanes;
    for (size_t i = 0; i < n; ++i) {
      sink(i, SequenceValue(generator, base + (i % lanes) * per_lane + i / lanes));
    }
  } else {
    for (size_t i = 0; i < n; ++i) sink(i, SequenceValue(generator, base + i));
  }
  generator.offset += n;
}

// cuRAND's uniform mapping: (x + 1/2) / 2^32, in (0, 1].
float Uniform(uint32_t x) {
  constexpr float kInv = 2.3283064e-10f;  // 2^-32
  return static_cast<float>(x) * kInv + kInv / 2.0f;
}

// cuRAND's double from two 32-bit draws (_curand_uniform_double_hq): 53 bits, in (0, 1).
double UniformDouble(uint32_t x, uint32_t y) {
  constexpr double kInv53 = 1.0 / 9007199254740992.0;  // 2^-53
  const uint64_t z = static_cast<uint64_t>(x) ^ (static_cast<uint64_t>(y) << (53 - 32));
  return static_cast<double>(z) * kInv53 + kInv53 / 2.0;
}

// Box-Muller on consecutive pairs of uniforms in place, as cuRAND does for pseudorandom
// generators; `log_normal`: exp of each normal value.
template <typename T>
void BoxMuller(T* values, size_t n, T mean, T stddev, bool log_normal) {
  constexpr T kTwoPi = static_cast<T>(6.28318530717958647692);
  for (size_t i = 0; i < n; i += 2) {
    const T radius = std::sqrt(T(-2) * std::log(values[i]));
    const T angle = kTwoPi * values[i + 1];
    values[i] = radius * std::sin(angle) * stddev + mean;
    values[i + 1] = radius * std::cos(angle) * stddev + mean;
    if (log_normal) {
      values[i] = std::exp(values[i]);
      values[i + 1] = std::exp(values[i + 1]);
    }
  }
}

std::mutex& GeneratorMutex() {
  static auto* mutex = new std::mutex();  // generators may be used during exit
  return *mutex;
}

bool IsSupportedPseudo(curandRngType_t type) {
  return type == CURAND_RNG_PSEUDO_DEFAULT || type == CURAND_RNG_PSEUDO_XORWOW ||
         type == CURAND_RNG_PSEUDO_PHILOX4_32_10 || type == CURAND_RNG_PSEUDO_MRG32K3A ||
         type == CURAND_RNG_PSEUDO_MTGP32 || type == CURAND_RNG_PSEUDO_MT19937;
}

// XORWOW and Philox make a double of two 32-bit draws; the others of one.
bool TwoDrawsPerDouble(curandRngType_t type) {
  return type == CURAND_RNG_PSEUDO_XORWOW || type == CURAND_RNG_PSEUDO_PHILOX4_32_10;
}

// Checks a generate call's arguments (n values of `element` bytes), synchronises its stream and
// launches the library's kernel.
curandStatus_t Prepare(curandGenerator_t generator, const void* out, size_t n, size_t element = 4) {
  if (generator == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
  if (n == 0) return CURAND_STATUS_SUCCESS;
  if (!IsDeviceRange(out, n * element)) return CURAND_STATUS_LAUNCH_FAILURE;
  if (!Synchronize(generator->stream)) return CURAND_STATUS_PREEXISTING_FAILURE;
  LaunchLibraryKernel(generator->stream, {{out, nullptr, nullptr}, static_cast<uint32_t>(n)});
  return CURAND_STATUS_SUCCESS;
}

// n uniform floats, or doubles from pairs of draws, into device memory; then, for the normal and
// log-normal distributions (n even), Box-Muller. The exported generates share these rather than
// calling each other: an exported call made from inside the library would reach a tracer's hook.
template <typename T>
curandStatus_t Generate(curandGenerator_t generator, T* out, size_t n, bool normal, T mean,
                        T stddev, bool log_normal) {
  if (normal && n % 2 != 0) return CURAND_STATUS_LENGTH_NOT_MULTIPLE;
  if (curandStatus_t status = Prepare(generator, out, n, sizeof(T));
      status != CURAND_STATUS_SUCCESS || n == 0) {
    return status;
  }
  std::lock_guard lock(GeneratorMutex());
  if constexpr (sizeof(T) == sizeof(double)) {
    if (TwoDrawsPerDouble(generator->type)) {
      uint32_t first = 0;
      Draw(*generator, 2 * n, [&](size_t i, uint32_t x) {
        if (i % 2 == 0) {
          first = x;
        } else {
          out[i / 2] = UniformDouble(first, x);
        }
      });
    } else {
      Draw(*generator, n, [out](size_t i, uint32_t x) { out[i] = UniformDouble(x, x); });
    }
  } else {
    Draw(*generator, n, [out](size_t i, uint32_t x) { out[i] = Uniform(x); });
  }
  if (normal) BoxMuller(out, n, mean, stddev, log_normal);
  return CURAND_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

curandStatus_t curandGetVersion(int* version) {
  if (version == nullptr) return CURAND_STATUS_OUT_OF_RANGE;
  *version = CURAND_VERSION;
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandCreateGenerator(curandGenerator_t* generator, curandRngType_t rng_type) {
  if (generator == nullptr) return CURAND_STATUS_OUT_OF_RANGE;
  if (!IsSupportedPseudo(rng_type)) return CURAND_STATUS_TYPE_ERROR;
  if (TheDriver().stream_synchronize == nullptr) return CURAND_STATUS_INITIALIZATION_FAILED;
  auto* created = new (std::nothrow) curandGenerator_st();
  if (created == nullptr) return CURAND_STATUS_ALLOCATION_FAILED;
  // PSEUDO_DEFAULT is XORWOW in cuRAND; the stand-in draws it from Philox too.
  created->type = rng_type == CURAND_RNG_PSEUDO_DEFAULT ? CURAND_RNG_PSEUDO_XORWOW : rng_type;
  *generator = created;
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandDestroyGenerator(curandGenerator_t generator) {
  if (generator == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
  delete generator;
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetStream(curandGenerator_t generator, cudaStream_t stream) {
  if (generator == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
  std::lock_guard lock(GeneratorMutex());
  generator->stream = stream;
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t generator,
                                                  unsigned long long seed) {
  if (generator == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
  std::lock_guard lock(GeneratorMutex());
  generator->seed = seed;
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetGeneratorOffset(curandGenerator_t generator, unsigned long long offset) {
  if (generator == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
  std::lock_guard lock(GeneratorMutex());
  generator->offset = offset;
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandSetGeneratorOrdering(curandGenerator_t generator, curandOrdering_t order) {
  if (generator == nullptr) return CURAND_STATUS_NOT_INITIALIZED;
  switch (order) {
    case CURAND_ORDERING_PSEUDO_BEST:
    case CURAND_ORDERING_PSEUDO_DEFAULT:
    case CURAND_ORDERING_PSEUDO_SEEDED:
    case CURAND_ORDERING_PSEUDO_LEGACY:
    case CURAND_ORDERING_PSEUDO_DYNAMIC:
      break;
    default:
      return CURAND_STATUS_OUT_OF_RANGE;
  }
  std::lock_guard lock(GeneratorMutex());
  generator->ordering = order;
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandGenerate(curandGenerator_t generator, unsigned int* output_ptr, size_t num) {
  if (curandStatus_t status = Prepare(generator, output_ptr, num); status != CURAND_STATUS_SUCCESS) {
    return status;
  }
  std::lock_guard lock(GeneratorMutex());
  Draw(*generator, num, [output_ptr](size_t i, uint32_t x) { output_ptr[i] = x; });
  return CURAND_STATUS_SUCCESS;
}

curandStatus_t curandGenerateUniform(curandGenerator_t generator, float* output_ptr, size_t num) {
  return Generate(generator, output_ptr, num, false, 0.0f, 0.0f, false);
}

curandStatus_t curandGenerateUniformDouble(curandGenerator_t generator, double* output_ptr,
                                           size_t num) {
  return Generate(generator, output_ptr, num, false, 0.0, 0.0, false);
}

curandStatus_t curandGenerateNormal(curandGenerator_t generator, float* output_ptr, size_t n,
                                    float mean, float stddev) {
  return Generate(generator, output_ptr, n, true, mean, stddev, false);
}

curandStatus_t curandGenerateLogNormal(curandGenerator_t generator, float* output_ptr, size_t n,
                                       float mean, float stddev) {
  return Generate(generator, output_ptr, n, true, mean, stddev, true);
}

curandStatus_t curandGenerateNormalDouble(curandGenerator_t generator, double* output_ptr, size_t n,
                                          double mean, double stddev) {
  return Generate(generator, output_ptr, n, true, mean, stddev, false);
}

curandStatus_t curandGenerateLogNormalDouble(curandGenerator_t generator, double* output_ptr,
                                             size_t n, double mean, double stddev) {
  return Generate(generator, output_ptr, n, true, mean, stddev, true);
}

}  // extern "C"
