// Taking a Python stack from inside a CUDA call, without deadlocking or changing the program.
//
// Only CPython's public, stable-across-versions functions are used, found with dlsym in the
// global scope (an executable built with libpython exports them; a shared libpython is in the
// global scope): PyThreadState_GetFrame, PyFrame_GetBack and PyFrame_GetCode (3.9+; 3.11
// replaced the frame structs, these stayed), PyFrame_GetLineNumber, and co_filename/co_name
// read as attributes. No struct layout is ever touched.
//
// Reading frames needs the GIL. The thread that issued the op is in one of four states:
//   1. No Python thread state (PyGILState_GetThisThreadState() is null): a native thread — a
//      library's worker, PyTorch's autograd threads, a thread a C extension started. It has no
//      Python stack; the record says so (nativeThread) rather than show another thread's.
//   2. It holds the GIL (PyGILState_Check()): a C extension called without releasing it
//      (pybind11 by default, ctypes.PyDLL). Its frames are read right here: nothing to wait for.
//   3. It has released the GIL (ctypes.CDLL calls, `py::gil_scoped_release`, PyTorch's ops).
//      Taking the GIL from this thread could deadlock: the thread holding it may be waiting for
//      something this thread holds (a library's mutex, the driver's lock, the program's own).
//      So a helper thread of ours (StartOwnThread) takes it with PyGILState_Ensure and reads
//      this thread's frames through its thread state, while this thread waits at most
//      `gil_wait_ms`. While the helper holds the GIL this thread's frames cannot change (it
//      cannot run Python code), and this thread cannot return to Python before the helper is
//      done: the wait ends under the job's mutex, which the helper holds while it reads. When
//      the wait times out the job is cancelled: the helper, whenever it gets the GIL, sees that,
//      reads nothing and lets go. The program is delayed by at most `gil_wait_ms`, once.
//   4. CPython is not running (not initialised yet, or finalising): nothing is read.
// Reading allocates (3.11+ creates frame objects on demand), so the cyclic GC is disabled
// while reading (PyGC_Disable, 3.10+; 3.9 allocates nothing here): no collection, hence no
// finaliser of the program's, can run on our account. An exception pending on the thread is
// saved and restored around it. Frames and strings are bounded (64 frames, 1 KiB per text).
#include "tracer/python_stack.h"

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>

#include "tracer/lineage.h"
#include "tracer/real_dl.h"

namespace ndt::tracer {
namespace {

constexpr size_t kMaxFrames = 64;
constexpr size_t kMaxText = 1024;

// CPython's public functions, as untyped pointers (no Python header is needed or wanted: the
// process's CPython may be any version).
struct PythonApi {
  using Obj = void*;
  const char* (*get_version)() = nullptr;
  int (*is_initialized)() = nullptr;
  int (*gil_check)() = nullptr;
  Obj (*this_thread_state)() = nullptr;
  int (*gil_ensure)() = nullptr;
  void (*gil_release)(int) = nullptr;
  Obj (*thread_frame)(Obj) = nullptr;  // 3.9+
  Obj (*frame_back)(Obj) = nullptr;    // 3.9+
  Obj (*frame_code)(Obj) = nullptr;    // 3.9+
  int (*frame_line)(Obj) = nullptr;
  Obj (*get_attr)(Obj, const char*) = nullptr;
  const char* (*as_utf8)(Obj) = nullptr;
  void (*dec_ref)(Obj) = nullptr;
  void (*err_fetch)(Obj*, Obj*, Obj*) = nullptr;
  void (*err_restore)(Obj, Obj, Obj) = nullptr;
  int (*gc_disable)() = nullptr;  // 3.10+
  int (*gc_enable)() = nullptr;   // 3.10+

  // The API is there at all (a CPython is in the process).
  bool present() const {
    return get_version != nullptr && is_initialized != nullptr && gil_check != nullptr &&
           this_thread_state != nullptr && gil_ensure != nullptr && gil_release != nullptr;
  }
  // The frame API of 3.9+ and what reading a frame needs.
  bool frames() const {
    return thread_frame != nullptr && frame_back != nullptr && frame_code != nullptr &&
           frame_line != nullptr && get_attr != nullptr && as_utf8 != nullptr &&
           dec_ref != nullptr && err_fetch != nullptr && err_restore != nullptr;
  }
};

template <typename Fn>
void Find(Fn* out, const char* name) {
  DlsymFn dlsym = RealDlsym();
  *out = dlsym != nullptr ? reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name)) : nullptr;
}

PythonApi LookUpApi() {
  PythonApi py;
  Find(&py.get_version, "Py_GetVersion");
  Find(&py.is_initialized, "Py_IsInitialized");
  Find(&py.gil_check, "PyGILState_Check");
  Find(&py.this_thread_state, "PyGILState_GetThisThreadState");
  Find(&py.gil_ensure, "PyGILState_Ensure");
  Find(&py.gil_release, "PyGILState_Release");
  Find(&py.thread_frame, "PyThreadState_GetFrame");
  Find(&py.frame_back, "PyFrame_GetBack");
  Find(&py.frame_code, "PyFrame_GetCode");
  Find(&py.frame_line, "PyFrame_GetLineNumber");
  Find(&py.get_attr, "PyObject_GetAttrString");
  Find(&py.as_utf8, "PyUnicode_AsUTF8");
  Find(&py.dec_ref, "Py_DecRef");
  Find(&py.err_fetch, "PyErr_Fetch");
  Find(&py.err_restore, "PyErr_Restore");
  Find(&py.gc_disable, "PyGC_Disable");
  Find(&py.gc_enable, "PyGC_Enable");
  return py;
}

// "3.11.7" from "3.11.7 (main, ...) [GCC ...]".
std::string VersionOf(const PythonApi& py) {
  const char* text = py.get_version != nullptr ? py.get_version() : nullptr;
  if (text == nullptr) return {};
  const size_t length = strnlen(text, 32);
  const std::string_view version(text, length);
  return std::string(version.substr(0, version.find(' ')));
}

// A text attribute of `object` (GIL held), bounded; "?" when it cannot be read.
std::string TextAttribute(const PythonApi& py, void* object, const char* name) {
  void* value = py.get_attr(object, name);
  if (value == nullptr) return "?";
  const char* utf8 = py.as_utf8(value);
  std::string text = utf8 != nullptr ? std::string(utf8, strnlen(utf8, kMaxText)) : "?";
  py.dec_ref(value);
  return text;
}

// Whether `file` is ndtrace's own Python shim (NDTRACE_PYTHON_SHIM, its directory, which
// `ndtrace` sets with PYTHONPATH): its frames (the dispatch mode that tells the tracer an aten
// op's tensors) are never the program's, and are left out of stacks.
bool IsShimFile(const std::string& file) {
  static const std::string shim = [] {
    const char* dir = std::getenv("NDTRACE_PYTHON_SHIM");
    return dir != nullptr && *dir != '\0' ? std::string(dir) + "/" : std::string();
  }();
  return !shim.empty() && file.starts_with(shim);
}

// Reads the frames of `thread_state` into `out` (captured, or noFrames). The GIL is held by the
// calling thread, and `thread_state`'s thread runs no Python code meanwhile.
void ReadFrames(const PythonApi& py, void* thread_state, format::PythonStackRecord* out) {
  void *type = nullptr, *value = nullptr, *traceback = nullptr;
  py.err_fetch(&type, &value, &traceback);
  const bool collecting = py.gc_disable != nullptr && py.gc_enable != nullptr && py.gc_disable();
  void* frame = py.thread_frame(thread_state);
  while (frame != nullptr && out->frames.size() < kMaxFrames) {
    format::PythonFrame entry;
    entry.line = py.frame_line(frame);
    if (void* code = py.frame_code(frame)) {
      entry.file = TextAttribute(py, code, "co_filename");
      entry.function = TextAttribute(py, code, "co_name");
      py.dec_ref(code);
    }
    if (!IsShimFile(entry.file)) out->frames.push_back(std::move(entry));
    void* back = py.frame_back(frame);
    py.dec_ref(frame);
    frame = back;
  }
  if (frame != nullptr) py.dec_ref(frame);
  if (collecting) py.gc_enable();
  py.err_restore(type, value, traceback);  // also clears anything our calls left
  if (out->frames.empty()) {
    out->status = format::PythonStackStatus::kNoFrames;
    out->detail =
        "the op was issued by a thread running no Python code (a native thread that has "
        "called into Python before)";
  } else {
    out->status = format::PythonStackStatus::kCaptured;
  }
}

// A request to a helper thread: read `thread_state`'s frames once it holds the GIL.
struct HelperJob {
  const PythonApi* py = nullptr;
  void* thread_state = nullptr;
  std::mutex mutex;  // guards what follows; held by the helper while it reads
  std::condition_variable done_changed;
  bool done = false;
  bool cancelled = false;
  format::PythonStackRecord result;
};

// Not noexcept: CPython may end a thread that waits for the GIL while it finalises
// (pthread_exit, a forced unwind through here).
void* HelperMain(void* argument) {
  std::unique_ptr<std::shared_ptr<HelperJob>> holder(
      static_cast<std::shared_ptr<HelperJob>*>(argument));
  const std::shared_ptr<HelperJob> job = *holder;
  holder.reset();
  const PythonApi& py = *job->py;
  {
    std::lock_guard lock(job->mutex);
    if (job->cancelled) return nullptr;
  }
  if (!py.is_initialized()) {
    std::lock_guard lock(job->mutex);
    job->result.status = format::PythonStackStatus::kNotRunning;
    job->result.detail = "CPython was not running";
    job->done = true;
    job->done_changed.notify_all();
    return nullptr;
  }
  const int gil = py.gil_ensure();
  {
    std::lock_guard lock(job->mutex);
    if (!job->cancelled) {
      if (py.is_initialized()) {
        ReadFrames(py, job->thread_state, &job->result);
      } else {
        job->result.status = format::PythonStackStatus::kNotRunning;
        job->result.detail = "CPython was finalising";
      }
      job->done = true;
      job->done_changed.notify_all();
    }
  }
  py.gil_release(gil);
  return nullptr;
}

}  // namespace

std::optional<std::vector<LanePlace>> ParsePythonStackRequest(std::string_view text) {
  std::vector<LanePlace> places;
  const auto number = [](std::string_view part, auto* out) {
    if (part.empty()) return false;
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), *out);
    return error == std::errc() && end == part.data() + part.size();
  };
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t first = item.find(':');
    const size_t second = first == std::string_view::npos ? first : item.find(':', first + 1);
    if (second == std::string_view::npos) return std::nullopt;
    LanePlace place;
    std::string_view index = item.substr(second + 1);
    place.top_level = !index.empty() && index.front() == 't';
    if (place.top_level) index.remove_prefix(1);
    if (!number(item.substr(0, first), &place.thread_id) ||
        !number(item.substr(first + 1, second - first - 1), &place.lane_stream) ||
        !number(index, &place.lane_index)) {
      return std::nullopt;
    }
    if (places.size() == kMaxPythonStackPlaces) return std::nullopt;
    places.push_back(place);
    if (comma != std::string_view::npos && text.empty()) return std::nullopt;  // trailing comma
  }
  if (places.empty()) return std::nullopt;
  return places;
}

std::string FindPythonVersion() {
  const char* (*get_version)() = nullptr;
  int (*is_initialized)() = nullptr;
  Find(&get_version, "Py_GetVersion");
  Find(&is_initialized, "Py_IsInitialized");
  if (get_version == nullptr || is_initialized == nullptr) return {};
  PythonApi py;
  py.get_version = get_version;
  return VersionOf(py);
}

PythonStackRequests::PythonStackRequests(std::vector<LanePlace> wanted, uint32_t gil_wait_ms)
    : wanted_(std::move(wanted)), gil_wait_ms_(gil_wait_ms) {}

std::optional<format::PythonStackRecord> PythonStackRequests::OnOp(const format::OpRecord& op) {
  bool thread_wanted = false;
  for (const LanePlace& place : wanted_) thread_wanted |= place.thread_id == op.thread_id;
  if (!thread_wanted || format::IsLifecycleOp(op)) return std::nullopt;
  const bool top_level = std::none_of(op.args.begin(), op.args.end(), [](const auto& argument) {
    return argument.name == "insideOp";
  });
  LanePlace place{op.thread_id, 0, 0};
  LanePlace top_place;  // its top-level place, when it has one
  {
    std::lock_guard lock(mutex_);
    auto [it, added] = ordinal_.try_emplace({op.thread_id, op.stream_id}, 0);
    if (added) it->second = streams_seen_[op.thread_id]++;
    place.lane_stream = it->second;
    place.lane_index = counts_[{op.thread_id, place.lane_stream}]++;
    if (top_level) {
      top_place = place;
      top_place.top_level = true;
      top_place.lane_index = top_counts_[{op.thread_id, place.lane_stream}]++;
    }
  }
  bool wanted = false;
  for (const LanePlace& w : wanted_) wanted |= w == place || (top_level && w == top_place);
  if (!wanted) return std::nullopt;
  format::PythonStackRecord stack = CapturePythonStack(gil_wait_ms_);
  stack.op_sequence = op.sequence;
  stack.thread_id = place.thread_id;
  stack.lane_stream = place.lane_stream;
  stack.lane_index = place.lane_index;
  return stack;
}

format::PythonStackRecord CapturePythonStack(uint32_t gil_wait_ms) {
  static const PythonApi py = LookUpApi();
  format::PythonStackRecord stack;
  if (!py.present()) {
    stack.status = format::PythonStackStatus::kNoPython;
    stack.detail = "no CPython in the process";
    return stack;
  }
  stack.python = VersionOf(py);
  if (!py.frames()) {
    stack.status = format::PythonStackStatus::kUnsupported;
    stack.detail = "CPython " + stack.python + " has no public frame API (3.9 or later needed)";
    return stack;
  }
  if (!py.is_initialized()) {
    stack.status = format::PythonStackStatus::kNotRunning;
    stack.detail = "CPython was not running (not initialised yet, or finalising)";
    return stack;
  }
  void* thread_state = py.this_thread_state();
  if (thread_state == nullptr) {
    stack.status = format::PythonStackStatus::kNativeThread;
    stack.detail =
        "the op was issued by a native thread with no Python thread state (a library's or "
        "the framework's own thread, e.g. an autograd worker)";
    return stack;
  }
  if (py.gil_check()) {
    ReadFrames(py, thread_state, &stack);
    return stack;
  }
  auto job = std::make_shared<HelperJob>();
  job->py = &py;
  job->thread_state = thread_state;
  auto holder = std::make_unique<std::shared_ptr<HelperJob>>(job);
  if (StartOwnThread(&HelperMain, holder.get()) != 0) {
    stack.status = format::PythonStackStatus::kFailed;
    stack.detail = "could not start a thread to take the GIL";
    return stack;
  }
  holder.release();  // the helper owns it now
  std::unique_lock lock(job->mutex);
  if (!job->done_changed.wait_for(lock, std::chrono::milliseconds(gil_wait_ms),
                                  [&] { return job->done; })) {
    job->cancelled = true;
    stack.status = format::PythonStackStatus::kGilUnavailable;
    stack.detail = "the GIL was not free within " + std::to_string(gil_wait_ms) +
                   " ms (another thread held it)";
    return stack;
  }
  job->result.python = stack.python;
  return std::move(job->result);
}

}  // namespace ndt::tracer
