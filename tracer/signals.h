// Closing the trace when a signal ends the process (tracer/README.md, "Process life").
#pragma once

namespace ndt::tracer {

// For each of SIGTERM, SIGINT, SIGHUP and the fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGABRT) whose disposition is still the default, installs a handler: `close` then runs on a
// watcher thread, and the signal takes its default effect afterwards (a fatal one waits at
// most 2 s for `close`). Signals the program handles itself are left alone. Call when this
// process's trace is created (again in a forked child: it gets its own watcher).
void InstallSignalFlush(void (*close)()) noexcept;

}  // namespace ndt::tracer
