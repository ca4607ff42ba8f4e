"""What `egg optimize` leaves behind: best.py (a drop-in ModelNew), report.md (per stage, like the paper's
ablation) and evidence.json (every number behind the verdict)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.llm.accounting import Ledger
from pipeline.report.compile_gap import versus_compile
from pipeline.stages.method import STAGE_NAMES, Progress
from pipeline.types import EvalOptions, EvalResult, Problem, to_jsonable


@dataclass(frozen=True)
class Outcome:
    """Everything one optimization run produced."""

    problem: Problem
    run_id: str
    options: EvalOptions
    model: str
    progress: Progress
    final: EvalResult | None  # the winner re-verified in a fresh process; None when no candidate passed
    ledger: Ledger
    reference: dict[str, Any]  # the reference worker's result (baselines, environment)
    replayed_calls: int
    verify_seed: int | None = None  # the held-out seed `final` was judged on (weights, inputs, trials)
    reverify_skipped: str = ""  # why the winner was not re-verified (it is not best.py): `final` is then its search verdict
    reverify_past_budget_s: float = 0.0  # how far the re-verification ran past the wall budget, if it did
    profile: dict[str, Any] | None = None  # the kept kernel's ProfileReport (JSON) where the run profiled it

    @property
    def best_is_reference(self) -> bool:
        return self.final is None or not self.final.ok

    @property
    def beats_eager(self) -> bool | None:
        """None when nothing was timed (cpu)."""
        if self.best_is_reference or not self.final.speedups:
            return None
        return self.final.speedups.get("eager", 0.0) > 1.0

    @property
    def keeps_reference(self) -> bool:
        """best.py is the reference: nothing passed, or (timed) nothing beat eager. The result is never worse than
        the reference."""
        return self.best_is_reference or self.beats_eager is False

    def versus_compile(self) -> str:
        """"" unless best.py is a kernel slower than torch.compile; then that, with the profiler's reason."""
        if self.keeps_reference or not self.final.speedups:
            return ""
        judged = self.final.baselines.get("compile")
        stored = self.reference.get("baselines", {}).get("compile")
        compile_ms = judged.median_ms if judged else stored.get("median_ms") if isinstance(stored, dict) else None
        return versus_compile(self.final.speedups, kernel_ms=self.final.timing.median_ms if self.final.timing else None,
                              compile_ms=compile_ms, floor_ms=self.final.physical_floor_ms, profile=self.profile)

    def headline(self) -> str:
        if self.best_is_reference:
            why = f" (the winner failed re-verification: {self.final.reason})" if self.final else ""
            return f"no candidate passed the judge{why}: best.py is the reference itself"
        kernel, unverified = ("a kernel that passed the judge", f" (not re-verified: {self.reverify_skipped})") if self.reverify_skipped else ("a verified kernel", "")
        if self.beats_eager is None:
            return f"{kernel} (correctness only on this device: not timed){unverified}"
        speed = ", ".join(f"{v:.3f}x vs {k}" for k, v in self.final.speedups.items())
        if not self.beats_eager:
            return f"nothing beat the reference: best.py is the reference itself (the fastest verified candidate, {self.progress.best_id}, reached {speed})"
        return f"{kernel}, {speed}{unverified}"


def write_outputs(out: Path, outcome: Outcome) -> None:
    (out / "best.py").write_text(best_source(outcome), encoding="utf-8")
    (out / "report.md").write_text(report(outcome), encoding="utf-8")
    (out / "evidence.json").write_text(json.dumps(evidence(outcome), indent=1), encoding="utf-8")


def best_source(outcome: Outcome) -> str:
    head = f"# egg {outcome.run_id}: {outcome.headline()}\n# problem: {outcome.problem.path}\n"
    if outcome.versus_compile():
        head += f"# {outcome.versus_compile()}\n"
    if outcome.keeps_reference:
        reference = Path(outcome.problem.path).read_text(encoding="utf-8")
        return head + reference + "\n\n# egg: the reference itself, as a drop-in ModelNew.\nModelNew = Model\n"
    return head + outcome.progress.best_source


def _stage_rows(outcome: Outcome) -> list[str]:
    eager = outcome.reference.get("baselines", {}).get("eager", {}).get("median_ms")
    rows = ["| stage | judged | passed | kept | best median ms | speedup vs eager | decision |", "|---|---|---|---|---|---|---|"]
    decisions = {d.stage: d for d in outcome.progress.decisions}
    for stage in STAGE_NAMES:
        tried = [a for a in outcome.progress.attempts if a.stage == stage]
        decision = decisions.get(stage)
        best_ms = decision.median_ms if decision else None
        speedup = f"{eager / best_ms:.3f}x" if eager and best_ms else "-"
        rows.append(
            f"| {stage} | {len(tried)} | {sum(a.status == 'ok' for a in tried)} | {sum(a.accepted for a in tried)} | "
            f"{f'{best_ms:.4f}' if best_ms else '-'} | {speedup} | {decision.summary if decision else 'not reached'} |"
        )
    return rows


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def report(outcome: Outcome) -> str:
    p = outcome.progress
    lines = [
        f"# egg optimize: {outcome.problem.name}",
        "",
        f"**{outcome.headline()}**",
        "",
        *([f"**{_sentence(outcome.versus_compile())}**", ""] if outcome.versus_compile() else []),
        f"Run `{outcome.run_id}`, model {outcome.model}, device {outcome.options.device}"
        + (" (correctness only: Triton's interpreter, no timing)" if outcome.options.device == "cpu" else "") + ".",
    ]
    if not outcome.keeps_reference and p.best_id is not None:
        lines += ["", f"best.py is candidate {p.best_id}."]
    if p.stopped:
        lines += ["", f"The run stopped early: {p.stopped}." if p.stopped.startswith("stopped") else
                  f"The run stopped early: budget exhausted ({p.stopped})."]
    lines += ["", "## Stages", "", *_stage_rows(outcome), "", "## Every candidate", "",
              "| id | stage | origin | status | median ms | kept | note / reason |", "|---|---|---|---|---|---|---|"]
    for a in p.attempts:
        text = (a.note + " / " if a.note else "") + a.reason
        lines.append(f"| {a.candidate_id} | {a.stage} | {a.origin} | {a.status} | {f'{a.median_ms:.4f}' if a.median_ms else '-'} | {'yes' if a.accepted else ''} | {text[:140].replace('|', '/')} |")
    lines += ["", "## Model calls", "", "| by | calls | failed | input tokens | output tokens | cost USD |", "|---|---|---|---|---|---|"]
    for label in ("stage", "agent"):
        for key, t in outcome.ledger.totals(label).items():
            lines.append(f"| {label} {key} | {t.calls} | {t.failed_calls} | {t.input_tokens} | {t.output_tokens} | {t.cost_usd:.4f}{'+' if t.unpriced_calls else ''} |")
    if outcome.replayed_calls:
        lines += ["", f"{outcome.replayed_calls} model replies were replayed from the store (resumed run)."]
    if outcome.reverify_skipped:
        lines += ["", "## Final verdict: not re-verified", "", f"The winner was not judged again in a fresh process on a held-out seed: "
                  f"{outcome.reverify_skipped}. Its verdict from the search stands ({outcome.final.status.value}: {outcome.final.reason})."
                  if outcome.final else f"The winner was not re-verified: {outcome.reverify_skipped}."]
    elif outcome.final is not None:
        seed = f", held-out seed {outcome.verify_seed}" if outcome.verify_seed is not None else ""
        shapes = f" On inputs of other shapes: {outcome.final.generality}." if outcome.final.generality else ""
        lines += ["", f"## Final verdict (fresh process{seed})", "", f"{outcome.final.status.value}: {outcome.final.reason}.{shapes}"]
        if outcome.reverify_past_budget_s > 0:
            lines += ["", f"The re-verification ended {outcome.reverify_past_budget_s:.0f} s past the wall budget: a kernel kept as "
                      "best.py is always judged again."]
    return "\n".join(lines) + "\n"


def evidence(outcome: Outcome) -> dict[str, Any]:
    ledger = outcome.ledger
    return {
        "problem": to_jsonable(outcome.problem),
        "run_id": outcome.run_id,
        "model": outcome.model,
        "options": to_jsonable(outcome.options),
        "headline": outcome.headline(),
        "best_is_reference": outcome.best_is_reference,
        "beats_eager": outcome.beats_eager,
        "keeps_reference": outcome.keeps_reference,
        "versus_compile": outcome.versus_compile(),  # "" unless best.py is a kernel slower than torch.compile
        "best_id": None if outcome.keeps_reference else outcome.progress.best_id,  # the candidate best.py is
        "verdict": to_jsonable(outcome.final) if outcome.final else None,
        "verification_seed": outcome.verify_seed,
        "reverified": outcome.final is not None and not outcome.reverify_skipped,
        "reverify_skipped": outcome.reverify_skipped,
        "generality": outcome.final.generality if outcome.final else "",
        "reverify_past_budget_s": round(outcome.reverify_past_budget_s, 1),
        "baselines": outcome.reference.get("baselines", {}),
        "decisions": [dataclasses.asdict(d) for d in outcome.progress.decisions],
        "attempts": [dataclasses.asdict(a) for a in outcome.progress.attempts],
        "stopped": outcome.progress.stopped,
        "llm": {
            "total": ledger.total().model_dump(),
            "by_stage": {str(k): v.model_dump() for k, v in ledger.totals("stage").items()},
            "by_agent": {str(k): v.model_dump() for k, v in ledger.totals("agent").items()},
            "replayed_calls": outcome.replayed_calls,
        },
        "environment": outcome.reference.get("environment", {}),
    }
