"""Asking for a typed reply: the schema shown is generated from the reply type, code travels in fenced blocks,
and a malformed reply goes back to the model with the reason, a bounded number of times.

A reply type is a pydantic model. A field annotated `Annotated[str, CodeBlock("python")]` is not part of the
JSON: the model writes it in a fenced block of that language. Every other field must appear in the JSON:
nothing is ever filled in from a default.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.llm.chat import Conversation
from pipeline.llm.client import LLMClient

T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"^(?P<fence>`{3,})[ \t]*(?P<lang>[\w+.#-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
_ALIASES = {"py": "python", "python3": "python", "jsonc": "json"}
_TRUNCATED = {"length", "max_tokens"}


@dataclass(frozen=True)
class CodeBlock:
    """Marks a str field whose value the model gives in a fenced block of `language`."""

    language: str = "python"


@dataclass(frozen=True)
class FencedBlock:
    """One fenced block of a reply; `language` is lower-case and empty when the fence names none."""

    language: str
    body: str


class ReplyError(ValueError):
    """Why a reply could not be read; sent back to the model as is."""


class StructuredFailure(BaseModel):
    """The model did not produce a valid reply within the allowed repairs. `errors` holds one reason per reply."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["malformed_reply"] = "malformed_reply"
    reply_type: str
    errors: tuple[str, ...]
    last_reply: str
    conversation: Conversation


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A valid reply, and the conversation that led to it (its last turn is the reply)."""

    value: T
    conversation: Conversation


def fenced_blocks(text: str) -> list[FencedBlock]:
    """Every closed fenced block in `text`, in order."""
    blocks = []
    for match in _FENCE.finditer(text):
        language = match["lang"].lower()
        blocks.append(FencedBlock(language=_ALIASES.get(language, language), body=match["body"]))
    return blocks


def extract_code(text: str, language: str = "python") -> str | None:
    """The last fenced block in `language` (or, if none is tagged so, the last untagged one); None if neither."""
    blocks = fenced_blocks(text)
    for wanted in (_ALIASES.get(language, language), ""):
        matching = [block.body for block in blocks if block.language == wanted]
        if matching:
            return matching[-1]
    return None


def code_fields(reply_type: type[BaseModel]) -> dict[str, CodeBlock]:
    """The fields of `reply_type` that travel as fenced code, by name."""
    found = {}
    for name, field in reply_type.model_fields.items():
        for marker in field.metadata:
            if isinstance(marker, CodeBlock):
                found[name] = marker
    languages = [marker.language for marker in found.values()]
    if len(set(languages)) != len(languages):
        raise TypeError(f"{reply_type.__name__}: two code fields share a language, so replies would be ambiguous")
    return found


def reply_schema(reply_type: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema the model is shown: the reply type's own, without its code fields."""
    schema = reply_type.model_json_schema()
    properties = schema.get("properties", {})
    for name in code_fields(reply_type):
        properties.pop(name, None)
    # Required unless its default is None, which means "the model did not say": nothing is filled in for it.
    schema["required"] = [name for name in properties if not _may_omit(reply_type.model_fields[name])]
    return schema


def reply_instructions(reply_type: type[BaseModel]) -> str:
    """How to answer: the schema, and one line per code field."""
    schema = json.dumps(reply_schema(reply_type), indent=2)
    lines = [
        "Answer with one JSON object in a ```json fenced block that matches this JSON schema.",
        "Give every field listed as required.",
        f"```json\n{schema}\n```",
    ]
    for name, marker in code_fields(reply_type).items():
        description = reply_type.model_fields[name].description or name
        lines.append(f"Then give `{name}` ({description}) in one ```{marker.language} fenced block.")
    return "\n".join(lines)


def parse_reply(text: str, reply_type: type[T], *, truncated: bool = False) -> T:
    """The reply as `reply_type`, or ReplyError saying what is wrong."""
    try:
        data = _json_object(text) if _json_required(reply_type) else _json_object_if_any(text)
        data.update(_code_values(text, reply_type, data))
        missing = [name for name, field in reply_type.model_fields.items() if not _may_omit(field) and name not in data]
        if missing:
            raise ReplyError(f"missing field(s) {', '.join(missing)}: every required field must be given")
        return reply_type.model_validate(data)
    except ValidationError as error:
        raise _with_cut_note(ReplyError(_validation_summary(error)), truncated) from None
    except ReplyError as error:
        raise _with_cut_note(error, truncated) from None


def ask(
    client: LLMClient, conversation: Conversation, prompt: str, reply_type: type[T], *, repairs: int | None = None
) -> Parsed[T] | StructuredFailure:
    """Ask `prompt` for a `reply_type`; send parse errors back up to `repairs` times. LLMCallError passes through."""
    repairs = client.settings.structured_repairs if repairs is None else repairs
    conversation = conversation.with_user(f"{prompt}\n\n{reply_instructions(reply_type)}")
    errors: list[str] = []
    while True:
        response = client.complete(conversation)
        conversation = conversation.with_assistant(response.text)
        try:
            truncated = response.finish_reason in _TRUNCATED
            return Parsed(value=parse_reply(response.text, reply_type, truncated=truncated), conversation=conversation)
        except ReplyError as error:
            errors.append(str(error))
        if len(errors) > repairs:
            return StructuredFailure(
                reply_type=reply_type.__name__,
                errors=tuple(errors),
                last_reply=response.text,
                conversation=conversation,
            )
        conversation = conversation.with_user(_feedback(errors[-1], reply_type))


def _json_required(reply_type: type[BaseModel]) -> bool:
    """Whether the reply needs a JSON block: some required field does not travel as fenced code."""
    code = code_fields(reply_type)
    return any(not _may_omit(field) and name not in code for name, field in reply_type.model_fields.items())


def _may_omit(field: Any) -> bool:
    """A field the model may leave out: its default is None, read as "not said". Other defaults must be stated."""
    return not field.is_required() and field.default is None


def _json_object_if_any(text: str) -> dict[str, Any]:
    has_json = any(block.language == "json" for block in fenced_blocks(text)) or text.strip().startswith("{")
    return _json_object(text) if has_json else {}


def _json_object(text: str) -> dict[str, Any]:
    candidates = [block.body for block in fenced_blocks(text) if block.language == "json"]
    if not candidates and text.strip().startswith("{"):
        candidates = [text.strip()]  # a bare object, as servers with JSON modes return
    if not candidates:
        raise ReplyError("no ```json fenced block found")
    try:
        data = json.loads(candidates[-1])
    except json.JSONDecodeError as error:
        raise ReplyError(f"the JSON block is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ReplyError(f"the JSON block holds a {type(data).__name__}, not an object")
    return data


def _code_values(text: str, reply_type: type[BaseModel], data: dict[str, Any]) -> dict[str, str]:
    values = {}
    for name, marker in code_fields(reply_type).items():
        code = extract_code(text, marker.language)
        if code is None and not isinstance(data.get(name), str):
            raise ReplyError(f"no ```{marker.language} fenced block found for `{name}`")
        values[name] = code if code is not None else data[name]
    return values


def _validation_summary(error: ValidationError) -> str:
    problems = [f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in error.errors()[:5]]
    more = f" (and {error.error_count() - 5} more)" if error.error_count() > 5 else ""
    return "invalid field(s): " + "; ".join(problems) + more


def _with_cut_note(error: ReplyError, truncated: bool) -> ReplyError:
    return ReplyError(f"{error} (the reply was cut off at the token limit)") if truncated else error


def _feedback(error: str, reply_type: type[BaseModel]) -> str:
    # The instructions and schema are already in the history (which is sent in full): do not repeat them.
    blocks = ["```json", *(f"```{marker.language}" for marker in code_fields(reply_type).values())]
    return (
        f"Your reply could not be used: {error}.\n"
        f"Reply again, in full, with the {' and '.join(blocks)} fenced block(s) exactly as instructed above."
    )
