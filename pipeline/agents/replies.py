"""What each agent must answer, as types: the JSON schema the model is shown is generated from these."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from pipeline.llm.structured import CodeBlock


class _Reply(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Evidence(_Reply):
    metric: str = Field(description="a metric name from the profile, e.g. dram_throughput_pct")
    value: str = Field(description="its value as shown")
    interpretation: str = Field(description="what the value means for this kernel")


class Fix(_Reply):
    change: str = Field(description="one concrete change to the kernel")
    expected_gain_pct: float = Field(ge=0, description="expected time saved, in percent")


class Bottleneck(_Reply):
    name: str = Field(description="e.g. memory_bound, occupancy_limited_registers, launch_bound")
    evidence: list[Evidence] = Field(min_length=1)
    fixes: list[Fix] = Field(min_length=1, description="ranked by expected gain, largest first")


class Diagnosis(_Reply):
    """The Profile Agent's answer."""

    bottlenecks: list[Bottleneck] = Field(min_length=1)


class Tunable(_Reply):
    name: str = Field(description="a tl.constexpr parameter, or num_warps / num_stages")
    values: list[int] = Field(min_length=1, description="values worth searching")


class KernelReply(_Reply):
    """The Code Agent's answer: a whole candidate file."""

    # Only the kernel is required: a reply that is just a correct file in a fenced block is usable. The rest is
    # None when the model did not say it.
    paradigm: str | None = Field(default=None, description="the algorithmic structure, in a few words")
    rationale: str | None = Field(default=None, description="why this should be correct and fast, briefly")
    tunables: list[Tunable] | None = Field(default=None, description="numbers the tuning engine should search")
    kernel: Annotated[str, CodeBlock("python")] = Field(description="the complete candidate file defining ModelNew")


class DebugReply(_Reply):
    """The Debug Agent's answer: the cause and the repaired file."""

    cause: str | None = Field(default=None, description="what was wrong, in one or two sentences")
    kernel: Annotated[str, CodeBlock("python")] = Field(description="the complete repaired candidate file")
