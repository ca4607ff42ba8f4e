"""The profiler on the H200, in one run: ceilings, NCU fixtures of known character, `egg profile` overhead, and the
CPU static report checked against what the device builds.

Run on the GPU machine from the repository root (about 3-5 minutes):
    PYTHONPATH=. python bench/profile_h200.py --out OUTDIR
It writes at most 8 files, flat, into OUTDIR:
    h200_copy.csv h200_gemm.csv h200_chase.csv h200_tiny.csv   raw `ncu --csv --page raw` of each fixture kernel
    h200_copy.ncu-rep                                          the copy's raw report (for the .ncu-rep reader)
                                                               -> commit these five as tests/fixtures/ncu/
    profile_softmax.json   `egg profile --json` of examples/candidates/softmax_triton.py on the suite's 23_Softmax
    profile_h200.json      every number: ceilings, classes, overheads, static-vs-device comparison, errors
    profile_h200.md        the tables and the human `egg profile` output -> commit under bench/results/
and prints a short summary table last. A failing step is recorded (with its log tail) and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.judge.sandbox import clean_environment
from pipeline.profiler import ceilings as ceiling_store
from pipeline.profiler import ncu
from pipeline.profiler.cache import cache_root
from pipeline.profiler.classify import Context, classify_profiles
from pipeline.profiler.counters import profiles_from_rows
from pipeline.judge.launcher import read_job_json
from pipeline.profiler.profiling import ProfileOptions, write_spec
from pipeline.profiler.survey import survey_candidate

FIXTURES = ROOT / "tests" / "fixtures" / "profiler"
SUITE = ROOT / "data" / "problems" / "suite" / "level1"
CASES = {  # name -> (candidate, problem, expected class); tests/fixtures/ncu/expected.json says the same
    "copy": (FIXTURES / "copy_triton.py", FIXTURES / "copy_problem.py", "memory_bound"),
    "gemm": (FIXTURES / "gemm_fp16_triton.py", SUITE / "6_GEMM_Square_FP16.py", "compute_bound_tensor"),
    "chase": (FIXTURES / "chase_triton.py", FIXTURES / "chase_problem.py", "occupancy_limited_registers"),
    "tiny": (FIXTURES / "rowwise_tiny_triton.py", FIXTURES / "rowwise_problem.py", "launch_bound"),
}
EXAMPLE = (ROOT / "examples" / "candidates" / "softmax_triton.py", SUITE / "23_Softmax.py")
CASE_TIMEOUT_S = 150  # per ncu run: the whole bench must fit one 10-minute device command


def capture(name: str, out: Path, ceilings, results: dict) -> None:
    """NCU CSV of one fixture, its classification, and its static facts against the device build."""
    candidate, problem, expected = CASES[name]
    start = time.monotonic()
    survey = survey_candidate(candidate, problem)
    with tempfile.TemporaryDirectory(prefix=f"egg-bench-{name}-") as folder:
        workdir = Path(folder) / "job"  # the sandbox's fresh folder; the report is read back beside it
        workdir.mkdir()
        spec = write_spec(workdir, str(candidate), str(problem), "ncu", ProfileOptions())
        run = ncu.collect(ncu.find_ncu(), workdir, spec, clean_environment("cuda"), timeout_s=CASE_TIMEOUT_S,
                          read_only=(str(candidate), str(problem)), keep_dir=Path(folder))
        driver = read_job_json(workdir / "driver.json")
        driver = driver if isinstance(driver, dict) else {}
        if name == "copy" and run.report_path:  # one raw report, for the .ncu-rep reader's test
            shutil.copyfile(run.report_path, out / "h200_copy.ncu-rep")
    row = {"expected": expected, "wall_s": round(time.monotonic() - start, 2), "survey_errors": list(survey.errors)}
    if run.error:
        row.update(error=run.error, log_tail=run.log_tail, driver_error=driver.get("error", ""))
        results["cases"][name] = row
        return
    (out / f"h200_{name}.csv").write_text(run.csv_text)
    kernels, overall = classify_profiles(profiles_from_rows(ncu.parse_raw_csv(run.csv_text)), Context(ceilings, survey.costs), counters=True)
    dominant = max(kernels, key=lambda k: k.duration_ms or 0.0)
    row.update(
        kind=overall.kind if overall else None,
        kernel_kind=dominant.classification.kind,
        ok=bool(overall and overall.kind == expected and dominant.classification.kind == expected),
        summary=overall.summary if overall else "",
        evidence=[f"{e.metric} = {e.value}: {e.meaning}" for e in dominant.classification.evidence],
        kernel_ms=round(sum(k.duration_ms or 0 for k in kernels), 5),
        launches_profiled=sum(k.calls for k in kernels),
        static_vs_device=compare_static(survey, driver, dominant),
    )
    results["cases"][name] = row


def compare_static(survey, driver: dict, measured) -> dict:
    """The CPU-path static facts of the measured kernel against the device build and against NCU's launch metrics."""
    facts = next((launch.facts for launch in survey.launches if launch.facts.kernel == measured.name), None)
    device = next((c for c in driver.get("compiled", []) if c["kernel"] == measured.name), None)
    if facts is None or device is None:
        return {"error": f"no static facts ({facts is not None}) or device build ({device is not None}) for {measured.name}"}
    return {
        "kernel": measured.name,
        "static": {"registers": facts.registers, "spilled_bytes": facts.spilled_bytes, "shared_bytes": facts.shared_bytes, "sha256": facts.binary_sha256},
        "device": {"registers": device["registers"], "spilled_bytes": device["spilled_bytes"], "dynamic_shared_bytes": device["dynamic_shared_bytes"], "sha256": device["binary_sha256"]},
        "ncu": {"registers": measured.registers_per_thread, "shared_bytes": measured.shared_bytes_per_block},
        "registers_match": facts.registers == device["registers"] == measured.registers_per_thread,
        "shared_match": facts.shared_bytes == measured.shared_bytes_per_block,
        "same_binary": facts.binary_sha256 == device["binary_sha256"],
    }


def egg_profile(out: Path, results: dict) -> None:
    """`egg profile` of the example, as a user runs it, in a fresh cache (holding only the measured ceilings):
    ncu as JSON (timed), the human report (served from the profile cache), then the other modes (timed)."""
    candidate, problem = EXAMPLE
    cache = Path(tempfile.mkdtemp(prefix="egg-bench-cache-"))
    shutil.copytree(cache_root() / "ceilings", cache / "ceilings")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EGG_CACHE": str(cache), "COLUMNS": "110"}
    command = [sys.executable, "-m", "pipeline.cli", "profile", str(candidate), "--ref", str(problem)]
    timings = {}
    for mode in ("ncu", "torch_profiler", "static_only"):
        start = time.monotonic()
        done = subprocess.run([*command, "--json", "--mode", mode], capture_output=True, text=True, env=env, check=False, timeout=300)
        timings[mode] = {"wall_s": round(time.monotonic() - start, 2), "exit": done.returncode}
        if mode == "ncu":
            (out / "profile_softmax.json").write_text(done.stdout or done.stderr)
            human = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=300)
            results["egg_profile"] = {"human_output": human.stdout + human.stderr[-800:]}
        if done.returncode:
            timings[mode]["stderr_tail"] = done.stderr[-1500:]
        else:
            report = json.loads(done.stdout)
            timings[mode].update(source=report["source"], kind=(report["overall"] or {}).get("kind"), profile_s=report["profile_s"], kernel_ms=report["total_kernel_ms"])
    results["egg_profile"]["overhead"] = timings


def markdown(results: dict) -> str:
    c = results.get("ceilings", {})
    lines = ["# The profiler on the H200", "", f"Command: `PYTHONPATH=. python bench/profile_h200.py --out OUTDIR` ({results['wall_s']} s)", ""]
    if c:
        flops = ", ".join(f"{k} {v / 1e12:.0f} TFLOP/s" for k, v in c["matmul_flops_per_s"].items())
        lines += [f"Ceilings ({c['device']}, {c['sms']} SMs): copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s; {flops}.", ""]
    lines += ["| fixture | expected | overall | kernel | ok | kernel ms | regs static/device/ncu | smem static/ncu | same binary |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, row in results["cases"].items():
        cmp_ = row.get("static_vs_device", {})
        regs = f"{cmp_.get('static', {}).get('registers')}/{cmp_.get('device', {}).get('registers')}/{cmp_.get('ncu', {}).get('registers')}" if "static" in cmp_ else "-"
        smem = f"{cmp_.get('static', {}).get('shared_bytes')}/{cmp_.get('ncu', {}).get('shared_bytes')}" if "static" in cmp_ else "-"
        lines.append(f"| {name} | {row['expected']} | {row.get('kind', row.get('error'))} | {row.get('kernel_kind', '-')} | {row.get('ok', False)} | {row.get('kernel_ms', '-')} | {regs} | {smem} | {cmp_.get('same_binary', '-')} |")
    overhead = results.get("egg_profile", {}).get("overhead", {})
    lines += ["", "`egg profile` of examples/candidates/softmax_triton.py (suite 23_Softmax), wall seconds per candidate, no cache:", ""]
    lines += [f"- {mode}: {t.get('wall_s')} s (exit {t.get('exit')}, source {t.get('source')}, class {t.get('kind')})" for mode, t in overhead.items()]
    human = results.get("egg_profile", {}).get("human_output", "")
    return "\n".join(lines + ["", "```", human.rstrip(), "```", ""])


def summary(results: dict) -> str:
    rows = [f"{'fixture':8} {'expected':28} {'got':28} ok"]
    for name, row in results["cases"].items():
        rows.append(f"{name:8} {row['expected']:28} {str(row.get('kind', 'ERROR: ' + row.get('error', '?')))[:28]:28} {row.get('ok', False)}")
    for mode, t in results.get("egg_profile", {}).get("overhead", {}).items():
        rows.append(f"egg profile --mode {mode}: {t.get('wall_s')} s, exit {t.get('exit')}")
    return "\n".join(rows)


def step(results: dict, name: str, fn, *args) -> None:
    try:
        fn(*args)
    except Exception as exc:  # keep going: one broken step must not lose the others
        results["errors"][name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    results: dict = {"cases": {}, "errors": {}, "ncu": ncu.find_ncu()}
    t0 = time.monotonic()
    ceilings = ceiling_store.load_or_measure()  # a fresh machine measures; `egg profile` below reuses the cache
    results["ceilings"] = {**ceilings.__dict__, "measure_s": round(time.monotonic() - t0, 2)}
    for name in CASES:
        step(results, name, capture, name, args.out, ceilings, results)
        save(args.out, results, start)  # a run cut short still leaves what it measured
    step(results, "egg_profile", egg_profile, args.out, results)
    save(args.out, results, start)
    print(summary(results))


def save(out: Path, results: dict, start: float) -> None:
    results["wall_s"] = round(time.monotonic() - start, 1)
    (out / "profile_h200.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "profile_h200.md").write_text(markdown(results))


if __name__ == "__main__":
    main()
