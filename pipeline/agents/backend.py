"""Who proposes at each step of the method: a language model's three agents, the expert backend's rules, or nobody
(a person writes the kernels at the kernel gates).

A backend answers five questions with typed values, or with `NoProposal` saying why it has none; it never raises
for a bad model reply. `feedback` is what a reviewer said when they rejected the previous proposal for the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from textwrap import shorten
from typing import Any, Protocol

from pipeline.agents.code_agent import CodeAgent
from pipeline.agents.debug_agent import DebugAgent
from pipeline.agents.profile_agent import ProfileAgent
from pipeline.agents.replies import DebugReply, Diagnosis, KernelReply
from pipeline.expert.knowledge import for_stage
from pipeline.llm.client import LLMClient
from pipeline.llm.errors import LLMCallError
from pipeline.llm.structured import StructuredFailure
from pipeline.profiler.report import ProfileReport, compact
from pipeline.types import EvalResult


@dataclass(frozen=True)
class NoProposal:
    """A step the backend could not (or does not) answer; `reason` is one line for the timeline."""

    reason: str


@dataclass(frozen=True)
class Measurements:
    """What the Profile role reads about a kernel: the judge's verdict on it and the profiler's report."""

    verdict: EvalResult | None
    report: ProfileReport | None = None
    error: str = ""  # why there is no report, when profiling failed

    def for_model(self) -> dict[str, Any]:
        """The compact JSON a model is shown (a few hundred tokens)."""
        result = self.verdict
        if result is None:
            return {"note": "no measurements"}
        data: dict[str, Any] = {"device": result.device, "kernels_launched": result.kernels_launched}
        if result.timing:
            data["time_ms"] = {"median": result.timing.median_ms, "ci95": [result.timing.ci95_low_ms, result.timing.ci95_high_ms]}
            data["speedups"] = result.speedups
            data["physical_floor_ms"] = result.physical_floor_ms
        else:
            data["note"] = "correctness only on this device: no timings"
        if self.report is not None:
            data["profile"] = compact(self.report)
        if self.error:
            data["profile_error"] = self.error
        return data


# The Optimizer prefixes a stage's verdict feedback with this in a step's feedback: a reviewer's guidance for the
# stage's next proposals, not a rejection of the step's own (each of those is a line without it).
VERDICT_NOTE = "(on an earlier verdict) "


class Backend(Protocol):
    """The three agent roles, as one session's backend sees them."""

    name: str  # announced in the timeline and stored with the session, e.g. "openai:gpt-5.1" or "expert"
    proposes_kernels: bool  # False: a person writes every kernel at its gate
    # True: the backend is deterministic rules. Its NoProposal is its last word (not a model's failed reply), so no
    # gate asks a person about it unless it answers their rejection, and a kernel it proposes that was judged
    # already gets no gate either; the timeline records both. Optional (default False).
    empty_is_final: bool
    # True: a kernel it proposes that was judged already goes back to it, once per try, asking for a different
    # one (a model; not a script of fixed replies, whose order would shift). Optional (default False).
    asks_again_on_repeat: bool

    def seed(self, problem_source: str, paradigm: str, index: int, count: int, feedback: str = "") -> KernelReply | NoProposal: ...

    def transform(self, problem_source: str, kernel: str, paradigm: str, feedback: str = "") -> KernelReply | NoProposal: ...

    def diagnose(self, kernel: str, measurements: Measurements, stage: str, objective: str, feedback: str = "") -> Diagnosis | NoProposal: ...

    def rewrite(self, kernel: str, stage: str, objective: str, diagnosis: Diagnosis, decisions: list, time_text: str,
                feedback: str = "") -> KernelReply | NoProposal: ...

    def repair(self, kernel: str, verdict: EvalResult, problem_source: str, feedback: str = "") -> DebugReply | NoProposal: ...


class ModelBackend:
    """The paper's agents on a language model (or a scripted one): every call a fresh conversation."""

    proposes_kernels = True

    def __init__(self, client: LLMClient, name: str, *, asks_again_on_repeat: bool = True) -> None:
        self.client, self.name, self.asks_again_on_repeat = client, name, asks_again_on_repeat

    def seed(self, problem_source: str, paradigm: str, index: int, count: int, feedback: str = "") -> KernelReply | NoProposal:
        code = CodeAgent(self.client.labelled(stage="algorithm"), for_stage("algorithm"))
        return self._ask(lambda: code.seed(problem_source, paradigm, index, count, feedback))

    def transform(self, problem_source: str, kernel: str, paradigm: str, feedback: str = "") -> KernelReply | NoProposal:
        code = CodeAgent(self.client.labelled(stage="algorithm"), for_stage("algorithm"))
        return self._ask(lambda: code.transform(problem_source, kernel, paradigm, feedback))

    def diagnose(self, kernel: str, measurements: Measurements, stage: str, objective: str, feedback: str = "") -> Diagnosis | NoProposal:
        profile = ProfileAgent(self.client.labelled(stage=stage), for_stage(stage))
        return self._ask(lambda: profile.diagnose(kernel, measurements.for_model(), stage, objective, feedback))

    def rewrite(self, kernel: str, stage: str, objective: str, diagnosis: Diagnosis, decisions: list, time_text: str,
                feedback: str = "") -> KernelReply | NoProposal:
        code = CodeAgent(self.client.labelled(stage=stage), for_stage(stage))
        return self._ask(lambda: code.rewrite(kernel, stage, objective, diagnosis, decisions, time_text, feedback))

    def repair(self, kernel: str, verdict: EvalResult, problem_source: str, feedback: str = "") -> DebugReply | NoProposal:
        debug = DebugAgent(self.client.labelled(stage="debug"), for_stage("debug"))
        return self._ask(lambda: debug.repair(kernel, verdict, problem_source, feedback))

    def _ask(self, call: Callable[[], Any]) -> Any:
        try:
            reply = call()
        except LLMCallError as error:
            return NoProposal(f"model call failed: {error}")
        if isinstance(reply, StructuredFailure):
            return NoProposal(f"malformed reply after {len(reply.errors)} tries: {shorten(reply.errors[-1], 300, placeholder=' ...')}")
        return reply.value


class PersonBackend:
    """No model: the plan comes from the profiler's classification by rules (pipeline.expert.diagnosis), and every
    kernel gate asks the person for the kernel."""

    name = "none (a person writes the kernels)"
    proposes_kernels = False

    def seed(self, problem_source: str, paradigm: str, index: int, count: int, feedback: str = "") -> KernelReply | NoProposal:
        return NoProposal("no model: write the kernel at this gate")

    def transform(self, problem_source: str, kernel: str, paradigm: str, feedback: str = "") -> KernelReply | NoProposal:
        return NoProposal("no model: write the transformed kernel at this gate")

    def diagnose(self, kernel: str, measurements: Measurements, stage: str, objective: str, feedback: str = "") -> Diagnosis | NoProposal:
        from pipeline.expert.diagnosis import diagnose

        return diagnose(measurements, stage)

    def rewrite(self, kernel: str, stage: str, objective: str, diagnosis: Diagnosis, decisions: list, time_text: str,
                feedback: str = "") -> KernelReply | NoProposal:
        return NoProposal("no model: write the rewritten kernel at this gate")

    def repair(self, kernel: str, verdict: EvalResult, problem_source: str, feedback: str = "") -> DebugReply | NoProposal:
        return NoProposal("no model: write the repaired kernel at this gate")
