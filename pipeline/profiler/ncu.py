"""Nsight Compute: the command that collects our metric set for the measured call, and the parser of its raw CSV.

Collection is two steps, so program output never mixes with the table: `ncu ... --export REPORT python -m
pipeline.profiler.driver SPEC` keeps the raw `.ncu-rep`, then `ncu --import REPORT --csv --page raw --print-units base`
prints one row per kernel launch. Only kernels between the driver's cudaProfilerStart and cudaProfilerStop are
profiled (`--profile-from-start off`): the measured call, inside an NVTX range `egg_measured`; warm-up, input
creation and the L2 flush happen outside. Clocks are never changed (`--clock-control none`).
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

MAX_LAUNCHES = 64  # kernels profiled per candidate; a program of many tiny kernels is sampled, and says so
NCU_TIMEOUT_S = 600.0
PERMISSION_MARKER = "ERR_NVGPUCTRPERM"
_NCU_CANDIDATES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
_NSIGHT_HOMES = ("/opt/nvidia",)  # where CUDA's `bin/ncu` launcher looks for the Nsight Compute it starts


def metric_names() -> tuple[str, ...]:
    """The sm_90 metric set that classifies a bottleneck (a copy of shared/ncu-metrics.txt, shipped in the package)."""
    text = resources.files("pipeline.profiler").joinpath("ncu_metrics.txt").read_text()
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def find_ncu() -> str | None:
    """The `ncu` executable: on PATH, else where CUDA and Nsight Compute install it."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in _NCU_CANDIDATES:
        matches = sorted(glob.glob(pattern), reverse=True)
        if matches and os.access(matches[0], os.X_OK):
            return matches[0]
    return None


def install_folders(program: str) -> tuple[str, ...]:
    """The folders NCU runs from, for the sandbox to show read-only: the executable's own, and the Nsight Compute
    installations a launcher script may start (CUDA's `bin/ncu` is a script that looks next to CUDA, then under
    /opt/nvidia). The sandbox shows a job only the folders it is told of, and NCU cannot start without these."""
    here = os.path.dirname(program)
    found = [here]
    for pattern in (os.path.join(here, "..", "nsight-compute*"), *(os.path.join(h, "nsight-compute*") for h in _NSIGHT_HOMES)):
        for path in sorted(glob.glob(pattern)):
            if os.path.isdir(path):
                found += [os.path.normpath(path), os.path.realpath(path)]
    return tuple(dict.fromkeys(found))


def collect_command(ncu: str, report: Path, driver_spec: Path, *, metrics: tuple[str, ...] | None = None, max_launches: int = MAX_LAUNCHES) -> list[str]:
    """The `ncu` command that profiles the driver's measured call and keeps the raw report at `report`."""
    return [
        ncu,
        "--clock-control", "none",  # never change clocks (the GPU machine's rule, and the real speed)
        "--metrics", ",".join(metrics or metric_names()),
        "--profile-from-start", "off",  # only between the driver's cudaProfilerStart/Stop: the measured call
        "--nvtx",  # and the driver's NVTX range `egg_measured` is recorded in the report
        "--launch-count", str(max_launches),
        "--print-summary", "none",
        "--export", str(report), "--force-overwrite",
        sys.executable, "-m", "pipeline.profiler.driver", str(driver_spec),
    ]  # fmt: skip


def import_command(ncu: str, report: Path) -> list[str]:
    """The command that prints a kept report as raw CSV, every value in base units."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base", "function"]


@dataclass(frozen=True)
class NcuRun:
    """The outcome of collecting: CSV text and the kept report, or why there is none."""

    csv_text: str
    report_path: str
    error: str = ""  # empty on success
    permission_denied: bool = False  # counters exist but this user may not read them (ERR_NVGPUCTRPERM)
    log_tail: str = ""


REPORT_LIMIT_BYTES = 512 << 20  # the largest NCU report read back from the sandbox


def collect(ncu: str, workdir: Path, driver_spec: Path, env: dict[str, str], *, timeout_s: float = NCU_TIMEOUT_S, max_launches: int = MAX_LAUNCHES,
            read_only: tuple[str, ...] = (), keep_dir: Path | None = None) -> NcuRun:
    """Run the driver under ncu, then export the CSV. Failures are data (`error`), never exceptions.

    NCU and its target (the driver, which imports the candidate and the problem) run together in the judge's
    sandbox (pipeline.judge.launcher), in the fresh job folder `workdir`, with NCU's own folder and `read_only`
    (the candidate and the problem) readable. The report is read back as a regular file only (never a link), into
    `keep_dir` (the caller's, outside the job's view), and NCU exports that copy."""
    from pipeline.judge import launcher

    report = workdir / "profile.ncu-rep"
    program = os.path.realpath(ncu)
    finished = launcher.run("", (), argv=collect_command(program, report, driver_spec, max_launches=max_launches), workdir=workdir,
                            read_only=(*install_folders(program), *read_only), device="cuda", timeout_s=timeout_s, tail_bytes=8000)
    log = finished.log_tail + (f"\n[egg] {finished.error}" if finished.error else "")
    if PERMISSION_MARKER in log:
        return NcuRun("", "", "ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM)", True, log)
    data = launcher.read_job_file(report, REPORT_LIMIT_BYTES) if finished.error is None else None
    if data is None:
        why = f"ncu: {finished.error} and no report" if finished.error else (
            "ncu profiled no kernel in the measured call" if not os.path.lexists(report) else "the NCU report is not a regular file under 512 MB")
        return NcuRun("", "", why, log_tail=log)
    kept = (keep_dir or workdir.parent) / "profile.ncu-rep"
    kept.write_bytes(data)
    code, text = _run(import_command(ncu, kept), env, kept.parent, 300.0, merge_stderr=False)
    if code != 0:  # an older ncu may lack a print option: the plain export still parses (units row, long names)
        code, text = _run(import_command(ncu, kept)[:6], env, kept.parent, 300.0, merge_stderr=False)
    if code != 0:
        return NcuRun("", str(kept), f"ncu --import exited with {code}", log_tail=text[-2000:])
    return NcuRun(text, str(kept), log_tail=log[-2000:])


def _run(command: list[str], env: dict[str, str], cwd: Path, timeout_s: float, *, merge_stderr: bool = True) -> tuple[int, str]:
    child = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace",
    )  # fmt: skip
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        return -9, (out or "") + f"\n[egg] timed out after {timeout_s:.0f} s"
    return child.returncode, out if merge_stderr else out + (err or "")


# Parsing ----------------------------------------------------------------------------------------------------------

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
# What NCU prints in the units row. Nsight Compute 2025.3 writes times as "ns"/"us"/"ms" (older ones "nsecond",
# "usecond"), and `--print-units base` means each metric's own base unit: ns for gpu__time_duration, not seconds.
_BASE_UNITS = ("second", "s", "byte", "hz", "Hz", "cycle", "inst", "warp", "sector", "request", "block", "thread", "register", "SM", "cluster", "pass")
_UNIT = re.compile(r"^([KMGTPmunp]?)(" + "|".join(_BASE_UNITS) + r")s?$")


def unit_scale(unit: str) -> float | None:
    """Factor that turns a value in `unit` (e.g. "ns", "Gbyte/second", "Tbyte/s", "%") into base units (seconds,
    bytes, hertz, counts); None for a unit it cannot read, whose value is then not in base units."""
    unit = unit.strip()
    if not unit or unit == "%":
        return 1.0
    numerator, _, denominator = unit.partition("/")
    top, bottom = _token_scale(numerator), _token_scale(denominator) if denominator else 1.0
    return None if top is None or bottom is None else top / bottom


def _token_scale(token: str) -> float | None:
    match = _UNIT.match(token.strip())
    return None if match is None else _PREFIX[match.group(1)]


def parse_number(text: str) -> float | None:
    """A CSV cell as a number ("1,234.5" -> 1234.5); None for "n/a", "" and the like."""
    cleaned = text.strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        return None


@dataclass(frozen=True)
class NcuKernelRow:
    """One profiled kernel launch: its identity and every metric, in base units (bytes, seconds, percent)."""

    launch_id: int
    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    metrics: dict[str, float] = field(default_factory=dict)


def parse_raw_csv(text: str) -> list[NcuKernelRow]:
    """Rows of `ncu --csv --page raw` (any units: a units row is read and applied; numbers may carry thousands
    separators, "520,352"). Lines before the header are skipped (ncu's own `==PROF==` messages), and so are columns
    that are not metrics and metrics in a unit `unit_scale` cannot read."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = table[0], table[1:]
    units = body[0] if body and not body[0][0].strip() else [""] * len(header)
    if units is body[0]:
        body = body[1:]
    rows = []
    for cells in body:
        if len(cells) != len(header):
            continue
        info = dict(zip(header, cells))
        metrics = {}
        for name, unit, cell in zip(header, units, cells):
            value, scale = (parse_number(cell), unit_scale(unit)) if "__" in name else (None, None)
            if value is not None and scale is not None:  # a unit we cannot read is left out, never misread
                metrics[name] = value * scale
        rows.append(NcuKernelRow(int(parse_number(info.get("ID", "")) or 0), info.get("Kernel Name", "?"), _dims(info.get("Grid Size", "")), _dims(info.get("Block Size", "")), metrics))
    return rows


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", text))


def read_ncu_rep(path: str | Path) -> list[NcuKernelRow]:
    """Rows from a `.ncu-rep` file through NVIDIA's `ncu_report` reader (`pip install ncu-report==2025.3.1` on a
    machine without Nsight Compute). Values come in the report's base units."""
    try:
        import ncu_report  # type: ignore[import-not-found]
    except ImportError as exc:
        raise RuntimeError("reading .ncu-rep needs NVIDIA's ncu_report module: pip install ncu-report==2025.3.1") from exc
    context = ncu_report.load_report(str(path))
    rows = []
    for r in range(context.num_ranges()):
        kernels = context.range_by_idx(r)
        for k in range(kernels.num_actions()):
            action = kernels.action_by_idx(k)
            metrics = {}
            for name in action.metric_names():
                metric = action.metric_by_name(name)
                scale = unit_scale(metric.unit())
                if metric.kind() == ncu_report.IMetric.ValueKind_STRING or scale is None:
                    continue
                try:
                    metrics[name] = float(metric.as_double()) * scale
                except (TypeError, ValueError):
                    continue  # a string-valued metric
            name = action.name(ncu_report.IAction.NameBase_FUNCTION)
            rows.append(NcuKernelRow(len(rows), name, (), (), metrics))
    return rows
