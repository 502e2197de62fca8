#include "tracer/signals.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <thread>

namespace ndt::tracer {
namespace {

constexpr int kTermination[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kFatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// Written by InstallSignalFlush, read by the handler (async-signal-safe reads only).
std::atomic<int> g_write_fd{-1};
std::atomic<pid_t> g_owner{0};
std::atomic<bool> g_closed{false};
void (*g_close)() = nullptr;

bool IsFatal(int signal_number) {
  for (int fatal : kFatal) {
    if (fatal == signal_number) return true;
  }
  return false;
}

void Handler(int signal_number) {
  const int saved_errno = errno;
  if (getpid() != g_owner.load()) {
    // Another process (a child whose trace has no watcher yet): the default effect, now.
    signal(signal_number, SIG_DFL);
    raise(signal_number);
    errno = saved_errno;
    return;
  }
  const auto byte = static_cast<unsigned char>(signal_number);
  if (write(g_write_fd.load(), &byte, 1) != 1) {
    signal(signal_number, SIG_DFL);
    raise(signal_number);
  } else if (IsFatal(signal_number)) {
    // SA_RESETHAND restored the default: returning re-executes the fault (or abort() raises
    // again) once the trace is closed, or after 2 s.
    const timespec millisecond{0, 1'000'000};
    for (int waited = 0; waited < 2000 && !g_closed.load(); ++waited) {
      nanosleep(&millisecond, nullptr);
    }
  }
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
  if (g_close != nullptr) g_close();
  g_closed.store(true);
  if (!IsFatal(byte)) {
    signal(byte, SIG_DFL);
    kill(getpid(), byte);
  }
}

}  // namespace

void InstallSignalFlush(void (*close)()) noexcept {
  try {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    g_close = close;
    g_closed.store(false);
    g_write_fd.store(fds[1]);
    g_owner.store(getpid());
    std::thread(Watch, fds[0]).detach();
    const auto install = [](int signal_number, int flags) {
      struct sigaction current{};
      if (sigaction(signal_number, nullptr, &current) != 0) return;
      const bool ours = (current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == Handler;
      if (current.sa_handler != SIG_DFL && !ours) return;  // the program's own handler
      struct sigaction action{};
      action.sa_handler = Handler;
      sigemptyset(&action.sa_mask);
      action.sa_flags = flags;
      sigaction(signal_number, &action, nullptr);
    };
    for (int signal_number : kTermination) install(signal_number, SA_RESTART);
    for (int signal_number : kFatal) install(signal_number, SA_RESTART | SA_RESETHAND | SA_NODEFER);
  } catch (...) {
    // No watcher thread: signals keep their default effect (the trace is then incomplete).
  }
}

}  // namespace ndt::tracer
