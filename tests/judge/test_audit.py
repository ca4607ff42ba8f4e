"""Static cheat detection: each rule caught through aliases, honest candidates left alone."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from pipeline.judge.audit import RULES, audit_file, audit_source
from pipeline.types import Finding

ROOT = Path(__file__).resolve().parents[2]
FP32 = frozenset({"float32"})


def audit(source: str, dtypes: frozenset[str] = FP32) -> tuple[Finding, ...]:
    return audit_source(textwrap.dedent(source), reference_dtypes=dtypes)


def rules(source: str, dtypes: frozenset[str] = FP32) -> set[str]:
    return {f.rule for f in audit(source, dtypes)}


# monkey_patch ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import torch as T\ndef f(*a): return 0.0\nT.cuda.Event.elapsed_time = f\n",
        "from time import perf_counter as pc\nimport time as tm\ntm.perf_counter = lambda: 0.0\n",
        "import torch\nsetattr(torch.cuda, 'synchronize', lambda: None)\n",
        "import importlib\nmod = importlib.import_module('torch')\nmod.cuda.synchronize = print\n",
        "import torch\ngetattr(torch, 'cuda').synchronize = print\n",
        "import torch\nE = torch.cuda.Event\nE.elapsed_time = print\n",
        "from torch.cuda import Event as Ev\nEv.elapsed_time = print\n",
        "import torch\nsync = torch.cuda\nsync.synchronize = print\n",
        "__import__('torch').cuda.synchronize = print\n",
        "import builtins\nbuiltins.print = repr\n",
        "__builtins__.print = repr\n",
        "import torch\ntorch.allclose = lambda *a, **k: True\n",
        "import torch\ntorch.cuda.Event.elapsed_time += 0\n",
        "import torch\ndel torch.cuda.synchronize\n",
        "import torch\ndelattr(torch.cuda, 'synchronize')\n",
        "import torch\nobject.__setattr__(torch.cuda, 'synchronize', print)\n",
        "import torch\ntorch.cuda.__setattr__('synchronize', print)\n",
        "import torch\nvars(torch.cuda)['synchronize'] = print\n",
        "import torch\ntorch.cuda.__dict__.update(synchronize=print)\n",
        "import sys, types\nsys.modules['time'] = types.SimpleNamespace(perf_counter=lambda: 0.0)\n",
        "import sys\nsys.modules.get('time').perf_counter = lambda: 0.0\n",
        "import time, torch\nfor m in (torch.cuda, time):\n    m.synchronize = print\n",
        "import torch\ndef patch(mod=torch.cuda):\n    mod.synchronize = print\n",
        "import torch\nclass P:\n    def __init__(self):\n        self.ev = torch.cuda.Event\n"
        "    def go(self):\n        self.ev.elapsed_time = print\n",
        "import torch\nclass P:\n    ev = torch.cuda.Event\nP.ev.elapsed_time = print\n",
        "import torch\ndef timer():\n    return torch.cuda.Event\ntimer().elapsed_time = print\n",
        "import torch\ntype(torch.cuda.Event()).elapsed_time = print\n",
        "import operator, sys\noperator.setitem(sys.modules, 'time', None)\n",
        "def f(): pass\nf.__code__ = (lambda: 1).__code__\n",
        "import torch\ntorch.backends.cudnn.enabled = False\n",
        "from unittest import mock\nmock.patch('time.perf_counter', return_value=0.0).start()\n",
    ],
)
def test_monkey_patch_is_caught_through_aliases(source):
    assert "monkey_patch" in rules(source)


def test_monkey_patch_names_the_patched_path_and_line():
    (finding,) = audit("import torch as T\n\n\nT.cuda.Event.elapsed_time = lambda s, e: 0.0\n")
    assert finding == Finding("monkey_patch", finding.message, 4)
    assert "torch.cuda.Event.elapsed_time" in finding.message


def test_setattr_on_the_timer_names_the_full_path():
    (finding,) = audit("import torch\nsetattr(torch.cuda, 'synchronize', lambda: None)\n")
    assert "patches torch.cuda.synchronize" in finding.message


@pytest.mark.parametrize(
    "source",
    [
        "import torch.nn as nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        setattr(self, 'w', 1)\n        self.cache = {}\n        object.__setattr__(self, 'x', 2)\n",
        "class Box:\n    pass\nBox.size = 3\nsetattr(Box, 'name', 'b')\n",
        "import os\nos.environ['TRITON_PRINT_AUTOTUNING'] = '1'\nos.environ.setdefault('TRITON_CACHE_DIR', '/tmp')\n",
        "import torch\ntorch.backends.cudnn.benchmark = True\n",
        "from time import perf_counter as pc\nstart = pc()\n",
        "import torch\ndef time_it():\n    torch.cuda.synchronize()\n    return torch.cuda.Event(enable_timing=True)\n",
    ],
)
def test_writing_own_objects_is_not_patching(source):
    assert rules(source) == set()


# banned_import -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("import ctypes\n", "ctypes"),
        ("import importlib\nlib = importlib.import_module('ctypes')\n", "ctypes"),
        ("t = __import__('threading')\n", "threading"),
        ("from importlib import import_module as im\nim('subprocess')\n", "subprocess"),
        ("import importlib as il\ngetattr(il, 'import_module')('multiprocessing')\n", "multiprocessing"),
        ("from concurrent.futures import ThreadPoolExecutor\n", "concurrent"),
        ("import _thread as t\n", "_thread"),
        ("from torch.utils.cpp_extension import load_inline\n", "torch.utils.cpp_extension"),
        ("from torch.utils import cpp_extension\n", "torch.utils"),
        ("import cuda.bindings.runtime as cudart\n", "cuda"),
        ("from cuda import cudart\n", "cuda"),
        ("import cupy, pynvml\n", "cupy"),
        ("import gc\n", "gc"),
        ("import inspect\n", "inspect"),
        ("import signal\n", "signal"),
        ("import socket\n", "socket"),
        ("import pickle\n", "pickle"),
        ("import marshal\n", "marshal"),
        ("import numba\n", "numba"),
        ("import cffi\n", "cffi"),
        ("import pycuda.driver\n", "pycuda"),
        ("import torch.multiprocessing as mp\n", "torch.multiprocessing"),
        ("import sys\nsys.modules['ctypes'].CDLL(None)\n", "ctypes"),
        ("import sys\nlib = sys.modules.get('ctypes')\n", "ctypes"),
    ],
)
def test_banned_modules_are_caught_in_any_import_form(source, module):
    found = [f for f in audit(source) if f.rule == "banned_import"]
    assert any(module in f.message.split(":")[0] for f in found), found


def test_banned_import_message_says_why():
    (finding,) = audit("import threading\n")
    assert finding.message == "imports threading: threads can finish work after the clock stops"


@pytest.mark.parametrize(
    "source",
    [
        "import torch.cuda.nvtx as nvtx\nnvtx.range_push('x')\n",
        "from torch import cuda\nimport torch.cuda\n",
        "import functools\nimport itertools\nimport typing\nimport dataclasses\n",
    ],
)
def test_ordinary_modules_are_not_banned(source):
    assert rules(source) == set()


# dynamic_code ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "exec('x = 1')\n",
        "y = eval('1 + 1')\n",
        "code = compile('1', 'f', 'eval')\n",
        "run = exec\nrun('x = 1')\n",
        "import builtins\nbuiltins.eval('1')\n",
        "import builtins\ngetattr(builtins, 'exec')('x = 1')\n",
        "__builtins__['exec']('x = 1')\n",
        "import importlib\nname = 'ct' + 'ypes'\nimportlib.import_module(name)\n",
        "def load(n):\n    return __import__(n)\n",
        "globals()['x'] = 1\n",
        "g = globals()\ng['x'] = 1\n",
        "globals().update(x=1)\n",
        "data = open('/tmp/ref.pt', 'rb').read()\n",
        "import torch\nref = torch.load('/tmp/ref.pt')\n",
        "import os\nos.system('nvidia-smi')\n",
        "import os\nos.execv('/bin/true', ['true'])\n",
        "import os\nos.kill(os.getppid(), 9)\n",
        "import sys\nframe = sys._getframe(1)\n",
        "import sys\nsys.settrace(None)\n",
        "import importlib.util\nspec = importlib.util.spec_from_file_location('p', 'problem.py')\n",
    ],
)
def test_dynamic_code_is_caught(source):
    assert "dynamic_code" in rules(source)


@pytest.mark.parametrize(
    "source",
    [
        "from pathlib import Path\nkey = Path('/proc/1/environ').read_bytes()\n",
        "import pathlib as pl\nenv = pl.Path.home() / '.netrc'\n",
        "import sys\nP = sys.modules['pathlib'].Path\n",
        "import importlib\nP = importlib.import_module('pathlib')\n",
        "import io\nf = io.open('/root/.config/egg/egg.yaml')\n",
        "import io\nf = io.FileIO('.env')\n",
        "import os\nfd = os.open('/proc/1/environ', os.O_RDONLY)\n",
        "import os\ndata = os.read(3, 100)\n",
        "import os\nnames = os.listdir('/proc')\n",
        "import os\nfor entry in os.scandir('/home'):\n    pass\n",
        "import os\nfor top, dirs, files in os.walk('/'):\n    pass\n",
        "import os\nhere = os.path.exists('/root/.netrc')\n",
        "import os\nlink = os.readlink('/proc/1/cwd')\n",
        "import numpy as np\nraw = np.fromfile('/proc/1/environ', dtype=np.uint8)\n",
        "import numpy\nblob = numpy.load('ref.npy')\n",
        "import torch\nx = torch.from_file('/dev/shm/ref.bin', size=4)\n",
        "import torch\ns = torch.UntypedStorage.from_file('/dev/shm/ref.bin', True, 4)\n",
        "import torch\ntorch.save({}, '/tmp/x.pt')\n",
        "import mmap\n",
        "import shutil\nshutil.copy('/root/.netrc', 'here')\n",
        "import glob\nfound = glob.glob('/**/.env', recursive=True)\n",
        "import tempfile\nd = tempfile.mkdtemp(dir='/tmp')\n",
        "import torch\ndef f(x):\n    x.numpy().tofile('/tmp/out')\n",
        "def f(p):\n    return p.read_text()\n",
        "opener = open\nopener('.env')\n",
        "__builtins__['open']('.env')\n",
        "import urllib.request\nurllib.request.urlopen('file:///root/.netrc')\n",
    ],
)
def test_every_file_api_counts_as_file_access(source):
    assert "dynamic_code" in rules(source)


@pytest.mark.parametrize(
    "source",
    [
        "import os\nroot = os.path.join(os.path.dirname('a/b'), 'c')\n",
        "import os\nn = os.cpu_count()\nflag = os.environ.get('TRITON_DEBUG')\n",
        "import triton.language as tl\ndef k(p):\n    tl.store(p, tl.load(p))\n",
        "import torch\ny = torch.empty(4).copy_(torch.ones(4))\n",
    ],
)
def test_paths_and_kernel_loads_are_not_file_access(source):
    assert rules(source) == set()


def test_a_candidate_function_named_compile_is_not_the_builtin():
    source = "def compile(x):\n    return x\ny = compile(3)\n"
    assert rules(source) == set()


def test_torch_compile_is_delegation_not_dynamic_code():
    assert rules("import torch\nf = torch.compile(lambda x: x)\n") == {"delegation"}


def test_setting_and_reading_tritons_switches_is_fine_and_reading_another_variable_is_not():
    """Since session 28 (red team 20's c17 told the judge's sandbox by `USER` and `EGG_*`): tests/judge/test_environment_and_row_stride.py."""
    assert rules("import os\nflag = os.environ.get('TRITON_DEBUG', '0')\nos.environ['TRITON_DEBUG'] = flag\n") == set()
    assert rules("import os\nflag = os.environ.get('X', '0')\nos.environ['TRITON_DEBUG'] = flag\nn = os.getenv('N')\n") == {"dynamic_code"}


# reference_model ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "class ModelNew(Model):\n    pass\n",
        "from problem import Model\nclass ModelNew(Model):\n    pass\n",
        "from .reference import Model as Ref\n",
        "from problem import get_inputs, get_init_inputs\n",
        "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.ref = Model()\n",
        "import sys\nRef = sys.modules['__main__'].Model\n",
        "import importlib\nref = importlib.import_module('problem')\nR = getattr(ref, 'Model')\n",
        "import torch.nn as nn\nclass ModelNew(nn.Linear):\n    pass\n",
        "import torch\nclass Model(torch.nn.Module):\n    pass\nclass ModelNew(Model):\n    pass\n",
    ],
)
def test_reference_model_is_caught(source):
    assert "reference_model" in rules(source)


def test_inheriting_model_is_reported_on_the_class_line():
    findings = audit("import torch.nn as nn\n\nclass ModelNew(Model):\n    pass\n")
    assert [(f.rule, f.line) for f in findings] == [("reference_model", 3)]


@pytest.mark.parametrize(
    "source",
    [
        "from torch import nn\nclass ModelNew(nn.Module):\n    pass\n",
        "from torch.nn import Module\nclass ModelNew(Module):\n    pass\n",
        "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n",
        "import torch.nn as nn\nclass _Base(nn.Module):\n    pass\nclass ModelNew(_Base):\n    pass\n",
        # KernelBench-style candidates often repeat the input builders: their own, not the reference's
        "import torch\nclass ModelNew(torch.nn.Module):\n    pass\ndef get_inputs():\n    return [torch.rand(4)]\n"
        "def get_init_inputs():\n    return []\nprint(get_inputs(), get_init_inputs())\n",
    ],
)
def test_module_bases_are_fine(source):
    assert rules(source) == set()


# tensor_subclass ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nclass Lazy(torch.Tensor):\n    pass\n",
        "from torch import Tensor as TT\nclass Lazy(TT):\n    pass\n",
        "class Hook:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        return func(*args)\n",
        "class Hook:\n    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n        return None\n",
        "from torch.utils._python_dispatch import TorchDispatchMode\n",
        "import torch.overrides\n",
        "from torch.overrides import TorchFunctionMode as TFM\nclass M(TFM):\n    pass\n",
        "import torch\nLazy = type('Lazy', (torch.Tensor,), {})\n",
        "def f(y, cls):\n    return y.as_subclass(cls)\n",
    ],
)
def test_tensor_subclasses_are_caught(source):
    assert "tensor_subclass" in rules(source)


# fallback ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "def f(x):\n    try:\n        return kernel(x)\n    except:\n        return x\n",
        "def f(x):\n    try:\n        return kernel(x)\n    except Exception:\n        return x\n",
        "def f(x):\n    try:\n        return kernel(x)\n    except (ValueError, RuntimeError):\n        return x\n",
        "def f(x):\n    try:\n        return kernel(x)\n    except BaseException:\n        pass\n    return x\n",
        "import builtins\nOops = builtins.Exception\n"
        "def f(x):\n    try:\n        return kernel(x)\n    except Oops:\n        return x\n",
        "import contextlib\ndef f(x):\n    with contextlib.suppress(Exception):\n        return kernel(x)\n"
        "    return x\n",
    ],
)
def test_broad_handlers_that_carry_on_are_fallbacks(source):
    assert rules(source) == {"fallback"}


def test_fallback_is_reported_on_the_handler_line():
    source = "def f(x):\n    try:\n        return kernel(x)\n    except Exception:\n        return x\n"
    assert [(f.rule, f.line) for f in audit(source)] == [("fallback", 4)]


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    from triton.language.extra import libdevice\nexcept ImportError:\n    libdevice = None\n",
        "try:\n    import triton.language.extra.cuda as cx\n    HAS = True\nexcept Exception:\n    HAS = False\n",
        "def f(x):\n    try:\n        return kernel(x)\n    except Exception as e:\n"
        "        raise RuntimeError('kernel failed') from e\n",
        "def f(x):\n    try:\n        return kernel(x)\n    except (KeyError, ValueError):\n        return None\n",
        "def f(x):\n    try:\n        return kernel(x)\n    finally:\n        pass\n",
    ],
)
def test_narrow_or_reraising_handlers_are_fine(source):
    assert rules(source) == set()


# delegation --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import torch\n@torch.compile\ndef f(x):\n    return x\n",
        "from torch import compile as c\ng = c(print)\n",
        "import torch\nm = torch.jit.script(torch.nn.ReLU())\n",
        "import torch\nm = torch.jit.trace(torch.nn.ReLU(), torch.ones(1))\n",
        "import torch._dynamo\ntorch._dynamo.config.suppress_errors = True\n",
        "import torch._inductor.config as ic\n",
        "import torch\nep = torch.export.export(torch.nn.ReLU(), (torch.ones(1),))\n",
    ],
)
def test_asking_torch_to_write_the_kernels_is_delegation(source):
    assert "delegation" in rules(source)


# output_cache ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import functools\n@functools.lru_cache(maxsize=None)\ndef f(n):\n    return n\n",
        "from functools import cache\n@cache\ndef f(n):\n    return n\n",
        "import functools as ft\nclass M:\n    @ft.cached_property\n    def w(self):\n        return 1\n",
        # pointer-keyed store into instance state, in a helper that forward calls
        "class ModelNew:\n    def __init__(self):\n        self.memo = {}\n"
        "    def forward(self, x):\n        return self._run(x)\n"
        "    def _run(self, x):\n        key = (x.data_ptr(), x.shape)\n        if key in self.memo:\n"
        "            return self.memo[key]\n        y = x * 2\n        self.memo[key] = y\n        return y\n",
        # id()-keyed store into a module-level dict
        "_SEEN = {}\nclass ModelNew:\n    def forward(self, x):\n        out = x + 1\n"
        "        _SEEN.setdefault(id(x), out)\n        return _SEEN[id(x)]\n",
        # shape-keyed cache whose stored value forward returns
        "class ModelNew:\n    def __init__(self):\n        self.saved = {}\n    def forward(self, x):\n"
        "        key = tuple(x.shape)\n        if key not in self.saved:\n            self.saved[key] = x * 2\n"
        "        return self.saved[key]\n",
        # a local alias of instance state is still instance state
        "class ModelNew:\n    def forward(self, x):\n        store = self.store\n"
        "        store[x.untyped_storage().data_ptr()] = x\n        return x\n",
    ],
)
def test_output_caches_are_caught(source):
    assert "output_cache" in rules(source)


@pytest.mark.parametrize(
    "source",
    [
        # a shape-keyed config table: forward never returns what it stored
        "class ModelNew:\n    def __init__(self):\n        self.cfg = {}\n    def forward(self, x):\n"
        "        M, K = x.shape\n        self.cfg[(M, K)] = 64\n        return x * self.cfg[(M, K)]\n",
        # a local dict dies with the call
        "class ModelNew:\n    def forward(self, x):\n        seen = {}\n        seen[x.data_ptr()] = x\n"
        "        return x\n",
        # a pre-transposed weight keyed on the weight's own pointer
        "class ModelNew:\n    def forward(self, x):\n        key = self.weight.data_ptr()\n"
        "        self.wt[key] = self.weight.t()\n        return x @ self.wt[key]\n",
        # slicing writes into a fresh output
        "import torch\nclass ModelNew:\n    def forward(self, x):\n        out = torch.empty_like(x)\n"
        "        out[: x.shape[0]] = x\n        return out\n",
    ],
)
def test_honest_state_is_not_an_output_cache(source):
    assert rules(source) == set()


# precision_downgrade -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ny = torch.ones(3).to(torch.float16)\n",
        "import torch\ny = torch.ones(3, dtype=torch.bfloat16)\n",
        "import torch\nD = torch.half\n",
        "import triton.language as tl\nx = tl.bfloat16\n",
        "from triton import language as lang\nx = lang.float16\n",
        "def f(x):\n    return x.half()\n",
        "def f(x):\n    return x.bfloat16()\n",
        "import torch\ntorch.set_float32_matmul_precision('high')\n",
        "import torch\nwith torch.autocast('cuda'):\n    pass\n",
        "from torch.cuda.amp import autocast\nwith autocast():\n    pass\n",
        "import triton.language as tl\ndef k(a, b):\n    return tl.dot(a, b, input_precision='tf32')\n",
        "import triton.language as tl\ndef k(a, b):\n    return tl.dot(a, b, allow_tf32=True)\n",
    ],
)
def test_precision_downgrade_on_fp32_references(source):
    assert rules(source) == {"precision_downgrade"}


def test_allow_tf32_is_a_precision_downgrade_not_a_patch():
    source = "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True\n"
    assert [(f.rule, f.line) for f in audit(source)] == [("precision_downgrade", 2), ("precision_downgrade", 3)]
    assert rules("import torch\ntorch.backends.cuda.matmul.allow_tf32 = False\n") == set()


@pytest.mark.parametrize("dtypes", [frozenset({"float16"}), frozenset({"float32", "bfloat16"}), frozenset()])
def test_half_precision_is_fine_unless_the_reference_is_fp32_only(dtypes):
    source = "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ny = torch.ones(3).half().to(torch.float16)\n"
    assert rules(source, dtypes) == set()


@pytest.mark.parametrize(
    "source",
    [
        "import triton.language as tl\ndef k(a, b, acc):\n    return tl.dot(a, b, acc)\n",
        "import triton.language as tl\ndef k(a, b):\n    return tl.dot(a, b, input_precision='ieee')\n",
        "import triton.language as tl\ndef k(a, b):\n    return tl.dot(a, b, input_precision='tf32x3')\n",
        "import torch\ntorch.set_float32_matmul_precision('highest')\nx = torch.ones(1, dtype=torch.float32)\n",
    ],
)
def test_exact_fp32_math_is_fine(source):
    assert rules(source) == set()


# cuda_persistence and side_stream ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "attr = 'accessPolicyWindow'\n",
        "def f(rt, s, a):\n    rt.cudaStreamSetAttribute(s, a)\n",
        "def f(rt):\n    return rt.cudaLimitPersistingL2CacheSize\n",
        "SRC = '''\nstream_attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;\n'''\n",
    ],
)
def test_l2_persistence_is_caught(source):
    assert rules(source) == {"cuda_persistence"}


def test_docstrings_are_not_evidence():
    source = '"""Avoids persisting state; no accessPolicyWindow here."""\ndef f():\n    """persisting"""\n'
    assert rules(source) == set()


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ns = torch.cuda.Stream()\n",
        "import torch\ndef f(s):\n    with torch.cuda.stream(s):\n        pass\n",
        "import torch\ndef f(s):\n    torch.cuda.set_stream(s)\n",
        "from torch.cuda import Stream as S\ns = S()\n",
    ],
)
def test_side_streams_are_caught(source):
    assert rules(source) == {"side_stream"}


def test_current_stream_is_fine():
    assert rules("import torch\ns = torch.cuda.current_stream()\ntorch.cuda.synchronize()\n") == set()


# the whole report --------------------------------------------------------------------------------------------------


def test_findings_are_sorted_by_line_and_deduplicated():
    source = "import torch\nimport threading\nexec('1'); exec('2')\ntorch.cuda.synchronize = print\n"
    findings = audit(source)
    assert [(f.rule, f.line) for f in findings] == [("banned_import", 2), ("dynamic_code", 3), ("monkey_patch", 4)]
    assert all(f.rule in RULES for f in findings)


def test_a_syntax_error_propagates():
    with pytest.raises(SyntaxError):
        audit_source("def f(:\n")


@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "fixtures" / "audit").glob("*.py")), ids=lambda p: p.name)
def test_honest_candidates_have_no_findings(path):
    assert audit_file(path, reference_dtypes=FP32) == ()


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("cheat_cache_by_shape.py", "output_cache"),
        ("cheat_compile.py", "delegation"),
        ("cheat_fallback.py", "fallback"),
        ("cheat_half_precision.py", "precision_downgrade"),
        ("cheat_inherits_model.py", "reference_model"),
        ("cheat_l2_persist.py", "banned_import cuda_persistence"),
        ("cheat_tf32_switch.py", "precision_downgrade"),
        ("cheat_lazy_tensor.py", "tensor_subclass"),
        ("cheat_side_stream.py", "side_stream"),
        ("cheat_thread.py", "banned_import introspection"),  # importlib.import_module("threading"): the name in a string too
        ("cheat_timer_patch.py", "monkey_patch"),
        ("softmax_ok.py", None),
        ("softmax_optional_import.py", None),
        ("leak_ancestor_environ.py", "banned_import dynamic_code"),  # pathlib: a module a kernel may not import
        ("leak_all_environ.py", "dynamic_code"),
        ("leak_config_file.py", "banned_import dynamic_code delegation"),  # numpy.fromfile: a file read, and numpy
        ("leak_dotenv.py", "banned_import dynamic_code introspection"),  # and __file__: where the judge put it
        ("escape_write.py", "banned_import dynamic_code introspection"),
    ],
)
def test_shared_candidate_fixtures(name, rule):
    path = ROOT / "tests" / "fixtures" / "candidates" / name
    assert {f.rule for f in audit_file(path, reference_dtypes=FP32)} == set(rule.split() if rule else ())


# the source's encoding and match class patterns (the third held-out red team's first two classes) ----------------

def test_a_coding_declaration_that_turns_a_comment_into_code_is_refused():
    """UTF-7 decodes `+AAo-` as a newline: the comment below is, to Python, a line `import sys`."""
    raw = b"# coding: utf-7\nimport torch\n# +AAo-import sys\n"
    assert any(isinstance(node, ast.Import) and node.names[0].name == "sys" for node in ast.walk(ast.parse(raw)))
    text = raw.decode("utf-8")
    found = audit_source(text)
    assert [(f.rule, f.line) for f in found] == [("dynamic_code", 1)], found
    assert "utf-7" in found[0].message and "UTF-8" in found[0].message


@pytest.mark.parametrize("declaration", ["# coding: latin-1", "# -*- coding: cp1252 -*-", "#!/usr/bin/env python\n# vim: set fileencoding=utf_16 :",
                                         "# coding=no-such-codec"])
def test_every_encoding_but_utf8_is_refused(declaration):
    assert "dynamic_code" in rules(declaration + "\nimport torch\n")


@pytest.mark.parametrize("declaration", ["# coding: utf-8", "# -*- coding: UTF8 -*-", "#!/usr/bin/env python\n# coding: utf_8",
                                         "import torch\n# coding: utf-7", "import torch\n\n# coding: utf-7", ""])
def test_utf8_declarations_and_late_mentions_are_fine(declaration):
    """A declaration counts on the first two lines only, and only before any code (what Python's tokenizer reads)."""
    assert rules(declaration + "\nimport torch\n") == set()


@pytest.mark.parametrize("pattern", ["object(__class__=found)", "object(__globals__=found)", "torch.Tensor(_base=found)",
                                     "tuple(found)", "object(real=found)"])
def test_a_class_pattern_is_refused(pattern):
    found = audit(f"""
        import torch
        def pick(x):
            match x:
                case {pattern}:
                    return found
                case _:
                    return None
        """)
    assert [f.rule for f in found] == ["introspection"] and found[0].line == 5, found


def test_a_mapping_pattern_is_refused():
    found = audit("""
        import torch
        def pick(namespace):
            match namespace:
                case {"block": block}:
                    return block
        """)
    assert [f.rule for f in found] == ["introspection"] and "mapping pattern" in found[0].message, found


def test_match_without_class_or_mapping_patterns_is_fine():
    assert rules("""
        import torch
        def pick(mode, shape):
            match mode:
                case "sum" | "mean":
                    return 1
            match shape:
                case [rows, cols]:
                    return rows * cols
                case _:
                    return 0
        """) == set()


# inside a @triton.jit body: Triton's language only (the third held-out red team's fifth class) -------------------

JIT_HEADER = """
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
"""


def jit_rules(body: str, prelude: str = "") -> list[tuple[str, str]]:
    source = JIT_HEADER + textwrap.dedent(prelude) + "\n@triton.jit\ndef kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):\n" + \
        textwrap.indent(textwrap.dedent(body), "    ")
    return [(f.rule, f.message.split(" inside")[0]) for f in audit_source(source)]


def test_the_interpreter_cheat_through_a_blocks_numpy_array_is_caught_as_the_judge_runs_it():
    found = audit_file(ROOT / "tests" / "fixtures" / "audit_allowlist" / "jit_numpy_on_handle.py")
    assert {f.rule for f in found} == {"introspection"} and all(".data" in f.message or ".handle" in f.message for f in found)


@pytest.mark.parametrize("body, expected", [
    ("x = tl.load(x_ptr)\ny = x.handle.data.sum()\n", ("introspection", "reads .")),
    ("x = tl.load(x_ptr)\ny = getattr(x, 'handle')\n", ("introspection", "reads .handle")),
    ("x = tl.load(x_ptr)\ntl.store(out_ptr, torch.exp(x))\n", ("delegation", "uses torch.exp")),
    ("x = tl.load(x_ptr)\ntl.store(out_ptr, host_helper(x))\n", ("delegation", "calls host_helper")),
    ("x = tl.load(x_ptr)\ntl.store(out_ptr, (lambda v: v)(x))\n", ("delegation", "defines a function or class")),
    ("x = tl.load(x_ptr)\ntl.store(out_ptr, x.__array__())\n", ("introspection", "reads .__array__")),
])
def test_a_jit_body_reaching_outside_triton_is_caught(body, expected):
    prelude = "def host_helper(v):\n    return v\n"
    found = jit_rules(body, prelude)
    assert any(rule == expected[0] and message.startswith(expected[1]) for rule, message in found), found


def test_honest_jit_bodies_are_left_alone():
    """What honest kernels write in their bodies: the language, libdevice, constexpr helpers, the builtins Triton
    compiles, the members of blocks and dtypes, other jitted functions (called, or handed to tl.reduce)."""
    prelude = """
        @triton.jit
        def combine(a, b):
            return a + b

        @triton.jit
        def two(x):
            return x * 2, x.to(tl.float32)
        """
    body = """
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        acc = tl.zeros([BLOCK], dtype=x_ptr.dtype.element_ty)
        for i in tl.static_range(2):
            acc += libdevice.exp(x) + tl.math.exp2(x)
        for i in range(0, triton.cdiv(n, BLOCK)):
            acc = tl.maximum(acc, x)
        doubled, wide = two(x)
        total = tl.reduce(acc, 0, combine) + tl.sum(doubled, axis=0) + max(BLOCK, 16) + len(acc.shape)
        if x.dtype.is_fp32() and isinstance(BLOCK, tl.constexpr):
            tl.store(out_ptr + offs, (acc + total + wide).to(out_ptr.dtype.element_ty), mask=mask)
        """
    assert jit_rules(body, prelude) == []


@pytest.mark.parametrize("source", ["#\x0c\n\x0c# coding: utf-7\nimport torch\n", "# x\x0c# coding: utf-7\nimport torch\n"])
def test_a_declaration_is_found_where_pythons_tokenizer_finds_it(source):
    """A form feed is a line break to str.splitlines, not to Python's tokenizer: the declaration is read by the
    tokenizer's own rule (a held-out red team of session 23 hid utf-7 behind one)."""
    assert "dynamic_code" in {f.rule for f in audit_source(source)}
