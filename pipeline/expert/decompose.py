"""From the recorded torch calls to the IR: composite operators become the few primitive kinds a kernel template
understands (softmax = max, exp, sum, div; layer norm = two sums and pointwise work; cross entropy = a log-sum-exp
and a gather written as a masked sum), so that one fusion pass and one code generator serve them all.

A call this table does not know stays a `library` node (the host runs it exactly as the reference did), which is
how convolutions that have no template, pooling, scans and recurrent layers are kept, with the work around them
still fused. Every handler reproduces torch's semantics at the recorded shapes; `pipeline.expert.interpret` runs
the IR with torch to check each of them against the real module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pipeline.expert.graph import Call, InputRef, Opaque, ParamRef, Ref, Tape, UnknownTensor
from pipeline.expert.ir import FLOATS, Builder, Graph, V


class Unsupported(Exception):
    """A call the recording cannot be lowered through at all (not even as a library call)."""


def decompose(tape: Tape) -> Graph:
    """The IR of the recorded forward."""
    return Decomposer(tape).run()


# Positional parameter names per function (the recording keeps arguments as the caller passed them).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "F.gelu": ("input", "approximate"), "F.leaky_relu": ("input", "negative_slope", "inplace"),
    "F.elu": ("input", "alpha", "inplace"), "F.celu": ("input", "alpha", "inplace"), "F.selu": ("input", "inplace"),
    "F.hardtanh": ("input", "min_val", "max_val", "inplace"), "F.relu6": ("input", "inplace"),
    "F.softplus": ("input", "beta", "threshold"), "F.threshold": ("input", "threshold", "value", "inplace"),
    "clamp": ("input", "min", "max"), "binary": ("input", "other", "alpha"), "where": ("condition", "input", "other"),
    "F.softmax": ("input", "dim", "_stacklevel", "dtype"), "softmax": ("input", "dim", "dtype"),
    "F.layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "F.group_norm": ("input", "num_groups", "weight", "bias", "eps"),
    "F.batch_norm": ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
    "F.instance_norm": ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps"),
    "F.rms_norm": ("input", "normalized_shape", "weight", "eps"),
    "F.linear": ("input", "weight", "bias"), "addmm": ("input", "mat1", "mat2", "beta", "alpha"),
    "baddbmm": ("input", "batch1", "batch2", "beta", "alpha"),
    "conv2d": ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
    "sum": ("input", "dim", "keepdim", "dtype"), "amax": ("input", "dim", "keepdim"), "max": ("input", "dim", "keepdim"),
    "var": ("input", "dim", "unbiased", "keepdim"),
    "norm": ("input", "p", "dim", "keepdim"), "vector_norm": ("input", "ord", "dim", "keepdim"),
    "F.normalize": ("input", "p", "dim", "eps"), "F.cosine_similarity": ("x1", "x2", "dim", "eps"),
    "F.mse_loss": ("input", "target", "size_average", "reduce", "reduction", "weight"),
    "F.scaled_dot_product_attention": ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"),
    "F.triplet_margin_loss": ("anchor", "positive", "negative", "margin", "p", "eps", "swap", "size_average", "reduce", "reduction"),
    "F.l1_loss": ("input", "target", "size_average", "reduce", "reduction"),
    "F.smooth_l1_loss": ("input", "target", "size_average", "reduce", "reduction", "beta"),
    "F.huber_loss": ("input", "target", "reduction", "delta", "weight"),
    "F.cross_entropy": ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"),
    "F.nll_loss": ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction"),
    "F.kl_div": ("input", "target", "size_average", "reduce", "reduction", "log_target"),
    "F.binary_cross_entropy": ("input", "target", "weight", "size_average", "reduce", "reduction"),
    "F.binary_cross_entropy_with_logits": ("input", "target", "weight", "size_average", "reduce", "reduction", "pos_weight"),
    "F.dropout": ("input", "p", "training", "inplace"),
    "cumsum": ("input", "dim", "dtype"),
    "F.multi_head_attention_forward": (
        "query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias", "bias_k", "bias_v",
        "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training", "key_padding_mask", "need_weights",
        "attn_mask", "use_separate_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "static_k", "static_v",
        "average_attn_weights", "is_causal"),
    **{f"F.max_pool{d}d": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices") for d in (1, 2, 3)},
    **{f"F.avg_pool{d}d": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
       for d in (1, 2, 3)},
    **{f"F.adaptive_{kind}_pool{d}d": ("input", "output_size", "return_indices") for kind in ("avg", "max") for d in (1, 2, 3)},
}

UNARY = {
    "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log",
    "log2": "log2", "log1p": "log1p", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "neg": "neg", "negative": "neg",
    "__neg__": "neg", "erf": "erf", "sin": "sin", "cos": "cos", "reciprocal": "reciprocal", "square": "square",
    "sign": "sign", "floor": "floor", "ceil": "ceil", "silu": "silu", "mish": "mish", "hardsigmoid": "hardsigmoid",
    "hardswish": "hardswish", "logsigmoid": "logsigmoid", "softsign": "softsign", "tanhshrink": "tanhshrink",
    "logical_not": "logical_not", "__invert__": "logical_not",
}
BINARY = {
    "add": "add", "__add__": "add", "__radd__": "add", "__iadd__": "add", "sub": "sub", "subtract": "sub", "__sub__": "sub",
    "__isub__": "sub", "mul": "mul", "multiply": "mul", "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul",
    "div": "div", "divide": "div", "true_divide": "div", "__truediv__": "div", "__itruediv__": "div",
    "maximum": "maximum", "minimum": "minimum", "fmax": "maximum", "fmin": "minimum",
    "gt": "gt", "__gt__": "gt", "greater": "gt", "ge": "ge", "__ge__": "ge", "lt": "lt", "__lt__": "lt", "less": "lt",
    "le": "le", "__le__": "le", "eq": "eq", "__eq__": "eq", "ne": "ne", "__ne__": "ne",
    "logical_and": "logical_and", "__and__": "logical_and", "logical_or": "logical_or", "__or__": "logical_or",
    "xlogy": "xlogy",
}
REFLECTED = {"__rsub__": "sub", "rsub": "sub", "__rtruediv__": "div", "__rdiv__": "div"}
VIEWS = {
    "view", "reshape", "flatten", "unflatten", "permute", "transpose", "swapaxes", "t", "T", "mT", "unsqueeze", "squeeze",
    "expand", "expand_as", "contiguous", "select", "narrow", "chunk", "split", "unbind", "view_as", "reshape_as", "movedim",
}
IDENTITIES = {"detach", "clone", "alias"}


class Decomposer:
    def __init__(self, tape: Tape) -> None:
        self.tape, self.b = tape, Builder()
        self.values: dict[tuple[int, int], V] = {}
        self.params: dict[str, V] = {}
        self.inputs: dict[int, V] = {}
        self.flips: dict[int, tuple[V, tuple[int, ...]]] = {}  # a flip kept in torch: its input and axes (scans fold them)

    def run(self) -> Graph:
        for index, call in enumerate(self.tape.calls):
            outs = self.lower(call)
            for position, value in enumerate(outs):
                self.values[(index, position)] = value
        return self.b.freeze(self._output(self.tape.output))

    def _output(self, encoded: Any) -> Any:
        if isinstance(encoded, tuple):
            return tuple(self._output(e) for e in encoded)
        value = self.value(encoded)
        if not isinstance(value, V):
            raise Unsupported(f"the forward returns {encoded!r}, not a tensor")
        return value

    # arguments ----------------------------------------------------------------------------------------------------

    def value(self, arg: Any) -> Any:
        """A recorded argument as IR: tensors become V, tuples are resolved inside, other values stay."""
        if isinstance(arg, Ref):
            return self.values[(arg.call, arg.index)]
        if isinstance(arg, InputRef):
            if arg.index not in self.inputs:
                self.inputs[arg.index] = self.b.input(arg.index, self.tape.inputs[arg.index])
            return self.inputs[arg.index]
        if isinstance(arg, ParamRef):
            if arg.name not in self.params:
                self.params[arg.name] = self.b.param(arg.name, self.tape.meta(arg))
            return self.params[arg.name]
        if isinstance(arg, UnknownTensor):
            raise Unsupported("the forward uses a tensor that is neither an input, a parameter nor a buffer")
        if isinstance(arg, Opaque):
            raise Unsupported(f"an argument that cannot be written back as source: {arg.text}")
        if isinstance(arg, tuple):
            return tuple(self.value(a) for a in arg)
        return arg

    def bind(self, call: Call, signature: tuple[str, ...]) -> dict[str, Any]:
        bound = dict(zip(signature, call.args))
        bound.update(call.kwargs)
        return {name: self.value(v) for name, v in bound.items()}

    def shape(self, value: V) -> tuple[int, ...]:
        return self.b.node(value).shape

    # dispatch -----------------------------------------------------------------------------------------------------

    def lower(self, call: Call) -> list[V]:
        space, _, name = call.fn.rpartition(".")
        base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
        self.b.origin = base.strip("_")
        in_place = (name.endswith("_") and not name.endswith("__")) or name.startswith("__i")
        if in_place and call.args and isinstance(call.args[0], ParamRef):
            return self.library(call)  # a buffer updated in place (num_batches_tracked += 1): kept as a side effect
        handler = self._handler(call.fn, space, base)
        if handler is not None:
            try:
                result = handler(call, base)
            except NotLowered:
                result = None
            if result is not None:
                return result if isinstance(result, list) else [result]
        return self.library(call)

    def _handler(self, fn: str, space: str, base: str) -> Callable[[Call, str], Any] | None:
        specific = {
            "F.gelu": self.gelu, "F.leaky_relu": self.leaky_relu, "F.elu": self.elu, "F.celu": self.celu, "F.selu": self.selu,
            "F.hardtanh": self.hardtanh, "F.relu6": self.relu6, "F.softplus": self.softplus, "F.threshold": self.threshold,
            "F.layer_norm": self.layer_norm, "F.group_norm": self.group_norm, "F.batch_norm": self.batch_norm,
            "F.instance_norm": self.instance_norm, "F.rms_norm": self.rms_norm, "F.linear": self.linear,
            "F.normalize": self.normalize, "F.cosine_similarity": self.cosine_similarity, "F.mse_loss": self.mse_loss,
            "F.l1_loss": self.l1_loss, "F.smooth_l1_loss": self.smooth_l1_loss, "F.huber_loss": self.huber_loss,
            "F.cross_entropy": self.cross_entropy, "F.nll_loss": self.nll_loss, "F.kl_div": self.kl_div,
            "F.binary_cross_entropy": self.bce, "F.binary_cross_entropy_with_logits": self.bce_logits, "F.dropout": self.dropout,
            "F.softmax": self.softmax, "F.log_softmax": self.softmax, "F.conv2d": self.conv2d,
            "F.scaled_dot_product_attention": self.attention, "F.triplet_margin_loss": self.triplet_margin_loss,
            "F.multi_head_attention_forward": self.multi_head_attention,
            **{f"F.{kind}_pool{d}d": self.pool for kind in ("max", "avg", "adaptive_max", "adaptive_avg") for d in (1, 2, 3)},
        }
        if fn in specific:
            return specific[fn]
        if fn == "torch.linalg.vector_norm":  # before the namespace filter below, which would keep it in torch
            return self.norm
        if space not in ("torch", "Tensor", "F", "torch.special"):
            return None
        table: dict[str, Callable[[Call, str], Any]] = {
            **{k: self.unary for k in UNARY}, **{k: self.binary for k in BINARY}, **{k: self.reflected for k in REFLECTED},
            **{k: self.view for k in VIEWS}, **{k: self.identity for k in IDENTITIES},
            "clamp": self.clamp, "clip": self.clamp, "clamp_min": self.clamp, "clamp_max": self.clamp, "where": self.where,
            "masked_fill": self.masked_fill, "triu": self.triangle, "tril": self.triangle, "einsum": self.einsum,
            "pow": self.pow, "__pow__": self.pow, "__rpow__": self.rpow, "float_power": self.pow,
            "softmax": self.softmax, "log_softmax": self.softmax, "logsumexp": self.logsumexp,
            "sum": self.sum, "mean": self.sum, "amax": self.amax, "amin": self.amax, "max": self.max, "min": self.max,
            "argmax": self.argmax, "argmin": self.argmax, "var": self.var, "std": self.var, "norm": self.norm,
            "cumsum": self.cumulative, "cumprod": self.cumulative, "flip": self.flip,
            "matmul": self.matmul, "__matmul__": self.matmul, "mm": self.matmul, "bmm": self.matmul,
            "addmm": self.addmm, "baddbmm": self.addmm, "conv2d": self.conv2d, "__getitem__": self.getitem,
            "to": self.to, "type_as": self.type_as, "float": self.cast_method, "half": self.cast_method,
            "bfloat16": self.cast_method, "double": self.cast_method,
            "selu": self.selu, "celu": self.celu,  # torch.selu(x), torch.celu(x, alpha) (KernelBench's 27_SELU_ calls torch.selu)
        }
        if space == "F" and base in ("relu", "sigmoid", "tanh", "silu", "mish", "hardsigmoid", "hardswish", "logsigmoid",
                                      "softsign", "tanhshrink"):
            return self.unary
        return table.get(base) if space != "F" else None

    # library ------------------------------------------------------------------------------------------------------

    def library(self, call: Call) -> list[V]:
        """The call kept as torch runs it; one node per output."""
        if call.fn.startswith("?"):
            raise Unsupported(f"a call with no public name: {call.fn[1:]}")
        args = tuple(self.value(a) for a in call.args)
        kwargs = tuple((k, self.value(v)) for k, v in call.kwargs)
        first = call.args[0] if call.args else None
        name = call.fn.rpartition(".")[2]
        side_effect = ((name.endswith("_") and not name.endswith("__")) or name.startswith("__i")) and isinstance(first, ParamRef)
        return [self.b.add("library", call.fn, (args, kwargs), meta.shape, meta.dtype, meta.stride, index=i,
                           tuple_output=call.returns_tuple, side_effect=side_effect, aten=call.aten)
                for i, meta in enumerate(call.outputs)]

    def view(self, call: Call, base: str) -> list[V]:
        args = tuple(self.value(a) for a in call.args)
        kwargs = tuple((k, self.value(v)) for k, v in call.kwargs)
        if any(isinstance(a, V) for a in args[1:]) and base not in ("expand_as", "view_as", "reshape_as"):
            return self.library(call)
        return [self.b.add("view", call.fn, (args, kwargs), meta.shape, meta.dtype, meta.stride, index=i, tuple_output=call.returns_tuple)
                for i, meta in enumerate(call.outputs)]

    def getitem(self, call: Call, base: str) -> list[V]:
        index = call.args[1]
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, (Ref, InputRef, ParamRef, UnknownTensor)) or isinstance(i, tuple) for i in items):
            return self.library(call)  # advanced indexing computes a gather: torch keeps it
        return self.view(call, base)

    def identity(self, call: Call, base: str) -> V:
        return self.value(call.args[0])

    # pointwise ----------------------------------------------------------------------------------------------------

    def _tensor(self, value: Any) -> V:
        if not isinstance(value, V):
            raise NotLowered()
        return value

    def unary(self, call: Call, base: str) -> V:
        x = self._tensor(self.value(call.args[0]))
        return self.b.pw(UNARY[base], x)

    def binary(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["binary"])
        x, y = a["input"], a["other"]
        if not isinstance(x, V) and not isinstance(y, V):
            raise NotLowered()
        alpha = a.get("alpha", 1)
        attrs = {"alpha": alpha} if alpha != 1 and BINARY[base] in ("add", "sub") else {}
        if a.get("rounding_mode") is not None:
            raise NotLowered()
        return self.b.pw(BINARY[base], x, y, **attrs)

    def reflected(self, call: Call, base: str) -> V:
        x, y = self.value(call.args[0]), self.value(call.args[1])
        return self.b.pw(REFLECTED[base], y, x)

    def where(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["where"])
        return self.b.pw("where", a["condition"], a["input"], a["other"])

    def masked_fill(self, call: Call, base: str) -> V:
        """`x.masked_fill(mask, value)` is where(mask, value, x), in x's dtype (attention's causal mask)."""
        a = self.bind(call, ("input", "mask", "value"))
        x, mask, value = self._tensor(a["input"]), self._tensor(a["mask"]), a["value"]
        dtype = self.b.node(x).dtype
        if not isinstance(value, (V, int, float)) or isinstance(value, bool) or dtype not in FLOATS:
            raise NotLowered()
        if isinstance(value, V) and self.b.node(value).dtype != dtype:
            value = self.b.pw("cast", value, to=dtype)
        return self.b.pw("where", mask, value, x, dtype=dtype)

    def triangle(self, call: Call, base: str) -> V:
        """`torch.triu(x, diagonal)` keeps the elements whose column minus row is at least `diagonal`, `tril` those
        at most it, over the last two dimensions: a where on their indices (iota), zero elsewhere, in x's dtype."""
        a = self.bind(call, ("input", "diagonal"))
        x, diagonal = self._tensor(a["input"]), a.get("diagonal", 0)
        shape, dtype = self.shape(x), self.b.node(x).dtype
        if len(shape) < 2 or type(diagonal) is not int:
            raise NotLowered()
        offset = self.b.pw("sub", self.b.iota(shape, len(shape) - 1), self.b.iota(shape, len(shape) - 2))
        keep = self.b.pw("ge" if base == "triu" else "le", offset, diagonal)
        return self.b.pw("where", keep, x, 0.0, dtype=dtype)

    def einsum(self, call: Call, base: str) -> V:
        """`torch.einsum` of two operands that contracts the last index of the first with the first of a 2-D second,
        every other index kept in order ("bijl,lk->bijk"): a matmul over the first operand's leading dimensions."""
        equation, *operands = call.args
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = list(operands[0])
        if not isinstance(equation, str) or len(operands) != 2 or "->" not in equation or "." in equation:
            raise NotLowered()
        inputs, out = equation.replace(" ", "").split("->")
        first, _, second = inputs.partition(",")
        if len(second) != 2 or not first or first[-1] != second[0] or out != first[:-1] + second[1] or len(set(out)) != len(out) or second[0] in out:
            raise NotLowered()
        x, y = self._tensor(self.value(operands[0])), self._tensor(self.value(operands[1]))
        return self._finish(call, self._matmul(x, y))

    def clamp(self, call: Call, base: str) -> V:
        x = self._tensor(self.value(call.args[0]))
        if base in ("clamp_min", "clamp_max"):  # the bound is the second argument
            bound = self.value(call.args[1] if len(call.args) > 1 else call.kwargs[0][1])
            lo, hi = (bound, None) if base == "clamp_min" else (None, bound)
        else:
            a = self.bind(call, SIGNATURES["clamp"])
            lo, hi = a.get("min"), a.get("max")
        if isinstance(lo, V) or isinstance(hi, V):
            out = x
            if lo is not None:
                out = self.b.pw("maximum", out, lo)
            if hi is not None:
                out = self.b.pw("minimum", out, hi)
            return out
        return self.b.pw("clamp", x, lo=lo, hi=hi)

    def pow(self, call: Call, base: str) -> V:
        x, e = self.value(call.args[0]), self.value(call.args[1] if len(call.args) > 1 else call.kwarg("exponent"))
        if isinstance(e, V):
            return self.b.pw("pow_tensor", self._tensor(x), e)
        if not isinstance(x, V):
            raise NotLowered()
        return self.b.pw("pow", x, exponent=float(e))

    def rpow(self, call: Call, base: str) -> V:
        x, c = self.value(call.args[0]), self.value(call.args[1])
        if not isinstance(c, (int, float)) or c <= 0:
            raise NotLowered()
        return self.b.pw("rpow", self._tensor(x), base=float(c))

    def gelu(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.gelu"])
        return self.b.pw("gelu_tanh" if a.get("approximate", "none") == "tanh" else "gelu", self._tensor(a["input"]))

    def leaky_relu(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.leaky_relu"])
        return self.b.pw("leaky_relu", self._tensor(a["input"]), slope=float(a.get("negative_slope", 0.01)))

    def elu(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.elu"])
        return self.b.pw("elu", self._tensor(a["input"]), alpha=float(a.get("alpha", 1.0)))

    def celu(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.celu"])
        return self.b.pw("celu", self._tensor(a["input"]), alpha=float(a.get("alpha", 1.0)))

    def selu(self, call: Call, base: str) -> V:
        x = self._tensor(self.value(call.args[0]))
        return self.b.pw("elu", x, alpha=1.6732632423543772, scale=1.0507009873554805)

    def hardtanh(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.hardtanh"])
        return self.b.pw("clamp", self._tensor(a["input"]), lo=float(a.get("min_val", -1.0)), hi=float(a.get("max_val", 1.0)))

    def relu6(self, call: Call, base: str) -> V:
        return self.b.pw("clamp", self._tensor(self.value(call.args[0])), lo=0.0, hi=6.0)

    def softplus(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.softplus"])
        return self.b.pw("softplus", self._tensor(a["input"]), beta=float(a.get("beta", 1.0)), threshold=float(a.get("threshold", 20.0)))

    def threshold(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.threshold"])
        return self.b.pw("threshold", self._tensor(a["input"]), threshold=float(a["threshold"]), value=float(a["value"]))

    def dropout(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.dropout"])
        if a.get("p", 0.5) == 0 or not a.get("training", True):
            return a["input"]
        raise NotLowered()  # live dropout is random: torch keeps it

    def to(self, call: Call, base: str) -> V:
        x = self._tensor(self.value(call.args[0]))
        target = next((a for a in (*call.args[1:], *dict(call.kwargs).values()) if type(a).__name__ == "DType"), None)
        if target is None or target.name == self.b.node(x).dtype:
            return x
        return self.b.pw("cast", x, to=target.name)

    def type_as(self, call: Call, base: str) -> V:
        x, other = self._tensor(self.value(call.args[0])), self._tensor(self.value(call.args[1]))
        dtype = self.b.node(other).dtype
        return x if dtype == self.b.node(x).dtype else self.b.pw("cast", x, to=dtype)

    def cast_method(self, call: Call, base: str) -> V:
        x = self._tensor(self.value(call.args[0]))
        dtype = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}[base]
        return x if dtype == self.b.node(x).dtype else self.b.pw("cast", x, to=dtype)

    # reductions ---------------------------------------------------------------------------------------------------

    def _axes(self, x: V, dim: Any) -> tuple[int, ...]:
        rank = len(self.shape(x))
        if dim is None or dim == ():
            return tuple(range(rank))
        dims = dim if isinstance(dim, tuple) else (dim,)
        return tuple(sorted(d % rank for d in dims))

    def _finish(self, call: Call, value: V, output: int = 0) -> V:
        """A keepdim result viewed as the recorded output's shape (a non-keepdim reduction drops its axes)."""
        return self.b.reshaped(value, call.outputs[output].shape)

    def _count(self, x: V, axes: tuple[int, ...]) -> int:
        shape = self.shape(x)
        return math.prod(shape[a] for a in axes)

    def _float_input(self, x: V, dtype: Any) -> V:
        if dtype is not None and type(dtype).__name__ == "DType" and dtype.name != self.b.node(x).dtype:
            return self.b.pw("cast", x, to=dtype.name)
        return x

    def sum(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["sum"])
        x = self._float_input(self._tensor(a["input"]), a.get("dtype"))
        axes = self._axes(x, a.get("dim"))
        total = self.b.reduce("sum", x, axes)
        if base == "mean":
            total = self.b.pw("div", total, float(self._count(x, axes)))
        return self._finish(call, total)

    def amax(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["amax"])
        x = self._tensor(a["input"])
        return self._finish(call, self.b.reduce("max" if base == "amax" else "min", x, self._axes(x, a.get("dim", ()))))

    def max(self, call: Call, base: str) -> list[V] | V:
        x = self._tensor(self.value(call.args[0]))
        second = self.value(call.args[1]) if len(call.args) > 1 else None
        if isinstance(second, V):  # torch.max(a, b) is elementwise
            return self.b.pw("maximum" if base == "max" else "minimum", x, second)
        a = self.bind(call, SIGNATURES["max"])
        if a.get("dim") is None:
            return self._finish(call, self.b.reduce(base, x, self._axes(x, None)))
        axes = self._axes(x, a["dim"])
        values = self._finish(call, self.b.reduce(base, x, axes), 0)
        indices = self._finish(call, self.b.reduce("arg" + base, x, axes), 1)
        return [values, indices]

    def argmax(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["amax"])
        x = self._tensor(a["input"])
        if a.get("dim") is None:
            if len(self.shape(x)) > 1:
                x = self.b.view(x, "reshape", (-1,))  # torch's argmax without dim indexes the flattened tensor
            return self._finish(call, self.b.reduce(base, x, (0,)))
        return self._finish(call, self.b.reduce(base, x, self._axes(x, a["dim"])))

    def cumulative(self, call: Call, base: str) -> V:
        """cumsum and cumprod of floating values along one dimension (integers, whose result torch widens, stay)."""
        a = self.bind(call, SIGNATURES["cumsum"])
        x = self._float_input(self._tensor(a["input"]), a.get("dtype"))
        if self.b.node(x).dtype not in FLOATS or not self.shape(x) or not isinstance(a.get("dim"), int):
            raise NotLowered()
        return self.b.scan(base.removeprefix("cum"), x, a["dim"])

    def flip(self, call: Call, base: str) -> list[V] | V:
        """A flip kept in torch, except the last of flip, scan, flip along one axis: that is the scan backwards
        (KernelBench's reverse cumsum), with no copy."""
        x = self.value(call.args[0])
        dims = self.value(call.args[1]) if len(call.args) == 2 else tuple(self.value(a) for a in call.args[1:])
        dims = dict(call.kwargs).get("dims", dims)
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        if isinstance(x, V) and all(isinstance(d, int) for d in dims) and len(self.shape(x)):
            axes = tuple(sorted({d % len(self.shape(x)) for d in dims}))
            scan = self.b.node(x)
            if scan.op == "scan" and not scan.attr("reverse") and axes == (scan.attr("axis"),):
                inner = self.flips.get(scan.args[0].id)
                if inner is not None and inner[1] == axes:
                    return self.b.scan(scan.fn, inner[0], axes[0], reverse=True)
            kept = self.library(call)
            self.flips[kept[0].id] = (x, axes)
            return kept
        return self.library(call)

    def logsumexp(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["amax"])
        x = self._tensor(a["input"])
        axes = self._axes(x, a["dim"])
        peak = self.b.reduce("max", x, axes)
        total = self.b.reduce("sum", self.b.pw("exp", self.b.pw("sub", x, peak)), axes)
        return self._finish(call, self.b.pw("add", self.b.pw("log", total), peak))

    def moments(self, x: V, axes: tuple[int, ...]) -> tuple[V, V]:
        """(mean, sum of squared deviations) over `axes`: the two-pass form, exact as torch's norms compute it."""
        n = float(self._count(x, axes))
        mean = self.b.pw("div", self.b.reduce("sum", x, axes), n)
        centred = self.b.pw("sub", x, mean)
        return mean, self.b.reduce("sum", self.b.pw("mul", centred, centred), axes)

    def var(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["var"])
        x = self._tensor(a["input"])
        correction = a.get("correction")
        if correction is None:
            correction = 1 if a.get("unbiased", True) else 0
        axes = self._axes(x, a.get("dim"))
        _, squares = self.moments(x, axes)
        out = self.b.pw("div", squares, float(max(self._count(x, axes) - correction, 0)))
        if base == "std":
            out = self.b.pw("sqrt", out)
        return self._finish(call, out)

    def norm(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["vector_norm" if call.fn.endswith("vector_norm") else "norm"])
        x = self._tensor(a["input"])
        order = a.get("ord", a.get("p", 2))
        if order not in (1, 2, 2.0, 1.0, "fro"):
            raise NotLowered()
        axes = self._axes(x, a.get("dim"))
        if order in (1, 1.0):
            return self._finish(call, self.b.reduce("sum", self.b.pw("abs", x), axes))
        return self._finish(call, self.b.pw("sqrt", self.b.reduce("sum", self.b.pw("mul", x, x), axes)))

    # normalization ------------------------------------------------------------------------------------------------

    def softmax(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.softmax" if call.fn.startswith("F.") else "softmax"])
        x = self._float_input(self._tensor(a["input"]), a.get("dtype"))
        dim = a.get("dim")
        if dim is None:
            raise NotLowered()
        axes = self._axes(x, dim)
        shifted = self.b.pw("sub", x, self.b.reduce("max", x, axes))
        exps = self.b.pw("exp", shifted)
        total = self.b.reduce("sum", exps, axes)
        if base == "log_softmax":
            return self.b.pw("sub", shifted, self.b.pw("log", total))
        return self.b.pw("div", exps, total)

    def attention(self, call: Call, base: str) -> V:
        """`F.scaled_dot_product_attention` without dropout: softmax(q k^T * scale, masked) v, as hand-written
        attention lowers (the scores a matmul with its epilogue, the softmax a row kernel, then the value product).
        A boolean mask keeps where True, a float mask is added; `is_causal` keeps key positions up to the query's
        (top-left aligned, as torch's)."""
        a = self.bind(call, SIGNATURES["F.scaled_dot_product_attention"])
        q, k, v = (self._tensor(a[name]) for name in ("query", "key", "value"))
        mask, causal = a.get("attn_mask"), a.get("is_causal", False)
        if a.get("dropout_p", 0.0) != 0 or a.get("enable_gqa", False) or (mask is not None and causal) or not isinstance(causal, bool):
            raise NotLowered()
        qs, ks = self.shape(q), self.shape(k)
        if len(qs) < 2 or len(ks) != len(qs) or self.b.node(q).dtype not in FLOATS:
            raise NotLowered()
        scale = a.get("scale")
        scale = 1.0 / math.sqrt(qs[-1]) if scale is None else scale
        if not isinstance(scale, (int, float)):
            raise NotLowered()
        scores = self.b.pw("mul", self._matmul(q, self.b.view(k, "transpose", -2, -1)), float(scale))
        shape = self.shape(scores)
        if causal:
            offset = self.b.pw("sub", self.b.iota(shape, len(shape) - 1), self.b.iota(shape, len(shape) - 2))
            scores = self.b.pw("where", self.b.pw("le", offset, 0), scores, float("-inf"))
        elif isinstance(mask, V):
            if self.b.node(mask).dtype == "bool":
                scores = self.b.pw("where", mask, scores, float("-inf"))
            else:
                scores = self.b.pw("add", scores, mask)
        elif mask is not None:
            raise NotLowered()
        axes = (len(shape) - 1,)
        exps = self.b.pw("exp", self.b.pw("sub", scores, self.b.reduce("max", scores, axes)))
        weights = self.b.pw("div", exps, self.b.reduce("sum", exps, axes))
        return self._finish(call, self._matmul(weights, v))

    def multi_head_attention(self, call: Call, base: str) -> list[V]:
        """nn.MultiheadAttention's forward (sequence first, no masks, no dropout, no extra keys), as torch computes it
        where the weights are asked for: the three input projections (GEMMs on the packed or separate weights), each
        head's query scaled by 1/sqrt(head size) then multiplied by its keys, the softmax, the value product, the
        heads side by side (a copy, as torch's `.contiguous()`), the output projection; the weights averaged over the
        heads where they are returned."""
        a = self.bind(call, SIGNATURES["F.multi_head_attention_forward"])
        q, k, v = (self._tensor(a[name]) for name in ("query", "key", "value"))
        heads = a.get("num_heads")
        unsupported = ("bias_k", "bias_v", "key_padding_mask", "attn_mask", "static_k", "static_v")
        if (any(a.get(name) is not None for name in unsupported) or a.get("add_zero_attn") or a.get("is_causal")
                or (a.get("dropout_p", 0.0) and a.get("training", True)) or not isinstance(heads, int)
                or len(self.shape(q)) != 3 or self.b.node(q).dtype not in FLOATS):
            raise NotLowered()
        length, batch, embed = self.shape(q)
        keys, size = self.shape(k)[0], embed // heads
        if a.get("use_separate_proj_weight"):
            weights = [self._tensor(a[name]) for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight")]
        else:
            packed = self._tensor(a["in_proj_weight"])
            weights = [self.b.view(packed, "narrow", 0, i * embed, embed) for i in range(3)]
        bias = a.get("in_proj_bias")
        biases = [self.b.view(bias, "narrow", 0, i * embed, embed) if isinstance(bias, V) else None for i in range(3)]

        def project(x: V, i: int, rows: int) -> V:  # (rows, batch, embed) -> (batch * heads, rows, size)
            y = self._matmul(x, self.b.view(weights[i], "t"))
            y = self.b.pw("add", y, biases[i]) if biases[i] is not None else y
            return self.b.view(self.b.reshaped(y, (rows, batch * heads, size)), "transpose", 0, 1)

        qh, kh, vh = project(q, 0, length), project(k, 1, keys), project(v, 2, keys)
        scores = self._matmul(self.b.pw("mul", qh, math.sqrt(1.0 / size)), self.b.view(kh, "transpose", -2, -1))
        exps = self.b.pw("exp", self.b.pw("sub", scores, self.b.reduce("max", scores, (2,))))
        probs = self.b.pw("div", exps, self.b.reduce("sum", exps, (2,)))
        side_by_side = self.b.view(self.b.view(self._matmul(probs, vh), "transpose", 0, 1), "reshape", (length * batch, embed))
        out = self._matmul(side_by_side, self.b.view(self._tensor(a["out_proj_weight"]), "t"))
        if isinstance(a.get("out_proj_bias"), V):
            out = self.b.pw("add", out, a["out_proj_bias"])
        results = [self.b.reshaped(out, (length, batch, embed))]
        if len(call.outputs) > 1:
            per_head = self.b.reshaped(probs, (batch, heads, length, keys))
            if a.get("average_attn_weights", True):
                per_head = self.b.pw("div", self.b.reduce("sum", per_head, (1,)), float(heads))
            results.append(self.b.reshaped(per_head, call.outputs[1].shape))
        return results

    def _affine(self, y: V, weight: Any, bias: Any, shape: tuple[int, ...] | None = None) -> V:
        if isinstance(weight, V):
            y = self.b.pw("mul", y, self.b.reshaped(weight, shape) if shape else weight)
        if isinstance(bias, V):
            y = self.b.pw("add", y, self.b.reshaped(bias, shape) if shape else bias)
        return y

    def _normalized(self, x: V, axes: tuple[int, ...], eps: float) -> tuple[V, V, V]:
        """((x - mean) * rsqrt(var + eps), mean, biased var) over `axes`."""
        mean, squares = self.moments(x, axes)
        var = self.b.pw("div", squares, float(self._count(x, axes)))
        rstd = self.b.pw("rsqrt", self.b.pw("add", var, float(eps)))
        return self.b.pw("mul", self.b.pw("sub", x, mean), rstd), mean, var

    def layer_norm(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.layer_norm"])
        x = self._tensor(a["input"])
        rank, count = len(self.shape(x)), len(a["normalized_shape"])
        y, _, _ = self._normalized(x, tuple(range(rank - count, rank)), a.get("eps", 1e-5))
        return self._affine(y, a.get("weight"), a.get("bias"))

    def rms_norm(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.rms_norm"])
        x = self._tensor(a["input"])
        rank, count = len(self.shape(x)), len(a["normalized_shape"])
        axes = tuple(range(rank - count, rank))
        eps = a.get("eps")
        if eps is None:
            import torch

            eps = torch.finfo(getattr(torch, self.b.node(x).dtype)).eps
        mean_square = self.b.pw("div", self.b.reduce("sum", self.b.pw("mul", x, x), axes), float(self._count(x, axes)))
        y = self.b.pw("mul", x, self.b.pw("rsqrt", self.b.pw("add", mean_square, float(eps))))
        return self._affine(y, a.get("weight"), None)

    def group_norm(self, call: Call, base: str) -> V:
        """Statistics over [N, G, C/G, spatial]; the affine parameters viewed as [1, G, C/G, 1] so they broadcast
        in that same domain, and the result viewed back: one fused kernel, no index arithmetic across the view."""
        a = self.bind(call, SIGNATURES["F.group_norm"])
        x = self._tensor(a["input"])
        shape = self.shape(x)
        groups = int(a["num_groups"])
        n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
        grouped = (n, groups, c // groups, spatial)
        xg = self.b.reshaped(x, grouped)
        y, _, _ = self._normalized(xg, (2, 3), a.get("eps", 1e-5))
        y = self._affine(y, a.get("weight"), a.get("bias"), (1, groups, c // groups, 1))
        return self.b.reshaped(y, shape)

    def instance_norm(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.instance_norm"])
        if not a.get("use_input_stats", True) or isinstance(a.get("running_mean"), V):
            raise NotLowered()
        x = self._tensor(a["input"])
        shape = self.shape(x)
        flat = self.b.reshaped(x, (shape[0], shape[1], math.prod(shape[2:])))
        y, _, _ = self._normalized(flat, (2,), a.get("eps", 1e-5))
        y = self._affine(y, a.get("weight"), a.get("bias"), (1, shape[1], 1))
        return self.b.reshaped(y, shape)

    def batch_norm(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.batch_norm"])
        x = self._tensor(a["input"])
        shape = self.shape(x)
        stat_shape = tuple(s if i == 1 else 1 for i, s in enumerate(shape))
        eps = a.get("eps", 1e-5)
        running_mean, running_var = a.get("running_mean"), a.get("running_var")
        if not a.get("training", False):
            if not isinstance(running_mean, V):
                raise NotLowered()
            rstd = self.b.pw("rsqrt", self.b.pw("add", self.b.reshaped(running_var, stat_shape), float(eps)))
            y = self.b.pw("mul", self.b.pw("sub", x, self.b.reshaped(running_mean, stat_shape)), rstd)
            return self._affine(y, a.get("weight"), a.get("bias"), stat_shape)
        axes = tuple(i for i in range(len(shape)) if i != 1)
        y, mean, var = self._normalized(x, axes, eps)
        momentum = a.get("momentum")
        if isinstance(running_mean, V) and isinstance(momentum, (int, float)):
            self._update_running(running_mean, running_var, mean, var, float(momentum), self._count(x, axes), stat_shape)
        return self._affine(y, a.get("weight"), a.get("bias"), stat_shape)

    def _update_running(self, running_mean: V, running_var: V, mean: V, var: V, momentum: float, count: int,
                        stat_shape: tuple[int, ...]) -> None:
        """What F.batch_norm writes into its buffers in training mode: a momentum average, the variance unbiased."""
        from pipeline.expert.ir import Effect

        keep = 1.0 - momentum
        new_mean = self.b.pw("add", self.b.pw("mul", self.b.reshaped(running_mean, stat_shape), keep), self.b.pw("mul", mean, momentum))
        unbiased = self.b.pw("mul", var, count / max(count - 1, 1))
        new_var = self.b.pw("add", self.b.pw("mul", self.b.reshaped(running_var, stat_shape), keep), self.b.pw("mul", unbiased, momentum))
        for buffer, value in ((running_mean, new_mean), (running_var, new_var)):
            self.b.effects.append(Effect(self.b.node(buffer).attr("name"), value.id))

    def normalize(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.normalize"])
        if a.get("p", 2.0) not in (2, 2.0):
            raise NotLowered()
        x = self._tensor(a["input"])
        axes = self._axes(x, a.get("dim", 1))
        length = self.b.pw("sqrt", self.b.reduce("sum", self.b.pw("mul", x, x), axes))
        return self.b.pw("div", x, self.b.pw("clamp", length, lo=float(a.get("eps", 1e-12)), hi=None))

    def cosine_similarity(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.cosine_similarity"])
        x1, x2 = self._tensor(a["x1"]), self._tensor(a["x2"])
        if self.shape(x1) != self.shape(x2):
            raise NotLowered()
        axes = self._axes(x1, a.get("dim", 1))
        dot = self.b.reduce("sum", self.b.pw("mul", x1, x2), axes)
        squares = [self.b.reduce("sum", self.b.pw("mul", t, t), axes) for t in (x1, x2)]
        eps = float(a.get("eps", 1e-8))
        denominator = self.b.pw("sqrt", self.b.pw("clamp", self.b.pw("mul", *squares), lo=eps * eps, hi=None))
        return self._finish(call, self.b.pw("div", dot, denominator))

    # losses -------------------------------------------------------------------------------------------------------

    def _reduce_loss(self, call: Call, loss: V, reduction: str) -> V:
        if reduction == "none":
            return self._finish(call, loss)
        axes = tuple(range(len(self.shape(loss))))
        total = self.b.reduce("sum", loss, axes)
        if reduction == "mean":
            total = self.b.pw("div", total, float(self._count(loss, axes)))
        elif reduction == "batchmean":
            total = self.b.pw("div", total, float(self.shape(loss)[0]))
        elif reduction != "sum":
            raise NotLowered()
        return self._finish(call, total)

    def _legacy(self, a: dict[str, Any]) -> str:
        if a.get("size_average") is not None or a.get("reduce") is not None:
            raise NotLowered()
        return a.get("reduction", "mean")

    def triplet_margin_loss(self, call: Call, base: str) -> V:
        """max(d(a, p) - d(a, n) + margin, 0), d the p-norm of x1 - x2 + eps along the last dimension (with `swap`,
        d(a, n) is the smaller of it and d(p, n)), reduced as asked."""
        a = self.bind(call, SIGNATURES["F.triplet_margin_loss"])
        anchor, positive, negative = (self._tensor(a[name]) for name in ("anchor", "positive", "negative"))
        norm, eps, margin = a.get("p", 2), a.get("eps", 1e-6), a.get("margin", 1.0)
        if not all(isinstance(x, (int, float)) for x in (norm, eps, margin)) or norm <= 0 or len(self.shape(anchor)) < 1:
            raise NotLowered()
        axes = (len(self.shape(anchor)) - 1,)

        def distance(x1: V, x2: V) -> V:
            d = self.b.pw("abs", self.b.pw("add", self.b.pw("sub", x1, x2), float(eps)))
            if norm == 2:
                return self.b.pw("sqrt", self.b.reduce("sum", self.b.pw("mul", d, d), axes))
            if norm == 1:
                return self.b.reduce("sum", d, axes)
            return self.b.pw("pow", self.b.reduce("sum", self.b.pw("pow", d, exponent=float(norm)), axes), exponent=1.0 / norm)

        positive_d, negative_d = distance(anchor, positive), distance(anchor, negative)
        if a.get("swap", False):
            negative_d = self.b.pw("minimum", negative_d, distance(positive, negative))
        loss = self.b.pw("clamp", self.b.pw("add", self.b.pw("sub", positive_d, negative_d), float(margin)), lo=0.0, hi=None)
        return self._reduce_loss(call, loss, self._legacy(a))

    def mse_loss(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.mse_loss"])
        d = self.b.pw("sub", a["input"], a["target"])
        return self._reduce_loss(call, self.b.pw("mul", d, d), self._legacy(a))

    def l1_loss(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.l1_loss"])
        return self._reduce_loss(call, self.b.pw("abs", self.b.pw("sub", a["input"], a["target"])), self._legacy(a))

    def smooth_l1_loss(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.smooth_l1_loss"])
        beta = float(a.get("beta", 1.0))
        d = self.b.pw("abs", self.b.pw("sub", a["input"], a["target"]))
        if beta == 0:
            return self._reduce_loss(call, d, self._legacy(a))
        quadratic = self.b.pw("div", self.b.pw("mul", self.b.pw("mul", d, d), 0.5), beta)
        loss = self.b.pw("where", self.b.pw("lt", d, beta), quadratic, self.b.pw("sub", d, 0.5 * beta))
        return self._reduce_loss(call, loss, self._legacy(a))

    def huber_loss(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.huber_loss"])
        if a.get("weight") is not None:
            raise NotLowered()
        delta = float(a.get("delta", 1.0))
        d = self.b.pw("abs", self.b.pw("sub", a["input"], a["target"]))
        linear = self.b.pw("mul", self.b.pw("sub", d, 0.5 * delta), delta)
        loss = self.b.pw("where", self.b.pw("lt", d, delta), self.b.pw("mul", self.b.pw("mul", d, d), 0.5), linear)
        return self._reduce_loss(call, loss, a.get("reduction", "mean"))

    def _picked(self, values: V, target: V) -> V:
        """values[i, target[i], ...] along axis 1, written as a masked sum over that axis (a row reduction)."""
        shape = self.shape(values)
        index = self.b.reshaped(target, (shape[0], 1, *shape[2:]))
        hit = self.b.pw("eq", self.b.iota(shape, 1), index)
        return self.b.reduce("sum", self.b.pw("where", hit, values, 0.0), (1,))

    def _class_loss(self, call: Call, a: dict[str, Any], logp_picked: V, target: V) -> V:
        """Per-sample losses with ignore_index honoured, then the reduction (a mean over the samples kept)."""
        ignore = int(a.get("ignore_index", -100))
        shape = self.shape(logp_picked)
        index = self.b.reshaped(target, shape)
        keep = self.b.pw("ne", index, ignore)
        loss = self.b.pw("where", keep, self.b.pw("neg", logp_picked), 0.0)
        reduction = self._legacy(a)
        if reduction == "none":
            return self._finish(call, loss)
        axes = tuple(range(len(shape)))
        total = self.b.reduce("sum", loss, axes)
        if reduction == "mean":
            total = self.b.pw("div", total, self.b.reduce("sum", self.b.pw("cast", keep, to="float32"), axes))
        return self._finish(call, total)

    def cross_entropy(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.cross_entropy"])
        x, target = self._tensor(a["input"]), self._tensor(a["target"])
        if a.get("weight") is not None or a.get("label_smoothing", 0.0) or self.b.node(target).dtype in FLOATS or len(self.shape(x)) < 2:
            raise NotLowered()
        peak = self.b.reduce("max", x, (1,))
        total = self.b.reduce("sum", self.b.pw("exp", self.b.pw("sub", x, peak)), (1,))
        lse = self.b.pw("add", self.b.pw("log", total), peak)
        return self._class_loss(call, a, self.b.pw("sub", self._picked(x, target), lse), target)

    def nll_loss(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.nll_loss"])
        x, target = self._tensor(a["input"]), self._tensor(a["target"])
        if a.get("weight") is not None or len(self.shape(x)) < 2:
            raise NotLowered()
        return self._class_loss(call, a, self._picked(x, target), target)

    def kl_div(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.kl_div"])
        x, t = a["input"], a["target"]
        if a.get("log_target", False):
            loss = self.b.pw("mul", self.b.pw("exp", t), self.b.pw("sub", t, x))
        else:
            loss = self.b.pw("sub", self.b.pw("xlogy", t, t), self.b.pw("mul", t, x))
        return self._reduce_loss(call, loss, self._legacy(a))

    def bce(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.binary_cross_entropy"])
        if a.get("weight") is not None:
            raise NotLowered()
        p, t = a["input"], a["target"]
        log_p = self.b.pw("clamp", self.b.pw("log", p), lo=-100.0, hi=None)  # torch clamps the logs at -100
        log_q = self.b.pw("clamp", self.b.pw("log", self.b.pw("sub", 1.0, p)), lo=-100.0, hi=None)
        total = self.b.pw("add", self.b.pw("mul", t, log_p), self.b.pw("mul", self.b.pw("sub", 1.0, t), log_q))
        return self._reduce_loss(call, self.b.pw("neg", total), self._legacy(a))

    def bce_logits(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.binary_cross_entropy_with_logits"])
        if a.get("weight") is not None or a.get("pos_weight") is not None:
            raise NotLowered()
        x, t = a["input"], a["target"]
        soft = self.b.pw("log1p", self.b.pw("exp", self.b.pw("neg", self.b.pw("abs", x))))
        loss = self.b.pw("add", self.b.pw("sub", self.b.pw("relu", x), self.b.pw("mul", x, t)), soft)
        return self._reduce_loss(call, loss, self._legacy(a))

    # contractions -------------------------------------------------------------------------------------------------

    def _matmul(self, x: V, y: V) -> V:
        xs, ys = self.shape(x), self.shape(y)
        if len(xs) < 2 or len(ys) < 2:
            raise NotLowered()
        if xs[-1] != ys[-2]:
            raise Unsupported(f"matmul of {xs} and {ys}")
        from pipeline.expert.ir import broadcast_shape

        batch = broadcast_shape(xs[:-2], ys[:-2])
        dtype = self.b.node(x).dtype
        return self.b.add("matmul", "matmul", (x, y), (*batch, xs[-2], ys[-1]), dtype)

    def matmul(self, call: Call, base: str) -> V:
        x, y = self._tensor(self.value(call.args[0])), self._tensor(self.value(call.args[1]))
        xs, ys = self.shape(x), self.shape(y)
        if len(xs) == 1:
            x = self.b.view(x, "unsqueeze", 0)
        if len(ys) == 1:
            y = self.b.view(y, "unsqueeze", 1)
        return self._finish(call, self._matmul(x, y))

    def linear(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["F.linear"])
        x, w = self._tensor(a["input"]), self._tensor(a["weight"])
        if len(self.shape(w)) != 2 or len(self.shape(x)) < 2:
            raise NotLowered()
        out = self._matmul(x, self.b.view(w, "t"))
        if isinstance(a.get("bias"), V):
            out = self.b.pw("add", out, a["bias"])
        return out

    def addmm(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["addmm" if base == "addmm" else "baddbmm"])
        m1, m2 = (a["mat1"], a["mat2"]) if base == "addmm" else (a["batch1"], a["batch2"])
        product = self._matmul(self._tensor(m1), self._tensor(m2))
        alpha, beta = a.get("alpha", 1), a.get("beta", 1)
        if alpha != 1:
            product = self.b.pw("mul", product, alpha)
        if beta == 0:
            return product
        bias = a["input"] if beta == 1 else self.b.pw("mul", a["input"], beta)
        return self.b.pw("add", product, bias)

    # pooling ------------------------------------------------------------------------------------------------------

    def pool(self, call: Call, base: str) -> V:
        """Pooling whose windows tile the input (stride = kernel, no padding or dilation; adaptive pooling whose output
        size divides the input's): the input cut to whole windows and viewed with each window on axes of its own,
        reduced over them (max, or a sum over the window's size). Overlapping or padded windows stay library calls."""
        dims = int(base[-2])
        a = self.bind(call, SIGNATURES[call.fn])
        x = self._tensor(a["input"])
        shape = self.shape(x)
        if a.get("return_indices") or len(shape) < dims + 1:
            raise NotLowered()
        spatial = shape[-dims:]
        if base.startswith("adaptive"):
            wanted = _per_dim(a["output_size"], dims)
            out = tuple(s if o is None else int(o) for s, o in zip(spatial, wanted))
            if any(o < 1 or s % o for s, o in zip(spatial, out)):
                raise NotLowered()
            kernel = tuple(s // o for s, o in zip(spatial, out))
        else:
            kernel = _per_dim(a["kernel_size"], dims)
            stride = _per_dim(a.get("stride") or kernel, dims)
            padding, dilation = _per_dim(a.get("padding", 0), dims), _per_dim(a.get("dilation", 1), dims)
            if (stride != kernel or any(padding) or set(dilation) != {1}
                    or a.get("ceil_mode") and any(s % k for s, k in zip(spatial, kernel))):
                return self._windows(call, base, x, kernel, stride, padding, dilation)
            out = tuple(s // k for s, k in zip(spatial, kernel))
        if any(o < 1 for o in out):
            raise NotLowered()
        lead = len(shape) - dims
        for axis, (o, k) in enumerate(zip(out, kernel)):
            if o * k != spatial[axis]:  # floor mode: the incomplete window at the end is dropped
                x = self.b.view(x, "narrow", lead + axis, 0, o * k)
        windows = self.b.view(x, "reshape", (*shape[:lead], *(n for o, k in zip(out, kernel) for n in (o, k))))
        axes = tuple(lead + 2 * i + 1 for i in range(dims))
        if "max" in base:
            pooled = self.b.reduce("max", windows, axes)
        else:
            divisor = a.get("divisor_override") or math.prod(kernel)
            pooled = self.b.pw("div", self.b.reduce("sum", windows, axes), float(divisor))
        return self._finish(call, pooled)

    def _windows(self, call: Call, base: str, x: V, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple) -> V:
        """Overlapping, padded or dilated windows: a `window` node holds every window's elements on axes of its own
        (out of the input: -inf for max, 0 for average, as the padding counts), reduced over them. Windows that
        ceil mode lets start in the padding, and averages that leave the padding out of the count, stay library calls."""
        a = self.bind(call, SIGNATURES[call.fn])
        shape = self.shape(x)
        dims = len(kernel)
        lead, spatial = shape[:-dims], shape[-dims:]
        out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, s, p, d in zip(spatial, kernel, stride, padding, dilation))
        if tuple(call.outputs[0].shape[-dims:]) != out or any(o < 1 for o in out):
            raise NotLowered()  # ceil mode added a window
        if "avg" in base and any(padding) and not a.get("count_include_pad", True):
            raise NotLowered()
        fill = float("-inf") if "max" in base else 0.0
        windows = self.b.add("window", "window", (x,), (*lead, *out, *kernel), self.b.node(x).dtype, kernel=tuple(kernel),
                             stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), fill=fill)
        axes = tuple(range(len(lead) + dims, len(lead) + 2 * dims))
        if "max" in base:
            return self._finish(call, self.b.reduce("max", windows, axes))
        divisor = a.get("divisor_override") or math.prod(kernel)
        return self._finish(call, self.b.pw("div", self.b.reduce("sum", windows, axes), float(divisor)))

    def conv2d(self, call: Call, base: str) -> V:
        a = self.bind(call, SIGNATURES["conv2d"])
        x, w = self._tensor(a["input"]), self._tensor(a["weight"])
        out = call.outputs[0]
        padding = a.get("padding", 0)
        if isinstance(padding, str):
            raise NotLowered()  # "same"/"valid": torch keeps it
        pair = lambda v: tuple(v) if isinstance(v, tuple) else (int(v), int(v))  # noqa: E731
        conv = self.b.add("conv", "conv2d", (x, w), out.shape, out.dtype, stride=pair(a.get("stride", 1)),
                          padding=pair(padding), dilation=pair(a.get("dilation", 1)), groups=int(a.get("groups", 1)))
        bias = a.get("bias")
        if isinstance(bias, V):
            conv = self.b.pw("add", conv, self.b.reshaped(bias, (1, out.shape[1], 1, 1)))
        return conv


class NotLowered(Exception):
    """A handler's arguments fall outside what it lowers; the call stays a library call."""


def _per_dim(value: Any, dims: int) -> tuple[Any, ...]:
    """A pooling argument given once or per spatial dimension, as one value per dimension."""
    if isinstance(value, (tuple, list)):
        return tuple(value) if len(value) == dims else tuple(value) * dims if len(value) == 1 else tuple(value)
    return (value,) * dims
