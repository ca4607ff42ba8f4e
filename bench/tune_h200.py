"""Measures the tuning engine on the H200: every strategy against exhaustive search and triton.autotune.

Run on the GPU machine from the repository root:
    PYTHONPATH=. python bench/tune_h200.py --out OUTDIR
For three example kernels on their full-size suite problems (a GEMM, a row softmax, an elementwise chain) and one
space per kernel, it
  1. compiles the whole space for sm_90 on the CPU cores (pruning: spills, shared memory, duplicate binaries;
     this also fills Triton's cache, so no strategy below pays for compiling),
  2. runs exhaustive search, then random, pattern and surrogate with a quarter of exhaustive's device evaluations
     as their budget, each in a fresh measurement worker (setup not counted in its wall time),
  3. runs triton.autotune over the same configurations (in this process, its own do_bench),
and reports each one's best config, its time, the device evaluations and wall time it took, and its ratio to the
exhaustive best (every ratio is read from exhaustive's table, so all are measured the same way).
Writes OUTDIR/tune_h200.json, OUTDIR/tune_h200.md and OUTDIR/<kernel>_tuned.py (the exhaustive winner baked in):
five files. Prints the table last. About 5 minutes on an H200.

Without a GPU: `--simulate` runs the same orchestration with a scripted device (a cost model over the compiled
facts) and no autotune, to check the script itself; `--dry-run` only builds spaces and recipes.

`--replay PATH` (no GPU) replays every strategy over many seeds against the exhaustive tables of an earlier run's
tune_h200.json (`pipeline.tuning.replay`: same pruning and duplicate binaries, recorded times with 0.7% noise) and writes
OUTDIR/tune_replay.md: a replay of measurements, not a new measurement.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.tuning.measure import BatchMeasurer, MeasureSettings  # noqa: E402
from pipeline.tuning.measurement import Measurement  # noqa: E402
from pipeline.tuning.prune import Compiled, PrunedEvaluator, Sm90Compiler  # noqa: E402
from pipeline.tuning.recipe import LaunchRecipe, TensorSpec  # noqa: E402
from pipeline.tuning.rewrite import RewriteError, bake_config  # noqa: E402
from pipeline.tuning.scripted import ScriptedEvaluator  # noqa: E402
from pipeline.tuning.space import Config, Constraint, IntRange, PowerOfTwo, Space  # noqa: E402
from pipeline.tuning.strategy import Budget, make_strategy  # noqa: E402

EXAMPLES = ROOT / "examples" / "candidates"
SUITE = ROOT / "data" / "problems" / "suite" / "level1"
STRATEGIES = ("random", "pattern", "surrogate")


@dataclass(frozen=True)
class Case:
    """One kernel, its launch on the full-size problem, and its space (default: the file's own choice)."""

    name: str
    kernel_path: Path
    problem_path: Path
    recipe: LaunchRecipe
    space: Space


def problem_constants(path: Path) -> Any:
    """The problem module (its size constants), without calling get_inputs()."""
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gemm_case() -> Case:
    problem = SUITE / "1_GEMM_Square.py"
    n = problem_constants(problem).n
    recipe = LaunchRecipe(
        "matmul_kernel",
        {"a_ptr": TensorSpec((n, n), init="rand"), "b_ptr": TensorSpec((n, n), init="rand"),
         "c_ptr": TensorSpec((n, n), init="empty", output=True), "M": n, "N": n, "K": n,
         "stride_am": "K", "stride_ak": 1, "stride_bk": "N", "stride_bn": 1, "stride_cm": "N", "stride_cn": 1},
        grid="(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))",
    )
    space = Space(
        (PowerOfTwo("BLOCK_M", 32, 128), PowerOfTwo("BLOCK_N", 32, 128), PowerOfTwo("BLOCK_K", 16, 64),
         PowerOfTwo("num_warps", 2, 8), IntRange("num_stages", 2, 3)),
        # At most 128 fp32 accumulators per thread: larger tiles only spill (and take ptxas a minute to say so).
        (Constraint.expr("accumulator", "BLOCK_M * BLOCK_N <= 128 * 32 * num_warps"),),
        default=Config(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3),
    )
    return Case("gemm", EXAMPLES / "matmul_triton.py", problem, recipe, space)


def softmax_case() -> Case:
    problem = SUITE / "23_Softmax.py"
    module = problem_constants(problem)
    rows, cols = module.batch_size, module.dim
    recipe = LaunchRecipe(
        "softmax_row_kernel",
        {"x_ptr": TensorSpec((rows, cols)), "out_ptr": TensorSpec((rows, cols), init="empty", output=True),
         "n_cols": cols, "x_row_stride": cols, "out_row_stride": cols},
        grid=f"({rows},)",
    )
    block = 1 << (cols - 1).bit_length()
    space = Space(
        (PowerOfTwo("BLOCK_SIZE", block, 2 * block), PowerOfTwo("num_warps", 1, 32), IntRange("num_stages", 1, 3)),
        default=Config(BLOCK_SIZE=block, num_warps=4, num_stages=3),
    )
    return Case("softmax", EXAMPLES / "softmax_triton.py", problem, recipe, space)


def elementwise_case() -> Case:
    problem = SUITE / "16_GELU_Scale_Bias.py"
    module = problem_constants(problem)
    rows, cols = module.batch_size, module.dim
    recipe = LaunchRecipe(
        "gelu_scale_bias_kernel",
        {"x_ptr": TensorSpec((rows, cols), init="rand"), "bias_ptr": TensorSpec((cols,)),
         "out_ptr": TensorSpec((rows, cols), init="empty", output=True), "n_elements": rows * cols, "n_cols": cols,
         "scale": float(module.scale)},
        grid="(cdiv(n_elements, BLOCK_SIZE),)",
    )
    space = Space(
        (PowerOfTwo("BLOCK_SIZE", 128, 16384), PowerOfTwo("num_warps", 1, 16), IntRange("num_stages", 1, 3)),
        (Constraint.expr("one_element_per_thread", "BLOCK_SIZE >= 32 * num_warps"),),
        default=Config(BLOCK_SIZE=1024, num_warps=4, num_stages=3),
    )
    return Case("elementwise", EXAMPLES / "elementwise_triton.py", problem, recipe, space)


CASES = {"gemm": gemm_case, "softmax": softmax_case, "elementwise": elementwise_case}


# Pruning once per kernel ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Precompiled:
    """A compiler that answers from facts compiled up front (so every strategy sees the same pruning, free)."""

    table: dict[str, Compiled]

    def compile(self, config: Config):
        compiled = self.table[config.key]
        if compiled.facts is None:
            raise RuntimeError(compiled.error)
        return compiled.facts


def compile_space(case: Case, workers: int, log) -> tuple[Precompiled, float]:
    configs = list(case.space.configs())
    start = time.monotonic()
    with PrunedEvaluator(None, Sm90Compiler(str(case.kernel_path), case.recipe), workers=workers) as pruner:
        compiled = pruner.compile_all(configs)
    seconds = time.monotonic() - start
    failed = sum(c.facts is None for c in compiled)
    log(f"{case.name}: compiled {len(configs)} configs for sm_90 in {seconds:.1f} s on {workers} processes ({failed} failed)")
    return Precompiled({c.key: r for c, r in zip(configs, compiled)}), seconds


# Searching --------------------------------------------------------------------------------------------------------


def device_evaluator(case: Case, settings: MeasureSettings, simulate: bool, precompiled: Precompiled):
    """A fresh measurement worker (or, simulated, a cost model over the compiled facts)."""
    if simulate:
        return _SimulatedDevice(case, precompiled)
    measurer = BatchMeasurer(case.kernel_path, case.recipe, settings, reference_config=case.space.default)
    measurer.start()
    return measurer


class _SimulatedDevice(ScriptedEvaluator):
    """Times from a rough model: waves of programs, registers and shared memory limiting occupancy."""

    def __init__(self, case: Case, precompiled: Precompiled) -> None:
        super().__init__(lambda config: _model_ms(case, precompiled, config), noise=0.01)

    def close(self) -> None:
        pass


def _model_ms(case: Case, precompiled: Precompiled, config: Config) -> float:
    facts = precompiled.table[config.key].facts
    grid = math.prod(case.recipe.grid_for(config))
    threads = 32 * config["num_warps"]
    per_sm = max(1, min(2048 // threads, 65536 // max(1, facts.registers * threads), 232448 // max(1, facts.shared_bytes)))
    waves = math.ceil(grid / (132 * per_sm))
    return waves * (1.0 + 0.02 * config["num_warps"]) * (1 + 0.05 * config.get("num_stages", 1))


def run_strategy(case: Case, name: str, budget: Budget, precompiled: Precompiled, settings: MeasureSettings, simulate: bool) -> dict:
    device = device_evaluator(case, settings, simulate, precompiled)
    try:
        evaluator = PrunedEvaluator(device, precompiled, workers=0)
        start = time.monotonic()
        result = make_strategy(name, seed=0).run(case.space, evaluator, budget)
        wall_s = time.monotonic() - start
    finally:
        device.close()
    statuses: dict[str, int] = {}
    for trial in result.trials:
        statuses[trial.status.value] = statuses.get(trial.status.value, 0) + 1
    return {
        "strategy": name, "best_config": dict(result.best.config) if result.best else None,
        "best_ms": result.best.time_ms if result.best else None, "evaluations": result.evaluations,
        "proposed": len(result.trials), "wall_s": round(wall_s, 2), "stop_reason": result.stop_reason,
        "statuses": statuses, "history": [m.to_json() for m in result.trials],
    }


def table_time(exhaustive: dict, config: dict | None) -> float | None:
    """A config's time in exhaustive's table (a duplicate binary reads its twin's; too_slow is a lower bound)."""
    if config is None:
        return None
    key = Config(config).key
    for row in exhaustive["history"]:
        if Config(row["config"]).key == key:
            measurement = Measurement.from_json(row)
            return measurement.score if math.isfinite(measurement.score) else None
    return None


# triton.autotune over the same configurations ---------------------------------------------------------------------


def run_autotune(case: Case) -> dict:
    """triton.autotune over every configuration of the space, timed from the first call to its end."""
    import torch
    import triton

    from pipeline.tuning.recipe import materialize
    from pipeline.tuning.worker import load_kernel

    kernel = load_kernel(str(case.kernel_path), case.recipe.kernel)
    configs = list(case.space.configs())
    tuned = triton.autotune(
        configs=[triton.Config(c.constexprs(), num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in configs], key=[],
    )(kernel)
    args = materialize(case.recipe, torch.device("cuda"))
    grid = lambda meta: case.recipe.grid_for(meta)  # noqa: E731
    torch.cuda.synchronize()
    start = time.monotonic()
    tuned[grid](**args, **case.recipe.constexprs)
    torch.cuda.synchronize()
    wall_s = time.monotonic() - start
    best = tuned.best_config
    chosen = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
    timings = [t for t in (getattr(tuned, "configs_timings", None) or {}).values()]
    del args
    torch.cuda.empty_cache()
    return {"strategy": "triton.autotune", "best_config": chosen, "evaluations": len(configs), "proposed": len(configs),
            "wall_s": round(wall_s, 2), "bench_time_s": round(getattr(tuned, "bench_time", float("nan")), 2),
            "benchmarked": len(timings), "stop_reason": "all configs", "statuses": {}}


# One kernel -------------------------------------------------------------------------------------------------------


def bench_case(case: Case, args, log) -> dict:
    size = case.space.size()
    settings = MeasureSettings(warmup=args.warmup, trials=args.trials)
    log(f"{case.name}: {size} configs in the space")
    precompiled, compile_s = compile_space(case, args.workers, log)
    report: dict[str, Any] = {"kernel": case.name, "kernel_path": str(case.kernel_path.relative_to(ROOT)),
                              "problem": str(case.problem_path.relative_to(ROOT)), "space": case.space.to_spec(),
                              "space_size": size, "compile_s": round(compile_s, 1), "runs": []}
    exhaustive = run_strategy(case, "exhaustive", Budget(), precompiled, settings, args.simulate)
    report["runs"].append(exhaustive)
    log(f"{case.name}: exhaustive best {exhaustive['best_config']} {exhaustive['best_ms']} ms, {exhaustive['evaluations']} evaluations, {exhaustive['wall_s']} s")
    # The searchers get a quarter of what exhaustive measured on the device (after the same pruning) as budget.
    quarter = max(1, exhaustive["evaluations"] // 4)
    report["searcher_budget"] = quarter
    for name in STRATEGIES:
        if past_deadline(args):
            report["runs"].append({"strategy": name, "error": "skipped: the run's deadline passed"})
            continue
        run = run_strategy(case, name, Budget(max_evals=quarter), precompiled, settings, args.simulate)
        report["runs"].append(run)
        log(f"{case.name}: {name} best {run['best_config']} {run['best_ms']} ms, {run['evaluations']} evaluations, {run['wall_s']} s")
    if past_deadline(args):
        report["runs"].append({"strategy": "triton.autotune", "error": "skipped: the run's deadline passed"})
    elif not args.simulate:
        try:
            report["runs"].append(run_autotune(case))
        except Exception as exc:  # report it; the other kernels still run
            report["runs"].append({"strategy": "triton.autotune", "error": f"{type(exc).__name__}: {exc}"[:500]})
    best_ms = exhaustive["best_ms"]
    for run in report["runs"]:
        if "error" in run:
            continue
        run["table_ms"] = table_time(exhaustive, run.get("best_config"))
        run["ratio"] = round(run["table_ms"] / best_ms, 4) if run.get("table_ms") and best_ms else None
        run["eval_share"] = round(run.get("evaluations", 0) / max(1, exhaustive["evaluations"]), 3)
        run["config_share"] = round(run.get("proposed", 0) / max(1, size), 3)
        run["meets_target"] = bool(run["ratio"] is not None and run["ratio"] <= 1.03 and run["eval_share"] <= 0.25)
    report["tuned_source"] = baked_source(case, exhaustive)
    return report


def past_deadline(args) -> bool:
    return time.monotonic() > args.deadline


def baked_source(case: Case, exhaustive: dict) -> str | None:
    if exhaustive["best_config"] is None:
        return None
    try:
        return bake_config(case.kernel_path.read_text(), case.recipe.kernel, exhaustive["best_config"],
                           current=case.space.default, note=f"egg tuned (exhaustive search) for {case.problem_path.name}: {exhaustive['best_config']}")
    except RewriteError as exc:
        return f"# not bakeable: {exc}\n"


# Reporting --------------------------------------------------------------------------------------------------------


def table(reports: list[dict]) -> str:
    lines = ["| kernel | strategy | best config | best ms (own run) | ms in exhaustive table | ratio | device evals (share of exhaustive) | configs examined (share of space) | wall s | within 3% with <= 1/4 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for report in reports:
        for run in report["runs"]:
            if "error" in run:
                lines.append(f"| {report['kernel']} | {run['strategy']} | failed: {run['error'][:80]} | | | | | | | |")
                continue
            config = ", ".join(f"{k}={v}" for k, v in (run["best_config"] or {}).items())
            own = f"{run['best_ms']:.4f}" if run.get("best_ms") else "-"
            ref = f"{run['table_ms']:.4f}" if run.get("table_ms") else "-"
            target = "-" if run["strategy"] in ("exhaustive", "triton.autotune") else ("yes" if run["meets_target"] else "NO")
            lines.append(f"| {report['kernel']} | {run['strategy']} | {config} | {own} | {ref} | {run['ratio']} | {run['evaluations']} ({run['eval_share']}) | "
                         f"{run['proposed']} ({run['config_share']}) | {run['wall_s']} | {target} |")
    return "\n".join(lines)


def markdown(report: dict) -> str:
    lines = ["# The tuning engine on the H200", "", f"Command: `{report['command']}`", "", f"Environment: {json.dumps(report['environment'])}", "",
             "Ratios read each strategy's best config from exhaustive's table (the same measurements for all). Device",
             "evaluations count configurations timed on the GPU (pruned and duplicate-binary configs cost none); each",
             "searcher's budget is a quarter of exhaustive's device evaluations. Configs examined include the pruned ones.",
             "Wall time is the search alone, after the space was compiled once for sm_90 on the CPU cores.", "",
             table(report["kernels"]), ""]
    for kernel in report["kernels"]:
        lines.append(f"- {kernel['kernel']}: {kernel['space_size']} configs, compiled in {kernel['compile_s']} s ({kernel['problem']}); "
                     f"searcher budget {kernel.get('searcher_budget')} device evaluations")
    return "\n".join(lines) + "\n"


def replay_report(path: Path, seeds: int, kernels: list[str]) -> str:
    """Every strategy replayed `seeds` times on each kernel's recorded exhaustive table, as markdown."""
    from pipeline.tuning.replay import load_tables, quarter_budget, replay_many

    tables = load_tables(path)
    lines = [f"# Replay of H200 measurements: {path}", "",
             "Not a new measurement. Each strategy searched each kernel's space with seeds 0..{} against the times".format(seeds - 1),
             "measured by exhaustive search on the H200 (pruned and duplicate-binary configs free, as in the run; every",
             "time x (1 + 0.007 N(0,1)), the spread of repeated H200 measurements). Budget: a quarter of exhaustive's",
             "device evaluations. Success: the config found is within 3% of the exhaustive best in the recorded table.",
             f"Command: `python bench/tune_h200.py --replay {path} --seeds {seeds} --out OUTDIR`", "",
             "| kernel | strategy | success rate | median ratio | worst ratio | median device evals (budget; exhaustive) |",
             "|---|---|---|---|---|---|"]
    for kernel in kernels:
        if kernel not in tables:
            continue
        table = tables[kernel]
        for name in STRATEGIES:
            summary = replay_many(table, name, seeds)
            lines.append(f"| {kernel} | {name} | {summary.success_rate:.2f} | {summary.median_ratio:.4f} | {summary.worst_ratio:.4f} | "
                         f"{summary.median_evaluations:g} ({quarter_budget(table)}; {table.device_evaluations}) |")
    return "\n".join(lines) + "\n"


def environment(simulate: bool) -> dict:
    import torch
    import triton

    env = {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]}
    if not simulate and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--kernels", default=",".join(CASES))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--workers", type=int, default=max(1, min(16, (os.cpu_count() or 2) - 1)))
    parser.add_argument("--simulate", action="store_true", help="no GPU: a scripted device, no autotune")
    parser.add_argument("--dry-run", action="store_true", help="build spaces and recipes only")
    parser.add_argument("--replay", metavar="PATH", help="replay strategies against the exhaustive tables of a tune_h200.json (no GPU)")
    parser.add_argument("--seeds", type=int, default=50, help="with --replay: seeds per strategy and kernel")
    parser.add_argument("--deadline-s", type=float, default=480, help="past this, remaining searches are skipped (and said so)")
    args = parser.parse_args()
    args.deadline = time.monotonic() + args.deadline_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(message, flush=True)

    if args.replay:
        text = replay_report(Path(args.replay), args.seeds, [k for k in args.kernels.split(",")])
        (out / "tune_replay.md").write_text(text)
        print(text)
        return

    cases = [CASES[name]() for name in args.kernels.split(",")]
    if args.dry_run:
        for case in cases:
            log(f"{case.name}: {case.space.size()} configs; recipe {case.recipe.signature()}; default {dict(case.space.default)}")
        return
    report = {"command": " ".join(sys.argv), "environment": environment(args.simulate), "kernels": []}
    for case in cases:
        try:
            result = bench_case(case, args, log)
        except Exception as exc:  # keep going: one broken kernel must not lose the others
            log(f"{case.name}: failed: {type(exc).__name__}: {exc}")
            report["kernels"].append({"kernel": case.name, "error": f"{type(exc).__name__}: {exc}"[:2000], "runs": [],
                                      "space_size": 0, "compile_s": 0, "problem": ""})
            continue
        source = result.pop("tuned_source")
        if source:
            (out / f"{case.name}_tuned.py").write_text(source)
        report["kernels"].append(result)
        (out / "tune_h200.json").write_text(json.dumps(report, indent=1))  # after every kernel: a cut run keeps it
    (out / "tune_h200.json").write_text(json.dumps(report, indent=1))
    (out / "tune_h200.md").write_text(markdown(report))
    print("\n" + table(report["kernels"]))


if __name__ == "__main__":
    main()
