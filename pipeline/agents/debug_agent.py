"""The Debug Agent: from a failing kernel and the judge's verdict, the cause and a repaired file."""

from __future__ import annotations

from pipeline.agents.base import Agent
from pipeline.agents.replies import DebugReply
from pipeline.llm.structured import Parsed, StructuredFailure
from pipeline.types import EvalResult

LOG_TAIL_LINES = 30


class DebugAgent(Agent):
    name = "debug"

    def repair(self, kernel: str, verdict: EvalResult, problem_source: str, feedback: str = "") -> Parsed[DebugReply] | StructuredFailure:
        """A repaired version of `kernel`, given why the judge failed it."""
        tail = "\n".join(verdict.log_tail.rstrip().splitlines()[-LOG_TAIL_LINES:])
        return self.ask(
            "debug_repair",
            DebugReply,
            problem_source=problem_source,
            kernel=kernel,
            status=verdict.status.value,
            reason=verdict.reason,
            log_tail=tail,
            feedback=feedback,
        )
