"""A person steers egg's expert backend from the browser (review mode `every`): a seed rejected with `XBLOCK>1` comes
back with XBLOCK>1 written into its launch, and an edited plan is the plan the rewrite follows (issue 23)."""

from __future__ import annotations

import json
import time

from playwright.sync_api import expect

from tests.browser.test_app_in_chromium import GATE_HEADER, choose, click, gate, number, radio, settled, shot

FEEDBACK = "dim=64 fits in registers: try a variant with XBLOCK>1"


def heading(page) -> str:
    return page.locator(GATE_HEADER).filter(has_text=" · gate ").first.inner_text()


def decide(page, key: str) -> None:
    """Press a gate's button and wait for the next gate (or the end) to be drawn."""
    before = heading(page)
    click(page, key)
    expect(page.locator(GATE_HEADER).filter(has_text=" · gate ").first).not_to_have_text(before, timeout=120_000)
    settled(page)


def test_a_reject_with_a_bound_and_a_plan_edit_steer_the_expert_in_the_browser(server, page):
    page.goto(server.url)
    settled(page)
    choose(page, "problem_bundled", "tiny / level 1 / 23_Softmax")
    radio(page, "device", "cpu")
    radio(page, "review", "every")
    number(page, "budget_seeds", 2)
    number(page, "budget_rounds", 1)
    click(page, "start_session")
    gate(page, "Kernel gate · algorithm")  # seed 1
    for _ in range(6):  # seed 1 and its verdict (and any transformation), up to seed 2's kernel gate
        if page.get_by_text("seed 2 of 2").first.is_visible():
            break
        decide(page, "gate_approve")
    expect(page.get_by_text("XBLOCK=1,").first).to_be_attached()
    page.locator(".st-key-gate_feedback textarea").fill(FEEDBACK)
    page.locator(".st-key-gate_feedback textarea").press("Control+Enter")
    settled(page)
    decide(page, "gate_reject")
    gate(page, "Kernel gate · algorithm")
    expect(page.get_by_text("Feedback acted on: XBLOCK>1").first).to_be_visible()
    expect(page.get_by_text("XBLOCK=2,").first).to_be_attached()
    shot(page, "steered_by_feedback")
    for _ in range(8):  # on to the memory stage's plan
        if heading(page).startswith("Plan gate · memory"):
            break
        decide(page, "gate_approve")
    gate(page, "Plan gate · memory")
    plan = {"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "m", "value": "1", "interpretation": "the reviewer's"}],
                             "fixes": [{"change": "vector width: shorter runs per thread", "expected_gain_pct": 5}]}]}
    editor = page.locator("textarea").filter(has_text="bottlenecks").first
    editor.fill(json.dumps(plan))
    editor.press("Control+Enter")
    settled(page)
    click(page, "gate_edit")

    from pipeline import api

    store = api.open_store(server.db)
    [session] = api.list_sessions(store)
    steered = [g for g in store.gates(session.id) if g.kind == "kernel" and g.payload.get("label") == "seed 2 of 2"]
    assert len(steered) == 2 and "XBLOCK=1," in steered[0].payload["proposal"] and "XBLOCK=2," in steered[1].payload["proposal"]
    assert next(d for d in store.decisions(session.id) if d.action == "reject").feedback == FEEDBACK
    deadline = time.monotonic() + 120  # the worker goes on from the edit on its own clock (earlier stages' events look alike)
    while not (same := [e for e in store.events(session.id) if e.kind == "same_kernel" and e.data.get("stage") == "memory"]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    gate(page, "Stage end · memory")
    assert same and "the plan calls for vector_width" in same[0].data["rationale"] and "pipelining" not in same[0].data["rationale"]
    shot(page, "steered_by_plan_edit")
    api.cancel(store, session.id)
