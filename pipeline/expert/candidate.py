"""A whole candidate file from a schedule: the record line, the kernels with their launchers, and `ModelNew`, whose
`__init__` is the problem's own (same parameters, same order, same seeded values) and whose `forward` runs the
schedule's steps in order."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.expert.fusion import HostStep, Kernel, Schedule
from pipeline.expert.host import call_source, conv_source, literal, matmul_source, model_parts, param_path, variable
from pipeline.expert.ir import Graph, Node
from pipeline.expert.options import Options
from pipeline.expert.pointwise import HELPERS
from pipeline.expert.record import Record
from pipeline.expert.rowkernel import Emitted, RowKernel

IMPORTS = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport triton\nimport triton.language as tl\n"

# The kernels are written for the recorded shapes, strides and dtypes (sizes and strides are launch constants): a
# drop-in ModelNew refuses any other tensor with one clear error, never a wrong answer or an out-of-bounds read.
SHAPE_GUARD = '''def _specialised_to(name, value, shape, stride, dtype):
    """This ModelNew's kernels were written for these sizes, strides and dtype: another tensor is refused."""
    if tuple(value.shape) != shape or tuple(value.stride()) != stride or value.dtype != dtype:
        raise ValueError(f"egg: this ModelNew is specialised to {name} of shape {list(shape)}, strides {list(stride)}, "
                         f"{dtype}; got shape {list(value.shape)}, strides {list(value.stride())}, {value.dtype}")
'''


@dataclass(frozen=True)
class Written:
    source: str
    tunables: tuple[tuple[str, tuple[int, ...]], ...]  # of the kernel worth tuning (the most bytes moved)
    rules: tuple[str, ...]
    kernels: int
    by_kind: tuple[tuple[str, tuple], ...] = ()  # ("gemm" | "row", tunables of the largest kernel of that kind)

    def tunables_of(self, kind: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The tunables of the largest GEMM/convolution ("gemm") or row kernel ("row"), else the dominant one's."""
        return dict(self.by_kind).get(kind, self.tunables)


def kernel_name(kernel: Kernel, graph: Graph, index: int) -> str:
    origins: list[str] = []
    for n in ((kernel.anchor,) if kernel.anchor is not None else ()) + kernel.nodes:
        origin = graph.node(n).origin or graph.node(n).fn
        if origin not in origins:
            origins.append(origin)
    prefix = {"gemm": "gemm", "conv": "conv", "scan": "scan"}.get(kernel.kind, "fused")
    words = [variable(o).strip("_") for o in origins[:3]]
    return f"{prefix}{index}_{'_'.join(w for w in words if w) or 'ops'}"


def rules_of(schedule: Schedule, options: Options) -> list[str]:
    rules: list[str] = []
    graph = schedule.graph
    for step in schedule.steps:
        if isinstance(step, Kernel):
            if step.kind == "gemm":
                rules.append("triton_gemm_epilogue")
            elif step.kind == "conv":
                rules.append("implicit_gemm_conv")
            elif step.kind == "scan":
                rules.append("blocked_scan")
            else:
                rules.append("row_reduction" if step.raxes else "pointwise_fusion")
        else:
            node = graph.node(step.node)
            if node.op == "matmul":
                rules.append("library_gemm_epilogue")
            elif node.op == "conv":
                rules.append("library_conv")
            elif node.op == "library":
                rules.append("library_call")
    return list(dict.fromkeys(rules))


class Writer:
    def __init__(self, problem_source: str, schedule: Schedule, options: Options, record: Record) -> None:
        self.source, self.schedule, self.options, self.record = problem_source, schedule, options, record
        self.graph = schedule.graph
        self.init, self.args, self.kept = model_parts(problem_source)
        self.forward_names: dict[int, str] = {}  # node -> expression valid inside forward
        self.local_names: dict[int, str] = {}  # node -> identifier inside a launcher
        self._name_leaves()

    def _name_leaves(self) -> None:
        for node in self.graph.nodes:
            if node.op == "input":
                index = node.attr("index")
                name = self.args[index] if index < len(self.args) else f"input{index}"
                self.forward_names[node.id] = self.local_names[node.id] = name
            elif node.op == "param":
                self.forward_names[node.id] = param_path(node.attr("name"))
                self.local_names[node.id] = variable(node.attr("name"))
            else:
                self.local_names[node.id] = f"buf{node.id}"

    def write(self) -> Written:
        kernels: list[tuple[Kernel, Emitted]] = []
        lines: list[str] = []
        effect_of = {e.value: e.param for e in self.graph.effects}
        for step in self.schedule.steps:
            if isinstance(step, HostStep):
                lines += self._host(self.graph.node(step.node))
                continue
            emitted = self._emit(step, len(kernels) + 1, {o: variable(effect_of[o]) for o in step.outputs if o in effect_of})
            kernels.append((step, emitted))
            lines.append(self._call(step, emitted, effect_of))
        for effect in self.graph.effects:
            if not any(effect.value in k.outputs for k, _ in kernels):
                lines.append(f"{param_path(effect.param)}.copy_({self.forward_names[effect.value]}.reshape({param_path(effect.param)}.shape))")
        if not kernels:
            raise ValueError("nothing to launch: every op of this graph stays in torch")
        lines.append(f"return {literal_outputs(self.graph.outputs, self.forward_names)}")
        best = max(kernels, key=lambda ke: ke[1].bytes_moved)[1]
        by_kind = []
        for kind in ("gemm", "row"):
            of_kind = [e for k, e in kernels if ("gemm" if k.kind in ("gemm", "conv") else "row") == kind]
            if of_kind:
                by_kind.append((kind, max(of_kind, key=lambda e: e.bytes_moved).tunables))
        return Written(self._file(kernels, lines), best.tunables, tuple(self.record.rules), len(kernels), tuple(by_kind))

    def _emit(self, kernel: Kernel, index: int, effects: dict[int, str]) -> Emitted:
        name = kernel_name(kernel, self.graph, index)
        if kernel.kind == "gemm":
            from pipeline.expert.gemm import GemmKernel

            return GemmKernel(kernel, self.graph, self.options, name, self.local_names, effects).emit()
        if kernel.kind == "conv":
            from pipeline.expert.conv import ConvKernel

            return ConvKernel(kernel, self.graph, self.options, name, self.local_names, effects).emit()
        if kernel.kind == "scan":
            from pipeline.expert.scan import ScanKernel

            return ScanKernel(kernel, self.graph, self.options, name, self.local_names).emit()
        return RowKernel(kernel, self.graph, self.options, name, self.local_names, effects).emit()

    def _call(self, kernel: Kernel, emitted: Emitted, effect_of: dict[int, str]) -> str:
        name = emitted.launcher.split("(", 1)[0].removeprefix("def ")
        args = [self.forward_names[i] for i in kernel.loads] + [param_path(effect_of[o]) for o in kernel.outputs if o in effect_of]
        returned = [o for o in kernel.outputs if o not in effect_of]
        for o in returned:
            self.forward_names[o] = f"buf{o}"
        call = f"{name}({', '.join(args)})"
        return f"{', '.join(f'buf{o}' for o in returned)} = {call}" if returned else call

    def _host_name(self, node: Node) -> str:
        """A readable name for a host value: `linear_weight_t`, `x_view`, `max_pool2d_out`."""
        if node.op == "matmul":
            base = "mm"
        elif node.op == "conv":
            base = "conv"
        elif node.op == "view":
            source = node.inputs[0] if node.inputs else None
            base = f"{self.local_names[source]}_{node.fn.rpartition('.')[2].strip('_')}" if source is not None else "view"
            base = base.replace("getitem", "item")
        else:
            base = f"{node.fn.rpartition('.')[2].strip('_')}_out"
        base = variable(base)
        taken = set(self.local_names.values()) | set(self.args)
        name, suffix = base, 1
        while name in taken:
            suffix += 1
            name = f"{base}{suffix}"
        return name

    def _host(self, node: Node) -> list[str]:
        name = self._host_name(node)
        self.local_names[node.id] = name
        if node.op == "matmul":
            text = matmul_source(node, self.forward_names)
        elif node.op == "conv":
            text = conv_source(node, self.forward_names)
        else:
            text = call_source(node, self.forward_names)
        self.forward_names[node.id] = name
        if node.op == "library" and node.attr("side_effect"):
            return [f"{text}  # the reference updates this buffer in place too"]
        return [f"{name} = {text}"]

    def _file(self, kernels: list[tuple[Kernel, Emitted]], forward: list[str]) -> str:
        helpers = sorted({h for _, e in kernels for h in e.helpers})
        parts = [self.record.line(), self._preamble(kernels), IMPORTS]
        kept = [k for k in self.kept if k.strip() not in IMPORTS.splitlines()]
        if kept:
            parts.append("\n".join(kept) + "\n")
        parts += [HELPERS[h] for h in helpers] + [SHAPE_GUARD]
        # the kernel worth tuning is defined first: the tuning engine takes the first kernel with its tunables
        for _, emitted in sorted(kernels, key=lambda ke: -ke[1].bytes_moved):
            parts += [emitted.kernel, emitted.launcher]
        needs_device = any(re.search(r"\bdevice\b(?!=)", line) for line in forward)
        body = self._guards() + ([f"device = {self._device()}"] if needs_device else []) + forward
        signature = ", ".join(["self", *self.args])
        model = ["class ModelNew(nn.Module):", self.init.rstrip("\n"), "", f"    def forward({signature}):"]
        model += [f"        {line}" for line in body]
        parts.append("\n".join(model) + "\n")
        return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"

    def _guards(self) -> list[str]:
        """forward's first lines: every input tensor and parameter the kernels read, as recorded."""
        lines = []
        for node in self.graph.nodes:
            if node.op not in ("input", "param"):
                continue
            name = self.forward_names[node.id]
            label = name if node.op == "input" else node.attr("name")
            if node.op == "input" and _contiguous(node.shape, node.stride):
                # a user's view (sliced, transposed) is copied into the layout the kernels index; contiguous as it
                # comes (the problem's own inputs), nothing is copied
                lines.append(f"{name} = {name}.contiguous()")
            lines.append(f"_specialised_to({label!r}, {name}, {tuple(node.shape)!r}, {tuple(node.stride)!r}, torch.{node.dtype})")
        return lines

    def _device(self) -> str:
        for node in self.graph.nodes:
            if node.op == "input":
                return f"{self.forward_names[node.id]}.device"
        return "next(self.parameters()).device"

    def _preamble(self, kernels: list[tuple[Kernel, Emitted]]) -> str:
        lines = ["# Written by egg's expert backend (no model): rules and templates, every choice named below.",
                 f"# Seed: {self.options.paradigm}. Rules: {', '.join(self.record.rules)}."]
        for kernel, emitted in kernels:
            lines.append(f"# - {emitted.launcher.split('(', 1)[0].removeprefix('def ')}: {emitted.summary}")
        return "\n".join(lines)


def _contiguous(shape, stride) -> bool:
    expected, step = [], 1
    for size in reversed(tuple(shape)):
        expected.append(step)
        step *= max(1, int(size))
    return all(int(size) == 1 or int(a) == b for size, a, b in zip(shape, stride, reversed(expected)))


def literal_outputs(outputs, names: dict[int, str]) -> str:
    if isinstance(outputs, int):
        return names[outputs]
    inner = ", ".join(literal_outputs(o, names) for o in outputs)
    return f"({inner},)" if len(outputs) == 1 else f"({inner})"


def write(problem_source: str, schedule: Schedule, options: Options, record: Record) -> Written:
    """The candidate file for `schedule`."""
    return Writer(problem_source, schedule, options, record).write()


__all__ = ["Written", "write", "literal"]
