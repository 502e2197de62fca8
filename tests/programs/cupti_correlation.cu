// A probe of how CUPTI ties GPU work to the calls that started it, on a real GPU (the stand-in
// libcupti has no callback API: this program is built everywhere and run by tools/gpu_suite.sh
// only). ndtrace's GPU time (tracer/gpu_time.cc) names each driver op to CUPTI with an external
// correlation id; on an H200 every activity first came back tied to no op, then each runtime
// call's work to the thread's previous op. What this program prints says why, and what ndtrace
// relies on:
//
//   - which API record (RUNTIME or DRIVER) a kernel, memset or memcpy started through the
//     runtime carries the correlation id of;
//   - whether an id pushed around the runtime call (as torch.profiler's Kineto pushes) reaches
//     the activity, and an id pushed around the driver call the runtime makes inside it (as
//     ndtrace's hook does, imitated here with a driver-API callback), popped when that driver
//     call returns or only at the next one (a deferred pop);
//   - whether driver calls made inside runtime calls get DRIVER records of their own;
//   - the same for work started by driver calls directly (as Triton and cuDNN start it);
//   - what the API records' threadId is (pthread_self or gettid), and CUPTI's clock.
//
// On the H200 (tests/gpu/results/): the ids tied to a call are those pushed when it began, the
// runtime's own driver calls get no records, threadId is pthread_self, and API records of chosen
// functions come only when asked for before the context.
//
// Usage: cupti_correlation [api|cbids|bare] [immediate|deferred] [early|mid] [nocb]. api (default)
// enables the RUNTIME and DRIVER activity kinds besides CONCURRENT_KERNEL, MEMSET, MEMCPY and
// EXTERNAL_CORRELATION (as ndtrace does); cbids, instead of those two kinds, the API records of
// the functions the cases call (cuptiActivityEnableDriverApi/RuntimeApi); bare none. early
// enables CUPTI before the program's first CUDA call, mid after cuInit but before the context
// (default: after the context). nocb subscribes no callback (ndtrace has none), so only the
// outside ids are pushed. Exit 0 when every call succeeded (the facts are printed, not judged),
// 1 otherwise.
#include <cuda.h>
#include <cupti.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

__global__ void Touch(int* out, int value) {
  out[threadIdx.x] = value;
}

namespace {

// What the program pushes: the case around the runtime (or driver) call it makes, as CUSTOM0;
// the imitated hook, around each driver call, as CUSTOM2 (1000 + the driver call's number).
constexpr CUpti_ExternalCorrelationKind kOutside = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
constexpr CUpti_ExternalCorrelationKind kInside = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;

struct ApiRecord {
  bool runtime = false;
  uint32_t cbid = 0;
  uint32_t thread = 0;
  uint64_t start = 0;
  uint64_t end = 0;
};
struct Activity {
  const char* kind = "";
  uint32_t correlation = 0;
  uint32_t stream = 0;
};
struct DriverCall {  // seen by the callback
  std::string name;
  uint32_t correlation = 0;
  uint64_t pushed = 0;  // the inside id pushed at its entry
  int case_number = 0;
};

std::map<uint32_t, ApiRecord> api;                     // by correlation id
std::map<uint32_t, std::map<int, uint64_t>> external;  // correlation -> kind -> id
std::vector<Activity> activities;
std::vector<DriverCall> driver_calls;
int current_case = 0;
bool deferred = false;
bool inside_pushed = false;  // an inside id is on CUPTI's stack (deferred mode keeps it there)
uint64_t next_inside = 1000;

void Check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = "";
  cuptiGetResultString(result, &text);
  std::fprintf(stderr, "cupti_correlation: %s: %s\n", what, text);
  std::exit(1);
}
void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "cupti_correlation: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}
void Check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  std::fprintf(stderr, "cupti_correlation: %s: CUresult %d\n", what, static_cast<int>(result));
  std::exit(1);
}

void CUPTIAPI Request(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 1 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

void CUPTIAPI Complete(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* r = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        api[r->correlationId] = {record->kind == CUPTI_ACTIVITY_KIND_RUNTIME, r->cbid, r->threadId,
                                 r->start, r->end};
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* r = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        external[r->correlationId][static_cast<int>(r->externalKind)] = r->externalId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* r = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        activities.push_back({"kernel", r->correlationId, r->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* r = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        activities.push_back({"memset", r->correlationId, r->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* r = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        activities.push_back({"memcpy", r->correlationId, r->streamId});
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

// The imitated hook: an id pushed when a driver call enters, popped when it returns (or, with
// `deferred`, when the next driver call enters).
void CUPTIAPI OnDriverCall(void*, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (current_case == 0) return;
  if (info->callbackSite == CUPTI_API_ENTER) {
    if (inside_pushed) {
      cuptiActivityPopExternalCorrelationId(kInside, nullptr);
      inside_pushed = false;
    }
    const uint64_t id = ++next_inside;
    cuptiActivityPushExternalCorrelationId(kInside, id);
    inside_pushed = true;
    driver_calls.push_back({info->functionName != nullptr ? info->functionName : "?",
                            info->correlationId, id, current_case});
    (void)cbid;
  } else if (!deferred && inside_pushed) {
    cuptiActivityPopExternalCorrelationId(kInside, nullptr);
    inside_pushed = false;
  }
}

std::string ApiName(uint32_t correlation) {
  const auto found = api.find(correlation);
  if (found == api.end()) return "no API record";
  const ApiRecord& r = found->second;
  const char* name = nullptr;
  cuptiGetCallbackName(r.runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, r.cbid,
                       &name);
  return std::string(r.runtime ? "RUNTIME " : "DRIVER ") + (name != nullptr ? name : "?");
}

std::string Externals(uint32_t correlation) {
  const auto found = external.find(correlation);
  if (found == external.end()) return "none";
  std::string text;
  for (const auto& [kind, id] : found->second) {
    if (!text.empty()) text += ", ";
    text += (kind == kOutside  ? "outside="
             : kind == kInside ? "inside="
                               : "kind" + std::to_string(kind) + "=") +
            std::to_string(id);
  }
  return text;
}

void Begin(int number) {
  current_case = number;
  Check(cuptiActivityPushExternalCorrelationId(kOutside, number), "push");
}
void End() {
  uint64_t popped = 0;
  Check(cuptiActivityPopExternalCorrelationId(kOutside, &popped), "pop");
  current_case = 0;
}

}  // namespace

int main(int argc, char** argv) {
  enum class Api { kKinds, kWorkCbids, kNone } api_records = Api::kKinds;
  bool early = false;
  bool mid = false;
  bool callback = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "bare") == 0) api_records = Api::kNone;
    if (std::strcmp(argv[i], "cbids") == 0) api_records = Api::kWorkCbids;
    if (std::strcmp(argv[i], "deferred") == 0) deferred = true;
    if (std::strcmp(argv[i], "early") == 0) early = true;
    if (std::strcmp(argv[i], "mid") == 0) early = mid = true;
    if (std::strcmp(argv[i], "nocb") == 0) callback = false;
  }
  std::printf("mode: %s, %s pop of the inside id, CUPTI enabled %s, %s\n",
              api_records == Api::kKinds       ? "api (RUNTIME and DRIVER records on)"
              : api_records == Api::kWorkCbids ? "cbids (API records of work-starting calls)"
                                               : "bare (no API records)",
              deferred ? "deferred" : "immediate",
              mid     ? "after cuInit, before the context"
              : early ? "before cuInit"
                      : "after the context",
              callback ? "driver callback on" : "no callback (no inside ids)");
  uint32_t version = 0;
  cuptiGetVersion(&version);
  std::printf("CUPTI API version %u\n", version);

  if (!early) Check(cudaFree(nullptr), "cudaFree(0)");  // the context
  if (mid) Check(cuInit(0), "cuInit");
  Check(cuptiActivityRegisterCallbacks(Request, Complete), "cuptiActivityRegisterCallbacks");
  std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                           CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
  if (api_records == Api::kKinds) {
    kinds.push_back(CUPTI_ACTIVITY_KIND_RUNTIME);
    kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
  }
  for (CUpti_ActivityKind kind : kinds) Check(cuptiActivityEnable(kind), "cuptiActivityEnable");
  if (api_records == Api::kWorkCbids) {  // the functions the cases below call
    for (CUpti_CallbackId cbid :
         {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async}) {
      Check(cuptiActivityEnableDriverApi(cbid, 1), "cuptiActivityEnableDriverApi");
    }
    for (CUpti_CallbackId cbid : {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020}) {
      Check(cuptiActivityEnableRuntimeApi(cbid, 1), "cuptiActivityEnableRuntimeApi");
    }
  }
  CUpti_SubscriberHandle subscriber = nullptr;
  if (callback) {
    Check(cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(OnDriverCall), nullptr),
          "cuptiSubscribe");
    Check(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API), "cuptiEnableDomain");
  }
  if (early) Check(cudaFree(nullptr), "cudaFree(0)");  // the context

  int* device = nullptr;
  int* host = nullptr;
  cudaStream_t stream = nullptr;
  Check(cudaMalloc(&device, 256 * sizeof(int)), "cudaMalloc");
  Check(cudaMallocHost(&host, 256 * sizeof(int)), "cudaMallocHost");
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaFunction_t function = nullptr;
  Check(cudaGetFuncBySymbol(&function, reinterpret_cast<const void*>(&Touch)),
        "cudaGetFuncBySymbol");
  const char* names[] = {"",
                         "runtime launch (<<<>>>)",
                         "runtime cudaMemsetAsync",
                         "runtime cudaMemcpyAsync",
                         "driver cuLaunchKernel",
                         "driver cuMemsetD8Async"};

  Begin(1);
  Touch<<<1, 32, 0, stream>>>(device, 1);
  End();
  Begin(2);
  Check(cudaMemsetAsync(device, 0, 256 * sizeof(int), stream), "cudaMemsetAsync");
  End();
  Begin(3);
  Check(cudaMemcpyAsync(host, device, 256 * sizeof(int), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync");
  End();
  Begin(4);
  int value = 4;
  void* params[] = {&device, &value};
  Check(cuLaunchKernel(reinterpret_cast<CUfunction>(function), 1, 1, 1, 32, 1, 1, 0, stream, params,
                       nullptr),
        "cuLaunchKernel");
  End();
  Begin(5);
  Check(cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(device), 0, 64, stream), "cuMemsetD8Async");
  End();
  if (inside_pushed) cuptiActivityPopExternalCorrelationId(kInside, nullptr);
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  // The clocks, side by side.
  uint64_t cupti_now = 0;
  timespec realtime{}, monotonic{}, raw{};
  cuptiGetTimestamp(&cupti_now);
  clock_gettime(CLOCK_REALTIME, &realtime);
  clock_gettime(CLOCK_MONOTONIC, &monotonic);
  clock_gettime(CLOCK_MONOTONIC_RAW, &raw);
  const auto ns = [](const timespec& t) {
    return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
  };
  if (callback) Check(cuptiUnsubscribe(subscriber), "cuptiUnsubscribe");
  Check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");

  std::printf(
      "\nactivities (their correlation id, the API record it names, the external ids "
      "tied to it):\n");
  for (const Activity& a : activities) {
    std::printf("  %-7s stream %-4u correlation %-5u %-38s external: %s\n", a.kind, a.stream,
                a.correlation, ApiName(a.correlation).c_str(), Externals(a.correlation).c_str());
  }
  std::printf(
      "\ndriver calls the callback saw, per case (their correlation id, its API record, "
      "the external ids tied to it):\n");
  for (const DriverCall& d : driver_calls) {
    std::printf("  case %d %-28s %-26s correlation %-5u %-38s external: %s\n", d.case_number,
                names[d.case_number], d.name.c_str(), d.correlation, ApiName(d.correlation).c_str(),
                Externals(d.correlation).c_str());
  }
  std::printf("\nAPI records' threadId: ");
  uint32_t thread = 0;
  for (const auto& [correlation, record] : api) thread = record.thread;
  std::printf("%u; pthread_self %u, gettid %u\n", thread, static_cast<uint32_t>(pthread_self()),
              static_cast<uint32_t>(syscall(SYS_gettid)));
  std::printf(
      "cuptiGetTimestamp minus CLOCK_REALTIME %lld ns, CLOCK_MONOTONIC %lld ns, "
      "CLOCK_MONOTONIC_RAW %lld ns\n",
      static_cast<long long>(static_cast<int64_t>(cupti_now) - ns(realtime)),
      static_cast<long long>(static_cast<int64_t>(cupti_now) - ns(monotonic)),
      static_cast<long long>(static_cast<int64_t>(cupti_now) - ns(raw)));
  Check(cudaFreeHost(host), "cudaFreeHost");
  Check(cudaFree(device), "cudaFree");
  return 0;
}
