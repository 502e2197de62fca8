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
#   3. wherever the dispatch mode runs (CPU-only builds), and on CUDA builds with
#      NDTRACE_TENSOR_DIGESTS=1 (what --tensor-digests sets; there the dispatch mode then names
#      the ops instead of emit_nvtx), the dispatch mode also tells the tracer each aten op's
#      tensors (ndtrace_tensor_op_begin/end: their storage extents, inputs as the op starts,
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

    # ---- ops ----
    cuda_nvtx = bool(getattr(torch.version, "cuda", None)) and hasattr(torch._C, "_nvtx")
    asked = os.environ.get("NDTRACE_TENSOR_DIGESTS", "")
    tensor_digests = asked not in ("", "0") if cuda_nvtx else asked != "0"
    if cuda_nvtx and not tensor_digests:
        # PyTorch's own per-op ranges ("aten::op, seq = N"); kept on for the whole run.
        # emit_nvtx's __enter__ calls torch.cuda.synchronize(), which would initialise CUDA at
        # import time (a program may still set CUDA_VISIBLE_DEVICES or fork workers): skipped.
        synchronize = torch.cuda.synchronize
        torch.cuda.synchronize = lambda *args, **kwargs: None
        try:
            torch.autograd.profiler.emit_nvtx(record_shapes=False).__enter__()
        finally:
            torch.cuda.synchronize = synchronize
        return
    from torch.utils._python_dispatch import TorchDispatchMode

    tensors = _NdtraceTensorOps(torch, library, ctypes) if tensor_digests else None

    class _NdtraceOpRanges(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            schema = getattr(func, "_schema", None)
            name = schema.name if schema is not None else str(func)
            kwargs = kwargs or {}
            push(op_domain, name.encode("utf-8", "replace"))
            try:
                if tensors is None:
                    return func(*args, **kwargs)
                tensors.begin(func, args, kwargs)
                done = False
                try:
                    result = func(*args, **kwargs)
                    done = True
                finally:
                    tensors.end(name if done else None, func, result if done else None)
                return result
            finally:
                pop(op_domain)

    # Dispatch modes are per thread: entered in this thread for the whole run, and in every
    # thread `threading` starts, as it starts (before its target runs).
    _NdtraceOpRanges().__enter__()
    original_bootstrap = getattr(threading.Thread, "_bootstrap_inner", None)
    if original_bootstrap is None:
        _ndtrace_say("cannot watch thread starts; only the main thread's ops are annotated")
        return

    def _bootstrap_inner(thread):
        try:
            _NdtraceOpRanges().__enter__()
        except Exception as error:  # the thread runs unannotated
            _ndtrace_say("ops of thread %r are not annotated: %r" % (thread.name, error))
        original_bootstrap(thread)

    threading.Thread._bootstrap_inner = _bootstrap_inner


class _NdtraceTensorOps(object):
    """Passes an aten op's tensors (storage extents) to ndtrace_tensor_op_begin/end."""

    def __init__(self, torch, library, ctypes):
        import struct

        self.Tensor = torch.Tensor
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
        self.names = {}  # op overload -> (argument names, return names)

    def _names(self, func):
        names = self.names.get(func)
        if names is None:
            schema = getattr(func, "_schema", None)
            names = (([argument.name for argument in schema.arguments],
                      [result.name for result in schema.returns]) if schema is not None
                     else ([], []))
            self.names[func] = names
        return names

    def _call(self, function, prefix, named):
        Tensor = self.Tensor
        roles, words = [], []
        stream = 0
        for role, value in named:
            if isinstance(value, Tensor):
                items = ((role, value),)
            elif isinstance(value, (list, tuple)):
                items = [("%s.%d" % (role, i), item) for i, item in enumerate(value)
                         if isinstance(item, Tensor)]
            else:
                continue
            for role, tensor in items:
                try:
                    storage = (tensor.untyped_storage() if hasattr(tensor, "untyped_storage")
                               else tensor.storage())
                    address, size = storage.data_ptr(), storage.nbytes()
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
            names = self._names(func)[0]
            named = [(names[i] if i < len(names) else "arg%d" % i, value)
                     for i, value in enumerate(args)]
            named.extend(kwargs.items())
            self._call(self.begin_fn, (), named)
        except Exception:
            self.begin_fn(0, 0, None, 0, None)

    def end(self, name, func, result):
        try:
            if name is None:  # the op raised: the begun op is dropped
                raise LookupError
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
