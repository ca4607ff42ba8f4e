"""Numbers are searched, not guessed: the tunables a Code Agent names go to the tuning engine, which measures each
configuration with the real judge (the candidate with that configuration baked into its source)."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence

from pipeline.agents.replies import Tunable
from pipeline.tuning.measurement import Measurement, TuneStatus
from pipeline.tuning.rewrite import RewriteError, bake_config
from pipeline.tuning.space import LAUNCH_OPTIONS, Choice, Config, Space
from pipeline.types import EvalResult, Status

_STATUS = {
    Status.OK: TuneStatus.OK,
    Status.COMPILE_ERROR: TuneStatus.COMPILE_ERROR,
    Status.MISMATCH: TuneStatus.MISMATCH,
    Status.TIMEOUT: TuneStatus.TIMEOUT,
}

# Judges one candidate source: (candidate id, verdict).
JudgeSource = Callable[[str, str], tuple[int, EvalResult]]


def tunable_space(tunables: Sequence[Tunable]) -> Space | None:
    """A space of the values the agent named (one Choice per tunable with more than one value), or None."""
    params = tuple(Choice(t.name, tuple(sorted(set(t.values)))) for t in tunables if len(set(t.values)) > 1)
    return Space(params) if params else None


def tuned_kernel(source: str, names: Sequence[str]) -> str | None:
    """The @triton.jit function whose constexpr parameters include every tunable that is not a launch option."""
    wanted = {n for n in names if n not in LAUNCH_OPTIONS}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            constexprs = {a.arg for a in node.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}
            if wanted <= constexprs:
                return node.name
    return None


class JudgeEvaluator:
    """The tuning engine's Evaluator over whole candidates: each configuration is baked into the source and
    judged with every check (correctness included), so a configuration that changes results is rejected."""

    def __init__(self, source: str, kernel: str, judge_source: JudgeSource) -> None:
        self.source, self.kernel, self.judge_source = source, kernel, judge_source
        self.judged: list[tuple[Config, str, int, EvalResult]] = []

    def evaluate(self, configs: Sequence[Config]) -> list[Measurement]:
        return [self._one(config) for config in configs]

    def _one(self, config: Config) -> Measurement:
        try:
            variant = bake_config(self.source, self.kernel, config)
        except RewriteError as error:
            return Measurement(config, TuneStatus.COMPILE_ERROR, detail=str(error), measured=False)
        cid, result = self.judge_source(variant, json.dumps(dict(config), sort_keys=True))
        self.judged.append((config, variant, cid, result))
        time_ms = result.timing.median_ms if result.ok and result.timing else None
        return Measurement(config, _STATUS.get(result.status, TuneStatus.RUNTIME_ERROR), time_ms, result.reason, trials=result.timing.trials if time_ms else 0)
