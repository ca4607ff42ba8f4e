"""The Profile Agent: from a kernel and its profile, a Diagnosis with evidence and ranked fixes."""

from __future__ import annotations

import json

from pipeline.agents.base import Agent
from pipeline.agents.replies import Diagnosis
from pipeline.llm.structured import Parsed, StructuredFailure


class ProfileAgent(Agent):
    name = "profile"

    def diagnose(self, kernel: str, profile: dict, stage: str, objective: str, feedback: str = "") -> Parsed[Diagnosis] | StructuredFailure:
        """What limits `kernel`, judged from `profile` (plain JSON data)."""
        return self.ask("profile_diagnose", Diagnosis, kernel=kernel, profile=json.dumps(profile, indent=1), stage=stage, objective=objective, feedback=feedback)
