"""The captured computation as typed values: what `pipeline.expert.tape` recorded, decoded from its JSON.

Arguments keep their structure: a tensor is a `Ref` (an output of an earlier call), an `InputRef` (a forward
argument) or a `ParamRef` (a parameter or buffer by its dotted name); torch values that are not numbers are small
frozen wrappers that know how to be written back as Python source (`source_text`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str  # torch's name without the prefix: float32, float16, bfloat16, int64, bool
    stride: tuple[int, ...]
    offset: int = 0

    @property
    def numel(self) -> int:
        total = 1
        for size in self.shape:
            total *= size
        return total

    @property
    def contiguous(self) -> bool:
        return self.stride == contiguous_strides(self.shape) or self.numel <= 1


@dataclass(frozen=True)
class Ref:
    """Output `index` of tape call `call`."""

    call: int
    index: int = 0


@dataclass(frozen=True)
class InputRef:
    index: int


@dataclass(frozen=True)
class ParamRef:
    name: str  # dotted, as named_parameters()/named_buffers() give it: "net.0.weight"


@dataclass(frozen=True)
class UnknownTensor:
    """A tensor the forward used that is neither an input, a parameter, a buffer nor a recorded result."""

    meta: TensorMeta


@dataclass(frozen=True)
class DType:
    name: str


@dataclass(frozen=True)
class Device:
    name: str


@dataclass(frozen=True)
class Slice:
    start: Any
    stop: Any
    step: Any


@dataclass(frozen=True)
class Named:
    """A torch constant written by name, e.g. torch.contiguous_format."""

    name: str


@dataclass(frozen=True)
class Opaque:
    """A value that cannot be written back as source."""

    text: str


@dataclass(frozen=True)
class Call:
    fn: str  # "F.linear", "torch.softmax", "Tensor.view", ... ("?name" when it has no public name)
    args: tuple
    kwargs: tuple[tuple[str, Any], ...]
    outputs: tuple[TensorMeta, ...]
    returns_tuple: bool
    aten: tuple[str, ...]  # the aten ops it dispatched

    def kwarg(self, name: str, default: Any = None) -> Any:
        return dict(self.kwargs).get(name, default)


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # parameter or buffer
    meta: TensorMeta


@dataclass(frozen=True)
class Tape:
    """One forward of the problem's Model, call by call."""

    ran_on: str  # meta or cpu
    inputs: tuple  # TensorMeta, or the plain value of a non-tensor input
    init_inputs: tuple
    params: tuple[Param, ...]
    calls: tuple[Call, ...]
    output: Any  # a Ref / InputRef / ParamRef or a tuple of them
    ref_ops: tuple[str, ...]  # the reference's aten compute ops, as the judge's delegation check sees them
    problems: tuple[str, ...] = ()  # what the recording could not follow (in-place writes into views)

    def meta(self, value: Any) -> TensorMeta | None:
        """The layout of a tensor argument, None for anything else."""
        if isinstance(value, Ref):
            return self.calls[value.call].outputs[value.index]
        if isinstance(value, InputRef):
            item = self.inputs[value.index]
            return item if isinstance(item, TensorMeta) else None
        if isinstance(value, ParamRef):
            return next(p.meta for p in self.params if p.name == value.name)
        return None


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def tape_from_json(data: dict[str, Any]) -> Tape:
    """Decode the child's JSON (see pipeline.expert.tape)."""
    inputs = tuple(_meta(item["tensor"]) if "tensor" in item else decode(item["value"]) for item in data["inputs"])
    params = tuple(Param(p["name"], p["kind"], _meta(p["meta"])) for p in data["params"])
    calls = tuple(
        Call(c["fn"], tuple(decode(a) for a in c["args"]), tuple((k, decode(v)) for k, v in c["kwargs"].items()),
             tuple(_meta(m) for m in c["outputs"]), bool(c["tuple"]), tuple(c["aten"]))
        for c in data["calls"]
    )
    return Tape(data["ran_on"], inputs, tuple(decode(v) for v in data["init_inputs"]), params, calls, decode(data["output"]),
                tuple(data["ref_ops"]), tuple(data.get("problems", ())))


def _meta(data: dict[str, Any]) -> TensorMeta:
    return TensorMeta(tuple(data["shape"]), data["dtype"], tuple(data["stride"]), int(data.get("offset", 0)))


def decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    (key, inner), = value.items()
    if key == "t":
        return Ref(inner[0], inner[1])
    if key == "in":
        return InputRef(inner)
    if key == "p":
        return ParamRef(inner)
    if key in ("list", "tuple"):
        return tuple(decode(v) for v in inner)
    if key == "size":
        return tuple(inner)
    if key == "float":
        return float(inner)
    if key == "dtype":
        return DType(inner)
    if key == "device":
        return Device(inner)
    if key == "slice":
        return Slice(*(decode(v) for v in inner))
    if key == "ellipsis":
        return Ellipsis
    if key == "memory_format":
        return Named(f"torch.{inner}")
    if key == "tensor?":
        return UnknownTensor(_meta(inner))
    return Opaque(str(inner))
