"""A judged candidate: every check, the errors, the time with its interval, the speedups with their evidence, the
distance to the physical floor."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from pipeline.profiler.report import time_text
from pipeline.types import EvalResult, Timing

_MARK = {True: "pass", False: "FAIL", None: "skipped"}


@dataclass(frozen=True)
class SpeedupEvidence:
    """A speedup and what it rests on: both times, their intervals, and how they were measured."""

    baseline: str
    speedup: float
    candidate: Timing
    reference: Timing

    @property
    def overlapping(self) -> bool:
        """True when the two 95% intervals overlap: the difference may be noise."""
        return self.candidate.ci95_high_ms >= self.reference.ci95_low_ms and self.reference.ci95_high_ms >= self.candidate.ci95_low_ms

    def text(self) -> str:
        c, r = self.candidate, self.reference
        noise = " - the intervals overlap: within noise" if self.overlapping else ""
        return (f"{self.speedup:.3f}x vs {self.baseline}: {r.median_ms:.4g} ms [{r.ci95_low_ms:.4g}, {r.ci95_high_ms:.4g}] / "
                f"{c.median_ms:.4g} ms [{c.ci95_low_ms:.4g}, {c.ci95_high_ms:.4g}], {r.trials} trials each, {r.method}{noise}")


def speedup_evidence(result: EvalResult) -> list[SpeedupEvidence]:
    if result.timing is None:
        return []
    return [SpeedupEvidence(name, value, result.timing, result.baselines[name]) for name, value in result.speedups.items()
            if name in result.baselines]


def floor_share(result: EvalResult) -> float | None:
    """How close to the physical floor: floor / measured (1.0 is as fast as physics allows)."""
    if result.timing is None or not result.physical_floor_ms:
        return None
    return result.physical_floor_ms / result.timing.median_ms


def table_height(rows: int) -> int:
    """A dataframe tall enough to show every row (Streamlit's default scrolls after ten)."""
    return 38 + 35 * rows


def status_line(result: EvalResult) -> str:
    icon = ":green[:material/check_circle:]" if result.ok else ":red[:material/cancel:]"
    return f"{icon} **{result.status.value}** - {result.reason}"


def render_verdict(result: EvalResult) -> None:
    st.markdown(status_line(result))
    columns = st.columns(4)
    if result.timing is not None:
        t = result.timing
        columns[0].metric("median", f"{t.median_ms:.4g} ms", help=f"95% interval for the median: [{t.ci95_low_ms:.4g}, {t.ci95_high_ms:.4g}] ms over {t.trials} trials ({t.method})")
        columns[0].caption(f"95% CI [{t.ci95_low_ms:.4g}, {t.ci95_high_ms:.4g}] ms")
    else:
        columns[0].metric("median", "not timed", help="timing needs a GPU: on the CPU only correctness is judged")
    for column, evidence in zip(columns[1:3], speedup_evidence(result)):
        column.metric(f"vs {evidence.baseline}", f"{evidence.speedup:.3f}x")
        column.caption(evidence.text())
    share = floor_share(result)
    if share is not None:
        columns[3].metric("of the physical floor", f"{share:.0%}", help="floor / measured: 100% is as fast as the bytes or FLOPs allow")
        columns[3].caption(f"floor {time_text(result.physical_floor_ms)}")
    failed = result.failed_checks()
    if failed:
        st.error("\n\n".join(f"**{c.name}**: {c.detail}" for c in failed))
    st.dataframe([{"check": c.name, "result": _MARK[c.passed], "detail": c.detail} for c in result.checks],
                 hide_index=True, width="stretch", height=table_height(len(result.checks)))
    if result.trials:
        with st.expander(f"compared calls ({len(result.trials)})"):
            st.dataframe([{"call": t.name, "match": "yes" if t.passed else "NO", "max abs err": t.max_abs_err, "max rel err": t.max_rel_err,
                           "detail": t.detail} for t in result.trials], hide_index=True, width="stretch")
    for flag in result.flags:
        st.info(f"{flag.name}: {flag.message}")
    if result.log_tail and not result.ok:
        with st.expander("the end of its log"):
            st.code(result.log_tail, language="text")
    with st.expander("environment"):
        st.json(result.environment, expanded=False)
