// Closing the trace when a signal ends the process (tracer/README.md, "Process life").
#pragma once

namespace ndt::tracer {

// For each of SIGTERM, SIGINT, SIGHUP and the fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGABRT) whose disposition is still the default, installs a handler: `close` runs on a
// watcher thread (every signal blocked there) while the handler waits for it (at most 5 s, a
// fatal signal 2 s), then the signal takes its default effect in the thread that got it, so
// the process ends exactly where it would untraced. Signals the program handles or ignores
// are left alone. Call when this process's trace is created (again in a forked child: it gets
// its own watcher). The exported `sigaction` and `signal` (signals.cc) report SIG_DFL where
// this handler is installed.
// A termination signal arriving while `in_hook()` (this thread is inside a hook, which may
// hold a lock the close needs) is deferred to TakeDeferredSignal, which the hook calls as it
// returns: the signal then takes effect before the program's next instruction.
void InstallSignalFlush(void (*close)(), bool (*in_hook)()) noexcept;

// Takes the termination signal deferred on this thread, if any (does not return then).
void TakeDeferredSignal() noexcept;

}  // namespace ndt::tracer
