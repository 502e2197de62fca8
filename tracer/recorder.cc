#include "tracer/recorder.h"


// Every driver function declared here is one libndtrace.so may export: default visibility
// (the build hides everything else; libndtrace.map picks the exports).
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop
#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <string_view>

#include "kernels/digest_v1.h"
#include "tracer/capture.h"
#include "tracer/driver_table.h"
#include "tracer/gpu_time.h"
#include "tracer/library_support.h"
#include "tracer/nvtx.h"
#include "tracer/real_dl.h"
#include "tracer/signals.h"
#include "tracer/tls_ref.h"

extern char** environ;

namespace ndt::tracer {
namespace {

uint64_t SteadyNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

bool EnvFlag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

format::Digest ToFormat(kernels::Digest128 digest) {
  return {digest.lo, digest.hi};
}

std::string Demangle(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return mangled;
  std::string name(demangled);
  std::free(demangled);
  return name;
}

// The digest v1 of host memory the program may have unmapped since it handed it to us: read
// through process_vm_readv, which fails (EFAULT) instead of faulting. nullopt if unreadable.
// `rows` rows of `width` bytes, `pitch` apart (a 2D copy's host side), are digested back to
// back, as if contiguous: the padding between them is none of the copy's.
std::optional<kernels::Digest128> DigestHostSafely(const void* host, uint64_t width,
                                                   uint64_t rows = 1, uint64_t pitch = 0) {
  constexpr uint64_t kPiece = 1 << 20;  // a multiple of the 16-byte digest block
  constexpr size_t kMaxSpans = 1024;    // IOV_MAX
  const uint64_t bytes = width * rows;  // the caller checked it does not overflow
  const auto* base = static_cast<const unsigned char*>(host);
  std::vector<unsigned char> buffer(std::min(bytes, kPiece));
  std::vector<iovec> spans;
  kernels::DigestV1Accumulator sum;
  uint64_t row = 0, in_row = 0;  // where the next byte to read is
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t piece = std::min(kPiece, bytes - done);
    spans.clear();
    for (uint64_t filled = 0; filled < piece;) {
      const uint64_t take = std::min(width - in_row, piece - filled);
      spans.push_back({const_cast<unsigned char*>(base + row * pitch + in_row), take});
      filled += take;
      in_row += take;
      if (in_row == width) {
        ++row;
        in_row = 0;
      }
    }
    unsigned char* into = buffer.data();
    for (size_t first = 0; first < spans.size(); first += kMaxSpans) {
      const size_t count = std::min(kMaxSpans, spans.size() - first);
      uint64_t wanted = 0;
      for (size_t i = first; i < first + count; ++i) wanted += spans[i].iov_len;
      iovec local{into, wanted};
      if (process_vm_readv(getpid(), &local, 1, &spans[first], count, 0) !=
          static_cast<ssize_t>(wanted)) {
        return std::nullopt;
      }
      into += wanted;
    }
    sum = kernels::DigestV1Add(sum, kernels::DigestV1Partial(buffer.data(), piece, done / 16));
    done += piece;
  }
  return kernels::DigestV1Finish(sum, bytes);
}

// The most host memory a digest of device memory copies through at a time (a multiple of the
// 16-byte digest block).
constexpr uint64_t kDigestBufferBytes = uint64_t{64} << 20;

// `text` as a decimal u64; false unless it is entirely one.
bool ParseU64(std::string_view text, uint64_t* value) {
  const char* end = text.data() + text.size();
  return !text.empty() && std::from_chars(text.data(), end, *value).ptr == end;
}

template <typename Fn>
Fn Proc(const char* name, int version) {
  return reinterpret_cast<Fn>(DriverProc(name, version));
}

std::vector<std::string> CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return args;
}

// The digest v1 of the file at `path`, read in pieces; nullopt when it is not a regular file
// that can be read. Files over kMaxInputDigestBytes get their size only.
constexpr uint64_t kMaxInputDigestBytes = uint64_t{64} << 20;
std::optional<format::InputFile> DigestInputFile(const std::string& path) {
  struct stat facts {};
  if (stat(path.c_str(), &facts) != 0 || !S_ISREG(facts.st_mode)) return std::nullopt;
  format::InputFile file;
  file.path = path;
  file.bytes = static_cast<uint64_t>(facts.st_size);
  if (file.bytes > kMaxInputDigestBytes) return file;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::vector<unsigned char> buffer(1 << 20);
  kernels::DigestV1Accumulator sum;
  uint64_t done = 0;
  for (;;) {
    const ssize_t got = read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    // Pieces of 1 MiB: a multiple of 16 bytes, as DigestV1Partial needs, but the last.
    sum = kernels::DigestV1Add(
        sum, kernels::DigestV1Partial(buffer.data(), static_cast<uint64_t>(got), done / 16));
    done += static_cast<uint64_t>(got);
    if (got % 16 != 0) break;
  }
  close(fd);
  if (done != file.bytes) return std::nullopt;
  const kernels::Digest128 digest = kernels::DigestV1Finish(sum, done);
  file.digest_lo = digest.lo;
  file.digest_hi = digest.hi;
  return file;
}

// What the program was started with: its executable, then each regular file its arguments
// name (a script, a configuration), at most 8. Read at the first CUDA call.
std::vector<format::InputFile> InputFiles(const std::vector<std::string>& command_line) {
  std::vector<format::InputFile> inputs;
  char exe[4096] = {};
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (length > 0) {
    if (auto file = DigestInputFile(std::string(exe, static_cast<size_t>(length)))) {
      inputs.push_back(std::move(*file));
    }
  }
  for (size_t i = 1; i < command_line.size() && inputs.size() < 9; ++i) {
    if (command_line[i].empty() || command_line[i][0] == '-') continue;
    if (auto file = DigestInputFile(command_line[i])) inputs.push_back(std::move(*file));
  }
  return inputs;
}

bool IsDeterminismRelevant(std::string_view name) {
  for (std::string_view exact :
       {"CUBLAS_WORKSPACE_CONFIG", "CUDA_LAUNCH_BLOCKING", "PYTHONHASHSEED"}) {
    if (name == exact) return true;
  }
  for (std::string_view prefix : {"NCCL_", "CUDNN_", "TORCH_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// Asks the real driver about every device. Leaves `gpus` empty (and says so in `notes`) when
// the driver is not initialised yet.
void AddGpuFacts(format::TraceHeader& header) {
  using DriverGetVersionFn = CUresult (*)(int*);
  using DeviceGetCountFn = CUresult (*)(int*);
  using DeviceGetFn = CUresult (*)(CUdevice*, int);
  using DeviceGetNameFn = CUresult (*)(char*, int, CUdevice);
  using DeviceGetUuidFn = CUresult (*)(CUuuid*, CUdevice);
  using DeviceGetAttributeFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  using DeviceTotalMemFn = CUresult (*)(size_t*, CUdevice);
  int driver_version = 0;
  if (auto get_version = Proc<DriverGetVersionFn>("cuDriverGetVersion", 2020);
      get_version != nullptr && get_version(&driver_version) == CUDA_SUCCESS) {
    header.versions.driver = static_cast<uint32_t>(driver_version);
  }
  auto get_count = Proc<DeviceGetCountFn>("cuDeviceGetCount", 2000);
  auto get_device = Proc<DeviceGetFn>("cuDeviceGet", 2000);
  auto get_name = Proc<DeviceGetNameFn>("cuDeviceGetName", 2000);
  auto get_uuid = Proc<DeviceGetUuidFn>("cuDeviceGetUuid", 11040);
  auto get_attribute = Proc<DeviceGetAttributeFn>("cuDeviceGetAttribute", 2000);
  auto total_mem = Proc<DeviceTotalMemFn>("cuDeviceTotalMem", 3020);
  int count = 0;
  if (get_count == nullptr || get_count(&count) != CUDA_SUCCESS || get_device == nullptr) {
    header.notes.push_back("GPU facts unavailable: the driver was not initialised");
    return;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    if (get_device(&device, ordinal) != CUDA_SUCCESS) continue;
    format::GpuInfo gpu;
    gpu.ordinal = static_cast<uint32_t>(ordinal);
    char name[256] = {};
    if (get_name != nullptr && get_name(name, sizeof(name) - 1, device) == CUDA_SUCCESS) {
      gpu.name = name;
    }
    CUuuid uuid;
    if (get_uuid != nullptr && get_uuid(&uuid, device) == CUDA_SUCCESS) {
      gpu.uuid.assign(uuid.bytes, sizeof(uuid.bytes));
    }
    const auto attribute = [&](CUdevice_attribute which) -> uint32_t {
      int value = 0;
      if (get_attribute == nullptr || get_attribute(&value, which, device) != CUDA_SUCCESS) {
        return 0;
      }
      return static_cast<uint32_t>(value);
    };
    gpu.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    gpu.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    gpu.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    size_t bytes = 0;
    if (total_mem != nullptr && total_mem(&bytes, device) == CUDA_SUCCESS) {
      gpu.memory_bytes = bytes;
    }
    gpu.simulated = gpu.name == "ndtrace stand-in device";
    header.gpus.push_back(std::move(gpu));
  }
}

// The versions of the GPU libraries already loaded (linked by the program or loaded before its
// first CUDA call); 0 for the others.
void AddLibraryVersions(format::TraceHeader& header) {
  using SizeVersionFn = size_t (*)();
  using IntVersionFn = int (*)(int*);
  if (auto cudnn = reinterpret_cast<SizeVersionFn>(
          RealLibraryFunction(kCudnnSoname, "cudnnGetVersion"))) {
    header.versions.cudnn = static_cast<uint32_t>(cudnn());
  }
  if (auto cublas = reinterpret_cast<SizeVersionFn>(
          RealLibraryFunction(kCublasLtSoname, "cublasLtGetVersion"))) {
    header.versions.cublas = static_cast<uint32_t>(cublas());
  }
  int version = 0;
  if (auto curand = reinterpret_cast<IntVersionFn>(
          RealLibraryFunction(kCurandSoname, "curandGetVersion"));
      curand != nullptr && curand(&version) == 0) {
    header.versions.curand = static_cast<uint32_t>(version);
  }
  if (auto nccl = reinterpret_cast<IntVersionFn>(
          RealLibraryFunction(kNcclSoname, "ncclGetVersion"));
      nccl != nullptr && nccl(&version) == 0) {
    header.versions.nccl = static_cast<uint32_t>(version);
  }
}

format::TraceHeader BuildHeader() {
  format::TraceHeader header;
  header.tool_version = NDT_VERSION;
  header.command_line = CommandLine();
  header.inputs = InputFiles(header.command_line);
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) header.host = host;
  header.pid = static_cast<uint32_t>(getpid());
  header.rank = RankFromEnvironment();
  header.start_unix_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  AddGpuFacts(header);
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    const size_t equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    if (IsDeterminismRelevant(text.substr(0, equals))) {
      header.environment.push_back(
          {std::string(text.substr(0, equals)), std::string(text.substr(equals + 1))});
    }
  }
  AddLibraryVersions(header);
  header.python = FindPythonVersion();
  return header;
}

thread_local bool t_in_hook = false;
// In the child of fork(): whether its (only) thread is the main thread is asked again.
void ForgetExitDigestArm() noexcept;

// ---- Recorder --------------------------------------------------------------------------

enum class State { kIdle, kRecording, kFailed, kClosed };

class Recorder {
 public:
  static Recorder& Get() {
    static Recorder* recorder = new Recorder();  // never destroyed: hooks run during exit
    return *recorder;
  }

  // The session to record into, creating it on the first call; null when not recording.
  Session* Current() {
    Session* session = session_.load(std::memory_order_acquire);
    if (session != nullptr) return session;
    if (state_.load(std::memory_order_acquire) != State::kIdle) return nullptr;
    return Start();
  }

  // The session, without starting one.
  Session* IfRecording() const { return session_.load(std::memory_order_acquire); }

  bool strict() const { return strict_; }
  bool failed() const { return state_.load(std::memory_order_acquire) == State::kFailed; }

  // Logs `message` as one `ndtrace:` line unless quiet. Never throws.
  void Log(const std::string& message) {
    if (!quiet_) std::fprintf(stderr, "ndtrace: %s\n", message.c_str());
  }

  // Stops recording after an internal failure; logs the first one.
  void Fail(const std::string& message) {
    bool expected = false;
    if (!failure_logged_.compare_exchange_strong(expected, true)) return;
    Session* session = session_.load(std::memory_order_acquire);
    if (session != nullptr) {
      format::TracerNote note;
      note.severity = format::Severity::kError;
      note.text = "recording stopped: " + message;
      note.before_op = session->PeekOpSequence();
      note.time_ns = session->NowNs();
      session->Append(note);
      session->FlushHeldRecords(false);
    }
    state_.store(State::kFailed, std::memory_order_release);
    session_.store(nullptr, std::memory_order_release);
    Log(message + "; recording stopped, calls pass through");
  }

  // At exit: takes the exit state digest, once (unless NDTRACE_DIGEST_EXIT=0; skipped with a
  // note when the driver can no longer synchronise).
  void TakeExitDigest() {
    std::lock_guard lock(create_mutex_);
    TakeExitDigestLocked();
  }

  // At exit: takes the exit state digest if that has not happened yet, and closes this
  // process's trace (`signalled`: for a signal, from the watcher thread). Later hooks pass
  // through.
  void Close(bool signalled = false) {
    // Never in another process sharing our memory (a vfork child on its way to exec or _exit):
    // it must not touch the parent's session.
    if (owner_pid_ != getpid()) return;
    std::lock_guard lock(create_mutex_);
    TakeExitDigestLocked();
    Session* session = session_.exchange(nullptr, std::memory_order_acq_rel);
    State previous = state_.exchange(State::kClosed, std::memory_order_acq_rel);
    if (session == nullptr || previous != State::kRecording || owner_pid_ != getpid()) return;
    const bool nested = t_in_hook;
    t_in_hook = true;  // our driver calls must not be recorded
    gpu_time::Stop(!signalled);  // CUPTI's last activities, before the trace closes
    session->FlushHeldRecords(true);
    session->StopRings();
    t_in_hook = nested;
    Status status = session->writer().Close();
    if (!status.ok()) Log("trace " + output_ + ": " + status.message());
  }

 private:
  Recorder() {
    const char* output = std::getenv("NDTRACE_OUTPUT");
    base_output_ = output != nullptr && *output != '\0'
                       ? std::string(output)
                       : "ndtrace-" + std::to_string(getpid()) + ".ndt";
    // Under `ndtrace record`/`check` (NDTRACE_LAUNCHER_PID), only the process the launcher
    // started writes the trace path itself; every other process of the run (a torchrun worker,
    // an MPI rank, a subprocess) writes `<path>.rank<R>` when it has a rank, else
    // `<path>.<pid>`.
    if (const char* launcher = std::getenv("NDTRACE_LAUNCHER_PID");
        launcher != nullptr && std::strtol(launcher, nullptr, 10) != getppid()) {
      const int32_t rank = RankFromEnvironment();
      base_output_ += rank >= 0 ? ".rank" + std::to_string(rank) : "." + std::to_string(getpid());
    }
    output_ = base_output_;
    strict_ = EnvFlag("NDTRACE_STRICT");
    quiet_ = EnvFlag("NDTRACE_QUIET");
    digests_ = DigestConfigFromEnvironment(&digest_problems_);
    gpu_digests_ = GpuDigestConfigFromEnvironment(&digest_problems_);
    policy_ = PolicyFromEnvironment(&digest_problems_);
    if (const char* slots = std::getenv("NDTRACE_RING_SLOTS"); slots != nullptr && *slots != '\0') {
      uint64_t value = 0;
      if (ParseU64(slots, &value) && value >= 64 && value <= (1u << 20) &&
          (value & (value - 1)) == 0) {
        ring_slots_ = value;
      } else {
        digest_problems_.push_back(std::string("NDTRACE_RING_SLOTS=") + slots +
                                   ": expected a power of two from 64 to 1048576; using " +
                                   std::to_string(ring_slots_));
      }
    }
    owner_pid_ = getpid();
    pthread_atfork(nullptr, nullptr, [] {
      try {
        Get().OnForkChild();
      } catch (...) {  // out of memory in the child: it records nothing
        Get().ForgetInChild();
      }
    });
  }

  // Also writes the records still waiting for GPU digests, while the context is alive.
  void TakeExitDigestLocked() {
    Session* session = session_.load(std::memory_order_acquire);
    if (session == nullptr || exit_digest_taken_ || owner_pid_ != getpid() ||
        state_.load(std::memory_order_acquire) != State::kRecording || t_in_hook) {
      return;
    }
    exit_digest_taken_ = true;
    t_in_hook = true;  // our driver calls must not be recorded
    try {
      if (digests_.at_exit) session->TakeStateDigest("exit");
      session->FlushHeldRecords(true);
    } catch (...) {
    }
    t_in_hook = false;
  }

  // The child of fork() when OnForkChild failed: never records (no allocation here).
  void ForgetInChild() noexcept {
    session_.store(nullptr, std::memory_order_relaxed);
    state_.store(State::kClosed, std::memory_order_relaxed);
    owner_pid_ = getpid();
  }

  // In the child of fork(), single-threaded: forget (leak, never touch) the parent's
  // session, whose writer threads do not exist here, and start afresh on the next CUDA call.
  void OnForkChild() {
    new (&create_mutex_) std::mutex();
    session_.store(nullptr, std::memory_order_relaxed);
    failure_logged_.store(false, std::memory_order_relaxed);
    const State parent_state = state_.load(std::memory_order_relaxed);
    state_.store(parent_state == State::kClosed ? State::kClosed : State::kIdle,
                 std::memory_order_relaxed);
    owner_pid_ = getpid();
    exit_digest_taken_ = false;
    ForgetExitDigestArm();
    output_ = base_output_ + "." + std::to_string(owner_pid_);
    gpu_time::ForgetAfterFork();
  }

  Session* Start() {
    std::lock_guard lock(create_mutex_);
    if (state_.load(std::memory_order_acquire) != State::kIdle) {
      return session_.load(std::memory_order_acquire);
    }
    const uint64_t start = SteadyNs();
    format::TraceHeader header = BuildHeader();
    header.policy = ToFormat(policy_.mode);
    std::unique_ptr<PinTable> pins;
    if (policy_.mode == PolicyMode::kPin) {
      const std::string pin_path = ReferenceTracePath(policy_.pin_path);
      header.pinned_from = pin_path;
      StatusOr<PinTable> loaded = PinTable::Load(pin_path);
      if (loaded.ok()) {
        pins = std::make_unique<PinTable>(std::move(loaded).value());
        if (const std::vector<std::string> risky = pins->NondeterministicChoices();
            !risky.empty()) {
          std::string listed;
          for (const std::string& text : risky) listed += (listed.empty() ? "" : ", ") + text;
          const std::string why =
              "the reference " + pin_path + " ran nondeterministic algorithms (" + listed +
              "): pinned, they are chosen again but their results can still differ between "
              "runs; record the reference with deterministic algorithms "
              "(torch.backends.cudnn.deterministic=True, or ndtrace record --deterministic)";
          header.notes.push_back(why);
          Log(why);
        }
      } else {
        const std::string why = "cannot pin choices from " + pin_path + ": " +
                                loaded.status().message() + "; the program's own choices stand";
        header.notes.push_back(why);
        Log(why);
      }
    }
    StatusOr<std::unique_ptr<format::TraceWriter>> writer =
        format::TraceWriter::Create(output_, header);
    if (!writer.ok()) {
      failure_logged_.store(true);
      state_.store(State::kFailed, std::memory_order_release);
      Log("cannot record: " + writer.status().message() + "; calls pass through");
      return nullptr;
    }
    for (const std::string& problem : digest_problems_) Log(problem);
    digest_problems_.clear();
    // Never freed: other threads may still hold it when the exit handler closes the writer.
    auto* session = new Session(std::move(writer).value(), std::move(header), start, digests_,
                                policy_, std::move(pins), gpu_digests_,
                                [](const std::string& line) { Get().Log(line); }, ring_slots_);
    for (const format::PolicyDecisionRecord& decision : DecisionsAtLoad()) {
      session->Decide(decision);
    }
    if (!atexit_registered_) {
      atexit_registered_ = true;
      std::atexit([] {
        try {
          Get().Close();
        } catch (...) {  // nothing may escape an exit handler: it would terminate the program
        }
      });
    }
    if (const char* request = std::getenv("NDTRACE_PYTHON_STACK");
        request != nullptr && *request != '\0') {
      uint32_t wait_ms = kDefaultGilWaitMs;
      if (const char* wait = std::getenv("NDTRACE_PYTHON_STACK_WAIT_MS"); wait != nullptr) {
        uint64_t value = 0;
        if (ParseU64(wait, &value) && value >= 1 && value <= 60000) {
          wait_ms = static_cast<uint32_t>(value);
        } else {
          Log(std::string("NDTRACE_PYTHON_STACK_WAIT_MS=") + wait +
              ": expected 1 to 60000 (ms); waiting " + std::to_string(wait_ms) + " ms");
        }
      }
      if (std::optional<std::vector<LanePlace>> places = ParsePythonStackRequest(request)) {
        session->RequestPythonStacks(std::move(*places), wait_ms);
      } else {
        Log(std::string("NDTRACE_PYTHON_STACK=") + request +
            ": expected THREAD:STREAM:INDEX or THREAD:STREAM:tINDEX[,...] (at most 16); no Python "
            "stack is taken");
      }
    }
    const bool simulated = !session->header().gpus.empty() && session->header().gpus.front().simulated;
    format::TracerNote gpu_time_note;
    gpu_time_note.text = "GPU time: " + gpu_time::Start(session, simulated);
    gpu_time_note.time_ns = session->NowNs();
    session->Append(gpu_time_note);
    WriteNvtxPreamble(*session);
    session_.store(session, std::memory_order_release);
    state_.store(State::kRecording, std::memory_order_release);
    InstallSignalFlush([] { Get().Close(/*signalled=*/true); }, [] { return t_in_hook; });
    return session;
  }

  std::mutex create_mutex_;  // held while a session is created or closed, never in a hook
  std::atomic<Session*> session_{nullptr};
  std::atomic<State> state_{State::kIdle};
  std::atomic<bool> failure_logged_{false};
  bool atexit_registered_ = false;
  std::string base_output_;
  std::string output_;
  bool strict_ = false;
  bool quiet_ = false;
  DigestConfig digests_;
  GpuDigestConfig gpu_digests_;
  PolicyConfig policy_;
  std::vector<std::string> digest_problems_;  // logged when recording starts
  size_t ring_slots_ = 1024;                  // NDTRACE_RING_SLOTS: record slots per thread
  bool exit_digest_taken_ = false;            // guarded by create_mutex_
  pid_t owner_pid_ = 0;
};

// Takes the exit state digest and writes the records waiting for GPU digests when the main
// thread's thread-local objects are destroyed at exit: before the atexit handlers, while
// thread-local driver state (the current context; the stand-in keeps it in a thread_local) is
// still alive. Armed by the first op recorded on the main thread, after that op's context was
// made current, so it is destroyed first. The exit handler does it when this did not (the main
// thread recorded no op).
struct ExitDigestArm {
  bool checked = false;  // whether this thread is the main thread is known
  bool armed = false;
  ~ExitDigestArm() {
    if (!armed || gettid() != getpid()) return;
    try {
      Recorder::Get().TakeExitDigest();
    } catch (...) {
    }
  }
};
thread_local ExitDigestArm t_exit_digest;

void ForgetExitDigestArm() noexcept { t_exit_digest.checked = false; }

}  // namespace

// ---- DigestConfig ----------------------------------------------------------------------

bool ParseDigestWindow(const std::string& text, DigestConfig* config) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  uint64_t first = 0, last = UINT64_MAX;
  if (!ParseU64(std::string_view(text).substr(0, colon), &first)) return false;
  const std::string_view rest = std::string_view(text).substr(colon + 1);
  if (!rest.empty() && !ParseU64(rest, &last)) return false;
  if (first > last) return false;
  config->window = true;
  config->window_first = first;
  config->window_last = last;
  return true;
}

DigestConfig DigestConfigFromEnvironment(std::vector<std::string>* problems) {
  DigestConfig config;
  if (const char* every = std::getenv("NDTRACE_DIGEST_EVERY"); every != nullptr && *every) {
    uint64_t value = 0;
    if (ParseU64(every, &value) && value >= 1) {
      config.every = value;
    } else {
      problems->push_back(std::string("ignoring NDTRACE_DIGEST_EVERY=") + every +
                          ": not a whole number >= 1");
    }
  }
  config.at_sync = EnvFlag("NDTRACE_DIGEST_SYNC");
  if (const char* at_exit = std::getenv("NDTRACE_DIGEST_EXIT"); at_exit != nullptr) {
    config.at_exit = std::strcmp(at_exit, "0") != 0;
  }
  if (const char* managed = std::getenv("NDTRACE_DIGEST_MANAGED"); managed != nullptr) {
    config.managed = std::strcmp(managed, "0") != 0;
  }
  if (const char* window = std::getenv("NDTRACE_DIGEST_WINDOW"); window != nullptr && *window) {
    if (!ParseDigestWindow(window, &config)) {
      problems->push_back(std::string("ignoring NDTRACE_DIGEST_WINDOW=") + window +
                          ": not A:B or A: with A <= B");
    }
  }
  return config;
}

// ---- HookScope -------------------------------------------------------------------------

HookScope::HookScope() noexcept {
  bool& in_hook = TlsRef(t_in_hook);
  if (in_hook) return;
  in_hook = true;
  entered_ = true;
  try {
    Recorder& recorder = Recorder::Get();
    session_ = recorder.Current();
    if (session_ != nullptr && session_->writer().failed()) {
      // The trace can no longer be written (EFBIG under `ulimit -f`, ENOSPC, EIO, out of
      // memory): recording stops, said once, and the program goes on untouched.
      recorder.Fail(session_->writer().status().message());
      session_ = nullptr;
    }
    fail_closed_ = session_ == nullptr && recorder.strict() && recorder.failed();
  } catch (...) {
    session_ = nullptr;
  }
}

HookScope::~HookScope() {
  if (!entered_) return;
  t_in_hook = false;
  TakeDeferredSignal();  // a SIGTERM/INT/HUP that came while this hook ran
}

void HookScope::Lift() noexcept {
  if (!entered_) return;
  t_in_hook = false;
  TakeDeferredSignal();  // no lock is held across the real call about to be made
}

void HookScope::Restore() noexcept {
  if (entered_) t_in_hook = true;
}

Session* CurrentSessionIfRecording() noexcept {
  return Recorder::Get().IfRecording();
}

void ReportHookFailure(const char* hook) noexcept {
  try {
    Recorder::Get().Fail(std::string("internal error in ") + hook);
  } catch (...) {
  }
}

// ---- Session ---------------------------------------------------------------------------

Session::Session(std::unique_ptr<format::TraceWriter> writer, format::TraceHeader header,
                 uint64_t start_steady_ns, DigestConfig digests, PolicyConfig policy,
                 std::unique_ptr<PinTable> pins, GpuDigestConfig gpu_digests,
                 std::function<void(const std::string&)> log, size_t ring_slots)
    : writer_(std::move(writer)),
      header_(std::move(header)),
      start_steady_ns_(start_steady_ns),
      digests_(digests),
      policy_(std::move(policy)),
      pins_(std::move(pins)),
      gpu_(gpu_digests, std::move(log)),
      rings_(writer_.get(), ring_slots, &StartOwnThread,
             {[this](format::Record& record, std::vector<uint64_t>& tickets, bool wait) {
                return SettleHeld(record, tickets, wait);
              },
              [this](uint64_t lost) { return LostDigestsNote(lost); }}) {}

namespace {
// The ops open on this thread, innermost last (Session::OpenOp): a library call's own launches
// are made from inside it, and record so ("insideOp"). Deeper than kOpenDepth is not kept.
// One thread-local, so that each function finds it once (TlsRef).
struct OpenOps {
  static constexpr unsigned kDepth = 4;
  std::array<uint64_t, kDepth> sequences;
  unsigned depth = 0;
};
thread_local OpenOps t_open;

// Opens op `sequence`; returns the op it is made from inside, or 0.
uint64_t PushOpenOp(uint64_t sequence) {
  OpenOps& open = TlsRef(t_open);
  const uint64_t inside = open.depth > 0 ? open.sequences[open.depth - 1] : 0;
  if (open.depth < OpenOps::kDepth) open.sequences[open.depth++] = sequence;
  return inside;
}

// Closes op `sequence` (and any op opened inside it and never closed); returns the op it was
// made from inside, or 0 (also when it is not open: too deep, or closed already).
uint64_t PopOpenOp(uint64_t sequence) {
  OpenOps& open = TlsRef(t_open);
  for (unsigned i = open.depth; i-- > 0;) {
    if (open.sequences[i] != sequence) continue;
    open.depth = i;
    return i > 0 ? open.sequences[i - 1] : 0;
  }
  return 0;
}
// An op record whose strings and vectors keep their capacity, for this thread's next BeginOp.
thread_local format::OpRecord t_spare_op;
// This thread's ops on the hot path (BeginRawOp), one per nesting level: a library call that is
// a raw op (a GEMM) launches its kernels, raw ops too, before it ends. Deeper than that reuses
// the innermost.
struct RawOps {
  static constexpr unsigned kDepth = 3;
  std::array<RawOp, kDepth> ops;
  unsigned depth = 0;
};
thread_local RawOps t_raw;

// What a thread looked up last (Session::Kernel, Session::Canonical), valid while the session's
// version of that table is the one it was looked up in.
struct LookupCache {
  const Session* session = nullptr;
  uint64_t kernels_version = 0;
  struct KernelEntry {
    const void* function;
    const KernelInfo* info;
  };
  // A model's step launches a hundred kernels or more, on tensors in tens of allocator
  // segments: a thread's recent ones stay here (2 KiB each), looked up without the lock.
  static constexpr size_t kKernels = 128;
  std::array<KernelEntry, kKernels> kernels{};  // by hash of the handle (KernelSlot)
  uint64_t allocations_version = 0;
  // Sets of kWays by the address's MiB (small allocations share one), id 0: empty.
  static constexpr size_t kSets = 16;
  static constexpr size_t kWays = 4;
  std::array<Allocation, kSets * kWays> allocations{};
  unsigned next_way = 0;
  uint64_t streams_version = 0;
  struct StreamEntry {
    uint64_t handle;
    uint32_t id;  // 0: empty
  };
  std::array<StreamEntry, 4> streams{};
  unsigned next_stream = 0;
};
thread_local LookupCache t_lookups;

LookupCache& Lookups(const Session* session) {
  LookupCache& cache = TlsRef(t_lookups);
  if (cache.session != session) cache = LookupCache{session};
  return cache;
}

size_t KernelSlot(const void* function) {
  return (reinterpret_cast<uintptr_t>(function) >> 4) % LookupCache::kKernels;
}

// `op` emptied for reuse, capacity kept. Every field of OpRecord is reset here (the size check
// fails when one is added).
void ResetOp(format::OpRecord& op) {
  static_assert(sizeof(format::OpRecord) == 424, "a field was added to OpRecord: reset it here");
  op.sequence = 0;
  op.thread_id = 0;
  op.stream_id = 0;
  op.kind = format::OpKind::kOther;
  op.name.clear();
  op.args.clear();
  op.algorithm.reset();
  op.rng.reset();
  op.inputs.clear();
  op.outputs.clear();
  op.status = 0;
  op.start_ns = 0;
  op.end_ns = 0;
  op.module_id = 0;
  op.device_ordinal = 0;
  op.nvtx_range_id = 0;
}
}  // namespace

std::optional<uint64_t> Session::OpenOp() {
  const OpenOps& open = TlsRef(t_open);
  if (open.depth == 0) return std::nullopt;
  return open.sequences[open.depth - 1];
}

std::optional<uint64_t> Session::OpenOpAround(uint64_t sequence) {
  const OpenOps& open = TlsRef(t_open);
  for (unsigned i = open.depth; i-- > 0;) {
    if (open.sequences[i] == sequence) {
      return i > 0 ? std::optional<uint64_t>(open.sequences[i - 1]) : std::nullopt;
    }
  }
  return std::nullopt;
}

format::OpRecord Session::BeginOp(format::OpKind kind, std::string_view name, uint32_t stream_id) {
  format::OpRecord op;
  RecordRings::SwapOp(op, t_spare_op);
  ResetOp(op);
  op.sequence = TakeOpSequence();
  PushOpenOp(op.sequence);  // EndOp notes the op it is inside
  op.thread_id = ThreadId();
  op.stream_id = stream_id;
  op.kind = kind;
  op.name.assign(name);
  if (op.args.capacity() < 8) op.args.reserve(8);  // most ops have fewer arguments
  op.start_ns = NowNs();
  WriteOpenNvtxRanges(*this, op.sequence);
  op.nvtx_range_id = CurrentNvtxRange();
  return op;
}

RawOp& Session::BeginRawOp(format::OpKind kind, const char* name, uint32_t stream_id) {
  RawOps& raw = TlsRef(t_raw);
  RawOp& op = raw.ops[std::min(raw.depth, RawOps::kDepth - 1)];
  ++raw.depth;
  ResetRawOp(op, kind, name, stream_id);
  op.sequence = TakeOpSequence();
  op.inside = PushOpenOp(op.sequence);
  op.thread_id = ThreadId();
  op.start_ns = NowNs();
  WriteOpenNvtxRanges(*this, op.sequence);
  op.nvtx_range_id = CurrentNvtxRange();
  return op;
}

void Session::EndRawOp(RawOp& op, int32_t status, std::vector<format::BufferDigest> outputs) {
  if (RawOps& raw = TlsRef(t_raw); raw.depth > 0) --raw.depth;
  PopOpenOp(op.sequence);
  if (!outputs.empty() || python_stacks_ != nullptr) {
    // Digests and Python stacks need the whole record.
    format::OpRecord record;
    ToOpRecord(op, record);
    record.outputs = std::move(outputs);
    EndOp(record, status);
    return;
  }
  op.status = status;
  op.end_ns = NowNs();
  rings_.AppendRaw(op, op.thread_id);
  AfterOp(op.kind, op.sequence);
}

const char* Session::InternName(const std::string& name) {
  std::lock_guard lock(mutex_);
  return names_.insert(name).first->c_str();
}

void Session::Decide(const format::PolicyDecisionRecord& decision) {
  Append(decision);
  if (decision.applied) return;
  {
    std::lock_guard lock(mutex_);
    if (std::find(said_.begin(), said_.end(), decision.action) != said_.end()) return;
    said_.push_back(decision.action);
  }
  Recorder::Get().Log("op " + std::to_string(decision.op_sequence) + ": " + decision.action +
                      "; the program keeps running");
}

uint64_t Session::NowNs() const {
  const uint64_t now = SteadyNs();
  return now > start_steady_ns_ ? now - start_steady_ns_ : 0;
}

uint64_t Session::SinceStart(uint64_t steady_ns) const {
  return steady_ns > start_steady_ns_ ? steady_ns - start_steady_ns_ : 0;
}

uint32_t Session::ThreadId() {
  return ThreadLineageId();
}

void Session::RetireStream(uint64_t handle) {
  std::lock_guard lock(mutex_);
  streams_.erase(handle);
  streams_version_.fetch_add(1, std::memory_order_release);
}

uint32_t Session::StreamId(uint64_t handle, bool per_thread_variant) {
  const auto legacy = reinterpret_cast<uint64_t>(CU_STREAM_LEGACY);
  const auto per_thread = reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD);
  if (handle == legacy || (handle == 0 && !per_thread_variant)) return 0;
  if (handle == per_thread || handle == 0) return PerThreadStreamId();
  // A stream this thread used lately (a side stream: a data loader's copies, DDP's NCCL
  // stream): no lock.
  LookupCache& cache = Lookups(this);
  const uint64_t version = streams_version_.load(std::memory_order_acquire);
  if (cache.streams_version != version) {
    cache.streams = {};
    cache.streams_version = version;
  }
  for (const LookupCache::StreamEntry& known : cache.streams) {
    if (known.handle == handle && known.id != 0) return known.id;
  }
  uint32_t id = 0;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = streams_.find(handle); it != streams_.end()) id = it->second;
  }
  if (id == 0) {
    const uint32_t fresh = NewStreamId();
    std::lock_guard lock(mutex_);
    id = streams_.try_emplace(handle, fresh).first->second;
  }
  cache.streams[cache.next_stream++ % cache.streams.size()] = {handle, id};
  return id;
}

uint32_t Session::OnStreamCreated(uint64_t handle) {
  const uint32_t id = NewStreamId();
  std::lock_guard lock(mutex_);
  streams_[handle] = id;
  streams_version_.fetch_add(1, std::memory_order_release);
  return id;
}

format::DevicePointer Session::Canonical(uint64_t address) {
  format::DevicePointer pointer;
  pointer.raw_address = address;
  LookupCache& cache = Lookups(this);
  const uint64_t version = allocations_version_.load(std::memory_order_acquire);
  if (cache.allocations_version != version) {
    cache.allocations = {};
    cache.allocations_version = version;
  }
  // An allocation this thread named lately in its set (by the address's MiB), unless naming
  // `address` would mark it suballocated.
  Allocation* set = &cache.allocations[(address >> 20) % LookupCache::kSets * LookupCache::kWays];
  for (size_t way = 0; way < LookupCache::kWays; ++way) {
    const Allocation& known = set[way];
    if (address - known.base < std::max<uint64_t>(known.bytes, 1) &&
        (address == known.base || known.suballocated) && known.id != 0) {
      pointer.allocation_id = known.id;
      pointer.offset = address - known.base;
      return pointer;
    }
  }
  if (!MayBeDevice(address)) {  // a number, not an address (no lock taken)
    pointer.offset = address;
    return pointer;
  }
  std::lock_guard lock(mutex_);
  if (std::optional<Allocation> allocation = allocations_.FindNaming(address)) {
    pointer.allocation_id = allocation->id;
    pointer.offset = address - allocation->base;
    set[cache.next_way++ % LookupCache::kWays] = *allocation;
  } else {
    pointer.offset = address;
  }
  return pointer;
}

bool Session::IsDevice(uint64_t address) {
  std::lock_guard lock(mutex_);
  return allocations_.Find(address).has_value();
}

// ---- records held for their GPU digests -------------------------------------------------

namespace {

// Every list of digests in `op` (const or not) that a GPU digest may stand in for.
template <typename AnyOp, typename Visit>
void ForEachOpDigest(AnyOp& op, Visit&& visit) {
  for (auto* digests : {&op.inputs, &op.outputs}) visit(*digests);
}

// The same in `record` (a format::Record, const or not): an op's, or a state digest's.
template <typename AnyRecord, typename Visit>
void ForEachDigest(AnyRecord& record, Visit&& visit) {
  if (auto* op = std::get_if<format::OpRecord>(&record)) {
    ForEachOpDigest(*op, visit);
  } else if (auto* state = std::get_if<format::StateDigestRecord>(&record)) {
    visit(state->allocations);
  }
}

// The tickets of the GPU digests in `digests` that have not arrived yet.
void AddOutstanding(GpuDigests& gpu, const std::vector<format::BufferDigest>& digests,
                    std::vector<uint64_t>* tickets) {
  for (const format::BufferDigest& digest : digests) {
    if (digest.digest.hi == 0 && gpu.Outstanding(digest.digest.lo)) {
      tickets->push_back(digest.digest.lo);
    }
  }
}

}  // namespace

void Session::EndOp(format::OpRecord& op, int32_t status) {
  if (const uint64_t inside = PopOpenOp(op.sequence); inside != 0) {
    format::Argument argument;
    argument.name = "insideOp";
    argument.value = inside;
    op.args.push_back(std::move(argument));
  }
  op.status = status;
  op.end_ns = NowNs();
  // Python stacks asked for (PythonStackRequests::OnOp reads the whole op): the record is
  // copied and `op` stays whole.
  if (python_stacks_ != nullptr) {
    Append(op);
    AfterOp(op);
    return;
  }
  std::vector<uint64_t> tickets;  // its GPU digests still on their way
  if (gpu_.enabled()) {
    ForEachOpDigest(op, [&](const auto& digests) { AddOutstanding(gpu_, digests, &tickets); });
  }
  const uint64_t sequence = op.sequence;
  const uint32_t thread_id = op.thread_id;
  const uint32_t stream_id = op.stream_id;
  const format::OpKind kind = op.kind;
  if (!tickets.empty()) {
    rings_.AppendHeld(format::Record(std::move(op)), std::move(tickets), thread_id);
    op = format::OpRecord();
  } else {
    // The usual case: the record goes into this thread's ring by swapping; its returned
    // capacity becomes the next BeginOp's.
    rings_.AppendSwap(op, thread_id);
    RecordRings::SwapOp(t_spare_op, op);
  }
  // `op` keeps the ids AfterOp reads.
  op.sequence = sequence;
  op.thread_id = thread_id;
  op.stream_id = stream_id;
  op.kind = kind;
  op.status = status;
  AfterOp(kind, sequence);
}

void Session::RequestPythonStacks(std::vector<LanePlace> places, uint32_t gil_wait_ms) {
  python_stacks_ = std::make_unique<PythonStackRequests>(std::move(places), gil_wait_ms);
}

void Session::AfterAppend(const format::OpRecord& op) {
  if (python_stacks_ == nullptr) return;
  try {
    if (std::optional<format::PythonStackRecord> stack = python_stacks_->OnOp(op)) {
      AppendRecord(format::Record(std::move(*stack)));
    }
  } catch (...) {
    // A stack that cannot be taken (out of memory) is only missing: the op is recorded and the
    // program goes on.
  }
}

void Session::Append(const format::Record& record) {
  AppendRecord(record);
  if (const auto* op = std::get_if<format::OpRecord>(&record)) AfterAppend(*op);
}

void Session::AppendRecord(const format::Record& record) {
  std::vector<uint64_t> tickets;
  if (gpu_.enabled()) {
    ForEachDigest(record, [&](const auto& digests) { AddOutstanding(gpu_, digests, &tickets); });
  }
  // Every record goes into the sequence of the thread it is about (an op's thread; else the
  // appending one), through the appending thread's ring; one whose GPU digests are still on
  // their way holds back that ring's later records until they arrive (RecordRings::AppendHeld).
  const auto* op = std::get_if<format::OpRecord>(&record);
  const uint64_t origin = op != nullptr ? op->thread_id : ThreadLineageId();
  if (tickets.empty()) {
    rings_.Append(record, origin);
  } else {
    rings_.AppendHeld(record, std::move(tickets), origin);
  }
}

void Session::Append(const format::OpRecord& op) {
  std::vector<uint64_t> tickets;
  if (gpu_.enabled()) {
    ForEachOpDigest(op, [&](const auto& digests) { AddOutstanding(gpu_, digests, &tickets); });
  }
  if (tickets.empty()) {
    rings_.Append(op, op.thread_id);
  } else {
    rings_.AppendHeld(format::Record(op), std::move(tickets), op.thread_id);
  }
  AfterAppend(op);
}

void Session::AppendNvtx(const RecordRings::NvtxFields& fields) {
  rings_.AppendNvtx(fields, fields.numbers.thread_id);
}

uint64_t Session::SettleHeld(format::Record& record, std::vector<uint64_t>& tickets, bool wait) {
  uint64_t lost = 0;
  while (!tickets.empty()) {
    const uint64_t ticket = tickets.back();
    const GpuDigests::Result result = gpu_.Take(ticket, wait);
    if (result.state == GpuDigests::State::kPending) break;
    ForEachDigest(record, [&](std::vector<format::BufferDigest>& digests) {
      for (auto it = digests.begin(); it != digests.end(); ++it) {
        if (it->digest.lo != ticket || it->digest.hi != 0) continue;
        if (result.state == GpuDigests::State::kArrived) {
          it->digest = result.digest;
          if (result.summary) it->summary = *result.summary;
        } else {
          digests.erase(it);
          ++lost;
        }
        return;
      }
    });
    tickets.pop_back();
  }
  return lost;
}

format::Record Session::LostDigestsNote(uint64_t lost) const {
  format::TracerNote note;
  note.severity = format::Severity::kWarning;
  note.text = std::to_string(lost) +
              " digest(s) computed on the GPU did not arrive (the context failed or is gone) "
              "and are left out of the record before";
  note.before_op = PeekOpSequence();
  note.time_ns = NowNs();
  return note;
}

void Session::FlushHeldRecords(bool wait) {
  // Nothing held: no driver calls (at exit they may come after the driver's thread-local state
  // is gone).
  if (rings_.held() == 0) return;
  if (wait) gpu_.ForgetDeadContexts();
  rings_.Flush(wait);
}

namespace {

// The calling thread's current context (null when there is none).
const void* CurrentContext() {
  using CurrentFn = CUresult (*)(CUcontext*);
  static const auto current = Proc<CurrentFn>("cuCtxGetCurrent", 4000);
  CUcontext context = nullptr;
  if (current == nullptr || current(&context) != CUDA_SUCCESS) return nullptr;
  return context;
}

// The device ordinal of the calling thread's current context (0 when there is none).
uint32_t CurrentDevice() {
  using DeviceFn = CUresult (*)(CUdevice*);
  static const auto device = Proc<DeviceFn>("cuCtxGetDevice", 2000);
  CUdevice ordinal = 0;
  if (device == nullptr || device(&ordinal) != CUDA_SUCCESS || ordinal < 0) return 0;
  return static_cast<uint32_t>(ordinal);
}

}  // namespace

void Session::OnAllocate(uint64_t base, uint64_t bytes, const char* api, uint32_t stream_id) {
  format::AllocationRecord record;
  record.allocation_id = NewObjectId(ObjectKind::kAllocation);
  // The device it is on: a process may drive several GPUs (DataParallel, a model split over
  // devices), and its memory is digested in that device's context.
  const void* const context = CurrentContext();
  const uint32_t device = context != nullptr ? CurrentDevice() : 0;
  record.device_ordinal = device;
  const bool managed = std::string_view(api) == "cuMemAllocManaged";
  {
    std::lock_guard lock(mutex_);
    // A new allocation leaves the allocations threads keep (LookupCache) right, unless it
    // replaced a stale one.
    if (allocations_.Add(base, bytes, record.allocation_id, context, device, managed)) {
      allocations_version_.fetch_add(1, std::memory_order_release);
    }
    if (managed) managed_live_.fetch_add(1, std::memory_order_relaxed);
    if (base < allocation_low_.load(std::memory_order_relaxed)) {
      allocation_low_.store(base, std::memory_order_relaxed);
    }
    if (base + bytes > allocation_high_.load(std::memory_order_relaxed)) {
      allocation_high_.store(base + bytes, std::memory_order_relaxed);
    }
  }
  record.event = format::AllocationEvent::kAllocate;
  record.bytes = bytes;
  record.api = api;
  record.raw_address = base;
  record.before_op = PeekOpSequence();
  record.stream_id = stream_id;
  Append(record);
}

Session::Freeing Session::BeginFree(uint64_t base) {
  Freeing freeing;
  std::lock_guard lock(mutex_);
  freeing.allocation = allocations_.Remove(base);
  freeing.before_op = PeekOpSequence();
  allocations_version_.fetch_add(1, std::memory_order_release);
  return freeing;
}

void Session::EndFree(const Freeing& freeing, bool freed, const char* api, uint32_t stream_id) {
  const std::optional<Allocation>& allocation = freeing.allocation;
  if (!allocation) return;  // not ours to name
  if (!freed) {  // the driver refused (a double free, a bad stream): it is still there
    std::lock_guard lock(mutex_);
    allocations_.Restore(*allocation);
    allocations_version_.fetch_add(1, std::memory_order_release);
    return;
  }
  if (allocation->managed) {
    managed_live_.fetch_sub(1, std::memory_order_relaxed);
    std::lock_guard lock(mutex_);  // its pending digests: the host can no longer read it
    std::erase_if(pending_, [&](const PendingDigest& pending) {
      return pending.managed && pending.source.allocation_id == allocation->id;
    });
  }
  format::AllocationRecord record;
  record.allocation_id = allocation->id;
  record.event = format::AllocationEvent::kFree;
  record.bytes = allocation->bytes;
  record.api = api;
  record.raw_address = allocation->base;
  record.device_ordinal = allocation->device;
  record.before_op = freeing.before_op;
  record.stream_id = stream_id;
  Append(record);
}

void Session::OnModuleLoad(const void* handle, const char* api, const void* image) {
  format::ModuleLoadRecord record;
  record.api = api;
  uint64_t bytes = 0;
  if (image != nullptr) bytes = ModuleImageBytes(&image);
  record.image_bytes = bytes;
  record.digest = ToFormat(kernels::DigestV1(bytes == 0 ? nullptr : image, bytes));
  // Named by its contents: which thread loads a module first (cudart loads it at the first
  // launch of one of its kernels) may vary from run to run. An image of unknown size is named
  // by its loading thread instead. Bit 63 keeps the two apart.
  record.module_id = bytes != 0 ? (record.digest.lo | (uint64_t{1} << 63))
                                : (NewObjectId(ObjectKind::kModule) & ~(uint64_t{1} << 63));
  {
    std::lock_guard lock(mutex_);
    modules_[handle] = record.module_id;
  }
  Append(record);
}

void Session::OnKernelHandle(const void* handle, const void* module_or_library, const char* mangled,
                             bool is_kernel) {
  KernelInfo info;
  info.name = Demangle(mangled);
  info.interned_name = InternName(info.name);
  info.is_kernel = is_kernel;
  info.philox = info.name.find("PhiloxCudaState") != std::string::npos;
  std::lock_guard lock(mutex_);
  auto module = modules_.find(module_or_library);
  if (module != modules_.end()) info.module_id = module->second;
  kernels_[handle] = new KernelInfo(std::move(info));
  kernels_version_.fetch_add(1, std::memory_order_release);
}

void Session::OnKernelFunction(const void* function, const void* kernel) {
  std::lock_guard lock(mutex_);
  auto it = kernels_.find(kernel);
  if (it == kernels_.end()) return;
  KernelInfo info = *it->second;
  info.is_kernel = false;
  info.params_known = false;
  info.params.clear();
  info.param_bytes = 0;
  kernels_[function] = new KernelInfo(std::move(info));
  kernels_version_.fetch_add(1, std::memory_order_release);
}

const KernelInfo& Session::Kernel(const void* function) {
  LookupCache& cache = Lookups(this);
  const uint64_t version = kernels_version_.load(std::memory_order_acquire);
  if (cache.kernels_version != version) {
    cache.kernels = {};
    cache.kernels_version = version;
  }
  LookupCache::KernelEntry& entry = cache.kernels[KernelSlot(function)];
  if (entry.function == function && entry.info != nullptr) return *entry.info;
  KernelInfo info;
  {
    std::lock_guard lock(mutex_);
    auto it = kernels_.find(function);
    if (it != kernels_.end()) {
      if (it->second->params_known) {
        entry = {function, it->second};
        return *it->second;
      }
      info = *it->second;
    } else {
      info.name = "(unknown kernel)";
      info.interned_name = "(unknown kernel)";
    }
  }
  using ParamInfoFn = CUresult (*)(const void*, size_t, size_t*, size_t*);
  // There is no parameter-count API: iterate until the driver says the index is too large.
  const auto query = [&](ParamInfoFn param_info) {
    if (param_info == nullptr) return false;
    std::vector<std::pair<uint64_t, uint64_t>> params;
    for (size_t index = 0; index < 4096; ++index) {
      size_t offset = 0, size = 0;
      const CUresult result = param_info(function, index, &offset, &size);
      if (result == CUDA_ERROR_INVALID_VALUE) break;
      if (result != CUDA_SUCCESS) return false;
      params.emplace_back(offset, size);
    }
    info.param_bytes = 0;
    for (const auto& param : params) info.param_bytes += param.second;
    info.params = std::move(params);
    info.params_known = true;
    return true;
  };
  auto func_info = Proc<ParamInfoFn>("cuFuncGetParamInfo", 12040);
  auto kernel_info = Proc<ParamInfoFn>("cuKernelGetParamInfo", 12040);
  if (info.is_kernel) {
    if (!query(kernel_info)) query(func_info);
  } else if (!query(func_info)) {
    query(kernel_info);
  }
  const auto* known = new KernelInfo(std::move(info));
  std::lock_guard lock(mutex_);
  kernels_[function] = known;
  kernels_version_.fetch_add(1, std::memory_order_release);
  return *known;
}

std::optional<Allocation> Session::FindManaged(uint64_t address) {
  std::lock_guard lock(mutex_);
  std::optional<Allocation> allocation = allocations_.Find(address);
  if (!allocation || !allocation->managed) return std::nullopt;
  return allocation;
}

void Session::AddPendingDigest(const PendingDigest& pending) {
  std::lock_guard lock(mutex_);
  if (pending.managed) {  // once per allocation: the last op given it names it
    for (PendingDigest& held : pending_) {
      if (held.managed && held.source.allocation_id == pending.source.allocation_id) {
        held = pending;
        return;
      }
    }
  }
  pending_.push_back(pending);
}

std::vector<format::BufferDigest> Session::TakePendingDigests(std::optional<uint32_t> stream_id,
                                                              uint64_t before_op) {
  std::vector<PendingDigest> ready;
  {
    std::lock_guard lock(mutex_);
    auto keep = pending_.begin();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      // Managed memory is read only when the whole device is idle: a GPU without concurrent
      // managed access faults the host's read while any kernel runs.
      const bool due =
          it->managed ? !stream_id.has_value() : (!stream_id || it->stream_id == *stream_id);
      if (due && it->op_sequence < before_op) {
        ready.push_back(*it);
      } else {
        *keep++ = *it;
      }
    }
    pending_.erase(keep, pending_.end());
  }
  std::vector<format::BufferDigest> digests;
  for (const PendingDigest& pending : ready) {
    format::BufferDigest digest;
    digest.role = (pending.managed ? "managed memory of op " : "dst of op ") +
                  std::to_string(pending.op_sequence);
    digest.pointer = pending.source;
    digest.bytes = pending.bytes;
    std::optional<kernels::Digest128> value =
        pending.pitch == 0 ? DigestHostSafely(pending.host, pending.bytes)
                           : DigestHostSafely(pending.host, pending.width,
                                              pending.bytes / pending.width, pending.pitch);
    if (!value) continue;  // the program released the buffer before synchronising
    digest.digest = ToFormat(*value);
    digests.push_back(std::move(digest));
  }
  return digests;
}

// ---- digests of device memory ---------------------------------------------------------

std::optional<format::Digest> Session::DigestDevice(uint64_t base, uint64_t bytes) {
  using CopyFn = CUresult (*)(void*, CUdeviceptr, size_t);
  const auto copy = reinterpret_cast<CopyFn>(RealDriverFunction(Hook::k_cuMemcpyDtoH_v2));
  if (copy == nullptr) return std::nullopt;
  std::lock_guard lock(digest_mutex_);
  const gpu_time::OwnWork own(gpu_time::OwnWork::Work::kHostCopies);
  const uint64_t wanted = std::min(bytes, kDigestBufferBytes);
  if (digest_buffer_.size() < wanted) digest_buffer_.resize(wanted);
  kernels::DigestV1Accumulator sum;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t piece = std::min(kDigestBufferBytes, bytes - done);
    if (copy(digest_buffer_.data(), base + done, piece) != CUDA_SUCCESS) return std::nullopt;
    sum = kernels::DigestV1Add(sum,
                               kernels::DigestV1Partial(digest_buffer_.data(), piece, done / 16));
    done += piece;
  }
  return ToFormat(kernels::DigestV1Finish(sum, bytes));
}

void Session::AfterOp(format::OpKind kind, uint64_t sequence) {
  ExitDigestArm& arm = TlsRef(t_exit_digest);
  if (!arm.checked) {
    arm.checked = true;
    arm.armed = gettid() == getpid();
  }
  const bool at_sync = digests_.at_sync && kind == format::OpKind::kSynchronize;
  const bool every = digests_.every != 0 && (sequence + 1) % digests_.every == 0;
  if (at_sync) {
    TakeStateDigest("synchronize");
  } else if (every) {
    TakeStateDigest("every " + std::to_string(digests_.every) + " ops");
  }
}

bool Session::TakeStateDigest(const std::string& reason) {
  const uint64_t issued = PeekOpSequence();
  const auto note = [&](const std::string& why) {
    format::TracerNote skipped;
    skipped.severity = format::Severity::kWarning;
    skipped.text = "state digest (" + reason + ") skipped: " + why;
    skipped.before_op = issued;
    skipped.time_ns = NowNs();
    Append(skipped);
    return false;
  };
  if (objects_.AnyCapture()) return note("a stream capture is in progress");
  using SynchronizeFn = CUresult (*)();
  using PushFn = CUresult (*)(CUcontext);
  using PopFn = CUresult (*)(CUcontext*);
  const auto synchronize =
      reinterpret_cast<SynchronizeFn>(RealDriverFunction(Hook::k_cuCtxSynchronize));
  static const auto push = Proc<PushFn>("cuCtxPushCurrent", 4000);
  static const auto pop = Proc<PopFn>("cuCtxPopCurrent", 4000);
  if (synchronize == nullptr) return note("the driver is not loaded");
  std::vector<Allocation> live;
  {
    std::lock_guard lock(mutex_);
    live = allocations_.All();
  }
  std::sort(live.begin(), live.end(),
            [](const Allocation& a, const Allocation& b) { return a.id < b.id; });
  // Each device's memory is read in its own context, once that context is synchronised: the
  // current context's first, then every other device's the program allocated in (a digest
  // kernel of one device may not read another's memory, and cuCtxSynchronize waits for one
  // device only).
  // A thread with no context (the signal watcher's, at a SIGTERM) synchronises none: the
  // digest is skipped with a note, as the program is to end at once.
  const void* const current = CurrentContext();
  std::vector<const void*> contexts = {current};
  for (const Allocation& allocation : live) {
    if (allocation.context != nullptr &&
        std::find(contexts.begin(), contexts.end(), allocation.context) == contexts.end()) {
      contexts.push_back(allocation.context);
    }
  }
  format::StateDigestRecord record;
  record.after_op = issued == 0 ? 0 : issued - 1;
  record.reason = reason;
  uint64_t unreadable = 0;
  // On the GPU, every digest goes on the legacy default stream of its context and the record is
  // written once they have all arrived, before the program goes on.
  const DigestStream legacy{0, [] { return true; }};
  bool any_on_gpu = false;
  std::vector<std::pair<uint64_t, format::BufferDigest>> digests;  // by allocation id
  for (const void* context : contexts) {
    const bool switched = context != current;
    if (switched && (push == nullptr || pop == nullptr ||
                     push(static_cast<CUcontext>(const_cast<void*>(context))) != CUDA_SUCCESS)) {
      continue;  // its allocations are counted unreadable below
    }
    const CUresult synced_result = synchronize();
    if (synced_result != CUDA_SUCCESS && !switched) {
      return note("cuCtxSynchronize returned " + std::to_string(static_cast<int>(synced_result)));
    }
    int synced = 1;
    // Another device's context gone or faulted: its allocations are counted unreadable.
    if (synced_result == CUDA_SUCCESS) {
      for (const Allocation& allocation : live) {
        const void* home = allocation.context != nullptr ? allocation.context : current;
        if (home != context) continue;
        bool on_gpu = false;
        std::optional<format::Digest> value =
            DigestInStreamOrder(allocation.base, allocation.bytes, legacy, &synced, &on_gpu);
        any_on_gpu |= on_gpu;
        if (!value) continue;  // freed by another thread meanwhile, or the copy failed
        format::BufferDigest digest;
        digest.pointer = {allocation.id, 0, allocation.base};
        digest.bytes = allocation.bytes;
        digest.digest = *value;
        digest.suballocated = allocation.suballocated;
        digests.emplace_back(allocation.id, std::move(digest));
      }
    }
    if (switched) {
      CUcontext popped = nullptr;
      pop(&popped);
    }
  }
  std::sort(digests.begin(), digests.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [id, digest] : digests) record.allocations.push_back(std::move(digest));
  unreadable = live.size() - record.allocations.size();
  record.time_ns = NowNs();
  Append(record);
  if (any_on_gpu) FlushHeldRecords(true);
  if (unreadable != 0) {
    note(std::to_string(unreadable) + " of " + std::to_string(live.size()) +
         " allocations could not be read");
  }
  return true;
}

std::optional<format::Digest> Session::DigestInStreamOrder(uint64_t address, uint64_t bytes,
                                                           const DigestStream& stream, int* synced,
                                                           bool* on_gpu, bool summarize_f32) {
  if (on_gpu != nullptr) *on_gpu = false;
  if (gpu_.enabled()) {
    std::optional<Allocation> allocation;
    {
      std::lock_guard lock(mutex_);
      allocation = allocations_.Find(address);
    }
    // Only inside memory we know to be allocated: a kernel reading past it would fault the
    // context, where a copy merely fails. And only memory of the current context's device: a
    // kernel reading another device's memory faults without peer access; a copy is staged by
    // the driver (a peer copy's destination, written from the source device's stream).
    if (allocation && bytes <= allocation->bytes - (address - allocation->base) &&
        (allocation->context == nullptr || allocation->context == CurrentContext())) {
      if (std::optional<uint64_t> ticket =
              gpu_.Enqueue(address, bytes, stream.launch, summarize_f32)) {
        if (on_gpu != nullptr) *on_gpu = true;
        return format::Digest{*ticket, 0};
      }
    }
  }
  if (*synced == 0) *synced = stream.synchronize() ? 1 : -1;
  if (*synced < 0) return std::nullopt;
  return DigestDevice(address, bytes);
}

std::optional<format::BufferDigest> Session::DigestRange(const std::string& role, uint64_t address,
                                                         uint64_t bytes,
                                                         const DigestStream& stream) {
  std::optional<Allocation> allocation;
  {
    std::lock_guard lock(mutex_);
    allocation = allocations_.Find(address);
  }
  if (!allocation) return std::nullopt;
  const uint64_t offset = address - allocation->base;
  bytes = std::min(bytes, allocation->bytes - offset);
  int synced = 0;
  std::optional<format::Digest> value = DigestInStreamOrder(address, bytes, stream, &synced);
  if (!value) return std::nullopt;
  format::BufferDigest digest;
  digest.role = role;
  digest.pointer = {allocation->id, offset, address};
  digest.bytes = bytes;
  digest.digest = *value;
  return digest;
}

std::vector<format::BufferDigest> Session::DigestAllocations(
    const std::vector<std::pair<std::string, uint64_t>>& buffers, const DigestStream& stream) {
  std::vector<std::pair<std::string, Allocation>> targets;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [role, address] : buffers) {
      std::optional<Allocation> allocation = allocations_.Find(address);
      if (!allocation) continue;
      const bool seen = std::any_of(targets.begin(), targets.end(), [&](const auto& target) {
        return target.second.id == allocation->id;
      });
      if (!seen) targets.emplace_back(role, *allocation);
    }
  }
  std::vector<format::BufferDigest> digests;
  int synced = 0;
  for (const auto& [role, allocation] : targets) {
    std::optional<format::Digest> value =
        DigestInStreamOrder(allocation.base, allocation.bytes, stream, &synced);
    if (!value) continue;
    format::BufferDigest digest;
    digest.role = role;
    digest.pointer = {allocation.id, 0, allocation.base};
    digest.bytes = allocation.bytes;
    digest.digest = *value;
    digest.suballocated = allocation.suballocated;
    digests.push_back(std::move(digest));
  }
  return digests;
}

}  // namespace ndt::tracer

// _exit and _Exit skip the exit handlers, and processes that were forked to work (Python's
// multiprocessing, PyTorch DataLoader workers, our own tests) leave through them: close this
// process's trace first, so that it is complete, then exit through the C library's _exit.
namespace {

[[noreturn]] void ExitNow(int status) {
  try {
    ndt::tracer::Recorder::Get().Close();
  } catch (...) {
  }
  using ExitFn = void (*)(int);
  static const auto real_exit = reinterpret_cast<ExitFn>(
      ndt::tracer::RealDlsym() != nullptr ? ndt::tracer::RealDlsym()(RTLD_NEXT, "_exit") : nullptr);
  if (real_exit != nullptr) real_exit(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

}  // namespace

// exec replaces the process image without running exit handlers: close the trace first. (If
// exec fails, the program goes on unrecorded.)
namespace {

template <typename Fn>
Fn RealNext(const char* name) {
  const ndt::tracer::DlsymFn real_dlsym = ndt::tracer::RealDlsym();
  return reinterpret_cast<Fn>(real_dlsym != nullptr ? real_dlsym(RTLD_NEXT, name) : nullptr);
}

void CloseBeforeExec() noexcept {
  try {
    ndt::tracer::Recorder::Get().Close();
  } catch (...) {
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int execve(const char* path, char* const argv[],
                                                             char* const envp[]) noexcept {
  static const auto real = RealNext<int (*)(const char*, char* const*, char* const*)>("execve");
  CloseBeforeExec();
  if (real == nullptr) return errno = ENOSYS, -1;
  return real(path, argv, envp);
}

extern "C" __attribute__((visibility("default"))) int execv(const char* path,
                                                            char* const argv[]) noexcept {
  static const auto real = RealNext<int (*)(const char*, char* const*)>("execv");
  CloseBeforeExec();
  if (real == nullptr) return errno = ENOSYS, -1;
  return real(path, argv);
}

extern "C" __attribute__((visibility("default"))) int execvp(const char* file,
                                                             char* const argv[]) noexcept {
  static const auto real = RealNext<int (*)(const char*, char* const*)>("execvp");
  CloseBeforeExec();
  if (real == nullptr) return errno = ENOSYS, -1;
  return real(file, argv);
}

extern "C" __attribute__((visibility("default"))) int execvpe(const char* file, char* const argv[],
                                                              char* const envp[]) noexcept {
  static const auto real = RealNext<int (*)(const char*, char* const*, char* const*)>("execvpe");
  CloseBeforeExec();
  if (real == nullptr) return errno = ENOSYS, -1;
  return real(file, argv, envp);
}

extern "C" [[noreturn]] __attribute__((visibility("default"))) void _exit(int status) noexcept {
  ExitNow(status);
}

extern "C" [[noreturn]] __attribute__((visibility("default"))) void _Exit(int status) noexcept {
  ExitNow(status);
}
