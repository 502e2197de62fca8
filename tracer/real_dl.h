// The C library's own dlsym and dlvsym, which libndtrace.so both interposes and needs.
//
// Our library exports `dlsym` and `dlvsym`, so any call to them from our own code binds to
// our definitions (an unversioned definition satisfies a versioned reference). The real ones
// are therefore found by looking `dlsym`/`dlvsym` up in libc.so.6's dynamic symbol table
// ourselves (GNU hash, symbol versions GLIBC_2.34, then GLIBC_2.2.5). See preload_entry.cc.
#pragma once

namespace ndt::tracer {

// The real functions; null only when libc.so.6 could not be inspected (then every dl hook
// fails its lookups: dlsym returns null). Thread-safe; resolves on first use.
using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);
DlsymFn RealDlsym();
DlvsymFn RealDlvsym();

}  // namespace ndt::tracer
