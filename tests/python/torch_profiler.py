# torch_profiler.py: a program that profiles itself with PyTorch's own profiler, in each way a
# program starts and stops one, on Debian's CPU-only PyTorch: torch.profiler.profile as a
# context manager, with start()/stop(), and with a schedule; torch.autograd.profiler.profile;
# the legacy profiler; one in a second thread; one nested in another and a stop without a start
# (both raise); emit_nvtx (raises without CUDA). It prints what each profiler saw (event names and
# counts), what PyTorch says of itself (_profiler_enabled) and each exception, so that two runs
# can be compared. The program knows nothing of ndtrace.
#
# Between and inside the profiled regions a custom op, `ndt::stage` (torch.library, in Python for
# the CPU key), copies a tensor to the CUDA device with cudaMemcpy: one copy of a size of its own
# per phase (PHASES), so that a trace shows which phases' ops were named by the op that issued
# them. Needs libcudart.so.13 on the library path.
import collections
import ctypes
import threading

import torch
import torch.autograd.profiler_legacy
from torch.profiler import ProfilerActivity

rt = ctypes.CDLL("libcudart.so.13")

# Phase -> (floats copied by its ndt::stage, whether the program's profiler is on meanwhile).
PHASES = {
    "before": (1, False),
    "context manager": (2, True),
    "between": (3, False),
    "start/stop": (4, True),
    "schedule wait": (5, False),
    "schedule warmup": (6, False),
    "schedule active": (7, True),
    "autograd profile": (8, True),
    "record_function alone": (9, False),
    "legacy": (10, True),
    "thread": (11, True),
    "thread after": (12, False),
    "after": (13, False),
}


def ok(result, what):
    if result != 0:
        raise SystemExit("%s failed: %d" % (what, result))


LIBRARY = torch.library.Library("ndt", "DEF")
LIBRARY.define("stage(Tensor x) -> Tensor")


def stage_impl(x):
    data = x.contiguous().numpy().tobytes()
    device = ctypes.c_void_p()
    ok(rt.cudaMalloc(ctypes.byref(device), len(data)), "cudaMalloc")
    ok(rt.cudaMemcpy(device, data, len(data), 1), "cudaMemcpy")
    ok(rt.cudaFree(device), "cudaFree")
    return x.clone()


LIBRARY.impl("stage", stage_impl, "CPU")

torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def step(phase):
    with torch.autograd.profiler.record_function("step: " + phase):
        torch.ops.ndt.stage(torch.ones(PHASES[phase][0]))
        MODEL(torch.randn(4, 8)).sum().backward()
    print("  %s: _profiler_enabled %s" % (phase, torch.autograd._profiler_enabled()))


def show(title, events):
    # Each op the profiler saw, and how often; aten::sum's only once: PyTorch 1.13's profiler
    # records its inner call in some runs and not in others.
    counts = collections.Counter(event.name for event in events)
    print(title, " ".join(name if name == "aten::sum" else "%s x%d" % (name, count)
                          for name, count in sorted(counts.items())))


def attempt(what, action):
    try:
        action()
        print(what, "ran")
    except Exception as error:
        print(what, "raised", type(error).__name__, str(error).splitlines()[0])


def in_thread():
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        step("thread")
    show("thread", prof.events())
    step("thread after")


def main():
    step("before")
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        step("context manager")
    show("torch.profiler.profile as a context manager", prof.events())
    step("between")

    prof = torch.profiler.profile(activities=[ProfilerActivity.CPU])
    prof.start()
    step("start/stop")
    prof.stop()
    show("torch.profiler.profile start()/stop()", prof.events())

    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=lambda p: show("schedule", p.events())) as prof:
        for phase in ("schedule wait", "schedule warmup", "schedule active", "schedule active"):
            step(phase)
            prof.step()

    with torch.autograd.profiler.profile() as prof:
        step("autograd profile")
    show("torch.autograd.profiler.profile", prof.function_events)
    step("record_function alone")

    with torch.autograd.profiler_legacy.profile() as prof:
        step("legacy")
    show("legacy", prof.function_events)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()

    def nested():
        with torch.autograd.profiler.profile():
            with torch.autograd.profiler.profile():
                pass

    attempt("nested profilers", nested)
    attempt("a stop without a start", lambda: torch.autograd.profiler.profile().__exit__(
        None, None, None))
    attempt("emit_nvtx", lambda: torch.autograd.profiler.emit_nvtx().__enter__())
    step("after")


if __name__ == "__main__":
    main()
