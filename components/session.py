"""A session at a glance: its four stages as a progress line, and its live timeline."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from pipeline.stages.method import ALGORITHM, HARDWARE_STAGES
from pipeline.store.records import EventRecord

STAGES = (ALGORITHM, *HARDWARE_STAGES)
STAGE_TITLES = {"algorithm": "1 · algorithmic structure", "parallel_mapping": "2a · parallel mapping", "tiling": "2b · tiling",
                "memory": "2c · memory"}


@dataclass(frozen=True)
class StageState:
    name: str
    title: str
    objective: str
    state: str  # done, current, waiting (not reached)


def stage_states(current: str, finished_stages: set[str], status: str, outcomes: dict[str, str] | None = None) -> list[StageState]:
    """Each stage as the record says it ended: done, stopped by the person, skipped, or not reached (a session that
    ended before it); the running one current (or cancelled/failed where the session ended there)."""
    outcomes = outcomes or {}
    states = []
    for stage in STAGES:
        summary = outcomes.get(stage.name)
        if summary is not None:
            state = "stopped" if summary.startswith("stopped") else "skipped" if summary.startswith("skipped") else "done"
        elif stage.name in finished_stages:
            state = "done"
        elif stage.name == current and status in ("cancelled", "failed"):
            state = status
        elif status in ("done", "cancelled", "failed"):
            state = "not reached"
        elif stage.name == current:
            state = "current"
        else:
            state = "waiting"
        states.append(StageState(stage.name, STAGE_TITLES[stage.name], stage.objective, state))
    return states


MARKS = {"done": ":green[:material/check_circle:]", "current": ":orange[:material/pending:]",
         "waiting": ":gray[:material/radio_button_unchecked:]", "stopped": ":red[:material/stop_circle:] stopped",
         "skipped": ":gray[:material/skip_next:] skipped", "not reached": ":gray[:material/block:] not reached",
         "cancelled": ":red[:material/cancel:] cancelled", "failed": ":red[:material/error:] failed"}


def render_stage_progress(states: list[StageState]) -> None:
    columns = st.columns(len(states))
    for column, s in zip(columns, states):
        column.markdown(f"{MARKS[s.state]} **{s.title}**")
        column.caption(s.objective)


def render_outcome(outcome: dict) -> None:
    """A finished session's outcome: its headline (a warning where best.py is the reference), then, where best.py is
    a kernel slower than torch.compile, that and the profiler's reason (pipeline.report.compile_gap's words)."""
    if outcome.get("headline"):
        (st.warning if outcome.get("keeps_reference") or outcome.get("best_is_reference") else st.success)(outcome["headline"])
    if outcome.get("versus_compile"):
        st.warning(outcome["versus_compile"], icon=":material/speed:")


def render_timeline(events: list[EventRecord], limit: int = 60) -> None:
    shown = events[-limit:]
    if len(events) > limit:
        st.caption(f"the last {limit} of {len(events)} events")
    lines = [f"{e.at[11:19]}  {e.kind:<12} {e.message.strip()}" for e in shown]
    st.code("\n".join(lines) if lines else "no events yet", language=None, wrap_lines=True)
