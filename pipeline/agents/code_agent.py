"""The Code Agent: writes seeds of different paradigms, and rewrites a kernel against a diagnosis."""

from __future__ import annotations

from pipeline.agents.base import Agent
from pipeline.agents.replies import Diagnosis, KernelReply
from pipeline.llm.structured import Parsed, StructuredFailure


class CodeAgent(Agent):
    name = "code"

    def seed(self, problem_source: str, paradigm: str, index: int, count: int, feedback: str = "") -> Parsed[KernelReply] | StructuredFailure:
        """Seed `index` of `count`, following `paradigm`."""
        return self.ask("code_seed", KernelReply, problem_source=problem_source, paradigm=paradigm, index=index, count=count, feedback=feedback)

    def transform(self, problem_source: str, kernel: str, paradigm: str, feedback: str = "") -> Parsed[KernelReply] | StructuredFailure:
        """The seed after expert transformations: fusion, dataflow reorganization, algebraic simplification."""
        return self.ask("code_transform", KernelReply, problem_source=problem_source, kernel=kernel, paradigm=paradigm, feedback=feedback)

    def rewrite(
        self, kernel: str, stage: str, objective: str, diagnosis: Diagnosis, decisions: list, time_text: str, feedback: str = ""
    ) -> Parsed[KernelReply] | StructuredFailure:
        """A new version of `kernel` that removes the diagnosed bottleneck, keeping earlier decisions."""
        return self.ask(
            "code_rewrite",
            KernelReply,
            kernel=kernel,
            stage=stage,
            objective=objective,
            diagnosis=diagnosis.model_dump_json(indent=1),
            decisions=decisions,
            time_text=time_text,
            feedback=feedback,
        )
