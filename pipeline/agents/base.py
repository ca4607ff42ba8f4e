"""What the agents share: prompt templates, and asking the model for a typed reply."""

from __future__ import annotations

from typing import TypeVar

import jinja2
from pydantic import BaseModel

from pipeline.llm.chat import Conversation
from pipeline.llm.client import LLMClient
from pipeline.llm.structured import Parsed, StructuredFailure, ask

T = TypeVar("T", bound=BaseModel)

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("pipeline.agents", "prompts"),
    undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
    keep_trailing_newline=True,
)


def render(name: str, **values: object) -> str:
    """A prompt template (`prompts/NAME.j2`) filled in."""
    return _TEMPLATES.get_template(f"{name}.j2").render(**values)


class Agent:
    """One role: a system prompt and a client labelled with the agent's name."""

    name: str = ""

    def __init__(self, client: LLMClient, knowledge: str) -> None:
        self.client = client.labelled(agent=self.name)
        self.system = render(f"{self.name}_system", knowledge=knowledge)

    def ask(self, template: str, reply_type: type[T], **values: object) -> Parsed[T] | StructuredFailure:
        """A fresh conversation: only what this step needs travels (the paper's selective context)."""
        return ask(self.client, Conversation(system=self.system), render(template, **values), reply_type)
