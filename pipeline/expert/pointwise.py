"""Elementwise functions: how each is written in Triton (in fp32 registers), what dtype it yields, and how torch
computes it (the IR's reference semantics, used to check decompositions and rewrites).

Triton expressions avoid what the CPU interpreter lacks (libdevice, inline asm): tanh is written through exp in a
small helper, erf is `tl.math.erf`, powers with small integer exponents are products.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Helper @triton.jit functions an expression may call; emitted once into a candidate that uses them.
HELPERS = {
    "_tanh": '''@triton.jit
def _tanh(x):
    # tanh through exp of a non-positive argument: no overflow at either tail, ~1e-7 absolute error near 0.
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)
''',
}


@dataclass(frozen=True)
class Pointwise:
    name: str
    arity: int
    triton: Callable[..., str]  # (operand expressions..., **attrs) -> expression
    result: str = "float"  # float (promoted), bool, same (as the first operand), int64
    helpers: tuple[str, ...] = ()


def _lit(value: Any) -> str:
    """A Python scalar as a Triton literal."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        if math.isnan(value):
            return 'float("nan")'
        return repr(value)
    return repr(value)


def operand(value: Any) -> str:
    return _lit(value) if not isinstance(value, str) else value


def _pow(a: str, exponent: Any) -> str:
    e = float(exponent)
    if e == 0:
        return f"({a} * 0.0 + 1.0)"
    if e == 0.5:
        return f"tl.sqrt({a})"
    if e == -0.5:
        return f"tl.rsqrt({a})"
    if e.is_integer() and 1 <= abs(e) <= 8:
        product = " * ".join([a] * int(abs(e)))
        return f"({product})" if e > 0 else f"(1.0 / ({product}))"
    return f"tl.exp({_lit(e)} * tl.log({a}))"  # NaN for negative bases, as torch gives for non-integer exponents


def _clamp(a: str, lo: Any, hi: Any) -> str:
    text = a
    if lo is not None:
        text = f"tl.maximum({text}, {_lit(float(lo))})"
    if hi is not None:
        text = f"tl.minimum({text}, {_lit(float(hi))})"
    return text


def _softplus(a: str, beta: float = 1.0, threshold: float = 20.0) -> str:
    scaled = f"({a} * {_lit(float(beta))})" if beta != 1 else a
    soft = f"(tl.log(1.0 + tl.exp({scaled})) / {_lit(float(beta))})" if beta != 1 else f"tl.log(1.0 + tl.exp({scaled}))"
    return f"tl.where({scaled} > {_lit(float(threshold))}, {a}, {soft})"


def _elu(a: str, alpha: float = 1.0, scale: float = 1.0) -> str:
    neg = f"{_lit(float(alpha))} * (tl.exp({a}) - 1.0)"
    body = f"tl.where({a} > 0, {a}, {neg})"
    return body if scale == 1.0 else f"({_lit(float(scale))} * {body})"


SQRT1_2 = 0.7071067811865476
SQRT2_PI = 0.7978845608028654

TABLE: dict[str, Pointwise] = {p.name: p for p in (
    Pointwise("identity", 1, lambda a: a, "same"),
    Pointwise("add", 2, lambda a, b, alpha=1: f"({a} + {b})" if alpha == 1 else f"({a} + {b} * {_lit(alpha)})"),
    Pointwise("sub", 2, lambda a, b, alpha=1: f"({a} - {b})" if alpha == 1 else f"({a} - {b} * {_lit(alpha)})"),
    Pointwise("mul", 2, lambda a, b: f"({a} * {b})"),
    Pointwise("div", 2, lambda a, b: f"({a} / {b})", "true_div"),
    Pointwise("neg", 1, lambda a: f"(-{a})", "same"),
    Pointwise("maximum", 2, lambda a, b: f"tl.maximum({a}, {b})"),
    Pointwise("minimum", 2, lambda a, b: f"tl.minimum({a}, {b})"),
    Pointwise("where", 3, lambda c, a, b: f"tl.where({c}, {a}, {b})", "where"),
    Pointwise("gt", 2, lambda a, b: f"({a} > {b})", "bool"),
    Pointwise("ge", 2, lambda a, b: f"({a} >= {b})", "bool"),
    Pointwise("lt", 2, lambda a, b: f"({a} < {b})", "bool"),
    Pointwise("le", 2, lambda a, b: f"({a} <= {b})", "bool"),
    Pointwise("eq", 2, lambda a, b: f"({a} == {b})", "bool"),
    Pointwise("ne", 2, lambda a, b: f"({a} != {b})", "bool"),
    Pointwise("logical_not", 1, lambda a: f"({a} == 0)", "bool"),
    Pointwise("logical_and", 2, lambda a, b: f"(({a} != 0) & ({b} != 0))", "bool"),
    Pointwise("logical_or", 2, lambda a, b: f"(({a} != 0) | ({b} != 0))", "bool"),
    Pointwise("abs", 1, lambda a: f"tl.abs({a})", "same"),
    Pointwise("relu", 1, lambda a: f"tl.maximum({a}, 0.0)", "same"),
    Pointwise("sigmoid", 1, lambda a: f"tl.sigmoid({a})", "real"),
    Pointwise("tanh", 1, lambda a: f"_tanh({a})", "real", ("_tanh",)),
    Pointwise("exp", 1, lambda a: f"tl.exp({a})", "real"),
    Pointwise("exp2", 1, lambda a: f"tl.exp2({a})", "real"),
    Pointwise("expm1", 1, lambda a: f"(tl.exp({a}) - 1.0)", "real"),
    Pointwise("log", 1, lambda a: f"tl.log({a})", "real"),
    Pointwise("log2", 1, lambda a: f"tl.log2({a})", "real"),
    Pointwise("log1p", 1, lambda a: f"tl.log(1.0 + {a})", "real"),
    Pointwise("sqrt", 1, lambda a: f"tl.sqrt({a})", "real"),
    Pointwise("rsqrt", 1, lambda a: f"tl.rsqrt({a})", "real"),
    Pointwise("reciprocal", 1, lambda a: f"(1.0 / {a})", "real"),
    Pointwise("square", 1, lambda a: f"({a} * {a})", "same"),
    Pointwise("sin", 1, lambda a: f"tl.sin({a})", "real"),
    Pointwise("cos", 1, lambda a: f"tl.cos({a})", "real"),
    Pointwise("erf", 1, lambda a: f"tl.math.erf({a})", "real"),
    Pointwise("floor", 1, lambda a: f"tl.floor({a})", "same"),
    Pointwise("ceil", 1, lambda a: f"tl.ceil({a})", "same"),
    Pointwise("sign", 1, lambda a: f"tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0))", "same"),
    Pointwise("pow", 1, lambda a, exponent: _pow(a, exponent), "real"),
    Pointwise("rpow", 1, lambda a, base: f"tl.exp({a} * {_lit(math.log(base))})", "real"),
    Pointwise("pow_tensor", 2, lambda a, b: f"tl.exp({b} * tl.log({a}))", "real"),
    Pointwise("clamp", 1, lambda a, lo=None, hi=None: _clamp(a, lo, hi), "same"),
    Pointwise("gelu", 1, lambda a: f"(0.5 * {a} * (1.0 + tl.math.erf({a} * {SQRT1_2})))", "real"),
    Pointwise("gelu_tanh", 1, lambda a: f"(0.5 * {a} * (1.0 + _tanh({SQRT2_PI} * ({a} + 0.044715 * {a} * {a} * {a}))))", "real", ("_tanh",)),
    Pointwise("silu", 1, lambda a: f"({a} * tl.sigmoid({a}))", "real"),
    Pointwise("mish", 1, lambda a: f"({a} * _tanh({_softplus(a)}))", "real", ("_tanh",)),
    Pointwise("softplus", 1, _softplus, "real"),
    Pointwise("elu", 1, _elu, "real"),
    Pointwise("celu", 1, lambda a, alpha=1.0: f"(tl.maximum({a}, 0.0) + tl.minimum(0.0, {_lit(float(alpha))} * (tl.exp({a} / {_lit(float(alpha))}) - 1.0)))", "real"),
    Pointwise("leaky_relu", 1, lambda a, slope=0.01: f"tl.where({a} > 0, {a}, {a} * {_lit(float(slope))})", "real"),
    Pointwise("hardsigmoid", 1, lambda a: _clamp(f"({a} / 6.0 + 0.5)", 0.0, 1.0), "real"),
    Pointwise("hardswish", 1, lambda a: f"({a} * {_clamp(f'({a} + 3.0)', 0.0, 6.0)} / 6.0)", "real"),
    Pointwise("logsigmoid", 1, lambda a: f"(tl.minimum({a}, 0.0) - tl.log(1.0 + tl.exp(-tl.abs({a}))))", "real"),
    Pointwise("softsign", 1, lambda a: f"({a} / (1.0 + tl.abs({a})))", "real"),
    Pointwise("tanhshrink", 1, lambda a: f"({a} - _tanh({a}))", "real", ("_tanh",)),
    Pointwise("threshold", 1, lambda a, threshold, value: f"tl.where({a} > {_lit(float(threshold))}, {a}, {_lit(float(value))})", "same"),
    Pointwise("xlogy", 2, lambda a, b: f"tl.where({a} == 0, 0.0, {a} * tl.log({b}))", "real"),
    Pointwise("cast", 1, lambda a, to: a, "cast"),
)}


def result_dtype(fn: str, dtypes: list[str], scalars: list[Any], attrs: dict[str, Any]) -> str:
    """torch's dtype for the result of `fn` on tensors of `dtypes` and Python `scalars`."""
    from pipeline.expert.ir import FLOATS, promote

    rule = TABLE[fn].result
    if rule == "bool":
        return "bool"
    if rule == "cast":
        return attrs["to"]
    if rule == "where":
        return promote(dtypes[1:] or dtypes, scalars)
    promoted = promote(dtypes, scalars)
    if rule == "same":
        return dtypes[0] if fn != "clamp" else promoted
    if rule in ("real", "true_div") and promoted not in FLOATS:
        return "float32"
    return promoted


def triton_expression(fn: str, operands: list[str], attrs: dict[str, Any]) -> str:
    return TABLE[fn].triton(*operands, **attrs)


def torch_reference(fn: str, operands: list[Any], attrs: dict[str, Any]) -> Any:
    """What torch computes for `fn` (the IR's meaning; used by pipeline.expert.interpret)."""
    import torch
    import torch.nn.functional as F

    a = operands[0]
    b = operands[1] if len(operands) > 1 else None
    simple = {
        "identity": lambda: a, "neg": lambda: -a, "abs": lambda: torch.abs(a), "relu": lambda: torch.relu(a),
        "sigmoid": lambda: torch.sigmoid(a), "tanh": lambda: torch.tanh(a), "exp": lambda: torch.exp(a),
        "exp2": lambda: torch.exp2(a), "expm1": lambda: torch.expm1(a), "log": lambda: torch.log(a), "log2": lambda: torch.log2(a),
        "log1p": lambda: torch.log1p(a), "sqrt": lambda: torch.sqrt(a), "rsqrt": lambda: torch.rsqrt(a),
        "reciprocal": lambda: torch.reciprocal(a), "square": lambda: a * a, "sin": lambda: torch.sin(a), "cos": lambda: torch.cos(a),
        "erf": lambda: torch.erf(a), "floor": lambda: torch.floor(a), "ceil": lambda: torch.ceil(a), "sign": lambda: torch.sign(a),
        "gelu": lambda: F.gelu(a), "gelu_tanh": lambda: F.gelu(a, approximate="tanh"), "silu": lambda: F.silu(a),
        "mish": lambda: F.mish(a), "hardsigmoid": lambda: F.hardsigmoid(a), "hardswish": lambda: F.hardswish(a),
        "logsigmoid": lambda: F.logsigmoid(a), "softsign": lambda: F.softsign(a), "tanhshrink": lambda: F.tanhshrink(a),
        "logical_not": lambda: torch.logical_not(a),
    }
    if fn in simple:
        return simple[fn]()
    binary = {
        "add": lambda: torch.add(a, b, alpha=attrs.get("alpha", 1)), "sub": lambda: torch.sub(a, b, alpha=attrs.get("alpha", 1)),
        "mul": lambda: a * b, "div": lambda: torch.true_divide(a, b), "maximum": lambda: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
        "minimum": lambda: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)), "gt": lambda: a > b, "ge": lambda: a >= b,
        "lt": lambda: a < b, "le": lambda: a <= b, "eq": lambda: a == b, "ne": lambda: a != b,
        "logical_and": lambda: torch.logical_and(torch.as_tensor(a), torch.as_tensor(b)),
        "logical_or": lambda: torch.logical_or(torch.as_tensor(a), torch.as_tensor(b)),
        "xlogy": lambda: torch.xlogy(a, b), "pow_tensor": lambda: torch.pow(a, b),
    }
    if fn in binary:
        return binary[fn]()
    if fn == "where":
        return torch.where(a, operands[1], operands[2])
    if fn == "pow":
        return torch.pow(a, attrs["exponent"])
    if fn == "rpow":
        return torch.pow(attrs["base"], a)
    if fn == "clamp":
        return torch.clamp(a, attrs.get("lo"), attrs.get("hi"))
    if fn == "softplus":
        return F.softplus(a, attrs.get("beta", 1.0), attrs.get("threshold", 20.0))
    if fn == "elu":
        return attrs.get("scale", 1.0) * F.elu(a, attrs.get("alpha", 1.0))
    if fn == "celu":
        return F.celu(a, attrs.get("alpha", 1.0))
    if fn == "leaky_relu":
        return F.leaky_relu(a, attrs.get("slope", 0.01))
    if fn == "threshold":
        return F.threshold(a, attrs["threshold"], attrs["value"])
    if fn == "cast":
        return a.to(getattr(torch, attrs["to"]))
    raise KeyError(fn)
