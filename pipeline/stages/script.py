"""A scripted model for demos, tests and hand-written GPU experiments: replies read from a YAML file, one queue per
agent (`code`, `profile`, `debug`), served through the real transport, accounting and structured-reply code."""

from __future__ import annotations

import threading
from pathlib import Path

import yaml

from pipeline.llm.chat import ChatRequest, ChatResponse, Usage
from pipeline.llm.errors import TransportError

AGENTS = ("code", "profile", "debug")


class ScriptError(ValueError):
    """A script file that cannot be used; the message says why."""


class AgentScript:
    """Answers each request with the next reply in the queue of the agent that asked (named on the first line of
    its system prompt, `egg agent: NAME`). An empty queue answers with a protocol_error, like a broken server."""

    def __init__(self, queues: dict[str, list[str]]) -> None:
        unknown = set(queues) - set(AGENTS)
        if unknown:
            raise ScriptError(f"unknown agent(s) {sorted(unknown)} in script: expected {', '.join(AGENTS)}")
        self._queues = {name: list(queues.get(name, [])) for name in AGENTS}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path) -> AgentScript:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as error:
            raise ScriptError(f"{path}: {error}") from None
        if not isinstance(data, dict) or not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in data.values()):
            raise ScriptError(f"{path}: expected a mapping of agent name to a list of reply texts")
        return cls(data)

    @staticmethod
    def agent_of(request: ChatRequest) -> str:
        return request.conversation.system.partition("\n")[0].removeprefix("egg agent: ").strip()

    def skip(self, request: ChatRequest) -> None:
        """Drop the reply this request would get (it was answered from the store of a resumed run)."""
        with self._lock:
            queue = self._queues.get(self.agent_of(request))
            if queue:
                queue.pop(0)

    def complete(self, request: ChatRequest) -> ChatResponse:
        agent = self.agent_of(request)
        with self._lock:
            queue = self._queues.get(agent)
            if not queue:
                raise TransportError("protocol_error", f"the script has no more replies for agent {agent!r}")
            text = queue.pop(0)
        words_in = sum(len(m.content.split()) for m in request.conversation.messages)
        return ChatResponse(text=text, usage=Usage(input_tokens=words_in, output_tokens=len(text.split())), finish_reason="stop", model=request.spec.model)
