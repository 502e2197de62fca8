# ndtrace's Python startup shim (tools/README.md, "The Python shim").
#
# `ndtrace record`/`check`/`run` put this file's directory first on PYTHONPATH, so Python runs
# it at startup as `sitecustomize`. It never changes what the program computes or prints:
#   1. it loads the user's own `sitecustomize` (the next one on sys.path), as Python would have;
#   2. only if and when the program imports torch, and only while libndtrace.so is preloaded,
#      it names PyTorch's work in NVTX ranges that the tracer records around each GPU op:
#      - module ranges in the NVTX domain "pytorch.module", named by qualified name
#        ("ResNet.layer1.0.conv2": the root module's class, then named_modules() paths), from
#        global module forward pre/post hooks;
#      - op ranges: PyTorch's own per-op NVTX ranges ("aten::addmm, seq = 12", from
#        torch.autograd.profiler.emit_nvtx) on a PyTorch built with CUDA; on one without NVTX
#        (CPU-only builds) a TorchDispatchMode names each aten op in the domain "pytorch.op".
#      Ranges reach the tracer through its C functions ndtrace_range_push/pop (ctypes).
#      While the program's own PyTorch profiler is on in a thread, op naming steps aside there
#      (_NdtraceProfilerGate), so that the profiler starts and counts as without ndtrace; and
#      when it takes CUDA activities, the tracer's GPU time stops, as CUPTI serves one client
#      (_ndtrace_watch_cuda_profiler).
#   3. wherever the dispatch mode runs (CPU-only builds), and on CUDA builds with
#      NDTRACE_TENSOR_DIGESTS=1 (what --tensor-digests sets; there the dispatch mode then names
#      the ops instead of emit_nvtx), the dispatch mode also tells the tracer each aten op's
#      tensors (ndtrace_tensor_op_begin/end: their extents in memory, inputs as the op starts,
#      outputs as it returns), and the tracer records the op with digests of exactly those
#      bytes (tracer/tensor_ops.cc). NDTRACE_TENSOR_DIGESTS=0 turns that off.
# Any failure of the shim is said once on stderr (unless NDTRACE_QUIET=1) and the program goes on
# unannotated. NDTRACE_PYTHON=0 (what --no-python sets) turns all of it off but step 1.
import os
import sys


def _ndtrace_say(message):
    if os.environ.get("NDTRACE_QUIET", "") in ("", "0"):
        sys.stderr.write("ndtrace: python shim: %s\n" % message)


def _ndtrace_chain_user_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # its errors are the program's, as without ndtrace


def _ndtrace_active():
    if os.environ.get("NDTRACE_PYTHON", "1") == "0":
        return False
    return "libndtrace" in os.environ.get("LD_PRELOAD", "")


class _NdtraceTorchWatcher(object):
    """Finds `torch` like the finders after it, and runs the annotation once torch is loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            try:
                _ndtrace_annotate_torch(module)
            except Exception as error:  # never the program's problem
                _ndtrace_say("PyTorch ops and modules are not annotated: %r" % (error,))

        try:
            spec.loader.exec_module = exec_module
        except (AttributeError, TypeError):
            _ndtrace_say("cannot watch the import of torch; PyTorch ops and modules are not annotated")
        return spec


def _ndtrace_annotate_torch(torch):
    import ctypes
    import threading
    import weakref

    library = ctypes.CDLL(None)
    push = library.ndtrace_range_push
    pop = library.ndtrace_range_pop
    push.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    push.restype = ctypes.c_int
    pop.argtypes = [ctypes.c_char_p]
    pop.restype = ctypes.c_int
    module_domain = b"pytorch.module"
    op_domain = b"pytorch.op"

    # ---- modules ----
    names = weakref.WeakKeyDictionary()  # module -> qualified name
    local = threading.local()

    def name_of(module):
        try:
            return names[module]
        except (KeyError, TypeError):
            pass
        stack = getattr(local, "stack", None)
        if stack:  # a submodule no root listed: its parent's name and its class
            name = "%s.%s" % (stack[-1], type(module).__name__)
        else:  # a root: its class, then every submodule by its named_modules() path
            name = type(module).__name__
            try:
                for qualified, child in module.named_modules():
                    if qualified and child not in names:
                        names[child] = "%s.%s" % (name, qualified)
            except Exception:
                pass
        try:
            names[module] = name
        except TypeError:
            pass
        return name

    def pre_hook(module, inputs):
        name = name_of(module)
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        stack.append(name)
        push(module_domain, name.encode("utf-8", "replace"))

    def post_hook(module, inputs, output):
        stack = getattr(local, "stack", None)
        if stack:
            stack.pop()
            pop(module_domain)

    hooks = torch.nn.modules.module
    hooks.register_module_forward_pre_hook(pre_hook)
    try:
        hooks.register_module_forward_hook(post_hook, always_call=True)  # pops on exceptions too
    except TypeError:
        hooks.register_module_forward_hook(post_hook)

    _ndtrace_watch_cuda_profiler(torch, library, ctypes)

    # ---- ops ----
    cuda_nvtx = bool(getattr(torch.version, "cuda", None)) and hasattr(torch._C, "_nvtx")
    asked = os.environ.get("NDTRACE_TENSOR_DIGESTS", "")
    tensor_digests = asked not in ("", "0") if cuda_nvtx else asked != "0"
    gate = _NdtraceProfilerGate(torch, push, pop)
    if cuda_nvtx and not tensor_digests:
        # PyTorch's own per-op ranges ("aten::op, seq = N"), on for the whole run but while the
        # program's own profiler is on; not at all where the gate cannot see that profiler.
        if not gate.usable:
            _ndtrace_say("PyTorch's profiler entry points are not where expected; "
                         "PyTorch ops are not annotated")
            return
        gate.install(_NdtraceNvtxEmission(torch, gate.enable, gate.disable))
        return
    from torch.utils._python_dispatch import TorchDispatchMode

    tensors = _NdtraceTensorOps(torch, library, ctypes) if tensor_digests else None
    # A tensor the mode was given now has a Python object, which PyTorch (1.13) keeps alive for
    # as long as C++ holds the tensor, and whose release takes the GIL. A collective's work
    # (c10d::allreduce_ ...) holds its tensors on the backend's own thread (gloo's run loop,
    # NCCL's watchdog); if that thread dropped the last reference while the main thread held
    # the GIL and waited for it (destroy_process_group joins it), the program would hang: 2 of
    # 20 runs of a two-process DDP script on gloo did. So the last collectives' arguments and
    # results are held here as well, and released on a thread that holds the GIL.
    import collections
    collectives = collections.deque(maxlen=8)

    class _NdtraceOpRanges(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            schema = getattr(func, "_schema", None)
            name = schema.name if schema is not None else str(func)
            kwargs = kwargs or {}
            push(op_domain, name.encode("utf-8", "replace"))
            result = None
            try:
                if tensors is None:
                    result = func(*args, **kwargs)
                    return result
                tensors.begin(func, args, kwargs)
                done = False
                try:
                    result = func(*args, **kwargs)
                    done = True
                finally:
                    tensors.end(name if done else None, func, result if done else None)
                return result
            finally:
                if name.startswith("c10d::"):
                    collectives.append((args, kwargs, result))
                pop(op_domain)

    # Dispatch modes are per thread: entered in this thread for the whole run, and in every
    # thread `threading` starts, as it starts (before its target runs).
    _NdtraceOpRanges().__enter__()
    try:
        if gate.usable:
            gate.install(_NdtraceModeEmission(_NdtraceOpRanges))
    except Exception as error:  # ops stay named while the program's profiler is on
        _ndtrace_say("the program's PyTorch profiler will count the shim's op calls: %r" % (error,))
    original_bootstrap = getattr(threading.Thread, "_bootstrap_inner", None)
    if original_bootstrap is None:
        _ndtrace_say("cannot watch thread starts; only the main thread's ops are annotated")
        return

    # The mode is left again as the thread's run ends, while the thread still holds the GIL.
    # PyTorch keeps entered modes in C++ thread-locals, and a mode still there when its thread
    # ends is released by their destructor, which takes the GIL; a thread that ends during
    # interpreter shutdown is ended by pthread_exit as it takes it, inside that destructor then,
    # and the process aborts ("terminate called without an active exception"). A DataLoader's
    # multiprocessing.Queue feeder thread, which ends as the queue is closed at exit, did so in
    # 5 of 60 runs of a small training script on Debian's PyTorch 1.13.
    def _bootstrap_inner(thread):
        mode = None
        try:
            mode = _NdtraceOpRanges()
            mode.__enter__()
        except Exception as error:  # the thread runs unannotated
            mode = None
            _ndtrace_say("ops of thread %r are not annotated: %r" % (thread.name, error))
        try:
            original_bootstrap(thread)
        finally:
            if mode is not None:
                try:
                    mode.__exit__(None, None, None)
                except Exception:
                    pass

    threading.Thread._bootstrap_inner = _bootstrap_inner


def _ndtrace_watch_cuda_profiler(torch, library, ctypes):
    """Steps ndtrace's GPU time aside as the program's PyTorch profiler prepares CUDA activities.

    PyTorch's profiler (Kineto) takes GPU activities from CUPTI, which serves one client. Its
    registration goes through libndtrace.so's interposed cuptiActivityRegisterCallbacks where
    PyTorch links the shared libcupti (the pip wheels do), not where a build links CUPTI
    statically: before torch.autograd's _prepare_profiler or _enable_profiler runs with
    ProfilerActivity.CUDA among its activities, the tracer's GPU time stops for the rest of the
    run, or never starts (ndtrace_cupti_yield, a note in the trace).
    """
    import sys

    step_aside = getattr(library, "ndtrace_cupti_yield", None)
    if step_aside is None:
        return
    step_aside.argtypes = []
    step_aside.restype = None
    autograd = torch.autograd
    holders = [holder for holder in (autograd, getattr(autograd, "profiler", None),
                                     sys.modules.get("torch.autograd.profiler_legacy"))
               if holder is not None]

    def wants_cuda(args, kwargs):
        activities = kwargs.get("activities", args[1] if len(args) > 1 else None)
        try:
            return any(getattr(activity, "name", None) == "CUDA" for activity in activities)
        except TypeError:
            return False

    def watched(original):
        def call(*args, **kwargs):
            if wants_cuda(args, kwargs):
                step_aside()
            return original(*args, **kwargs)

        return call

    for name in ("_prepare_profiler", "_enable_profiler"):
        original = getattr(autograd, name, None)
        if callable(original):
            _NdtraceProfilerGate._replace(holders, original, watched(original))


class _NdtraceProfilerGate(object):
    """Keeps the shim's op emission out of the way of the program's own PyTorch profiler.

    PyTorch has one profiler state per thread, and emit_nvtx (the shim's op ranges on CUDA
    builds) is one: the program's profiler (torch.profiler.profile, autograd.profiler.profile,
    emit_nvtx, emit_itt, the legacy profiler) would fail to start beside it. The dispatch mode
    (CPU builds, tensor digests) is not a profiler state, but its own calls of each op would
    be counted by the program's profiler. Every start and stop of a profiler state goes through
    torch.autograd's _enable_profiler/_disable_profiler (and the _legacy pair); `install`
    replaces them, in the modules of torch that hold them, with functions that stop the shim's
    emission in the calling thread before the program's profiler starts there, and start it
    again once that profiler has stopped; meanwhile the thread is in the range "program
    profiler on" of the NVTX domain "ndtrace.python". `torch.autograd._profiler_enabled()`
    answers as without the shim. The program's own calls run unchanged: same results, same
    exceptions. Nothing here raises into the program; a failure is said once.
    """

    def __init__(self, torch, push, pop):
        import threading

        self.autograd = autograd = torch.autograd
        self.push, self.pop = push, pop
        self.pairs = [(getattr(autograd, enable, None), getattr(autograd, disable, None))
                      for enable, disable in (("_enable_profiler", "_disable_profiler"),
                                              ("_enable_profiler_legacy",
                                               "_disable_profiler_legacy"))]
        self.pairs = [pair for pair in self.pairs if callable(pair[0]) and callable(pair[1])]
        self.enable, self.disable = (getattr(autograd, "_enable_profiler", None),
                                     getattr(autograd, "_disable_profiler", None))
        self.usable = (callable(self.enable) and callable(self.disable) and
                       getattr(autograd, "profiler", None) is not None)
        self.local = threading.local()  # .aside: this thread's emission waits for its profiler
        self.lock = threading.Lock()
        self.programs = 0  # the program's profilers on now, in all threads
        self.said = False

    def install(self, emission):
        import sys

        self.emission = emission
        holders = [self.autograd, self.autograd.profiler,
                   sys.modules.get("torch.autograd.profiler_legacy")]
        for enable, disable in self.pairs:
            self._replace(holders, enable, self._enabler(enable))
            self._replace(holders, disable, self._disabler(disable))
        query = getattr(self.autograd, "_profiler_enabled", None)
        if callable(query) and emission.has_state:
            self._replace(holders, query, self._query(query))

    @staticmethod
    def _replace(holders, original, replacement):
        for holder in holders:
            for name, value in list(getattr(holder, "__dict__", {}).items()):
                if value is original:
                    setattr(holder, name, replacement)

    def _say(self, error):
        if not self.said:
            self.said = True
            _ndtrace_say("PyTorch op annotation around the program's profiler: %r" % (error,))

    def _off(self):
        try:
            if not self.emission.off():
                return False
        except Exception as error:
            self._say(error)
            return False
        self.push(b"ndtrace.python", b"program profiler on")
        return True

    def _on(self):
        self.pop(b"ndtrace.python")
        try:
            self.emission.on()
        except Exception as error:
            self._say(error)

    def _enabler(self, original):
        def enable(*args, **kwargs):
            aside = self._off()
            try:
                result = original(*args, **kwargs)
            except BaseException:
                if aside:
                    self._on()
                raise
            if aside:
                self.local.aside = True
            with self.lock:
                self.programs += 1
            return result

        return enable

    def _disabler(self, original):
        def disable(*args, **kwargs):
            borrowed = self._off()  # the shim's state is on here: the call meets PyTorch's alone
            try:
                result = original(*args, **kwargs)
            except BaseException:
                if borrowed:
                    self._on()
                raise
            with self.lock:
                self.programs = max(0, self.programs - 1)
            if borrowed or getattr(self.local, "aside", False):
                self.local.aside = False
                self._on()
            return result

        return disable

    def _query(self, original):
        def _profiler_enabled():
            enabled = original()
            if enabled:
                try:
                    return not self.emission.answers(self.programs)
                except Exception:
                    pass
            return enabled

        return _profiler_enabled


class _NdtraceNvtxEmission(object):
    """PyTorch's own per-op NVTX ranges (emit_nvtx), on in the thread that imported torch.

    Entered as emit_nvtx enters, but for two calls: its torch.cuda.synchronize(), which would
    initialise CUDA at import time (a program may still set CUDA_VISIBLE_DEVICES or fork
    workers), is skipped, and the Python flag PyTorch 2 keeps for "a profiler is on"
    (torch.autograd.profiler._is_profiler_enabled) is left as it was. Stopped and started again
    with the arguments emit_nvtx gave _enable_profiler, with no synchronisation.
    """

    has_state = True

    def __init__(self, torch, enable, disable):
        import atexit
        import threading

        self.enable, self.disable = enable, disable
        self.get_ident = threading.get_ident
        profiler = torch.autograd.profiler
        profiler_type = getattr(torch._C._autograd, "_profiler_type", None)
        nvtx_type = getattr(getattr(torch._C._autograd, "ActiveProfilerType", None), "NVTX", None)
        self.nvtx_here = ((lambda: profiler_type() == nvtx_type)
                          if callable(profiler_type) and nvtx_type is not None else lambda: True)
        calls = []

        def capture(*args, **kwargs):
            calls.append((args, kwargs))
            return enable(*args, **kwargs)

        flag = profiler.__dict__.get("_is_profiler_enabled")
        held = profiler._enable_profiler
        synchronize = torch.cuda.synchronize
        nvtx = profiler.emit_nvtx(record_shapes=False)
        torch.cuda.synchronize = lambda *args, **kwargs: None
        profiler._enable_profiler = capture
        try:
            nvtx.__enter__()
            if len(calls) != 1:  # entered some other way: left, as there is no stepping aside
                nvtx.__exit__(None, None, None)
        finally:
            profiler._enable_profiler = held
            torch.cuda.synchronize = synchronize
            if flag is not None:
                profiler._is_profiler_enabled = flag
        if len(calls) != 1:
            raise LookupError("emit_nvtx did not call torch.autograd.profiler._enable_profiler")
        self.call = calls[0]
        self.thread = self.get_ident()
        self.running = True
        # Left on at exit, PyTorch warns on stderr of a leaked callback ("observer.cpp").
        atexit.register(self.leave)

    def leave(self):
        try:
            self.off()
        except Exception:
            pass

    def off(self):
        if not self.running or self.get_ident() != self.thread:
            return False
        self.disable()
        self.running = False
        return True

    def on(self):
        args, kwargs = self.call
        self.enable(*args, **kwargs)
        self.running = True

    def answers(self, programs):
        """Whether the profiler state this thread sees is the shim's."""
        return (self.running and (self.get_ident() == self.thread or programs == 0) and
                self.nvtx_here())


class _NdtraceModeEmission(object):
    """The shim's dispatch mode, stepped aside in a thread where it is the innermost mode."""

    has_state = False

    def __init__(self, mode_type):
        import threading

        from torch.utils import _python_dispatch

        self.mode_type = mode_type
        self.stack = _python_dispatch._get_current_dispatch_mode_stack
        self.push_mode = _python_dispatch._push_mode
        self.pop_mode = _python_dispatch._pop_mode
        self.local = threading.local()  # .mode: this thread's mode, while stepped aside

    def off(self):
        stack = self.stack()
        if not stack or not isinstance(stack[-1], self.mode_type):
            return False
        self.local.mode = self.pop_mode()
        return True

    def on(self):
        mode = getattr(self.local, "mode", None)
        if mode is not None:
            self.local.mode = None
            self.push_mode(mode)

    def answers(self, programs):
        return False


class _NdtraceTensorOps(object):
    """Passes an aten op's tensors (their extents in memory) to ndtrace_tensor_op_begin/end."""

    def __init__(self, torch, library, ctypes):
        import struct

        self.Tensor = torch.Tensor
        self.ctypes = ctypes
        self.current_stream = lambda device: torch.cuda.current_stream(device).cuda_stream
        self.pack = struct.pack
        self.begin_fn = library.ndtrace_tensor_op_begin
        self.end_fn = library.ndtrace_tensor_op_end
        # Roles as NUL-separated names; tensors as (address, bytes, dtype | host << 16) words.
        packed = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
        self.begin_fn.argtypes = [ctypes.c_uint64] + packed
        self.end_fn.argtypes = [ctypes.c_char_p, ctypes.c_uint64] + packed
        self.begin_fn.restype = self.end_fn.restype = ctypes.c_int
        self.dtypes = {}  # torch dtype -> ndtrace's format::DType code
        for name, code in (("float64", 1), ("float32", 2), ("float16", 3), ("bfloat16", 4),
                           ("int64", 7), ("int32", 8), ("int16", 9), ("int8", 10),
                           ("uint8", 11), ("bool", 12)):
            dtype = getattr(torch, name, None)
            if dtype is not None:
                self.dtypes[dtype] = code
        self.names = {}  # op overload -> _names(op overload)

    # In-place ops that overwrite all of `self` without reading it (random fills, fills, copies
    # into it): its bytes before are no input of theirs (often memory just handed out, and so
    # whatever was there).
    OVERWRITE_SELF = frozenset((
        "aten::bernoulli_", "aten::uniform_", "aten::normal_", "aten::random_",
        "aten::exponential_", "aten::geometric_", "aten::log_normal_", "aten::cauchy_",
        "aten::fill_", "aten::zero_", "aten::copy_",
    ))

    def _names(self, func):
        """(argument names, return names, the arguments written and not read) of an op."""
        names = self.names.get(func)
        if names is None:
            schema = getattr(func, "_schema", None)
            if schema is None:
                names = ([], [], frozenset())
            else:
                unread = set()
                for argument in schema.arguments:
                    alias = getattr(argument, "alias_info", None)
                    # out= tensors: written by the op, their bytes before are not its input.
                    if alias is not None and alias.is_write and argument.kwarg_only:
                        unread.add(argument.name)
                if schema.name in self.OVERWRITE_SELF and getattr(
                        schema.arguments[0].alias_info, "is_write", False):
                    unread.add(schema.arguments[0].name)
                names = ([argument.name for argument in schema.arguments],
                         [result.name for result in schema.returns], frozenset(unread))
            self.names[func] = names
        return names

    def _call(self, function, prefix, named, scalars=False):
        Tensor = self.Tensor
        roles, words = [], []
        stream = 0
        held = []  # the scalars' bytes, alive until the tracer has digested them
        for role, value in named:
            if isinstance(value, Tensor):
                items = ((role, value),)
            elif isinstance(value, (list, tuple)):
                items = [("%s.%d" % (role, i), item) for i, item in enumerate(value)
                         if isinstance(item, Tensor)]
            elif scalars and isinstance(value, (float, int)):
                # A Python number the op was given (`x + jitter`): an input of 8 host bytes, so
                # that a value that differs between runs shows as data from Python.
                is_float = isinstance(value, float)
                data = self.ctypes.create_string_buffer(
                    self.pack("<d" if is_float else "<q", value if is_float else int(value)), 8)
                held.append(data)
                roles.append(role.encode("utf-8", "replace"))
                words.extend((self.ctypes.addressof(data), 8, (1 if is_float else 7) | 1 << 16))
                continue
            else:
                continue
            for role, tensor in items:
                try:
                    # The bytes from the tensor's first element to its last: not its whole
                    # storage, whose other bytes may be another tensor's or never written (a
                    # scalar result in a block cut from a larger one).
                    address, count = tensor.data_ptr(), tensor.numel()
                    if count and not tensor.is_contiguous():
                        count = 1 + sum((n - 1) * s for n, s in zip(tensor.shape,
                                                                  tensor.stride()) if n)
                    size = count * tensor.element_size()
                except Exception:  # sparse, meta or otherwise storage-less tensors
                    continue
                if not address or not size:
                    continue
                on_cuda = tensor.is_cuda
                if on_cuda and not stream:
                    stream = self.current_stream(tensor.device)
                roles.append(role.encode("utf-8", "replace"))
                words.extend((address, size, self.dtypes.get(tensor.dtype, 0) |
                              (0 if on_cuda else 1 << 16)))
        joined = b"\0".join(roles)
        return function(*prefix, stream, len(roles), joined, len(joined),
                        self.pack("<%dQ" % len(words), *words))

    # begin and end never raise, and each makes exactly one call into the tracer, so that the
    # tracer's begun ops stay paired with their ends whatever happens here.
    def begin(self, func, args, kwargs):
        try:
            names, _, unread = self._names(func)
            named = [(names[i] if i < len(names) else "arg%d" % i, value)
                     for i, value in enumerate(args)]
            named.extend(kwargs.items())
            if unread:
                named = [(role, value) for role, value in named if role not in unread]
            self._call(self.begin_fn, (), named, scalars=True)
        except Exception:
            self.begin_fn(0, 0, None, 0, None)

    # Ops that compute nothing from the program's data, whose records are dropped: memory
    # handed out uninitialised (its bytes are whatever was there before; the op that then
    # writes it is recorded with what it wrote), the profiler's handles (addresses), and tensors
    # wrapped around storage made elsewhere (set_, lift_fresh: a DataLoader's main process
    # unpickles each worker's batch as it arrives, in whatever order the workers finish; the ops
    # that then read the batch do so in the program's order).
    UNCOMPUTED = frozenset((
        "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::empty_permuted",
        "aten::new_empty", "aten::new_empty_strided", "aten::resize_", "aten::resize_as_",
        "aten::set_", "aten::lift_fresh",
    ))

    def end(self, name, func, result):
        try:
            if name is None:  # the op raised: the begun op is dropped
                raise LookupError
            if name in self.UNCOMPUTED or name.startswith("profiler::"):
                raise LookupError
            named = []
            # A collective (c10d::allreduce_, broadcast_, recv_, ...) returns as soon as its
            # work is queued on the backend's own thread or stream: what its tensors hold at
            # return is not yet its result, so it is recorded with its inputs only (the ops that
            # read the result after the program waits for it show whether it differed).
            if not name.startswith("c10d::"):
                returns = self._names(func)[1]
                results = (result if isinstance(result, (list, tuple)) and len(returns) > 1
                           else (result,))
                named = [(returns[i] if i < len(returns) and returns[i] else
                          ("out" if len(results) == 1 else "out%d" % i), value)
                         for i, value in enumerate(results)]
            self._call(self.end_fn, (name.encode("utf-8", "replace"),), named)
        except Exception:
            self.end_fn(None, 0, 0, None, 0, None)


if _ndtrace_active():
    sys.meta_path.insert(0, _NdtraceTorchWatcher())
_ndtrace_chain_user_sitecustomize()
