"""The Bench page in Chromium, as a person waits for it: the recorded H200 run imported with one click, its table,
its plots and two runs compared; the time from the click to the plots is measured, and the page is shot for the
README."""

from __future__ import annotations

import time

from playwright.sync_api import expect

from pipeline import api
from tests.browser.test_app_in_chromium import click, settled, shot
from tests.ui.test_bench_page import timed_run


def test_the_bench_page_imports_the_recorded_h200_run_and_draws_it(server, page):
    page.goto(server.url)
    settled(page)
    page.locator("[data-testid=stSidebarNav]").get_by_text("Bench", exact=True).click()
    settled(page)
    expect(page.get_by_text("No bench run yet")).to_be_visible()
    started = time.monotonic()
    click(page, "bench_import")
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=30_000)
    waited = time.monotonic() - started
    settled(page)
    expect(page.get_by_text("fast_p (share of all problems")).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(2)  # fast_p and the levels: one problem ended a stage, too few
    expect(page.get_by_text("Per-stage gains: 1 problem(s) ended a stage")).to_be_visible()
    grid = page.locator("[data-testid=stDataFrame]").first
    expect(grid).to_be_visible()
    [run] = api.bench_runs(api.open_store(server.db))
    rows = api.bench_rows(api.open_store(server.db), run.id)
    assert len(rows) == 21 and {r["level"] for r in rows} == {1, 2, 3}
    path = shot(page, "bench")
    assert path.stat().st_size > 20_000
    print(f"click to plots: {waited:.2f} s")

    timed_run(api.open_store(server.db), "later", {r["problem"]: 2.0 for r in rows})  # a second run of the same problems
    page.reload()
    settled(page)
    multiselect = page.locator(".st-key-bench_compare input")
    for label in (run.id, "later"):
        multiselect.click()
        multiselect.fill(label)
        page.get_by_role("option").filter(has_text=label).first.click()
        settled(page)
    expect(page.get_by_text("shared problems")).to_be_visible(timeout=30_000)
