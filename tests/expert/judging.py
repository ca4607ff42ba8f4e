"""Judging expert candidates in the tests: the real judge on CPU (Triton's interpreter), with fewer trials."""

from __future__ import annotations

from pathlib import Path

from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, EvalResult

# Inputs of other shapes are judged in test_shape_guard.py: the expert's seeds refuse them (their shape guard).
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1, other_shapes=False)


def judge_source(judge: Judge, problem: Path, source: str, folder: Path, name: str) -> EvalResult:
    """Write the candidate to a real file (Triton reads source files) and judge it against `problem`."""
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    return judge.evaluate(load_problem(problem), load_candidate(path))


def verdict_text(result: EvalResult) -> str:
    return f"{result.status.value}: {result.reason}\n{result.log_tail[-1500:]}"


__all__ = ["CPU", "Judge", "judge_source", "verdict_text"]
