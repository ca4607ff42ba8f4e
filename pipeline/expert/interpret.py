"""The IR run with torch: what a graph means, node by node. Decompositions and algebraic rewrites are checked with
it against the real module (tests), before any kernel is written."""

from __future__ import annotations

from typing import Any

from pipeline.expert.ir import Graph, Node, V
from pipeline.expert.pointwise import torch_reference


def resolve(fn: str) -> Any:
    """The callable a recorded name denotes ("F.softmax", "torch.cumsum", "Tensor.view" as an unbound method)."""
    import torch
    import torch.nn.functional as F

    space, _, name = fn.rpartition(".")
    roots = {"F": F, "torch": torch, "Tensor": torch.Tensor, "torch.special": torch.special, "torch.linalg": torch.linalg,
             "torch.fft": torch.fft}
    return getattr(roots[space], name)


def replay(fn: str, args: tuple, kwargs: dict) -> Any:
    """Call a recorded function the way the recording saw it called (properties such as Tensor.T included)."""
    if fn.startswith("Tensor."):
        name = fn.removeprefix("Tensor.")
        attribute = getattr(args[0], name)
        return attribute(*args[1:], **kwargs) if callable(attribute) else attribute
    return resolve(fn)(*args, **kwargs)


def run(graph: Graph, inputs: list[Any], params: dict[str, Any]) -> Any:
    """The graph's outputs for these forward inputs and named parameters/buffers (effects written into them)."""
    env: dict[int, Any] = {}
    for node in graph.nodes:
        env[node.id] = _node(node, env, inputs, params, graph)
    for effect in graph.effects:
        target = params[effect.param]
        target.copy_(env[effect.value].reshape(target.shape))
    return _structure(graph.outputs, env)


def _structure(outputs: Any, env: dict[int, Any]) -> Any:
    if isinstance(outputs, int):
        return env[outputs]
    return tuple(_structure(o, env) for o in outputs)


def _arg(value: Any, env: dict[int, Any]) -> Any:
    import torch

    from pipeline.expert.graph import Device, DType, Named, Slice

    if isinstance(value, V):
        return env[value.id]
    if isinstance(value, tuple):
        return tuple(_arg(v, env) for v in value)
    if isinstance(value, Slice):
        return slice(_arg(value.start, env), _arg(value.stop, env), _arg(value.step, env))
    if isinstance(value, DType):
        return getattr(torch, value.name)
    if isinstance(value, Device):
        return torch.device("cpu")
    if isinstance(value, Named):
        return getattr(torch, value.name.removeprefix("torch."))
    return value


def _node(node: Node, env: dict[int, Any], inputs: list[Any], params: dict[str, Any], graph: Graph) -> Any:
    import torch
    import torch.nn.functional as F

    if node.op == "input":
        return inputs[node.attr("index")]
    if node.op == "param":
        return params[node.attr("name")].clone()  # effects write the real buffer only at the end
    if node.op == "pointwise":
        return torch_reference(node.fn, [_arg(a, env) for a in node.args], dict(node.attrs))
    if node.op == "iota":
        axis = node.attr("axis")
        shape = [1] * len(node.shape)
        shape[axis] = node.shape[axis]
        return torch.arange(node.shape[axis], dtype=torch.int32).view(shape).expand(node.shape)
    if node.op == "reduce":
        return _reduce(node, env[node.args[0].id])
    if node.op == "matmul":
        return torch.matmul(env[node.args[0].id], env[node.args[1].id])
    if node.op == "conv":
        return F.conv2d(env[node.args[0].id], env[node.args[1].id], None, node.attr("stride"), node.attr("padding"),
                        node.attr("dilation"), node.attr("groups"))
    if node.op == "window":
        return windows(env[node.args[0].id], dict(node.attrs))
    if node.op == "scan":
        x, axis = env[node.args[0].id], node.attr("axis")
        scan = torch.cumsum if node.fn == "sum" else torch.cumprod
        return scan(x.flip(axis), axis).flip(axis) if node.attr("reverse") else scan(x, axis)
    if node.op in ("view", "library"):
        args, kwargs = node.args
        out = replay(node.fn, _arg(args, env), dict(_arg(kwargs, env)))
        return out[node.attr("index")] if node.attr("tuple_output") else out
    raise ValueError(f"unknown node kind {node.op}")


def windows(x: Any, attrs: dict[str, Any]) -> Any:
    """Every pooling window of `x` (the last len(kernel) axes), its elements on trailing axes of their own."""
    import torch.nn.functional as F

    kernel, stride, padding, dilation = (attrs[k] for k in ("kernel", "stride", "padding", "dilation"))
    dims = len(kernel)
    pads = [p for pad in reversed(padding) for p in (pad, pad)]
    x = F.pad(x, pads, value=attrs["fill"]) if any(padding) else x
    lead = x.dim() - dims
    for j, (k, s, d) in enumerate(zip(kernel, stride, dilation)):
        x = x.unfold(lead + j, d * (k - 1) + 1, s)[..., ::d]
    return x


def _reduce(node: Node, x: Any) -> Any:
    axes = node.attr("axes")
    kind = node.fn
    if kind == "sum":
        return x.sum(dim=axes, keepdim=True)
    if kind in ("max", "min"):
        return (x.amax if kind == "max" else x.amin)(dim=axes, keepdim=True)
    (axis,) = axes
    return (x.argmax if kind == "argmax" else x.argmin)(dim=axis, keepdim=True)
