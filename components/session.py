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


def stage_states(current: str, finished_stages: set[str], session_done: bool) -> list[StageState]:
    states = []
    for stage in STAGES:
        if stage.name in finished_stages or session_done:
            state = "done"
        elif stage.name == current:
            state = "current"
        else:
            state = "waiting"
        states.append(StageState(stage.name, STAGE_TITLES[stage.name], stage.objective, state))
    return states


def render_stage_progress(states: list[StageState]) -> None:
    columns = st.columns(len(states))
    marks = {"done": ":green[:material/check_circle:]", "current": ":orange[:material/pending:]", "waiting": ":gray[:material/radio_button_unchecked:]"}
    for column, s in zip(columns, states):
        column.markdown(f"{marks[s.state]} **{s.title}**")
        column.caption(s.objective)


def render_timeline(events: list[EventRecord], limit: int = 60) -> None:
    shown = events[-limit:]
    if len(events) > limit:
        st.caption(f"the last {limit} of {len(events)} events")
    lines = [f"{e.at[11:19]}  {e.kind:<12} {e.message.strip()}" for e in shown]
    st.code("\n".join(lines) if lines else "no events yet", language=None, wrap_lines=True)
