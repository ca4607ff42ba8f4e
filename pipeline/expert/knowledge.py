"""The knowledge base: one markdown file per topic, chosen per stage."""

from __future__ import annotations

from functools import cache
from importlib import resources

STAGE_TOPICS = {
    "algorithm": ("rules", "fusion", "structures", "precision"),
    "parallel_mapping": ("rules", "parallel_mapping", "hopper"),
    "tiling": ("rules", "tiling", "hopper", "precision"),
    "memory": ("rules", "memory", "hopper"),
    "debug": ("rules", "precision", "debugging"),
}


@cache
def topic(name: str) -> str:
    """One topic's text."""
    return resources.files("pipeline.expert").joinpath("knowledge", f"{name}.md").read_text(encoding="utf-8")


def for_stage(stage: str) -> str:
    """The guidance a stage's prompts carry."""
    return "\n\n".join(topic(name) for name in STAGE_TOPICS[stage])
