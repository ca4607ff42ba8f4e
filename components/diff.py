"""A kernel against its parent: unified, and side by side."""

from __future__ import annotations

import difflib
import html
from dataclasses import dataclass

import streamlit as st


@dataclass(frozen=True)
class DiffRow:
    """One aligned row of a side-by-side diff; a number is None where that side has no line."""

    left_no: int | None
    left: str
    right_no: int | None
    right: str
    tag: str  # equal, replace, delete, insert


def unified(before: str, after: str, before_name: str = "parent", after_name: str = "proposal") -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), before_name, after_name)
    return "".join(lines)


def side_by_side(before: str, after: str) -> list[DiffRow]:
    a, b = before.splitlines(), after.splitlines()
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k in range(max(i2 - i1, j2 - j1)):
            left = i1 + k if i1 + k < i2 else None
            right = j1 + k if j1 + k < j2 else None
            rows.append(DiffRow(None if left is None else left + 1, a[left] if left is not None else "",
                                None if right is None else right + 1, b[right] if right is not None else "", tag))
    return rows


def changed_lines(before: str, after: str) -> tuple[int, int]:
    """(lines removed, lines added)."""
    removed = added = 0
    for row in side_by_side(before, after):
        removed += row.left_no is not None and row.tag != "equal"
        added += row.right_no is not None and row.tag != "equal"
    return removed, added


_COLOURS = {"equal": "", "replace": "#fff5b1", "delete": "#ffdce0", "insert": "#cdffd8"}


def _side_by_side_html(rows: list[DiffRow]) -> str:
    cells = []
    for r in rows:
        colour = _COLOURS[r.tag]
        left_bg = f"background:{colour};" if r.tag in ("replace", "delete") else ""
        right_bg = f"background:{colour};" if r.tag in ("replace", "insert") else ""
        cells.append(
            f"<tr><td class='n'>{r.left_no or ''}</td><td style='{left_bg}'>{html.escape(r.left)}</td>"
            f"<td class='n'>{r.right_no or ''}</td><td style='{right_bg}'>{html.escape(r.right)}</td></tr>"
        )
    style = ("<style>.eggdiff{border-collapse:collapse;width:100%;font-family:monospace;font-size:12px}"
             ".eggdiff td{padding:0 6px;white-space:pre;vertical-align:top;color:#111}.eggdiff td.n{color:#888;text-align:right;"
             "user-select:none;width:3em}.eggdiff th{text-align:left;font-family:sans-serif}</style>")
    return (style + "<div style='overflow-x:auto;max-height:560px;overflow-y:auto'><table class='eggdiff'>"
            "<tr><th></th><th>parent</th><th></th><th>proposal</th></tr>" + "".join(cells) + "</table></div>")


def render_diff(before: str, after: str, *, before_name: str = "parent") -> None:
    """Tabs: the unified diff, the two files side by side."""
    removed, added = changed_lines(before, after)
    st.caption(f"against the {before_name}: {removed} lines removed, {added} added")
    tab_unified, tab_sides = st.tabs(["Unified diff", "Side by side"])
    with tab_unified:
        text = unified(before, after, before_name)
        st.code(text or "(no change)", language="diff")
    with tab_sides:
        st.html(_side_by_side_html(side_by_side(before, after)))
