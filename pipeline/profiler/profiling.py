"""`profile_candidate(candidate, problem) -> ProfileReport`: measure, classify, cache.

Which source the report rests on, strongest first: NCU hardware counters (a CUDA GPU and `ncu` that may read
counters), the torch profiler's kernel times (a GPU without usable `ncu`), or static facts only (no GPU: every
kernel compiled for sm_90, the analytic floor on nominal H200 ceilings). `mode="auto"` takes the strongest one
available and says in the notes what it could not use; naming a mode that cannot run is a setup error.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pipeline.profiler import ceilings as ceiling_store
from pipeline.profiler import ncu
from pipeline.profiler.cache import ProfileCache, cache_root, profile_key
from pipeline.profiler.classify import Context, classify_profiles
from pipeline.profiler.counters import profiles_from_rows
from pipeline.profiler.report import Ceilings, KernelProfile, ProfileReport
from pipeline.profiler.survey import KernelLaunch, Survey, survey_candidate
from pipeline.profiler.trace import profiles_from_trace

MODES = ("auto", "ncu", "torch_profiler", "static_only")
L2_FLUSH_BYTES = 256 << 20


class ProfilerSetupError(Exception):
    """The asked-for profiling cannot run here (no GPU, no ncu): one line, with `hint` saying what to do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class ProfileOptions:
    mode: str = "auto"  # one of MODES
    use_cache: bool = True
    warmup: int = 3  # untimed calls before the measured one (compilation, autotuning)
    max_launches: int = ncu.MAX_LAUNCHES  # kernels NCU profiles per candidate
    timeout_s: float = ncu.NCU_TIMEOUT_S


def resolve_mode(asked: str, gpu: bool, ncu_path: str | None) -> tuple[str, list[str]]:
    """The mode to run and notes on what was not available. Raises ProfilerSetupError for an impossible ask."""
    if asked not in MODES:
        raise ProfilerSetupError(f"unknown profiling mode {asked!r}", f"use one of {', '.join(MODES)}")
    if asked in ("ncu", "torch_profiler") and not gpu:
        raise ProfilerSetupError(f"--mode {asked} needs a CUDA GPU, and none is visible", "use --static-only on a machine without a GPU")
    if asked == "ncu" and ncu_path is None:
        raise ProfilerSetupError("--mode ncu, but Nsight Compute's `ncu` is not on PATH", "install Nsight Compute or put ncu on PATH")
    if asked != "auto":
        return asked, []
    if not gpu:
        return "static_only", ["no CUDA GPU here: static facts only (sm_90 compiles, analytic floor); no counters were read"]
    if ncu_path is None:
        return "torch_profiler", ["`ncu` not found: kernel times from the torch profiler, no hardware counters"]
    return "ncu", []


def profile_candidate(candidate_path: str | Path, problem_path: str | Path, options: ProfileOptions = ProfileOptions(), cache: ProfileCache | None = None) -> ProfileReport:
    """Profile one candidate on one problem. Cached by candidate source, problem and environment."""
    from pipeline.problems.loader import load_candidate, load_problem

    start = time.monotonic()
    candidate, problem = load_candidate(candidate_path), load_problem(problem_path)
    gpu = _cuda_available()
    mode, notes = resolve_mode(options.mode, gpu, ncu.find_ncu() if gpu else None)
    env_fp = environment_fingerprint(gpu)
    key = profile_key(candidate.fingerprint, problem.fingerprint, env_fp, f"{mode}|{','.join(ncu.metric_names())}")
    cache = cache if cache is not None else ProfileCache()
    if options.use_cache and (hit := cache.get(key)) is not None:
        # The same source may have been profiled from another file: report the paths asked about now.
        return replace(hit, candidate_path=candidate.path, problem_path=problem.path,
                       notes=(*hit.notes, f"from the profile cache ({cache.path(key).name}); measured in {hit.profile_s:.1f} s"))
    survey = survey_candidate(candidate.path, problem.path)
    notes += [f"static survey: {e}" for e in survey.errors]
    if mode == "static_only":
        report = static_report(survey, notes)
    else:
        report = measured_report(candidate.path, problem.path, survey, mode, notes, options, key, ceiling_store.load_or_measure(), ncu.find_ncu())
    report = replace(
        report,
        candidate_path=candidate.path,
        candidate_sha256=candidate.fingerprint,
        problem_path=problem.path,
        problem_fingerprint=problem.fingerprint,
        profile_s=round(time.monotonic() - start, 2),
    )
    measurement_failed = mode != "static_only" and report.source == "static_only"
    if options.use_cache and not measurement_failed:  # a failed run is tried again next time
        cache.put(key, report)
    return report


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def environment_fingerprint(gpu: bool) -> str:
    """What a profile depends on besides the sources: the device (with driver) and the compiler stack."""
    import torch
    import triton

    device = ceiling_store.fingerprint() if gpu else f"no gpu | torch {torch.__version__}"
    return f"{device} | triton {triton.__version__}"


# Static only ------------------------------------------------------------------------------------------------------


def kernel_from_launch(launch: KernelLaunch) -> KernelProfile:
    """A KernelProfile from what the survey compiled: grid, block, registers and shared memory, no times."""
    facts = launch.facts
    return KernelProfile(
        name=facts.kernel,
        calls=max(launch.calls, 1),
        grid=launch.grid,
        block=(facts.threads,),
        registers_per_thread=facts.registers,
        shared_bytes_per_block=facts.shared_bytes,
        static=facts,
    )


def static_report(survey: Survey, notes: list[str], ceilings: Ceilings | None = None) -> ProfileReport:
    """The report without a measurement: compiled facts, predicted bounds, the analytic floor (on nominal H200
    ceilings when none were measured here)."""
    ceilings = ceilings or ceiling_store.nominal()
    ctx = Context(ceilings, survey.costs)
    kernels = [kernel_from_launch(launch) for launch in survey.launches]
    kernels, overall = classify_profiles(kernels, ctx, counters=False, forward_launches=survey.forward_launches)
    tensor = any(k.static and k.static.uses_wgmma for k in kernels)
    if not kernels and survey.ran_on:
        notes = [*notes, "the candidate launched no Triton kernel in its forward call"]
    return ProfileReport(
        source="static_only", candidate_path="", candidate_sha256="", problem_path="", problem_fingerprint="",
        kernels=tuple(kernels), overall=overall, ceilings=ceilings, costs=survey.costs, total_kernel_ms=None,
        floor_ms=ctx.floor_ms(tensor), notes=tuple(notes),
    )  # fmt: skip


# Measured ---------------------------------------------------------------------------------------------------------


def measured_report(
    candidate_path: str, problem_path: str, survey: Survey, mode: str, notes: list[str], options: ProfileOptions, key: str, ceilings: Ceilings, ncu_path: str | None
) -> ProfileReport:
    """Run the driver under ncu (falling back to the torch profiler when ncu fails or counters are refused) and
    classify. A run that fails altogether gives the static report, with the failure in its notes."""
    from pipeline.judge.sandbox import clean_environment

    env = clean_environment("cuda")
    candidate_path, problem_path = str(Path(candidate_path).resolve()), str(Path(problem_path).resolve())
    with tempfile.TemporaryDirectory(prefix="egg-profile-") as folder:
        base, error, driver = Path(folder), "", {}
        if mode == "ncu":  # each run its own fresh job folder: the fallback never runs where NCU's job wrote
            job = base / "ncu"
            job.mkdir()
            kernels, raw, error = _with_ncu(base, job, candidate_path, problem_path, env, options, key, ncu_path)
            driver = _driver_result(job)
            if error:
                notes.append(f"NCU: {error}; falling back to the torch profiler (no hardware counters)")
                mode = "torch_profiler"
        if mode == "torch_profiler":
            raw, job = "", base / "torch"
            job.mkdir()
            kernels, error = _with_torch_profiler(job, candidate_path, problem_path, options)
            driver = _driver_result(job)
    error = error or str(driver.get("error", ""))
    if error or not driver:
        return static_report(survey, [*notes, f"the measured run failed ({error or 'no result'}): static facts only"], ceilings)
    try:
        return classified_report(mode, kernels, survey, ceilings, notes, driver, raw)
    except Exception as exc:  # the driver's result came from the candidate's process: what does not read is no result
        return static_report(survey, [*notes, f"the measured run's result could not be read ({type(exc).__name__}): static facts only"], ceilings)


def _driver_result(job: Path) -> dict:
    from pipeline.judge import launcher

    data = launcher.read_job_json(job / "driver.json")
    return data if isinstance(data, dict) else {}


def _with_ncu(base: Path, job: Path, candidate_path: str, problem_path: str, env: dict, options: ProfileOptions, key: str,
              ncu_path: str | None) -> tuple[list[KernelProfile], str, str]:
    """(kernels, kept raw report, error) from the driver run under ncu."""
    spec_path = write_spec(job, candidate_path, problem_path, "ncu", options)
    run = ncu.collect(ncu_path, job, spec_path, env, timeout_s=options.timeout_s, max_launches=options.max_launches,
                      read_only=(candidate_path, problem_path), keep_dir=base)
    if run.error:
        said = [line.strip() for line in run.log_tail.splitlines() if line.strip().startswith("==")]  # NCU's own messages
        return [], "", run.error + (f" (ncu: {' / '.join(said[-3:])[-400:]})" if said else "")
    try:
        kernels = profiles_from_rows(ncu.parse_raw_csv(run.csv_text))
    except Exception as exc:
        return [], "", f"the NCU report could not be read ({type(exc).__name__})"
    if not kernels:
        return [], "", "the NCU report has no kernel rows"
    return kernels, keep_report(run.report_path, key), ""


def _with_torch_profiler(job: Path, candidate_path: str, problem_path: str, options: ProfileOptions) -> tuple[list[KernelProfile], str]:
    """(kernels, error) from the driver run under the torch profiler."""
    from pipeline.judge import launcher

    spec_path = write_spec(job, candidate_path, problem_path, "torch", options)
    error = run_driver(spec_path, job, options.timeout_s, read_only=(candidate_path, problem_path))
    if error:
        return [], error
    trace = launcher.read_job_json(job / "trace.json", 1 << 30)
    if not isinstance(trace, dict):
        return [], "the driver's trace is not a trace"
    try:
        return profiles_from_trace(trace), ""
    except Exception as exc:
        return [], f"the driver's trace could not be read ({type(exc).__name__})"


def classified_report(mode: str, kernels: list[KernelProfile], survey: Survey, ceilings: Ceilings, notes: list[str], driver: dict, raw: str) -> ProfileReport:
    ctx = Context(ceilings, survey.costs)
    kernels = [attach_static(k, survey) for k in kernels]
    kernels, overall = classify_profiles(kernels, ctx, counters=mode == "ncu")
    launches = sum(k.calls for k in kernels)
    if mode == "ncu" and launches >= ncu.MAX_LAUNCHES:
        notes.append(f"NCU profiled the first {launches} kernel launches of the measured call; later ones are not in this report")
    tensor = any(k.static and k.static.uses_wgmma for k in kernels)
    total = sum(k.duration_ms or 0.0 for k in kernels)
    return ProfileReport(
        source=mode, candidate_path="", candidate_sha256="", problem_path="", problem_fingerprint="",
        kernels=tuple(kernels), overall=overall, ceilings=ceilings, costs=survey.costs,
        total_kernel_ms=round(total, 6) if kernels else None, floor_ms=ctx.floor_ms(tensor), notes=tuple(notes),
        environment={k: str(v) for k, v in driver.get("environment", {}).items()}, raw_report=raw,
    )  # fmt: skip


def attach_static(k: KernelProfile, survey: Survey) -> KernelProfile:
    """The survey's compiled facts for a measured kernel: same name, and the same grid when there are several."""
    matches = [launch for launch in survey.launches if launch.facts.kernel == k.name]
    if not matches:
        return k
    same_grid = [launch for launch in matches if launch.grid and launch.grid == k.grid[: len(launch.grid)]]
    return replace(k, static=(same_grid or matches)[0].facts)


def write_spec(workdir: Path, candidate_path: str, problem_path: str, mode: str, options: ProfileOptions) -> Path:
    spec = {
        "candidate_path": candidate_path,
        "problem_path": problem_path,
        "mode": mode,
        "seed": 42,
        "warmup": options.warmup,
        "l2_flush_bytes": L2_FLUSH_BYTES,
        "result_path": str(workdir / "driver.json"),
        "trace_path": str(workdir / "trace.json"),
    }
    path = workdir / f"spec-{mode}.json"
    path.write_text(json.dumps(spec))
    return path


def run_driver(spec_path: Path, workdir: Path, timeout_s: float, *, read_only: tuple[str, ...]) -> str:
    """Run the driver without ncu (torch profiler mode), in the judge's sandbox: it imports the candidate and the
    problem. Returns an error line, or "" on success."""
    from pipeline.judge import launcher

    finished = launcher.run("pipeline.profiler.driver", [str(spec_path)], workdir=workdir, read_only=read_only, device="cuda",
                            timeout_s=timeout_s)
    if finished.error is None:
        return ""
    if finished.error.startswith("timed out"):
        return f"the driver {finished.error}"
    return f"the driver: {finished.error}: {finished.log_tail[-500:]}"


def keep_report(report_path: str, key: str) -> str:
    """Keep the raw .ncu-rep in the cache folder (it is the evidence); returns where."""
    target = cache_root() / "ncu" / f"{key[:24]}.ncu-rep"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(report_path, target)
    return str(target)


