// NDT_HOT_TLS: the initial-exec TLS model, for the few small thread-locals every hooked call
// reads. Such a variable is one load relative to %fs; the default model for a shared object
// (global-dynamic) calls __tls_get_addr at every access (about 25 instructions, ten-odd times a
// hooked call).
//
// Keep them small (about 150 bytes in all today). When libndtrace.so is loaded by dlopen
// rather than LD_PRELOAD (an NVTX injection without the preload), initial-exec variables come
// from glibc's static TLS surplus, a few hundred bytes shared with every other library; the
// large thread-locals (NVTX's range stacks, the spare records) keep the default model.
#pragma once

#define NDT_HOT_TLS __attribute__((tls_model("initial-exec")))
