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


def test_a_plan_edit_that_deletes_fusion_yields_no_fusion_proposal_in_the_browser(server, page):
    """Two kernels (a GEMM and a log-sum-exp): the parallel-mapping plan offers to fuse them; the person deletes that
    fix in the plan's editor, and what the rewrite answers no longer names fusion (issue 23's acceptance)."""
    page.goto(server.url)
    settled(page)
    choose(page, "problem_bundled", "tiny / level 2 / 6_Linear_ReLU_LogSumExp")
    radio(page, "device", "cpu")
    radio(page, "review", "every")
    number(page, "budget_seeds", 1)
    number(page, "budget_rounds", 1)
    click(page, "start_session")
    gate(page, "Kernel gate · algorithm")
    for _ in range(8):  # the seed, its verdict and the stage end, up to the parallel-mapping plan
        if heading(page).startswith("Plan gate · parallel_mapping"):
            break
        decide(page, "gate_approve")
    gate(page, "Plan gate · parallel_mapping")
    editor = page.locator("textarea").filter(has_text="bottlenecks").first
    plan = json.loads(editor.input_value())
    fixes = [f["change"] for b in plan["bottlenecks"] for f in b["fixes"]]
    assert any(c.startswith("fuse the kernels") for c in fixes), fixes  # what the person deletes is there to delete
    plan["bottlenecks"] = [{**b, "fixes": [f for f in b["fixes"] if "fuse" not in f["change"]]} for b in plan["bottlenecks"]]
    plan["bottlenecks"] = [b for b in plan["bottlenecks"] if b["fixes"]]
    editor.fill(json.dumps(plan))
    editor.press("Control+Enter")
    settled(page)
    click(page, "gate_edit")

    from pipeline import api

    store = api.open_store(server.db)
    [session] = api.list_sessions(store)
    deadline = time.monotonic() + 120
    answered = []
    while not answered and time.monotonic() < deadline:  # the rewrite of the edited plan: a gate, or the same kernel again
        answered = [e.data.get("rationale", "") for e in store.events(session.id) if e.kind == "same_kernel" and e.data.get("stage") == "parallel_mapping"]
        answered += [g.data.rationale or "" for g in api.gates(store, session.id, kind="kernel") if g.stage == "parallel_mapping"]
        time.sleep(0.2)
    assert answered, api.events(store, session.id)[-5:]
    assert all("fuse" not in text and "fusion" not in text for text in answered), answered
    rewrites = [g for g in api.gates(store, session.id, kind="kernel") if g.stage == "parallel_mapping"]
    if rewrites:  # the rewrite answers the person's plan, as edited: fusion deleted from it
        heard = [h for h in rewrites[0].data.heard if h.what == "edited plan"]
        assert heard and "fuse" not in heard[0].text and "more programs" in heard[0].text, rewrites[0].data.heard
    shot(page, "steered_by_deleting_fusion")
    api.cancel(store, session.id)
