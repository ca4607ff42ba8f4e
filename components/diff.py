"""A kernel against its parent: unified, and side by side at equal widths with Python highlighting; a seed beside
the reference problem it replaces (a diff against the problem file would be mostly its deleted `Model`)."""

from __future__ import annotations

import difflib
import html
from dataclasses import dataclass

import streamlit as st
from pygments.lexers import PythonLexer
from pygments.styles import get_style_by_name


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


_STYLE = get_style_by_name("default")


def highlighted_lines(source: str) -> list[str]:
    """The source as HTML, one string per line, coloured by Pygments' Python lexer (a token that spans lines, such
    as a docstring, is coloured on each of them)."""
    lines: list[list[str]] = [[]]
    for token, value in PythonLexer(stripnl=False, ensurenl=False).get_tokens(source):
        style = _STYLE.style_for_token(token)
        css = (f"color:#{style['color']};" if style["color"] else "") + ("font-weight:bold;" if style["bold"] else "") + \
              ("font-style:italic;" if style["italic"] else "")
        for i, piece in enumerate(value.split("\n")):
            if i:
                lines.append([])
            if piece:
                lines[-1].append(f"<span style='{css}'>{html.escape(piece)}</span>" if css else html.escape(piece))
    out = ["".join(parts) for parts in lines]
    expected = len(source.splitlines())
    return out[:expected] + [""] * (expected - len(out))


_COLOURS = {"equal": "", "replace": "#fff5b1", "delete": "#ffdce0", "insert": "#cdffd8"}
_TABLE_STYLE = ("<style>.eggdiff{border-collapse:collapse;width:100%;table-layout:fixed;font-family:monospace;font-size:12px}"
                ".eggdiff td{padding:0 6px;white-space:pre-wrap;overflow-wrap:anywhere;vertical-align:top;color:#111}"
                ".eggdiff td.n{color:#888;text-align:right;user-select:none}.eggdiff th{text-align:left;font-family:sans-serif}"
                ".eggdiff tr.fold td{color:#666;background:#f0f2f6;font-family:sans-serif;text-align:center}</style>")


CONTEXT_LINES = 3  # unchanged lines kept on each side of a change; longer unchanged runs fold into one row


def folded(rows: list[DiffRow], context: int = CONTEXT_LINES) -> list[DiffRow | int]:
    """The rows with each run of unchanged lines farther than `context` from a change replaced by its length."""
    changed = [i for i, r in enumerate(rows) if r.tag != "equal"]
    if not changed:
        return list(rows)
    near = {j for i in changed for j in range(i - context, i + context + 1)}
    out: list[DiffRow | int] = []
    for i, row in enumerate(rows):
        if i in near or row.tag != "equal":
            out.append(row)
        elif out and isinstance(out[-1], int):
            out[-1] += 1
        else:
            out.append(1)
    return out


def side_by_side_html(before: str, after: str, before_name: str = "parent", after_name: str = "proposal") -> str:
    """Both files in two columns of equal width (long lines wrap), changed lines coloured, code highlighted, and
    long unchanged runs folded so every change is on screen."""
    left_lines, right_lines = highlighted_lines(before), highlighted_lines(after)
    cells = []
    for r in folded(side_by_side(before, after)):
        if isinstance(r, int):
            cells.append(f"<tr class='fold'><td colspan='4'>⋯ {r} unchanged line{'s' if r > 1 else ''}</td></tr>")
            continue
        colour = _COLOURS[r.tag]
        left_bg = f"background:{colour};" if r.tag in ("replace", "delete") else ""
        right_bg = f"background:{colour};" if r.tag in ("replace", "insert") else ""
        left = left_lines[r.left_no - 1] if r.left_no else ""
        right = right_lines[r.right_no - 1] if r.right_no else ""
        cells.append(f"<tr><td class='n'>{r.left_no or ''}</td><td style='{left_bg}'>{left}</td>"
                     f"<td class='n'>{r.right_no or ''}</td><td style='{right_bg}'>{right}</td></tr>")
    columns = "<colgroup><col style='width:3.5em'><col style='width:calc(50% - 3.5em)'><col style='width:3.5em'><col style='width:calc(50% - 3.5em)'></colgroup>"
    return (_TABLE_STYLE + "<div style='max-height:560px;overflow-y:auto'><table class='eggdiff'>" + columns +
            f"<tr><th></th><th>{html.escape(before_name)}</th><th></th><th>{html.escape(after_name)}</th></tr>" + "".join(cells) + "</table></div>")


def render_diff(before: str, after: str, *, before_name: str = "parent") -> None:
    """Tabs: the two files side by side (first), the unified diff."""
    removed, added = changed_lines(before, after)
    st.caption(f"against the {before_name}: {removed} lines removed, {added} added")
    tab_sides, tab_unified = st.tabs(["Side by side", "Unified diff"])
    with tab_sides:
        st.html(side_by_side_html(before, after, before_name))
    with tab_unified:
        text = unified(before, after, before_name)
        st.code(text or "(no change)", language="diff")


def render_beside(reference: str, proposal: str, *, reference_name: str = "the reference problem", proposal_name: str = "the proposal") -> None:
    """Two whole files at equal widths, each highlighted: a seed beside the problem it replaces."""
    left, right = st.columns(2)
    with left:
        st.caption(reference_name)
        st.code(reference, language="python", line_numbers=True)
    with right:
        st.caption(proposal_name)
        st.code(proposal, language="python", line_numbers=True)
