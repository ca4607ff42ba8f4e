"""`make app` with no key: the New session page defaults to egg's expert backend, and a session on a bundled problem
shows the expert's proposals, each with the rule that made it, at its kernel and plan gates (issue 16)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.test_app_in_chromium import choose, click, gate, number, radio, settled, shot


def test_with_no_key_a_session_shows_the_expert_backends_proposals(server, page):
    page.goto(server.url)
    settled(page)
    expect(page.get_by_text("No model configured (EGG_LLM or egg.yaml): the default is egg's expert backend.")).to_be_visible()
    choose(page, "problem_bundled", "tiny / level 1 / 23_Softmax")
    radio(page, "device", "cpu")
    radio(page, "review", "plans")
    number(page, "budget_seeds", 1)
    number(page, "budget_rounds", 1)
    click(page, "start_session")
    gate(page, "Kernel gate · algorithm")
    expect(page.get_by_text("proposed by expert").first).to_be_visible()
    expect(page.get_by_text("rationale:").first).to_be_visible()
    shot(page, "expert_kernel_gate")
    for _ in range(8):  # the seed, then the expert's transformations of it, each at its kernel gate, until the plan
        heading = page.locator("h2").filter(has_text=" · gate ").first
        title = heading.inner_text()
        if title.startswith("Plan gate"):
            break
        approve = page.locator(".st-key-gate_approve button:visible")
        click(page, "gate_approve" if approve.is_enabled() else "gate_skip")  # skip where nothing was proposed
        expect(heading).not_to_have_text(title, timeout=120_000)
        settled(page)
    gate(page, "Plan gate · parallel_mapping")
    expect(page.get_by_text("The plan, by expert")).to_be_visible()
    shot(page, "expert_plan_gate")
    from pipeline import api

    store = api.open_store(server.db)
    [session] = api.list_sessions(store)
    assert session.backend["kind"] == "expert"
    kernel = next(g for g in store.gates(session.id) if g.kind == "kernel")
    plan = next(g for g in store.gates(session.id) if g.kind == "plan")
    assert kernel.payload["author"] == "expert" and kernel.payload["proposal"] and kernel.payload["rationale"]
    assert plan.payload["proposal"]["bottlenecks"]
    api.cancel(store, session.id)
