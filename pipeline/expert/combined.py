"""A model's agents with the expert's seeds added to its multi-seed search.

The model answers every seed but the last, which is the expert's first (its best-founded paradigm), so the search
always holds one kernel made by rules; a kernel carrying the expert's record line is transformed, rewritten and
repaired by the expert (it can read its own record), every other one by the model; plans come from the model, and
from the rules when the model has none. With a single seed the model keeps it.

Wiring it is the session's choice (pipeline/sessions/backends.py builds backends): `WithExpertSeeds(ModelBackend(...))`.
"""

from __future__ import annotations

from pipeline.agents.backend import Backend, Measurements, NoProposal
from pipeline.agents.replies import DebugReply, Diagnosis, KernelReply
from pipeline.expert.backend import ExpertBackend
from pipeline.expert.record import read
from pipeline.types import EvalResult


class WithExpertSeeds:
    """Backend: `model` for its own kernels and plans, the expert for its seed and its own kernels."""

    proposes_kernels = True

    def __init__(self, model: Backend, expert: Backend | None = None) -> None:
        self.model, self.expert = model, expert or ExpertBackend()
        self.name = f"{model.name} + expert seeds"
        self.asks_again_on_repeat = getattr(model, "asks_again_on_repeat", False)

    def _for(self, kernel: str) -> Backend:
        return self.expert if read(kernel) is not None else self.model

    def seed(self, problem_source: str, paradigm: str, index: int, count: int, feedback: str = "") -> KernelReply | NoProposal:
        if count >= 2 and index == count:
            return self.expert.seed(problem_source, paradigm, 1, 1, feedback)
        return self.model.seed(problem_source, paradigm, index, count, feedback)

    def transform(self, problem_source: str, kernel: str, paradigm: str, feedback: str = "") -> KernelReply | NoProposal:
        return self._for(kernel).transform(problem_source, kernel, paradigm, feedback)

    def diagnose(self, kernel: str, measurements: Measurements, stage: str, objective: str, feedback: str = "") -> Diagnosis | NoProposal:
        plan = self.model.diagnose(kernel, measurements, stage, objective, feedback)
        return plan if isinstance(plan, Diagnosis) else self.expert.diagnose(kernel, measurements, stage, objective, feedback)

    def rewrite(self, kernel: str, stage: str, objective: str, diagnosis: Diagnosis, decisions: list, time_text: str,
                feedback: str = "") -> KernelReply | NoProposal:
        return self._for(kernel).rewrite(kernel, stage, objective, diagnosis, decisions, time_text, feedback)

    def repair(self, kernel: str, verdict: EvalResult, problem_source: str, feedback: str = "") -> DebugReply | NoProposal:
        return self._for(kernel).repair(kernel, verdict, problem_source, feedback)
