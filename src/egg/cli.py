"""The `egg` command: parse, call, print."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

try:
    from egg.llm.cli import app as llm_app
except ImportError as missing:  # the GPU machine's image lacks pydantic and the SDKs; check and profile work there
    llm_app = typer.Typer(help=f"Unavailable in this environment ({missing}).")

app = typer.Typer(help="egg: faster, verified Triton kernels from PyTorch programs.", no_args_is_help=True, add_completion=False)
app.add_typer(llm_app, name="llm")
err = Console(stderr=True)


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


def resolve_device(device: Device) -> str:
    """`auto` means cuda when a GPU is visible, else cpu, and says so: never a silent switch."""
    if device is not Device.auto:
        if device is Device.cuda:
            import torch

            if not torch.cuda.is_available():
                fail("--device cuda, but no CUDA GPU is visible", "use --device cpu to check correctness through Triton's interpreter")
        return device.value
    import torch

    if torch.cuda.is_available():
        return "cuda"
    err.print("[yellow]no CUDA GPU visible: checking on the CPU through Triton's interpreter (correctness only, no timing)[/]")
    return "cpu"


def fail(message: str, hint: str = "", code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}" + (f"\n[dim]hint: {hint}[/]" if hint else ""))
    raise typer.Exit(code)


@app.command()
def check(
    candidate: Path = typer.Argument(..., help="A file defining class ModelNew."),
    ref: Path = typer.Option(..., "--ref", help="The KernelBench-format problem file it must match."),
    device: Device = typer.Option(Device.auto, help="cuda (timed) or cpu (Triton's interpreter, correctness only)."),
    as_json: bool = typer.Option(False, "--json", help="Print the EvalResult as JSON (top-level `status`)."),
    trials: int = typer.Option(5, min=1, help="Correctness trials with fresh seeds (plus a signed-input trial)."),
    timing_trials: int = typer.Option(100, min=5, help="Timed calls per measurement (GPU)."),
    compile_timeout: float = typer.Option(300.0, help="Seconds for import, construction and the first call."),
    run_timeout: float = typer.Option(600.0, help="Seconds for everything after the first call."),
    cuda_graph: bool = typer.Option(False, help="Also time CUDA-graph replay (GPU)."),
) -> None:
    """Judge a candidate strictly against a problem. Exit status 0 only when the verdict is ok."""
    from egg.evaluator import evaluate
    from egg.problems.loader import ProblemError, load_candidate, load_problem
    from egg.report.verdict import render
    from egg.types import EvalOptions, to_jsonable

    try:
        problem, cand = load_problem(ref), load_candidate(candidate)
    except ProblemError as exc:
        fail(str(exc))
    options = EvalOptions(
        device=resolve_device(device),
        correctness_trials=trials,
        timing_trials=timing_trials,
        compile_timeout_s=compile_timeout,
        run_timeout_s=run_timeout,
        cuda_graph=cuda_graph,
    )
    if not as_json:
        err.print(f"[dim]judging {cand.path} on {options.device} ...[/]")
    result = evaluate(problem, cand, options)
    if as_json:
        sys.stdout.write(json.dumps(to_jsonable(result), indent=2) + "\n")
    else:
        render(result, Console())
    raise typer.Exit(0 if result.ok else 1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
