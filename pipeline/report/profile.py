"""One screen for a person about one profile: what it rests on, what limits the candidate and why, each kernel."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pipeline.profiler.report import Classification, KernelProfile, ProfileReport

_SOURCE = {
    "ncu": ("NCU hardware counters", "green"),
    "torch_profiler": ("torch profiler kernel times (no hardware counters)", "yellow"),
    "static_only": ("static facts only: sm_90 compiles + analytic roofline (no GPU, no counters read)", "yellow"),
}
MAX_KERNELS, MAX_EVIDENCE, MAX_NOTES = 8, 5, 5
SHORT_KIND = {
    "memory_bound": "memory",
    "compute_bound_tensor": "tensor",
    "compute_bound_fma": "fma",
    "latency_bound": "latency",
    "occupancy_limited_registers": "occ:regs",
    "occupancy_limited_shared": "occ:smem",
    "launch_bound": "launch",
}


def render(report: ProfileReport, console: Console) -> None:
    """Print the report: source, overall bound with evidence, the kernel table, notes."""
    label, color = _SOURCE[report.source]
    parts = [Text.assemble(("source: ", "bold"), (label, color)), Text(f"candidate {report.candidate_path}\nproblem   {report.problem_path}", style="dim")]
    parts.append(_overall(report))
    if report.kernels:
        parts.append(_kernels(report.kernels, report.source == "ncu"))
        if any(k.static and k.static.launch_problems() for k in report.kernels):
            parts.append(Text("* compiled for sm_90 with spills, or with more shared memory than an H200 block may have", style="dim"))
    for note in report.notes[:MAX_NOTES]:
        parts.append(Text(f"note: {note}", style="yellow"))
    if len(report.notes) > MAX_NOTES:
        parts.append(Text(f"... {len(report.notes) - MAX_NOTES} more notes in --json", style="dim"))
    console.print(Panel(Group(*parts), title="egg profile", border_style=color))


def _overall(report: ProfileReport) -> Group:
    cls = report.overall
    if cls is None:
        return Group(Text("no kernel seen: nothing to classify", style="bold red"))
    lines = [Text.assemble((_kind(cls), "bold"), "  ", cls.summary)]
    lines.append(Text(_times(report), style="cyan"))
    lines.extend(Text(f"  - {e.meaning}  [{e.metric} = {_value(e.value)}]", style="dim") for e in cls.evidence[:MAX_EVIDENCE])
    return Group(*lines)


def _kind(cls: Classification) -> str:
    return cls.kind.upper().replace("_", " ") + (" (predicted)" if cls.predicted else "")


def _times(report: ProfileReport) -> str:
    parts = []
    if report.total_kernel_ms is not None:
        parts.append(f"kernel time {report.total_kernel_ms:.4f} ms")
    if report.floor_ms is not None:
        ceilings = report.ceilings.source if report.ceilings else "?"
        parts.append(f"roofline floor {report.floor_ms:.4f} ms ({ceilings} ceilings)")
    if report.overall and report.overall.roofline_distance_pct is not None:
        parts.append(f"distance to roofline {report.overall.roofline_distance_pct:.0f}%")
    parts.append(f"profiled in {report.profile_s:.1f} s")
    return "; ".join(parts)


def _kernels(kernels: tuple[KernelProfile, ...], counters: bool) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    columns = ["kernel", "calls", "ms", "grid", "regs", "smem B", "occ%", "class", "dist%"]
    if counters:
        columns[6:6] = ["mem%", "sm%"]
    for column in columns:
        table.add_column(column, overflow="ellipsis", no_wrap=True, max_width=28 if column == "kernel" else None)
    ranked = sorted(kernels, key=lambda k: -(k.duration_ms or 0.0))
    for k in ranked[:MAX_KERNELS]:
        cls = k.classification
        occupancy = k.achieved_occupancy_pct if k.achieved_occupancy_pct is not None else k.theoretical_occupancy_pct
        row = [
            k.name + (" *" if k.static and k.static.launch_problems() else ""),
            str(k.calls),
            _num(k.duration_ms, ".4f"),
            "x".join(map(str, k.grid)) or "-",
            _num(k.registers_per_thread, "d"),
            _num(k.shared_bytes_per_block, ",d"),
            _num(occupancy, ".0f"),
            (SHORT_KIND[cls.kind] + ("?" if cls.predicted else "")) if cls else "-",
            _num(cls.roofline_distance_pct if cls else None, ".0f"),
        ]
        if counters:
            row[6:6] = [_num(k.memory_throughput_pct, ".0f"), _num(k.sm_throughput_pct, ".0f")]
        table.add_row(*row)
    if len(ranked) > MAX_KERNELS:
        table.add_row(f"... {len(ranked) - MAX_KERNELS} more", *[""] * (len(columns) - 1))
    return table


def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _value(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
