// How a process ends or handles signals, after real CUDA work (so the tracer is recording and
// has installed what it installs): the fail-open comparison (tests/tracer/failopen_compare.sh)
// runs each mode traced and untraced and requires the same stdout, stderr (minus `ndtrace:`
// lines) and exit status or signal.
//
//   lifecycle raise SIG         raise(SIG), then print "after raise" and exit 0
//   lifecycle kill SIG          another thread sends SIG to the process; main sleeps 1 s
//   lifecycle block SIG         block SIG in every thread of the program, send it, go on
//   lifecycle ignore SIG        SIG_IGN before the first CUDA call, then raise(SIG)
//   lifecycle ignore-after SIG  SIG_IGN after the first CUDA call, then raise(SIG)
//   lifecycle handler SIG       own handler installed after the first CUDA call, raise(SIG)
//   lifecycle handler-before SIG  the same, installed before the first CUDA call
//   lifecycle query SIG         print SIG's disposition as the program sees it
//   lifecycle thread-exit       a second thread calls exit(7) while main waits in join
//   lifecycle fork              a forked child prints and exits 3; the parent reports it
//   lifecycle vfork             a vfork child execs /bin/echo; the parent reports it
//   lifecycle exec              exec /bin/echo
//   lifecycle abort | segv | pipe   abort(), a null write, a write to a closed pipe
//   lifecycle ops N             N small CUDA ops (a trace that grows: `ulimit -f`)
// SIG: TERM, INT, HUP, PIPE, USR1, SEGV, ABRT...
#include <cuda_runtime.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

void Say(const char* text) {
  std::printf("%s\n", text);
  std::fflush(stdout);
}

int SignalNamed(const char* name) {
  static const struct {
    const char* name;
    int number;
  } kSignals[] = {{"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},   {"PIPE", SIGPIPE},
                  {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"ABRT", SIGABRT}, {"BUS", SIGBUS},
                  {"FPE", SIGFPE},   {"ILL", SIGILL},   {"QUIT", SIGQUIT}, {"ALRM", SIGALRM}};
  for (const auto& entry : kSignals) {
    if (std::strcmp(entry.name, name) == 0) return entry.number;
  }
  std::fprintf(stderr, "lifecycle: unknown signal %s\n", name);
  std::exit(2);
}

// Real CUDA work: an allocation, a copy each way, a memset; the result is checked.
bool CudaWork(int iterations = 1) {
  int* device = nullptr;
  if (cudaMalloc(&device, 256 * sizeof(int)) != cudaSuccess) {
    std::fprintf(stderr, "lifecycle: cudaMalloc failed\n");
    return false;
  }
  int host[256];
  for (int i = 0; i < 256; ++i) host[i] = i;
  bool ok = cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess;
  for (int i = 0; ok && i < iterations; ++i) {
    ok = cudaMemset(device, i & 0xff, sizeof host) == cudaSuccess;
  }
  ok = ok && cudaMemcpy(host, device, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess;
  const int expected = ((iterations - 1) & 0xff) * 0x01010101;
  ok = ok && host[255] == (iterations > 0 ? expected : 255);
  cudaFree(device);
  if (!ok) std::fprintf(stderr, "lifecycle: CUDA work failed\n");
  return ok;
}

volatile sig_atomic_t g_handled = 0;
void OwnHandler(int signal_number) { g_handled = signal_number; }

void InstallOwnHandler(int signal_number) {
  struct sigaction action{};
  action.sa_handler = OwnHandler;
  sigemptyset(&action.sa_mask);
  sigaction(signal_number, &action, nullptr);
}

void ReportChild(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, 0) != child) {
    Say("waitpid failed");
  } else if (WIFEXITED(status)) {
    std::printf("child exited %d\n", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    std::printf("child killed by signal %d\n", WTERMSIG(status));
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lifecycle MODE [ARG]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int signal_number = argc > 2 && mode != "ops" ? SignalNamed(argv[2]) : 0;
  if (mode == "ignore") signal(signal_number, SIG_IGN);
  if (mode == "handler-before") InstallOwnHandler(signal_number);
  if (!CudaWork()) return 1;
  Say("cuda done");

  if (mode == "raise") {
    raise(signal_number);
    Say("after raise");
  } else if (mode == "kill") {
    std::thread sender([signal_number] { kill(getpid(), signal_number); });
    sender.join();
    sleep(1);
    Say("survived kill");
  } else if (mode == "block") {
    // The program's only thread blocks it: a process-directed signal stays pending.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signal_number);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    kill(getpid(), signal_number);
    usleep(300 * 1000);
    if (!CudaWork()) return 1;
    sigset_t pending;
    sigpending(&pending);
    std::printf("survived, pending %d\n", sigismember(&pending, signal_number));
    std::fflush(stdout);
  } else if (mode == "ignore" || mode == "ignore-after") {
    if (mode == "ignore-after") signal(signal_number, SIG_IGN);
    raise(signal_number);
    kill(getpid(), signal_number);
    usleep(100 * 1000);
    Say("still here");
  } else if (mode == "handler" || mode == "handler-before") {
    if (mode == "handler") InstallOwnHandler(signal_number);
    raise(signal_number);
    std::printf("handled %d\n", static_cast<int>(g_handled));
    std::fflush(stdout);
  } else if (mode == "query") {
    struct sigaction current{};
    sigaction(signal_number, nullptr, &current);
    Say(current.sa_handler == SIG_DFL ? "default" : current.sa_handler == SIG_IGN ? "ignored"
                                                                                   : "handled");
    void (*previous)(int) = signal(signal_number, SIG_DFL);
    Say(previous == SIG_DFL ? "default" : previous == SIG_IGN ? "ignored" : "handled");
  } else if (mode == "thread-exit") {
    std::thread worker([] {
      CudaWork();
      Say("thread exits");
      std::exit(7);
    });
    worker.join();
    Say("not reached");
  } else if (mode == "fork") {
    const pid_t child = fork();
    if (child == 0) {
      Say("child");
      std::exit(3);
    }
    ReportChild(child);
  } else if (mode == "vfork") {
    const pid_t child = vfork();
    if (child == 0) {
      execl("/bin/echo", "echo", "vfork child", static_cast<char*>(nullptr));
      _exit(127);
    }
    ReportChild(child);
  } else if (mode == "exec") {
    execl("/bin/echo", "echo", "exec'd", static_cast<char*>(nullptr));
    Say("exec failed");
  } else if (mode == "abort") {
    std::abort();
  } else if (mode == "segv") {
    *static_cast<volatile int*>(nullptr) = 1;
  } else if (mode == "pipe") {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    close(fds[0]);
    const char byte = 'x';
    if (write(fds[1], &byte, 1) < 0) Say("write failed");
  } else if (mode == "ops") {
    const int n = argc > 2 ? std::atoi(argv[2]) : 1000;
    if (!CudaWork(n)) return 1;
    std::printf("%d ops\n", n);
    std::fflush(stdout);
  } else {
    std::fprintf(stderr, "lifecycle: unknown mode %s\n", mode.c_str());
    return 2;
  }
  return 0;
}
