"""Static cheat detection: read a candidate's syntax tree and report the tricks it sets up.

The runtime checks see what a candidate does; this module sees what it prepares (FACTS.md section 2): patched
timers, modules that reach around the judge, fallbacks and the reference model, tensor subclasses, caches,
precision changes, side streams. Every expression that denotes an imported thing is first resolved to a dotted
path (`T.cuda.Event` -> `torch.cuda.Event`) through import aliases, plain assignments, `importlib`,
`__import__`, `getattr` and `sys.modules`, so renaming a module hides nothing.

Only the standard library is imported: the GPU worker imports this module too.
"""

from __future__ import annotations

import ast
import builtins
import codecs
import functools
import io
import re
import string
import tokenize
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from pipeline.types import Finding

RULES = (
    "monkey_patch",
    "banned_import",
    "dynamic_code",
    "reference_model",
    "tensor_subclass",
    "fallback",
    "delegation",
    "output_cache",
    "precision_downgrade",
    "cuda_persistence",
    "side_stream",
    "introspection",
)

# What globals(), locals() and vars() resolve to: writing there rebinds names where no reader looks.
_NAMESPACE = "<namespace>"
_BUILTINS = frozenset(dir(builtins))

_THREADS = "threads can finish work after the clock stops"
_NATIVE = "runs native code the judge cannot see"
_PROCESSES = "runs work in another process, outside the judge's clock"
_GPU_DRIVER = "drives the GPU outside Triton (raw launches, streams, L2 persistence, clocks)"
_BANNED_MODULES = {
    "ctypes": _NATIVE,
    "_ctypes": _NATIVE,
    "cffi": _NATIVE,
    "subprocess": _PROCESSES,
    "multiprocessing": _PROCESSES,
    "torch.multiprocessing": _PROCESSES,
    "threading": _THREADS,
    "_thread": _THREADS,
    "concurrent": _THREADS,
    "asyncio": _THREADS,
    "gc": "can find and alter the judge's objects",
    "inspect": "can read the judge's frames and objects",
    "sys": "reaches every module and frame of the judge's process",
    "traceback": "can walk the judge's frames",
    "weakref": "runs code when the judge frees an object, outside any call",
    "atexit": "runs code after the judge's own",
    "faulthandler": "hooks the judge's process",
    "pipeline": "is egg's judge itself",
    "pty": _PROCESSES,
    "_posixsubprocess": _PROCESSES,
    "resource": "changes the judge's process limits",
    "fcntl": "works on the judge's descriptors",
    "select": "works on the judge's descriptors",
    "selectors": "works on the judge's descriptors",
    "code": "runs code built at run time",
    "codeop": "runs code built at run time",
    "pdb": "can read the judge's frames and objects",
    "bdb": "can read the judge's frames and objects",
    "signal": "can interrupt or hijack the judge",
    "socket": "talks to the network",
    "pickle": "loads objects (and code) from outside the candidate",
    "dill": "loads objects (and code) from outside the candidate",
    "marshal": "loads code objects",
    "cuda": _GPU_DRIVER,
    "cupy": _GPU_DRIVER,
    "pycuda": _GPU_DRIVER,
    "pynvml": _GPU_DRIVER,
    "numba": _GPU_DRIVER,
    "torch.utils.cpp_extension": "compiles native code whose launches the judge cannot see",
}

# Every way to read, write, list or probe a file (and every module built for it): a kernel needs none of them,
# and a candidate that reads a config file or a .env finds keys. Run-time isolation is the real wall
# (pipeline.judge.isolation); this is the fast first line, and it names what the candidate tried.
_FILE_APIS = (
    "builtins.open", "io", "_io", "pathlib", "shutil", "glob", "tempfile", "mmap", "fileinput", "zipfile", "tarfile",
    "gzip", "bz2", "lzma", "shelve", "dbm", "sqlite3", "linecache", "filecmp", "codecs.open", "tokenize.open",
    "importlib.resources", "pkgutil.get_data", "posix", "nt",
    *(f"os.{name}" for name in (
        "open", "fdopen", "read", "pread", "readv", "write", "pwrite", "writev", "sendfile", "copy_file_range",
        "splice", "listdir", "scandir", "walk", "fwalk", "readlink", "stat", "lstat", "access", "statvfs", "remove",
        "unlink", "rename", "renames", "replace", "mkdir", "makedirs", "rmdir", "removedirs", "symlink", "link", "chmod",
        "chown", "lchown", "truncate", "ftruncate", "mkfifo", "mknod", "memfd_create", "chdir", "fchdir", "chroot",
        "utime", "getxattr", "listxattr", "setxattr", "removexattr", "posix_fallocate", "dup", "dup2", "pipe",
        "get_terminal_size")),
    *(f"os.path.{name}" for name in (
        "exists", "lexists", "isfile", "isdir", "islink", "ismount", "getsize", "getmtime", "getatime", "getctime",
        "samefile", "realpath")),
    "numpy.load", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.fromfile", "numpy.loadtxt",
    "numpy.savetxt", "numpy.genfromtxt", "numpy.memmap", "numpy.lib.format", "numpy.lib.npyio", "numpy.DataSource",
    "torch.load", "torch.save", "torch.from_file", "torch.hub", "torch.classes.load_library", "torch.ops.load_library",
    "torch.serialization", "triton.runtime.cache",
)
_NETWORK_APIS = ("urllib", "http", "ftplib", "smtplib", "xmlrpc", "requests", "httpx", "aiohttp")
# Methods that read or write files whatever object they are called on (a Path, an array, a storage).
# Methods that take a tensor's values to the host as Python or numpy data, or compute there element by element.
_HOST_METHODS = frozenset({"numpy", "tolist", "apply_", "map_", "map2_", "__array__", "__dlpack__",
                           # a tensor's bytes as Python numbers: read element by element, out of every recorder's sight
                           "untyped_storage", "storage", "typed_storage", "_typed_storage", "_untyped_storage"})
_FILE_METHODS = frozenset({"tofile", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "rglob", "touch",
                           "unlink", "from_file", "open"})

# the TRITON_* variables the judge's sandbox sets for every job (pipeline.judge.isolation, launcher): read, they tell it
# from a user's shell; so does any other folder Triton is told of
_JUDGE_SET_TRITON = frozenset({"TRITON_HOME", "TRITON_CACHE_DIR"})
# a module's place: where the judge loaded it (`__spec__`, `__loader__` and `__builtins__` have rules of their own)
_PLACE_NAMES = frozenset({"__name__", "__file__", "__package__", "__cached__", "__path__"})

# (rule, why, path prefixes): any use of these paths is a finding.
_USE_RULES = (
    ("delegation", "asks torch to generate the code instead of writing kernels",
     ("torch.compile", "torch.jit.script", "torch.jit.trace", "torch.jit.freeze", "torch._dynamo",
      "torch._inductor", "torch.export")),
    ("tensor_subclass", "changes what tensors do when the judge reads them",
     ("torch.utils._python_dispatch", "torch.overrides", "torch._subclasses", "torch.Tensor._make_subclass",
      "torch.Tensor._make_wrapper_subclass")),
    ("side_stream", "moves work off the current stream, where the judge's events cannot see it",
     ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.set_stream", "torch.cuda.ExternalStream",
      "torch.cuda.StreamContext", "torch.Stream", "torch.accelerator.set_stream", "torch._C._cuda_setStream")),
    ("output_cache", "caches results between calls, and the judge calls it on the same inputs",
     ("functools.lru_cache", "functools.cache", "functools.cached_property")),
    ("monkey_patch", "patches objects at run time", ("unittest.mock",)),
    ("dynamic_code", "runs code built or loaded at run time",
     ("builtins.exec", "builtins.eval", "builtins.compile", "builtins.breakpoint", "types.FunctionType",
      "types.CodeType", "importlib.util", "importlib.machinery", "importlib.reload", "runpy",
      # string annotations are evaluated as code (session 23's held-out red team: numpy reached through one)
      "typing.get_type_hints", "typing.ForwardRef", "typing._eval_type", "typing.evaluate_forward_ref",
      "typing._type_check", "annotationlib")),
    ("dynamic_code", "touches files, which a kernel has no reason to do", _FILE_APIS),
    ("dynamic_code", "reaches other machines or local servers", _NETWORK_APIS),
    ("dynamic_code", "starts, signals or ends processes",
     ("os.system", "os.popen", "os.fork", "os.forkpty", "os.kill", "os.killpg", "os._exit")),
    # the process's seed: the judge seeds its draws (a small seed), a user's process rarely does, or seeds 0 (red team
    # 21's a02 read it back with torch.initial_seed() and was right only under the judge)
    ("dynamic_code", "reads the random generators' seed or state, which tells the judge's process from a user's",
     ("torch.initial_seed", "torch.random.initial_seed", "torch.get_rng_state", "torch.random.get_rng_state",
      "torch.default_generator", "torch.random.default_generator", "torch.cuda.initial_seed", "torch.cuda.get_rng_state",
      "torch.cuda.get_rng_state_all", "torch.cuda.random", "torch.cuda.default_generators", "random.getstate")),
    ("dynamic_code", "reaches into the judge's frames or tracing hooks",
     ("sys._getframe", "sys.settrace", "sys.setprofile", "sys.addaudithook")),
    ("delegation", "computes with numpy or on the host, outside Triton and out of the judge's sight",
     ("numpy", "torch.from_numpy", "torch.frombuffer", "torch.UntypedStorage", "torch.TypedStorage", "torch.utils.dlpack",
      "torch.from_dlpack", "torch.to_dlpack", "torch.Tensor.numpy", "torch.Tensor.untyped_storage", "torch.Tensor.storage",
      "torch.Tensor.tolist", "torch.Tensor.apply_", "torch.Tensor.map_", "torch.Tensor.map2_")),
    ("monkey_patch", "registers kernels for torch's own operators", ("torch.library", "torch.Library", "torch._library")),
    # `aten.exp.default.redispatch(DispatchKeySet(CPU), x)`: torch's ops called below the Python dispatch key, where
    # the judge's work recorder sees none of them (red team 14's c09); a kernel file never picks dispatch keys
    ("tensor_subclass", "calls torch's operators below the dispatch keys the judge records at",
     ("torch.DispatchKey", "torch.DispatchKeySet", "torch._C.DispatchKey", "torch._C.DispatchKeySet")),
    ("introspection", "watches for the judge's probes", ("torch.profiler", "torch.autograd.profiler", "torch.autograd.graph")),
    ("introspection", "fetches objects by a path written in a string", ("string.Formatter", "operator.attrgetter",
                                                                        "operator.methodcaller", "pkgutil", "sysconfig")),
)

_TENSOR_CLASSES = frozenset({
    "torch.Tensor", "torch._tensor.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter",
    "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer",
})
_TORCH_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.Module", "torch.nn.modules.module.Module"})
_BROAD_ERRORS = frozenset({"builtins.Exception", "builtins.BaseException", "builtins.RuntimeError"})
_DUNDER_TARGETS = frozenset({
    "__code__", "__globals__", "__class__", "__dict__", "__bases__", "__defaults__", "__kwdefaults__", "__builtins__",
})
_DICT_MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"})
_IMPORT_FUNCS = frozenset({"importlib.import_module", "importlib.__import__", "builtins.__import__"})
_REFERENCE_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs"})
_PERSISTENCE_MARKERS = ("accesspolicywindow", "cudastreamsetattribute", "persisting")
_HALF_DTYPES = frozenset({"float16", "bfloat16", "half"})
_LOW_PRECISION = frozenset({
    "torch.float16", "torch.half", "torch.bfloat16", "triton.language.float16", "triton.language.bfloat16",
})
_AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast")
_PRECISION_FLAGS = frozenset({
    "allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
    "fp32_precision",
})
# Attributes that reach frames, code and the objects behind them: a candidate has no use for them, and through them
# the judge's own state is in reach.
_FRAME_ATTRIBUTES = frozenset({
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "f_lineno", "tb_frame", "tb_next", "tb_lasti",
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code", "ag_await",
    "co_consts", "co_names", "cell_contents", "f_lasti",
})
# Dunder attributes a kernel may read; any other (__globals__, __closure__, __subclasses__, __traceback__, ...) is
# introspection. Defining a dunder method outside _DUNDER_DEFINITIONS is one too (__del__ runs when the judge frees
# an object, outside every call and every check).
_DUNDER_READS = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__class__", "__call__", "__len__", "__getitem__", "__iter__",
    "__next__", "__enter__", "__exit__", "__repr__", "__str__", "__eq__", "__ne__", "__hash__", "__bool__",
    "__contains__", "__version__", "__post_init__", "__setattr__", "__delattr__", "__setitem__", "__delitem__",
})
# The private attributes a kernel may read that it does not define: a tensor's version counter (a weight cache
# keyed on it). Any other `._name` of a value is someone else's internals (issue 41: by allowlist).
_PRIVATE_READS = frozenset({"_version"})
_DUNDER_DEFINITIONS = frozenset({
    "__init__", "__call__", "__repr__", "__str__", "__len__", "__getitem__", "__iter__", "__next__", "__enter__",
    "__exit__", "__eq__", "__ne__", "__hash__", "__bool__", "__contains__", "__post_init__", "__lt__", "__le__",
    "__gt__", "__ge__",
})
_DUNDER_NAMES = frozenset({"__loader__", "__spec__", "__builtins__"})  # module globals that reach the import system
# A module reached as an attribute of another (`torch.sys`, `os.sys`, `triton...np`) is that module: `torch.sys.modules`
# is `sys.modules`. torch.signal is torch's own (signal windows), not the standard library's.
_MODULE_ALIASES = frozenset({
    "sys", "os", "gc", "inspect", "builtins", "importlib", "ctypes", "subprocess", "threading", "_thread",
    "multiprocessing", "pty", "socket", "traceback", "pickle", "marshal", "io", "pathlib", "shutil", "tempfile",
    "mmap", "_posixsubprocess", "posix", "resource", "fcntl", "select", "weakref", "atexit", "types", "numpy", "np",
    "pipeline", "signal", "string", "operator", "functools", "runpy", "code", "faulthandler",
})
# Attributes that name a dangerous module or builtin: read from a value the audit cannot trace (a call's result, a
# container's item: `dict(a=torch)["a"].sys`, `(lambda: torch)().sys`), they are that module or builtin with every
# alias rule bypassed. A kernel never reads them from anything untraced.
_UNTRACED_REACH = frozenset({
    "sys", "gc", "inspect", "builtins", "importlib", "ctypes", "subprocess", "_thread", "multiprocessing", "pty",
    "socket", "traceback", "pickle", "marshal", "shutil", "mmap", "_posixsubprocess", "posix", "resource", "fcntl",
    "weakref", "atexit", "pipeline", "runpy", "code", "faulthandler", "os",
    "exec", "eval", "__import__", "getattr", "setattr", "delattr", "globals", "locals", "vars", "open", "_getframe",
    "np", "numpy", "threading", "concurrent", "asyncio", "signal", "interpreter",
})
# Builtins that turn names into objects, or read namespaces, when used as values (passed to map, bound to a name)
_DYNAMIC_BUILTINS = frozenset({"builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.hasattr",
                               "builtins.vars", "builtins.globals", "builtins.locals", "builtins.dir", "builtins.__import__"})
# Pure-helper caches are fine: a cached function that calls nothing of these and reads its arguments as numbers.
_CONFIG_READS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda"})
_HELPER_CALLS = frozenset({"triton.next_power_of_2", "triton.cdiv", "builtins.min", "builtins.max", "builtins.int",
                           "builtins.float", "builtins.abs", "builtins.round", "builtins.len", "builtins.range",
                           "builtins.tuple", "builtins.bool", "builtins.divmod", "builtins.str"})
# What a candidate may import: torch and triton (less the parts below), and a few standard modules that compute
# nothing a kernel could hide behind. Anything else is banned: a kernel needs none of it, and every module beyond
# these has been a way around the judge (logging's frames, warnings' file reads, torch.utils.collect_env's shell).
_ALLOWED_MODULES = frozenset({
    "torch", "triton", "math", "functools", "itertools", "operator", "typing", "typing_extensions", "dataclasses",
    "collections", "os", "enum", "abc", "numbers", "contextlib", "__future__", "time", "random", "statistics",
    "copy", "bisect", "heapq", "fractions", "decimal", "string", "re", "cmath", "builtins",
})
_BLOCKED_PARTS = (
    "torch.utils", "torch.distributed", "torch.package", "torch.jit", "torch.onnx", "torch.fx", "torch.cuda.jiterator",
    "torch.testing", "torch.mps", "torch.xpu", "triton.runtime.cache", "triton.runtime.interpreter", "triton.tools",
    "triton.backends", "triton.compiler", "triton.knobs", "triton.runtime.build",
)
# TRITON_* variables that name the programs Triton's compiles start (the judge sets aside only those it knows).
_TRITON_TOOL_VARIABLES = frozenset({"TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH", "TRITON_CUOBJDUMP_PATH",
                                    "TRITON_NVDISASM_PATH", "TRITON_CACHE_MANAGER", "TRITON_REMOTE_CACHE_BACKEND",
                                    "TRITON_LIBCUDA_PATH"})
# What of os a kernel may use: the environment (to set TRITON_* switches) and path arithmetic, nothing that acts.
_OS_ALLOWED = frozenset({
    "os.environ", "os.getenv", "os.cpu_count", "os.sep", "os.path.join", "os.path.basename", "os.path.dirname",
    "os.path.splitext", "os.path.sep", "os.name", "os.linesep",
})
# os.environ's methods that write (their keys are _check_environment_key's)
_ENVIRONMENT_WRITES = frozenset({"update", "clear", "pop", "popitem", "__delitem__", "__init__"})
_BUILTINS_BANNED = frozenset({"builtins.help", "builtins.license", "builtins.credits", "builtins.copyright"})
# Methods that read a module's namespace (`vars(torch).get("sys")`): a name looked up where no alias rule follows.
_NAMESPACE_READS = frozenset({"get", "items", "values", "keys", "pop", "setdefault", "copy", "popitem", "__getitem__"})
# Inside a @triton.jit body (issue 41): what may be called and read. Triton compiles these bodies from its language
# alone, but its interpreter (TRITON_INTERPRET=1, the CPU) runs them as Python, where `x.handle.data` is a numpy
# array and numpy does the work: so the body is held to what Triton would compile. The builtins its code generator
# knows; Triton's constexpr helpers; and on values, the public members of tl.tensor, tl.dtype and tl.constexpr.
_JIT_DECORATORS = ("triton.jit", "triton.runtime.jit.jit", "triton.runtime.jit")
_JIT_BUILTINS = frozenset({"len", "list", "range", "float", "int", "isinstance", "getattr", "hasattr", "print", "min", "max"})
_JIT_PATHS = ("triton.language", "triton.cdiv", "triton.next_power_of_2", "triton.jit", "triton.constexpr")
_JIT_MEMBERS = frozenset({
    # tl.tensor's methods and the fields every tensor has
    "T", "abs", "advance", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and", "atomic_cas", "atomic_max",
    "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "broadcast_to", "cast", "cdiv", "ceil", "cos", "cumprod",
    "cumsum", "erf", "exp", "exp2", "expand_dims", "flip", "floor", "gather", "histogram", "item", "log", "log2",
    "logical_and", "logical_or", "max", "min", "permute", "ravel", "reduce", "reduce_or", "reshape", "rsqrt", "sigmoid",
    "sin", "softmax", "sort", "split", "sqrt", "sqrt_rn", "store", "sum", "to", "trans", "view", "xor_sum",
    "shape", "numel", "type", "dtype", "value",
    # tl.dtype's (a tensor's .dtype, a pointer's element type)
    "element_ty", "scalar", "primitive_bitwidth", "int_bitwidth", "fp_mantissa_width", "exponent_bias", "name", "nbytes",
    "is_bf16", "is_block", "is_bool", "is_floating", "is_fp16", "is_fp32", "is_fp64", "is_fp8", "is_int", "is_int1",
    "is_int8", "is_int16", "is_int32", "is_int64", "is_int_signed", "is_int_unsigned", "is_ptr", "is_standard_floating",
    "is_uint8", "is_uint16", "is_uint32", "is_uint64", "is_void", "with_element_ty", "get_block_shapes",
})
# The syntax a kernel file may use (issue 41: by allowlist). Anything else, today's or a later Python's, is refused
# as syntax the rules do not model: the third held-out red team read attributes through match class patterns, which
# no rule saw. Yields, coroutines and class or mapping patterns have findings of their own.
_NODES = tuple(getattr(ast, name) for name in """
    Module FunctionDef ClassDef Return Delete Assign AugAssign AnnAssign For While If With Raise Try TryStar Assert
    Import ImportFrom Global Nonlocal Expr Pass Break Continue BoolOp NamedExpr BinOp UnaryOp Lambda IfExp Dict Set
    ListComp SetComp DictComp GeneratorExp Compare Call FormattedValue JoinedStr Constant Attribute Subscript Starred
    Name List Tuple Slice expr_context boolop operator unaryop cmpop comprehension ExceptHandler arguments arg keyword
    alias withitem type_ignore Match match_case MatchValue MatchSingleton MatchSequence MatchStar MatchAs MatchOr
    """.split() if hasattr(ast, name))
_OWN_FINDINGS = tuple(getattr(ast, name) for name in ("AsyncFunctionDef", "Await", "Yield", "YieldFrom", "MatchClass", "MatchMapping"))
# modules a string may not name (the judge's process and everything that reaches around it)
_MODULES_BY_NAME = frozenset({
    "sys", "gc", "inspect", "builtins", "importlib", "ctypes", "subprocess", "_thread", "multiprocessing", "socket",
    "traceback", "pickle", "marshal", "_posixsubprocess", "posix", "threading", "numpy", "pipeline", "faulthandler",
    "runpy", "weakref", "atexit",
})
_GLOBAL_HOOKS = ("register_module_",)  # torch.nn.modules.module's hooks on every module (forward, pre, backward, ...)
_FORMAT_ATTRIBUTE = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)")


def _format_field_attributes(text: str) -> list[str]:
    """The attribute names the replacement fields of a str.format template read (`{0.a.b[k].c}`: a, b, c), nested
    fields in format specs included; none when the text is no valid template."""
    if "{" not in text:
        return []
    names: list[str] = []
    try:
        for _, field, spec, _ in string.Formatter().parse(text):
            if field:
                names += _FORMAT_ATTRIBUTE.findall(field)
            if spec and "{" in spec:
                names += _format_field_attributes(spec)
    except (ValueError, IndexError):
        return []
    return names


def _reaches_behind(attr: str) -> bool:
    """An attribute name that reaches behind the value it is read from: a dunder no kernel reads, a private name, a
    frame's or code's attribute, a Triton block's handle, a global module hook."""
    if attr.startswith("__") and attr.endswith("__"):
        return attr not in _DUNDER_READS | _DUNDER_DEFINITIONS
    return attr.startswith("_") or attr in _FRAME_ATTRIBUTES or attr == "handle" or attr.startswith(_GLOBAL_HOOKS)


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")  # a string that reads as an attribute path
_IDENTITY_KEY = "data_ptr/id"
_SHAPE_KEY = "shape"


def audit_source(source: str, *, reference_dtypes: frozenset[str] = frozenset()) -> tuple[Finding, ...]:
    """Read a candidate's source and return every cheat pattern found (empty tuple when clean).

    reference_dtypes: the dtypes of the reference's outputs, e.g. {"float32"}; used for the precision rule.
    A SyntaxError propagates: the caller reports it as a compile error.
    """
    tree = ast.parse(source)
    symbols = _Symbols(tree)
    auditor = _Auditor(symbols, fp32_reference=_is_fp32_only(reference_dtypes))
    auditor.parents = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    auditor.visit(tree)
    return _sorted_unique([*_encoding_findings(source), *auditor.findings, *_cache_findings(tree, symbols)])


def _encoding_findings(source: str) -> Iterator[Finding]:
    """A coding declaration other than UTF-8: Python decodes the file with it when it imports it, so the code that
    runs is not the text read here (`# coding: utf-7` turns a comment's `+AAo-` runs into lines of code). Read by
    Python's own tokenizer (tokenize.detect_encoding): what counts as the first two lines is its business."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source.encode("utf-8", "surrogatepass")).readline)
    except SyntaxError as error:  # an unknown codec, or a declaration that disagrees with a BOM
        yield Finding("dynamic_code", f"declares a source encoding Python cannot use as UTF-8 ({error}): a kernel file is UTF-8", 1)
        return
    if codecs.lookup(encoding).name not in ("utf-8", "utf-8-sig"):
        yield Finding("dynamic_code", f"declares the source encoding {encoding}: Python would run other code than the text the "
                      "judge reads; a kernel file is UTF-8", 1)


def audit_file(path: str | Path, *, reference_dtypes: frozenset[str] = frozenset()) -> tuple[Finding, ...]:
    """`audit_source` on a file's text."""
    return audit_source(Path(path).read_text(encoding="utf-8"), reference_dtypes=reference_dtypes)


def _is_fp32_only(dtypes: Iterable[str]) -> bool:
    names = {d.removeprefix("torch.") for d in dtypes}
    return "float32" in names and not names & _HALF_DTYPES


def _sorted_unique(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    # sorted() is stable, so the first message seen for a (rule, line) is the one kept.
    kept: dict[tuple[str, int], Finding] = {}
    for finding in sorted(findings, key=lambda f: (f.line, f.rule)):
        kept.setdefault((finding.rule, finding.line), finding)
    return tuple(kept.values())


# Name resolution ---------------------------------------------------------------------------------------------------


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` as text when the expression is a plain chain of names, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


# The standard modules a candidate may import hold other modules under names of their own (`enum.bltns` is
# builtins, `collections._sys` is sys, `random._os` is os), and torch holds itself (`torch.accelerator.graphs.torch`):
# for these, and for torch and triton, an attribute that is a module is looked up for real.
_STDLIB_ROOTS = frozenset({"math", "functools", "itertools", "operator", "typing", "typing_extensions", "dataclasses", "collections",
                           "enum", "abc", "numbers", "contextlib", "time", "random", "statistics", "copy", "bisect", "heapq",
                           "fractions", "decimal", "string", "re", "cmath"})  # os: its aliases are _MODULE_ALIASES


def _join(base: str | None, attr: str) -> str | None:
    if not base or base == _NAMESPACE:
        return None
    if attr in _MODULE_ALIASES and not (attr == "signal" and base == "torch"):
        return "numpy" if attr == "np" else attr  # torch.sys is sys, triton's np is numpy
    if base.split(".", 1)[0] in _STDLIB_ROOTS | {"torch", "triton"} and (module := _stdlib_module(f"{base}.{attr}")):
        return module
    return f"{base}.{attr}"


@functools.lru_cache(maxsize=4096)
def _stdlib_module(path: str) -> str | None:
    """The real name of the module `path` (a dotted path from an allowed standard module) is, or None."""
    import importlib
    import types

    root, *parts = path.split(".")
    try:
        value = importlib.import_module(root)
        for part in parts:
            value = getattr(value, part)
    except Exception:  # a missing or lazily failing attribute: the path stays as written
        return None
    return value.__name__ if isinstance(value, types.ModuleType) and value.__name__ != path else None


def _names_reference(node: ast.Import | ast.ImportFrom) -> bool:
    """An import of the reference's names (its own finding, reference_model, says more than the module's)."""
    return isinstance(node, ast.ImportFrom) and any(a.name in _REFERENCE_NAMES for a in node.names)


def _under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _import_bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    """(bound name, dotted path) for each name an import statement binds."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            top = alias.name.split(".")[0]
            yield (alias.asname, alias.name) if alias.asname else (top, top)
        return
    module = "." * node.level + (node.module or "")
    for alias in node.names:
        if alias.name != "*":
            yield alias.asname or alias.name, _member(module, alias.name)


def _member(module: str, name: str) -> str:
    return module + name if module.endswith(".") else f"{module}.{name}"


def _imported_paths(node: ast.Import | ast.ImportFrom) -> list[str]:
    """Every module or object an import statement reaches, by full path."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = "." * node.level + (node.module or "")
    return [module, *(_member(module, a.name) for a in node.names if a.name != "*")]


def _bound_names(body: Iterable[ast.AST]) -> set[str]:
    """Names a block binds in its own scope (nested function and class bodies are other scopes)."""
    names: set[str] = set()
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(name for name, _ in _import_bindings(node))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        todo.extend(ast.iter_child_nodes(node))
    return names


def _function_locals(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = node.args
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
    if isinstance(node, ast.Lambda):
        return params
    declared = {n for s in ast.walk(node) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names}
    return params | (_bound_names(node.body) - declared)


def _pair(target: ast.AST, value: ast.AST, pending: list[tuple[str, ast.AST]]) -> None:
    """Record `target = value` bindings, unpacking `a, b = x, y` element by element."""
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)):
        if len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                _pair(t, v, pending)
    elif key := _dotted(target):
        pending.append((key, value))


def _default_bindings(args: ast.arguments) -> list[tuple[str, ast.AST]]:
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return [(a.arg, d) for a, d in pairs]


def _bindings(tree: ast.Module, aliases: dict[str, str]) -> list[tuple[str, ast.AST]]:
    """Put import bindings in `aliases`; return every other `name = expression` binding, flow-insensitively."""
    pending: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, path in _import_bindings(node):
                aliases.setdefault(name, path)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                _pair(target, node.value, pending)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            _pair(node.target, node.value, pending)
        elif isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
            for element in node.iter.elts:  # `for m in (torch.cuda, time): m.x = f`
                _pair(node.target, element, pending)
        elif isinstance(node, ast.arguments):
            pending.extend(_default_bindings(node))
        if isinstance(node, ast.ClassDef):
            pending.extend(_class_bindings(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending.extend(_return_bindings(node))
    return pending


def _class_bindings(node: ast.ClassDef) -> Iterator[tuple[str, ast.AST]]:
    """`class P: ev = torch.cuda.Event` also makes `P.ev`, `self.ev` and `cls.ev` aliases."""
    for stmt in node.body:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    for owner in (node.name, "self", "cls"):
                        yield f"{owner}.{target.id}", stmt.value


def _return_bindings(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[str, ast.AST]]:
    """`def get(): return torch.cuda` makes `get()` (and `self.get()`) an alias of what it returns."""
    for ret in ast.walk(node):
        if isinstance(ret, ast.Return) and ret.value is not None:
            yield f"{node.name}()", ret.value
            yield f"self.{node.name}()", ret.value


class _Symbols:
    """Which expressions denote imported things (as dotted paths), and which names the candidate binds."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases: dict[str, str] = {}  # source text ("T", "self.E") -> dotted path ("torch", ...)
        global_names = {n for s in ast.walk(tree) if isinstance(s, ast.Global) for n in s.names}
        self.bound = _bound_names(tree.body) | global_names  # module-level names: they shadow builtins
        self.classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self._settle(_bindings(tree, self.aliases))

    def _settle(self, pending: list[tuple[str, ast.AST]]) -> None:
        # Aliases of aliases (`m = torch; c = m.cuda`) resolve in any order: repeat until nothing changes.
        changed = True
        while changed:
            changed = False
            for key, value in pending:
                if key not in self.aliases and (path := self.resolve(value)):
                    self.aliases[key] = path
                    changed = True

    def resolve(self, node: ast.AST, local: frozenset[str] = frozenset()) -> str | None:
        """The dotted path an expression denotes (`torch.cuda.Event`), or None when it is the candidate's own."""
        if isinstance(node, ast.Name):
            return self._name(node.id, local)
        if isinstance(node, ast.Attribute):
            key = _dotted(node)
            if key in self.aliases:
                return self.aliases[key]
            return _join(self.resolve(node.value, local), node.attr)
        if isinstance(node, ast.Call):
            return self._call(node, local)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, local)
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value, local)
        return None

    def _name(self, name: str, local: frozenset[str]) -> str | None:
        if name in self.aliases:
            return self.aliases[name]
        if name in local or name in self.bound:
            return None
        if name == "__builtins__":
            return "builtins"
        return f"builtins.{name}" if name in _BUILTINS else None

    def _call(self, node: ast.Call, local: frozenset[str]) -> str | None:
        callee = _dotted(node.func)
        if callee and f"{callee}()" in self.aliases:
            return self.aliases[f"{callee}()"]
        func = self.resolve(node.func, local)
        args = node.args
        if func == "builtins.type" and len(args) == 1 and isinstance(args[0], ast.Call):
            return self.resolve(args[0].func, local)  # type(torch.cuda.Event()) is torch.cuda.Event
        if func == "builtins.getattr" and len(args) >= 2 and (attr := _const_str(args[1])):
            return _join(self.resolve(args[0], local), attr)
        name = _const_str(args[0]) if args else None
        if func in ("importlib.import_module", "sys.modules.get") and name:
            return name
        if func in ("builtins.__import__", "importlib.__import__") and name:
            # __import__("a.b") returns package a unless a fromlist asks for a.b itself.
            wants_leaf = len(args) >= 4 or any(k.arg == "fromlist" for k in node.keywords)
            return name if wants_leaf else name.split(".")[0]
        if func in ("builtins.globals", "builtins.locals") or (func == "builtins.vars" and not args):
            return _NAMESPACE
        if func == "builtins.vars" and args:
            return _join(self.resolve(args[0], local), "__dict__")
        return None

    def _subscript(self, node: ast.Subscript, local: frozenset[str]) -> str | None:
        if isinstance(node.value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return self._element(node.value, node.slice, local)
        key = _const_str(node.slice)
        base = self.resolve(node.value, local)
        if not key or not base:
            return None
        if base == _NAMESPACE:
            return self._name(key, frozenset())
        if base == "sys.modules":
            return key
        if base.endswith(".__dict__"):
            return _join(base.removesuffix(".__dict__"), key)
        return f"builtins.{key}" if base == "builtins" else None


    def _element(self, container: ast.AST, index: ast.AST, local: frozenset[str]) -> str | None:
        """What `[a, b][i]` (or a tuple, set or dict literal's element) denotes: the element a constant index
        picks, else the first element that denotes anything (`[triton.runtime][0].build` is triton.runtime.build)."""
        elements = container.values if isinstance(container, ast.Dict) else container.elts
        picked = None
        if isinstance(container, ast.Dict):
            keys = [_const_str(k) if k is not None else None for k in container.keys]
            key = _const_str(index)
            picked = [v for k, v in zip(keys, elements) if key is not None and k == key]
        elif isinstance(index, ast.Constant) and isinstance(index.value, int) and -len(elements) <= index.value < len(elements):
            picked = [elements[index.value]]
        for element in picked or elements:
            path = self.resolve(element.value if isinstance(element, ast.Starred) else element, local)
            if path:
                return path
        return None


# Rules on paths ----------------------------------------------------------------------------------------------------


def _banned(module: str) -> tuple[str, str] | None:
    """(banned module, why) when `module` is one of the banned modules or inside one."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in _BANNED_MODULES:
            return prefix, _BANNED_MODULES[prefix]
    return None


def _use_rules(path: str, fp32_reference: bool) -> Iterator[tuple[str, str]]:
    """(rule, why) for each rule that a use of `path` breaks."""
    for rule, why, prefixes in _USE_RULES:
        if _under(path, prefixes):
            yield rule, why
    parts = path.split(".")
    if parts[-1] in ("TorchDispatchMode", "TorchFunctionMode"):
        yield "tensor_subclass", "changes what tensor operations do"
    if parts[-1] in ("from_file", "tofile", "load_library"):  # torch.UntypedStorage.from_file, numpy.ndarray.tofile
        yield "dynamic_code", "touches files, which a kernel has no reason to do"
    if parts[0] == "os" and len(parts) == 2 and parts[1].startswith(("exec", "spawn", "posix_spawn")):
        yield "dynamic_code", "starts processes"
    if any(part in _REFERENCE_NAMES for part in parts):
        yield "reference_model", "it belongs to the reference problem"
    if fp32_reference and _is_low_precision(path):
        yield "precision_downgrade", "the reference computes in float32"


def _is_low_precision(path: str) -> bool:
    last = path.rsplit(".", 1)[-1]
    return (
        path in _LOW_PRECISION
        or last in ("HalfTensor", "BFloat16Tensor")
        or path.startswith(("torch.float8", "triton.language.float8"))
        or _under(path, _AUTOCAST)
    )


def _is_safe_precision(value: ast.AST | None) -> bool:
    """True for a value that keeps fp32 math exact (allow_tf32 = False, precision "highest"/"ieee")."""
    return isinstance(value, ast.Constant) and value.value in (False, "ieee", "highest")


def _does_no_work(body: list[ast.stmt]) -> bool:
    """True for a try body that only imports or binds names (feature detection): a broad handler hides nothing."""
    return all(_is_setup(stmt) for stmt in body)


def _is_setup(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
        return True
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return False
    return stmt.value is None or isinstance(stmt.value, ast.Constant) or _dotted(stmt.value) is not None


# The visitor -------------------------------------------------------------------------------------------------------


class _Auditor(ast.NodeVisitor):
    """Walks the module once and collects findings; scopes are tracked only to tell builtins from locals."""

    def __init__(self, symbols: _Symbols, *, fp32_reference: bool) -> None:
        self.symbols = symbols
        self.fp32_reference = fp32_reference
        self.findings: list[Finding] = []
        self.parents: dict[int, ast.AST] = {}  # id(node) -> its parent (audit_source fills it)
        self._local: frozenset[str] = frozenset()  # names bound by the enclosing functions
        self._values: dict[int, ast.AST] = {}  # id(assignment target) -> assigned value
        self._tensor_classes: set[str] = set()
        self._called: set[int] = set()  # ids of expressions that are called (getattr(...) is a call, `g = getattr` is not)
        self._helper_caches: set[int] = set()  # ids of cache decorators on pure helpers (pipeline/judge: allowed)
        self._jitted: set[str] = set()  # the module's jitted functions (visit_Module fills it)
        self._own: frozenset[str] = frozenset()  # every name the file itself binds, as a name or an attribute
        self._owners: frozenset[str] = frozenset()

    def add(self, rule: str, message: str, node: ast.AST) -> None:
        self.findings.append(Finding(rule, message, getattr(node, "lineno", 0)))

    def visit(self, node: ast.AST) -> None:
        if not isinstance(node, _NODES + _OWN_FINDINGS):
            self.add("dynamic_code", f"uses {type(node).__name__} syntax, which the audit does not model: a kernel file is "
                     "held to the constructs the audit reads", node)
        super().visit(node)

    def resolve(self, node: ast.AST) -> str | None:
        return self.symbols.resolve(node, self._local)

    # scopes and definitions

    def visit_Module(self, node: ast.Module) -> None:
        # jitted by a decorator, or by a call anywhere (`kernel = triton.jit(body)`): both bodies are Triton's
        by_call = {a.id for n in ast.walk(node) if isinstance(n, ast.Call) and self.resolve(n.func) in _JIT_DECORATORS
                   for a in n.args[:1] if isinstance(a, ast.Name)}
        self._jitted = {f.name for f in node.body if isinstance(f, ast.FunctionDef) and (self._is_jit(f) or f.name in by_call)}
        for stmt in node.body:  # `activation = _swish`: a module-level alias of a jitted function is one
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id in self._jitted:
                self._jitted |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        self._own = frozenset(_own_names(node))
        # what a private name may be read from: the module's own objects (`self`, `cls`, its classes and functions)
        self._owners = frozenset({"self", "cls"} | {n.name for n in node.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))})
        self.generic_visit(node)

    def _is_jit(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        return any(self.resolve(d.func if isinstance(d, ast.Call) else d) in _JIT_DECORATORS for d in node.decorator_list)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if isinstance(node, ast.AsyncFunctionDef):
            self.add("dynamic_code", f"defines the coroutine {node.name}: its frame outlives a call, run by whatever "
                     "drives it, outside the calls the judge times", node)
        if node.name in self._jitted or self._is_jit(node):
            self._check_jit_body(node)
        for decorator in node.decorator_list:  # a lambda as the decorator itself (a heuristic's lambda argument is fine)
            if isinstance(decorator, ast.Lambda) or (isinstance(decorator, ast.Call) and any(isinstance(n, ast.Lambda) for n in ast.walk(decorator.func))):
                self.add("dynamic_code", f"decorates {node.name} with a lambda: what it makes of the function (a Triton "
                         "kernel, or anything) is not what the audit reads", decorator)
        self._check_text(node.name, node)
        name = node.name
        if name.startswith("__") and name.endswith("__") and name not in _DUNDER_DEFINITIONS | _TORCH_HOOKS:
            self.add("introspection", f"defines {name}: Python calls it behind the judge's back (outside every call)", node)
        for decorator in node.decorator_list:
            if self._is_cache(decorator) and _is_pure_helper(node, self.symbols):
                self._helper_caches.update(id(n) for n in ast.walk(decorator))
        self._in_scope(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._in_scope(node)

    def _check_jit_body(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A @triton.jit body calls Triton's language, its builtins and the file's other jitted functions, and reads
        only the members Triton's values have (see _JIT_MEMBERS)."""
        local = self._local | _function_locals(func)  # its names, parameters too (a jitted function passed in)
        called = {id(n.func) for n in ast.walk(func) if isinstance(n, ast.Call)}
        for node in (n for stmt in func.body for n in ast.walk(stmt)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                self.add("delegation", "defines a function or class inside a @triton.jit body: Triton compiles none; "
                         "its interpreter runs any Python", node)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if id(node) in called and not (node.id in self._jitted | local or self._jit_path(node, local)):
                    self.add("delegation", f"calls {node.id} inside a @triton.jit body: only Triton's language, its builtins "
                             "and the file's jitted functions run there (its CPU interpreter would run any Python)", node)
                elif (path := self.symbols.resolve(node, local)) and not self._jit_path(node, local):
                    self.add("delegation", f"uses {path} inside a @triton.jit body: only Triton's language runs there", node)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                if (path := self.symbols.resolve(node, local)) is not None:
                    if not path.startswith(_JIT_PATHS):
                        self.add("delegation", f"uses {path} inside a @triton.jit body: only Triton's language runs there", node)
                elif self.symbols.resolve(node.value, local) is None and node.attr not in _JIT_MEMBERS:
                    self.add("introspection", f"reads .{node.attr} inside a @triton.jit body: a Triton value has no such "
                             "member (on the CPU interpreter it reaches the numpy array behind the tensor)", node)
            elif isinstance(node, ast.Call) and self.symbols.resolve(node.func, local) in ("builtins.getattr", "builtins.hasattr") \
                    and len(node.args) >= 2 and (name := _const_str(node.args[1])) is not None and name not in _JIT_MEMBERS:
                self.add("introspection", f"reads .{name} inside a @triton.jit body: a Triton value has no such member", node)

    def _jit_path(self, node: ast.AST, local: frozenset[str]) -> bool:
        path = self.symbols.resolve(node, local)
        return path is not None and (path.startswith(_JIT_PATHS) or path.removeprefix("builtins.") in _JIT_BUILTINS
                                     or path == "triton")  # `triton` as the base of triton.cdiv: the attribute is checked

    def _is_cache(self, decorator: ast.AST) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return self.resolve(target) in ("functools.lru_cache", "functools.cache")

    def _in_scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        outer = self._local
        self._local = outer | _function_locals(node)
        self.generic_visit(node)
        self._local = outer

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for stmt in node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id.startswith("__") and target.id.endswith("__") and target.id != "__slots__":
                    self.add("introspection", f"binds {target.id} in class {node.name}: Python calls it behind the judge's back", stmt)
        if any(k.arg == "metaclass" for k in node.keywords):
            self.add("introspection", f"class {node.name} has a metaclass: its hooks run behind the judge's back", node)
        if any(self._is_tensor_class(base) for base in node.bases):
            self._tensor_classes.add(node.name)
            self.add("tensor_subclass", f"class {node.name} derives from torch.Tensor: it can compute when read", node)
        if node.name == "ModelNew" and (foreign := self._foreign_base(node.bases, set())):
            self.add("reference_model", f"ModelNew inherits from {foreign}, not torch.nn.Module", node)
        self.generic_visit(node)

    def _is_tensor_class(self, base: ast.AST) -> bool:
        return self.resolve(base) in _TENSOR_CLASSES or (isinstance(base, ast.Name) and base.id in self._tensor_classes)

    def _foreign_base(self, bases: list[ast.expr], seen: set[str]) -> str | None:
        """The first base that is neither nn.Module nor the candidate's own class (other than Model)."""
        for base in bases:
            path = self.resolve(base)
            if path in _MODULE_BASES:
                continue
            own = self.symbols.classes.get(base.id) if isinstance(base, ast.Name) and path is None else None
            if own is None or own.name == "Model":
                return path or ast.unparse(base)
            if own.name not in seen:
                seen.add(own.name)
                if foreign := self._foreign_base(own.bases, seen):
                    return foreign
        return None

    # imports

    def visit_Import(self, node: ast.Import) -> None:
        self._check_imports(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        names = [a.name for a in node.names if a.name in _REFERENCE_NAMES]
        if names:
            module = "." * node.level + (node.module or "")
            self.add("reference_model", f"imports {', '.join(names)} from {module}: that is the reference", node)
        self._check_imports(node)

    def _check_imports(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:  # `from torch.nn.modules.module import register_module_forward_hook as h`
            self.visit_alias(alias)
        for path in _imported_paths(node):
            if banned := _banned(path):
                self.add("banned_import", f"imports {banned[0]}: {banned[1]}", node)
            elif not path.startswith(".") and path.split(".")[0] not in _ALLOWED_MODULES and not _names_reference(node):
                self.add("banned_import", f"imports {path}: a candidate may import torch, triton and a few standard modules "
                                          "(math, functools, itertools, typing, dataclasses, collections, os for its environment)", node)
            self._check_use(path, node)

    # expressions

    def _check_use(self, path: str, node: ast.AST) -> None:
        if path in ("os.environ", "os.getenv"):
            self._check_environment_read(node)
        found = False
        for rule, why in _use_rules(path, self.fp32_reference):
            if rule == "output_cache" and id(node) in self._helper_caches:
                continue  # a cache on a helper that makes no tensor: a config table, not an output cache
            self.add(rule, f"uses {path}: {why}", node)
            found = True
        parts = path.split(".")
        if not found and parts[0] in _ALLOWED_MODULES and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
            self.add("introspection", f"uses {path}: a private part of {parts[0]}, which the judge cannot vouch for", node)
            found = True
        if not found and _under(path, _BLOCKED_PARTS):
            self.add("banned_import", f"uses {path}: that part of {parts[0]} reaches around the judge (processes, files, code built at run time)", node)
        elif not found and parts[0] == "os" and len(parts) > 1 and not any(_under(path, (a,)) or a.startswith(path + ".") for a in _OS_ALLOWED):
            self.add("dynamic_code", f"uses {path}: a kernel needs only os.environ and path arithmetic from os", node)
        elif path in _BUILTINS_BANNED:
            self.add("dynamic_code", f"uses {path.removeprefix('builtins.')}: it reads files", node)
        elif not found and (banned := _banned(path)):  # torch.threading.Thread, torch.inspect.stack: the module by another name
            self.add("banned_import", f"uses {path}: {banned[1]}", node)
        elif not found and isinstance(node, ast.Attribute) and parts[0] not in _ALLOWED_MODULES and path != _NAMESPACE:
            # torch.warnings, triton's ast: reached through an allowed module (a name imported is the import's finding)
            self.add("banned_import", f"uses {path}: {parts[0]} is a module a candidate may not import, reached by another name", node)

    def _check_text(self, text: str, node: ast.AST) -> None:
        """Identifiers and strings that only a tensor-subclass or L2-persistence trick would mention."""
        if text in _TORCH_HOOKS:
            self.add("tensor_subclass", f"mentions {text}: it intercepts tensor operations", node)
        lowered = text.lower()
        if marker := next((m for m in _PERSISTENCE_MARKERS if m in lowered), None):
            self.add("cuda_persistence", f"mentions {marker!r}: L2 persistence survives the judge's cache flush", node)
        if text.startswith(_GLOBAL_HOOKS):
            # torch.nn.modules.module.register_module_forward_hook and kin: a hook on every module's forward, the
            # reference's included (red team 15's a3 and a6: its output caught for a replay, its input zeroed)
            self.add("monkey_patch", f"mentions {text}: a global module hook runs on every module's calls, the reference's "
                     "included", node)

    def visit_Name(self, node: ast.Name) -> None:
        self._check_text(node.id, node)
        if isinstance(node.ctx, ast.Load) and node.id in _PLACE_NAMES:
            self.add("introspection", f"reads {node.id}: the module's name and file are where the judge loaded it (egg_candidate, "
                     "a folder of its own), not a user's, so a kernel can tell the two apart by them (red team 21's a04)", node)
        if not isinstance(node.ctx, ast.Load):
            if node.id.startswith("__") and node.id.endswith("__"):  # `__name__ = "torch.x"`: passes for torch's own code
                self.add("introspection", f"binds {node.id}: a module's own identity is not the candidate's to set", node)
            return
        if node.id in _DUNDER_NAMES and node.id not in self._local:
            self.add("introspection", f"uses {node.id}: it reaches the import system and the judge's modules", node)
        if path := self.resolve(node):
            self._check_use(path, node)
            if path in _DYNAMIC_BUILTINS and id(node) not in self._called:
                self.add("introspection", f"uses {node.id} as a value: names become objects where no reader sees them", node)
        elif node.id == "Model" and "Model" not in self._local and "Model" not in self.symbols.bound:
            self.add("reference_model", "uses Model, which this file does not define: it is the reference", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check_text(node.attr, node)
        self._check_attribute_name(node.attr, node)
        if isinstance(node.ctx, ast.Load):
            if path := self.resolve(node):
                self._check_use(path, node)
            elif _is_private(node.attr) and node.attr not in _PRIVATE_READS and not (
                    node.attr in self._own and isinstance(node.value, ast.Name) and node.value.id in self._owners):
                # x._base, m._modules, t._values(): an object's internals, which no kernel needs and the judge
                # cannot vouch for (a by-allowlist rule: the file's own private names are its own)
                self.add("introspection", f"reads .{node.attr}: a private attribute this file does not define (the internals "
                         "of torch, Python or the judge behind the values it was given)", node)
            elif node.attr in _UNTRACED_REACH:
                self.add("introspection", f"reads .{node.attr} from a value the audit cannot trace: it is that module or builtin by another way", node)
        else:
            self._check_attribute_store(node)
        self.generic_visit(node)

    def _check_attribute_name(self, attr: str, node: ast.AST) -> None:
        if attr == "mro":  # the classes behind a value: torch.Tensor's bases hold its methods before the judge's probes
            self.add("introspection", "reads .mro: it reaches the classes behind the ones the candidate was given", node)
        elif attr in ("redispatch", "redispatch_boxed", "_op_dk"):  # an operator run below the judge's dispatch mode
            self.add("tensor_subclass", f"reads .{attr}: it runs a torch operator below the dispatch keys the judge "
                     "records its work at", node)
        elif attr == "handle":  # wherever the value came from: a kernel made by any route, or a helper handed a block
            self.add("introspection", "reads .handle: the IR or, on the CPU interpreter, the numpy array behind a Triton "
                     "block, which no kernel needs", node)
        elif attr in _FRAME_ATTRIBUTES:
            self.add("introspection", f"reads .{attr}: it reaches frames and code, and through them the judge's state", node)
        elif attr.startswith("__") and attr.endswith("__") and attr not in _DUNDER_READS | _TORCH_HOOKS and (
                attr not in _DUNDER_TARGETS or isinstance(getattr(node, "ctx", None), ast.Load)):
            # __globals__, __dict__, __bases__, __code__, __builtins__, __defaults__ read are a way to every module,
            # builtin and frame (the sixth red team's second pass); writing them is a patch, found as one
            self.add("introspection", f"reads .{attr}: it reaches objects behind the ones the candidate was given", node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.ctx, ast.Load):
            self._check_subscript_store(node)
        elif path := self.resolve(node):
            self._check_use(path, node)
            if banned := _banned(path):
                self.add("banned_import", f"reaches {banned[0]} by name: {banned[1]}", node)
        elif _const_str(node.slice) is None and (base := self.resolve(node.value)) and (
                base in (_NAMESPACE, "sys.modules", "builtins") or base.endswith(".__dict__")):
            self.add("introspection", "looks a name up in a namespace by a key built at run time (`vars(torch)[\"s\" + \"ys\"]`): "
                     "no reader can tell what it reaches", node)
        self.generic_visit(node)

    def visit_Yield(self, node: ast.Yield | ast.YieldFrom | ast.Await) -> None:
        # a generator's frame lives on between calls and its `finally` runs when the judge frees it, outside every
        # call (as __del__ would); coroutines the same: a kernel file needs neither
        kind = "awaits" if isinstance(node, ast.Await) else "yields"
        self.add("dynamic_code", f"{kind} inside a function: its frame outlives the call and runs code when it is freed, "
                 "outside every call the judge times or checks", node)
        self.generic_visit(node)

    visit_YieldFrom = visit_Await = visit_Yield

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        # `case {"sys": s}` on vars(torch) looks a name up in a namespace where no Subscript shows it (session 23's
        # held-out red team); a kernel file needs no mapping patterns
        self.add("introspection", "matches a mapping pattern: it looks keys up where the audit cannot follow", node)
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        # `case object(__class__=c)` reads attributes with no ast.Attribute for the rules above to see (the third
        # held-out red team reached torch._C, closures and frames this way); a kernel file needs no class patterns
        names = ", ".join(node.kwd_attrs) or f"{len(node.patterns)} positional"
        self.add("introspection", f"matches a class pattern ({names}): it reads attributes where the audit cannot look", node)
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        self._check_text(node.name.rsplit(".", 1)[-1], node)  # an imported name, whatever it is bound to

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._check_text(node.value, node)
            for part in _format_field_attributes(node.value):  # "{0.forward.__func__.__globals__}".format(self)
                if _reaches_behind(part):
                    self.add("introspection", f"reads .{part} in a format string's field ({node.value[:60]!r}): str.format "
                             "follows attribute paths where no rule sees an attribute read", node)
                    break
            if node.value in _MODULES_BY_NAME:  # `operator.getitem(vars(torch), "sys")`: a module looked up by its name
                self.add("introspection", f"names the module {node.value!r} in a string: a lookup by name reaches it where "
                         "no import or alias rule sees it", node)
            if _DOTTED.fullmatch(node.value):  # `attrgetter("run.__closure__")`, `vars(x)["__array_interface__"]`
                for part in node.value.split("."):
                    if part in _FRAME_ATTRIBUTES or part == "handle" or (part.startswith("__") and part.endswith("__") and part not in _DUNDER_READS | _DUNDER_DEFINITIONS):
                        self.add("introspection", f"names .{part} in a string ({node.value!r}): an attribute read where no "
                                 "rule sees one (attrgetter, a namespace's key)", node)
                        break

    def visit_Expr(self, node: ast.Expr) -> None:
        # A string statement (a docstring) does nothing: its words are no evidence.
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg:
            self._check_text(node.arg, node)
        self.generic_visit(node)

    # stores: patching what is not the candidate's own

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._values[id(target)] = node.value
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign | ast.AugAssign) -> None:
        if node.value is not None:
            self._values[id(node.target)] = node.value
        self.generic_visit(node)

    visit_AugAssign = visit_AnnAssign

    def _check_attribute_store(self, node: ast.Attribute) -> None:
        if node.attr in _DUNDER_TARGETS:
            self.add("monkey_patch", f"assigns {_short(node)}: it rewires an object behind the reader's back", node)
        elif path := _join(self.resolve(node.value), node.attr):
            self._report_patch(path, self._values.get(id(node)), node)

    def _check_subscript_store(self, node: ast.Subscript) -> None:
        self._check_item_store(node.value, node)

    def _check_item_store(self, container: ast.AST | None, node: ast.AST) -> None:
        base = self.resolve(container) if container is not None else None
        if base == _NAMESPACE:
            self.add("dynamic_code", f"writes {_short(node)}: it rebinds names where no reader looks", node)
        elif base == "os.environ":  # setting TRITON_* switches is fine
            self._check_environment_key(node.slice if isinstance(node, ast.Subscript) else None, node)
        elif base:
            self.add("monkey_patch", f"patches {_short(node)}: the judge's own code would see the change", node)

    def _check_environment_key(self, key_node: ast.AST | None, node: ast.AST) -> None:
        """A candidate sets only Triton's own switches (TRITON_*) in its environment: others change what Triton's
        compiler and the tools it starts run (LD_PRELOAD, COMPILER_PATH, GCC_EXEC_PREFIX, CC, PATH)."""
        key = _const_str(key_node) if key_node is not None else None
        if key is None or not key.startswith("TRITON_") or key in _TRITON_TOOL_VARIABLES:
            shown = f"the environment variable {key}" if key is not None else "environment variables by a computed name or in bulk"
            self.add("dynamic_code", f"sets {shown}: a kernel sets only TRITON_* switches, not what picks the programs Triton's "
                                     "compiler starts", node)

    def _check_environment_read(self, node: ast.AST) -> None:
        """A candidate reads only Triton's own switches (TRITON_*) from its environment: any other variable tells the
        judge's sandbox from a user's machine (`EGG_*`, `USER`, `HOME`), and a kernel right only there passes every
        check (red team 20's c17). Writes are `_check_environment_key`'s."""
        parent = self.parents.get(id(node))
        key: ast.AST | None = None
        if isinstance(node, (ast.alias, ast.Import, ast.ImportFrom)) or isinstance(parent, (ast.Import, ast.ImportFrom)):
            return  # `from os import environ`: its uses are checked where they are
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if not isinstance(parent.ctx, ast.Load):
                return
            key = parent.slice
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr in _ENVIRONMENT_WRITES:
                return
            call = self.parents.get(id(parent))
            called = isinstance(call, ast.Call) and call.func is parent
            if called and parent.attr in ("setdefault", "__setitem__") and isinstance(self.parents.get(id(call)), ast.Expr):
                return  # a write whose value nothing reads
            if called and parent.attr in ("get", "setdefault", "__getitem__", "__contains__"):
                key = call.args[0] if call.args else None
        elif isinstance(parent, ast.Call) and parent.func is node:  # os.getenv("TRITON_...")
            key = parent.args[0] if parent.args else None
        elif isinstance(parent, ast.Compare) and any(c is node for c in parent.comparators) and all(isinstance(o, (ast.In, ast.NotIn)) for o in parent.ops):
            key = parent.left
        name = _const_str(key) if key is not None else None
        if name in _JUDGE_SET_TRITON or name is not None and name.startswith("TRITON_") and name.endswith(("_DIR", "_HOME", "_PATH")):
            self.add("dynamic_code", f"reads the environment variable {name}: the judge's sandbox sets it (a folder of its own), "
                     "a user's shell rarely does, so a kernel right only where it is set passes every check (red team 21's a01)", node)
        elif name is None or not name.startswith("TRITON_"):
            shown = f"the environment variable {name}" if name is not None else "the environment by a computed name or in bulk"
            self.add("dynamic_code", f"reads {shown}: a kernel's answer may not depend on where it runs (the judge's sandbox "
                     "is told from a user's machine so); a kernel reads only Triton's own switches (TRITON_*)", node)

    def _report_patch(self, path: str, value: ast.AST | None, node: ast.AST) -> None:
        if path.startswith("torch.backends."):
            flag = path.rsplit(".", 1)[1]
            if flag in _PRECISION_FLAGS:
                if self.fp32_reference and not _is_safe_precision(value):
                    self.add("precision_downgrade", f"sets {path}: the reference computes in float32", node)
                return
            if flag == "benchmark":  # cudnn autotuning only makes library calls faster
                return
        self.add("monkey_patch", f"patches {path}: the judge's own calls would run the replacement", node)

    # calls

    def visit_Call(self, node: ast.Call) -> None:
        self._called.add(id(node.func))
        func = self.resolve(node.func)
        if func in ("os.environ.setdefault", "os.environ.__setitem__"):
            self._check_environment_key(node.args[0] if node.args else None, node)
        elif func in ("os.environ.update", "os.environ.clear", "os.environ.pop", "os.environ.popitem", "os.environ.__delitem__",
                      "os.environ.copy", "os.environ.__init__"):
            self._check_environment_key(None, node)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if method in _NAMESPACE_READS and (base := self.resolve(node.func.value)) and (base in (_NAMESPACE, "builtins") or base.endswith(".__dict__")):
            self.add("introspection", f"reads a module's namespace with .{method}() (`vars(torch).get(\"sys\")`): no reader can tell what it reaches", node)
        if func == "builtins.super" and node.args and self.resolve(node.args[0]) in _TENSOR_CLASSES:
            self.add("delegation", "calls super(torch.Tensor, ...): the tensor's own methods past the judge's probes "
                     "(its values to the host unseen)", node)
        self._check_attribute_call(node, func)
        if method in _HOST_METHODS and func is None:
            self.add("delegation", f"calls .{method}(): it computes on the host, outside Triton and out of the judge's sight", node)
        if (path := self.resolve(node)) and func != "builtins.vars":  # getattr(m, "x"), sys.modules.get("x")
            self._check_use(path, node)
            if func == "sys.modules.get" and (banned := _banned(path)):
                self.add("banned_import", f"reaches {banned[0]} by name: {banned[1]}", node)
        self._check_import_call(node, func)
        self._check_patch_call(node, func, method)
        self._check_precision_call(node, func, method)
        if method in _FILE_METHODS and func is None:
            self.add("dynamic_code", f"calls .{method}(): it touches files, which a kernel has no reason to do", node)
        if method == "as_subclass" or (func == "builtins.type" and self._makes_tensor_class(node)):
            self.add("tensor_subclass", f"calls {_short(node.func)}: it makes a tensor subclass", node)
        elif func == "builtins.type" and len(node.args) == 3:
            self.add("dynamic_code", "calls type() with three arguments: it builds a class at run time", node)
        if func == "contextlib.suppress" and any(self._broad_catch(a) for a in node.args):
            self.add("fallback", "suppresses broad exceptions: a failing kernel can be skipped silently", node)
        self.generic_visit(node)

    def _check_attribute_call(self, node: ast.Call, func: str | None) -> None:
        """getattr and its kin: a name computed at run time (on anything: `self` is only a parameter's name), or a
        name that reaches frames."""
        if func not in ("builtins.getattr", "builtins.hasattr", "builtins.setattr", "builtins.delattr") or len(node.args) < 2:
            return
        name = _const_str(node.args[1])
        if name is not None:
            self._check_attribute_name(name, node)
            if name in _HOST_METHODS:  # getattr(torch.Tensor.mro()[1], "numpy"): the method, spelled as a string
                self.add("delegation", f"reaches .{name} by getattr: it computes on the host, outside Triton and out of the judge's sight", node)
        else:
            self.add("dynamic_code", f"calls {func.removeprefix('builtins.')} with a name computed at run time", node)

    def _check_import_call(self, node: ast.Call, func: str | None) -> None:
        if func not in _IMPORT_FUNCS:
            return
        name = _const_str(node.args[0]) if node.args else None
        if name is None:
            self.add("dynamic_code", f"calls {func} with a name computed at run time", node)
        elif banned := _banned(name):
            self.add("banned_import", f"imports {banned[0]}: {banned[1]}", node)

    def _check_patch_call(self, node: ast.Call, func: str | None, method: str | None) -> None:
        args = [*node.args, None, None, None]
        if func in ("builtins.setattr", "builtins.delattr") and node.args:
            self._patch_target(args[0], args[1], args[2], node)
        elif method in ("__setattr__", "__delattr__") and node.args:
            if _const_str(node.args[0]) is not None:  # bound: torch.cuda.__setattr__("x", f)
                self._patch_target(node.func.value, args[0], args[1], node)
            else:  # unbound: object.__setattr__(target, "x", f)
                self._patch_target(args[0], args[1], args[2], node)
        elif func in ("operator.setitem", "operator.delitem", "operator.__setitem__", "operator.__delitem__"):
            self._check_item_store(node.args[0] if node.args else None, node)
        elif method in _DICT_MUTATORS:
            owner = self.resolve(node.func.value)
            if owner == _NAMESPACE:
                self.add("dynamic_code", f"calls {_short(node.func)}: it rebinds names where no reader looks", node)
            elif owner and (owner == "sys.modules" or owner.endswith(".__dict__")):
                self.add("monkey_patch", f"patches {owner} with .{method}()", node)

    def _patch_target(self, obj: ast.AST, name: ast.AST | None, value: ast.AST | None, node: ast.Call) -> None:
        base = self.resolve(obj)
        if not base or base == _NAMESPACE:
            return
        attr = _const_str(name)
        if attr is None:
            self.add("monkey_patch", f"patches an attribute of {base}, named at run time", node)
        else:
            self._report_patch(f"{base}.{attr}", value, node)

    def _check_precision_call(self, node: ast.Call, func: str | None, method: str | None) -> None:
        if not self.fp32_reference:
            return
        if method in ("half", "bfloat16") and not node.args:
            self.add("precision_downgrade", f"calls .{method}(): the reference computes in float32", node)
        elif func == "torch.set_float32_matmul_precision" and not _is_safe_precision(next(iter(node.args), None)):
            self.add("precision_downgrade", "lowers torch's float32 matmul precision", node)
        elif func == "triton.language.dot" and _dot_uses_tf32(node):
            self.add("precision_downgrade", "tl.dot asks for TF32 inputs: the reference computes in float32", node)

    def _makes_tensor_class(self, node: ast.Call) -> bool:
        bases = node.args[1] if len(node.args) == 3 else None
        return isinstance(bases, ast.Tuple) and any(self._is_tensor_class(b) for b in bases.elts)

    # fallbacks

    def visit_Try(self, node: ast.Try) -> None:
        if not _does_no_work(node.body):
            for handler in node.handlers:
                caught = self._broad_catch(handler.type)
                if caught and not (handler.body and isinstance(handler.body[-1], ast.Raise)):
                    self.add("fallback", f"catches {caught} and carries on: a failing kernel can be replaced", handler)
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def _broad_catch(self, caught: ast.AST | None) -> str | None:
        """The broad exception a handler's type catches (Exception, BaseException, RuntimeError), if any."""
        if caught is None:
            return "everything (bare except)"
        for node in caught.elts if isinstance(caught, ast.Tuple) else [caught]:
            path = self.resolve(node)
            if path in _BROAD_ERRORS:
                return path.removeprefix("builtins.")
        return None


def _is_private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def _own_names(tree: ast.Module) -> Iterator[str]:
    """Every name the file binds: its definitions, parameters, assigned names and attributes (`self._cache = ...`)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            yield node.id
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            yield node.attr
        elif isinstance(node, ast.alias):
            yield node.asname or node.name.split(".")[0]


def _is_pure_helper(func: ast.FunctionDef | ast.AsyncFunctionDef, symbols: _Symbols) -> bool:
    """A function that makes no tensor: not `forward`, calls nothing of torch's (math, a few builtins and Triton's
    size helpers only), reads its arguments only as numbers or their shapes, and returns none of them whole. A
    cache on it is a config table (a block size per problem size), not an output cache."""
    if func.name == "forward":
        return False
    params = _function_locals(func) & {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
    for node in ast.walk(func):
        if node in func.decorator_list:
            continue
        if isinstance(node, ast.Call):
            path = symbols.resolve(node.func, frozenset(params))
            if path is not None and not (path in _HELPER_CALLS or path.startswith("math.")):
                return False
            if isinstance(node.func, ast.Attribute) and _root_name(node.func.value) in params:
                return False  # a method of an argument: x.sum(), x.clone()
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in params:
            if node.attr not in _CONFIG_READS:
                return False
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id in params:
            return False
    return True


def _dot_uses_tf32(node: ast.Call) -> bool:
    """tl.dot(a, b, acc, input_precision, allow_tf32, ...) asking for TF32 by constant argument."""
    options = {k.arg: k.value for k in node.keywords if k.arg}
    for index, name in ((3, "input_precision"), (4, "allow_tf32")):
        if len(node.args) > index:
            options.setdefault(name, node.args[index])
    precision = _const_str(options.get("input_precision")) or ""
    allow = options.get("allow_tf32")
    return precision.lower() == "tf32" or (isinstance(allow, ast.Constant) and allow.value is True)


# Output caches in the forward path --------------------------------------------------------------------------------


def _cache_findings(tree: ast.Module, symbols: _Symbols) -> Iterator[Finding]:
    """Stores into state that outlives the call, keyed on the input's pointer, identity or shape."""
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name].append(node)
    for func in _reachable(functions, "forward"):
        yield from _cache_writes(func, symbols)


def _reachable(functions: dict[str, list], start: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions named `start` and every candidate function they call, matched by name."""
    seen: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    todo = list(functions.get(start, ()))
    while todo:
        func = todo.pop()
        if id(func) in seen:
            continue
        seen[id(func)] = func
        for call in ast.walk(func):
            if isinstance(call, ast.Call):
                callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
                todo.extend(functions.get(callee, ()))
    return list(seen.values())


def _cache_writes(func: ast.FunctionDef | ast.AsyncFunctionDef, symbols: _Symbols) -> Iterator[Finding]:
    fresh = _fresh_locals(func, symbols)
    taint = _key_taint(func, symbols)
    for node in ast.walk(func):
        store = _container_store(node)
        if store is None or _root_name(store[0]) in fresh:
            continue
        container, key = store
        kinds = _key_kinds(key, taint, symbols)
        # A shape key alone also fits honest config caches: flag it only when forward returns what it stored.
        replayed = _SHAPE_KEY in kinds and func.name == "forward" and _returns_from(func, container)
        if _IDENTITY_KEY in kinds or replayed:
            yield Finding(
                "output_cache",
                f"stores into {_short(container)} keyed on {' and '.join(sorted(kinds))}: results can be replayed",
                node.lineno,
            )


def _container_store(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(container, key) for `c[key] = v`, `c.setdefault(key, v)` and `c.__setitem__(key, v)`; for `c.update(pairs)` and
    `c |= pairs` the whole of what is merged in stands for the key (red team 14's c10 stored with `update`)."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
        return node.value, node.slice
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr in ("setdefault", "__setitem__"):
            return node.func.value, node.args[0]
        if node.func.attr == "update":
            return node.func.value, node.args[0]
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.BitOr):
        return node.target, node.value
    return None


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _fresh_locals(func: ast.AST, symbols: _Symbols) -> set[str]:
    """Local names only ever bound to a new object: stores into them die with the call."""
    verdict: dict[str, bool] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            fresh = _is_fresh(node.value, symbols)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    verdict[target.id] = verdict.get(target.id, True) and fresh
    return {name for name, fresh in verdict.items() if fresh}


def _is_fresh(value: ast.AST, symbols: _Symbols) -> bool:
    literals = (ast.Dict, ast.List, ast.Set, ast.Tuple, ast.DictComp, ast.ListComp, ast.SetComp, ast.Constant)
    if isinstance(value, literals):
        return True
    path = symbols.resolve(value.func) if isinstance(value, ast.Call) else None
    return bool(path) and (path.startswith(("torch.", "numpy.", "collections.")) or path in (
        "builtins.dict", "builtins.list", "builtins.set"))


def _key_kinds(expr: ast.AST, taint: dict[str, set[str]], symbols: _Symbols) -> set[str]:
    kinds: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and _is_identity_call(node, symbols):
            kinds.add(_IDENTITY_KEY)
        elif isinstance(node, ast.Attribute) and node.attr == "shape":
            kinds.add(_SHAPE_KEY)
        elif isinstance(node, ast.Name) and node.id in taint:
            kinds |= taint[node.id]
    return kinds


def _is_identity_call(call: ast.Call, symbols: _Symbols) -> bool:
    if isinstance(call.func, ast.Attribute) and call.func.attr == "data_ptr":
        subject = call.func.value
    elif symbols.resolve(call.func) == "builtins.id" and call.args:
        subject = call.args[0]
    elif symbols.resolve(call.func) == "builtins.hash" and call.args and not isinstance(call.args[0], (ast.Attribute, ast.Tuple, ast.Constant)):
        # a tensor's hash is its identity (red team 14's c10 replayed outputs keyed on it); `hash(x.shape)` is a shape
        subject = call.args[0]
    else:
        return False
    # Keying on a weight's pointer (self.weight.data_ptr()) caches a prepared weight, not an output.
    return _root_name(subject) not in ("self", "cls")


def _key_taint(func: ast.AST, symbols: _Symbols) -> dict[str, set[str]]:
    """Local names that carry a pointer, identity or shape (`key = (x.data_ptr(), x.shape)`)."""
    taint: dict[str, set[str]] = {}
    assigns = [n for n in ast.walk(func) if isinstance(n, ast.Assign)]
    changed = True
    while changed:
        changed = False
        for assign in assigns:
            kinds = _key_kinds(assign.value, taint, symbols)
            names = [n.id for t in assign.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            for name in names:
                if kinds - taint.get(name, set()):
                    taint[name] = taint.get(name, set()) | kinds
                    changed = True
    return taint


def _returns_from(func: ast.AST, container: ast.expr) -> bool:
    """True when the function returns a value read back from `container` as it is (`return c[key]`)."""
    target = ast.dump(container)
    read_names = {
        t.id for n in ast.walk(func) if isinstance(n, ast.Assign) and _is_read(n.value, target)
        for t in n.targets if isinstance(t, ast.Name)
    }
    return any(
        isinstance(n, ast.Return) and n.value is not None
        and (_is_read(n.value, target) or (isinstance(n.value, ast.Name) and n.value.id in read_names))
        for n in ast.walk(func)
    )


def _is_read(expr: ast.AST, target: str) -> bool:
    """`c[key]` or `c.get(key)` for the container dumped as `target`."""
    if isinstance(expr, ast.Subscript):
        return ast.dump(expr.value) == target
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get":
        return ast.dump(expr.func.value) == target
    return False
