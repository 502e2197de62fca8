#include "tracer/signals.h"

#include <dlfcn.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <thread>

#include "tracer/real_dl.h"

// libc's own name for sigaction (exported, GLIBC_2.2.5): our calls must not reach our hook.
extern "C" int __sigaction(int signal_number, const struct sigaction* action,
                           struct sigaction* previous);

namespace ndt::tracer {
namespace {

constexpr int kTermination[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// How long a handler waits for the watcher to close the trace before the signal takes its
// default effect anyway (the close may need a lock the interrupted thread holds).
constexpr int kTerminationWaitMs = 5000;
constexpr int kFatalWaitMs = 2000;

// Written by InstallSignalFlush, read by the handler (async-signal-safe reads only).
std::atomic<int> g_write_fd{-1};
std::atomic<pid_t> g_owner{0};
std::atomic<bool> g_closed{false};
void (*g_close)() = nullptr;
bool (*g_in_hook)() = nullptr;
// A termination signal that arrived while this thread was inside a hook (which may hold a lock
// the close needs): taken when the hook returns (TakeDeferredSignal), before the program runs.
thread_local volatile sig_atomic_t t_deferred_signal = 0;

bool IsFatal(int signal_number) {
  for (int fatal : kFatal) {
    if (fatal == signal_number) return true;
  }
  return false;
}

// The signal's default effect, synchronously, in this thread: the default disposition,
// unblocked here, raised. For every signal handled here that ends the process, so `raise`
// never returns, as without the tracer. Async-signal-safe.
void DefaultEffectNow(int signal_number) {
  struct sigaction default_action{};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  __sigaction(signal_number, &default_action, nullptr);
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
  raise(signal_number);
}

void Handler(int signal_number) {
  const int saved_errno = errno;
  if (getpid() == g_owner.load() && !IsFatal(signal_number) && g_in_hook != nullptr &&
      g_in_hook() && t_deferred_signal == 0) {
    t_deferred_signal = signal_number;
    errno = saved_errno;
    return;
  }
  if (getpid() == g_owner.load()) {
    const auto byte = static_cast<unsigned char>(signal_number);
    if (write(g_write_fd.load(), &byte, 1) == 1) {
      // The watcher closes the trace; this thread waits for it (bounded), then the signal
      // takes its default effect here and now.
      const int wait_ms = IsFatal(signal_number) ? kFatalWaitMs : kTerminationWaitMs;
      const timespec millisecond{0, 1'000'000};
      for (int waited = 0; waited < wait_ms && !g_closed.load(); ++waited) {
        nanosleep(&millisecond, nullptr);
      }
    }
  }
  // Another process (a child whose trace has no watcher yet), a closed pipe, or the trace is
  // closed: the default effect, now.
  DefaultEffectNow(signal_number);
  // Only reached if the default effect did not end the process (it always does for the
  // signals handled here).
  errno = saved_errno;
}

void Watch(int read_fd) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // signals go to the program's threads
  unsigned char byte = 0;
  ssize_t got = 0;
  do {
    got = read(read_fd, &byte, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) return;
  try {
    if (g_close != nullptr) g_close();
  } catch (...) {
  }
  g_closed.store(true);
}

bool IsOurs(void (*handler)(int), int flags) {
  return (flags & SA_SIGINFO) == 0 && handler == Handler;
}

}  // namespace

void TakeDeferredSignal() noexcept {
  const int signal_number = t_deferred_signal;
  if (signal_number == 0) return;
  t_deferred_signal = 0;
  Handler(signal_number);
}

void InstallSignalFlush(void (*close)(), bool (*in_hook)()) noexcept {
  try {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    g_close = close;
    g_in_hook = in_hook;
    g_closed.store(false);
    g_write_fd.store(fds[1]);
    g_owner.store(getpid());
    {
      // The watcher starts with every signal blocked, so none meant for the program is ever
      // delivered to it.
      sigset_t all, previous;
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, &previous);
      bool started = true;
      try {
        std::thread(Watch, fds[0]).detach();
      } catch (...) {
        started = false;
      }
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      if (!started) return;  // no watcher: signals keep their default effect
    }
    const auto install = [](int signal_number, int flags) {
      struct sigaction current{};
      if (__sigaction(signal_number, nullptr, &current) != 0) return;
      const bool ours = IsOurs(current.sa_handler, current.sa_flags);
      if (current.sa_handler != SIG_DFL && !ours) return;  // the program's own handler
      struct sigaction action{};
      action.sa_handler = Handler;
      sigemptyset(&action.sa_mask);
      action.sa_flags = flags;
      __sigaction(signal_number, &action, nullptr);
    };
    for (int signal_number : kTermination) install(signal_number, SA_RESTART);
    for (int signal_number : kFatal) install(signal_number, SA_RESTART | SA_RESETHAND | SA_NODEFER);
  } catch (...) {
    // No watcher thread: signals keep their default effect (the trace is then incomplete).
  }
}

}  // namespace ndt::tracer

// The program sees its own dispositions: where ours is installed, asking gives the default it
// replaced (a program that saves the disposition to chain to it or restore it later gets
// SIG_DFL, as untraced). Setting a disposition goes straight through: it replaces ours.
extern "C" __attribute__((visibility("default"))) int sigaction(
    int signal_number, const struct sigaction* action, struct sigaction* previous) noexcept {
  const int result = __sigaction(signal_number, action, previous);
  if (result == 0 && previous != nullptr &&
      ndt::tracer::IsOurs(previous->sa_handler, previous->sa_flags)) {
    previous->sa_handler = SIG_DFL;
    previous->sa_flags = 0;
    sigemptyset(&previous->sa_mask);
  }
  return result;
}

extern "C" __attribute__((visibility("default"))) sighandler_t signal(
    int signal_number, sighandler_t handler) noexcept {
  using SignalFn = sighandler_t (*)(int, sighandler_t);
  static const SignalFn real = [] {
    void* found = nullptr;
    if (ndt::tracer::DlvsymFn dlvsym = ndt::tracer::RealDlvsym()) {
      found = dlvsym(RTLD_NEXT, "signal", "GLIBC_2.2.5");
    }
    return reinterpret_cast<SignalFn>(found);
  }();
  sighandler_t previous = SIG_ERR;
  if (real != nullptr) {
    previous = real(signal_number, handler);
  } else {
    // BSD semantics, as glibc's signal(): restart, the signal blocked in its handler.
    struct sigaction action{}, old{};
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, signal_number);
    action.sa_flags = SA_RESTART;
    if (__sigaction(signal_number, &action, &old) == 0) previous = old.sa_handler;
  }
  if (previous != SIG_ERR && ndt::tracer::IsOurs(previous, 0)) previous = SIG_DFL;
  return previous;
}
