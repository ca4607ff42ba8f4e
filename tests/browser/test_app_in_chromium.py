"""The web app in Chromium, as a person uses it: a session on a tiny problem, every kind of gate on screen, approve
and edit clicked for real, the verdict seen. Screenshots go to docs/screenshots (the README shows them)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS
from tests.ui.scripted import write_script

GATE_HEADER = "h2"


def settled(page: Page) -> None:
    """The script is not running (the live fragment reruns it twice a second, so this is a moment, not a state)."""
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")


def choose(page: Page, key: str, option: str) -> None:
    """A selectbox's option, found by typing (its list is virtualized: long lists render only what is in view).

    The box is typed into through its own input, and the whole gesture is tried again if the list did not open:
    a rerun that lands between the click and the typing redraws the box and drops what was typed."""
    wanted = page.get_by_role("option", name=option)
    for attempt in range(3):
        settled(page)
        field = page.locator(f".st-key-{key} input")
        field.click()
        field.fill(option.rsplit(" / ", 1)[-1])
        try:
            wanted.wait_for(state="visible", timeout=15_000)
            break
        except Exception:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
    wanted.click()
    settled(page)


def radio(page: Page, key: str, label: str) -> None:
    page.locator(f".st-key-{key}").get_by_text(label, exact=True).click()
    settled(page)


def number(page: Page, key: str, value: int) -> None:
    field = page.locator(f".st-key-{key} input")
    field.fill(str(value))
    field.press("Enter")
    settled(page)


def gate(page: Page, title: str) -> None:
    expect(page.locator(GATE_HEADER).filter(has_text=title).first).to_be_visible(timeout=120_000)
    settled(page)


def click(page: Page, key: str) -> None:
    # A button with help text is drawn twice, one copy hidden (Streamlit 1.67): click the one a person sees.
    page.locator(f".st-key-{key} button:visible").click()


def shot(page: Page, name: str) -> Path:
    """The whole page: Streamlit scrolls inside its main block, so the window is made as tall as the content."""
    height = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight")
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], height + 40)})
    settled(page)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    page.set_viewport_size(size)
    return path


def decided_without_scrolling(page: Page) -> None:
    """The decision bar is on the first screen (1500x1000): a person decides without scrolling."""
    box = page.locator(".st-key-gate_approve button:visible").bounding_box()
    assert box is not None and box["y"] + box["height"] <= page.viewport_size["height"], box


def test_a_session_in_chromium_from_the_new_session_page_to_a_verdict(server, page, tmp_path):
    script = write_script(tmp_path / "script.yaml")
    page.set_viewport_size({"width": 1500, "height": 1000})
    page.goto(server.url)
    settled(page)
    expect(page.get_by_role("heading", name="New session")).to_be_visible()
    choose(page, "problem_bundled", "tiny / level 1 / 23_Softmax")
    radio(page, "backend_kind", "a script of hand-written replies (demos, controlled experiments)")
    field = page.locator(".st-key-backend_script input")
    field.fill(str(script))
    field.press("Enter")
    settled(page)
    radio(page, "device", "cpu")
    radio(page, "review", "every")
    number(page, "budget_seeds", 1)
    number(page, "budget_rounds", 1)
    shot(page, "new_session")
    click(page, "start_session")

    gate(page, "Kernel gate · algorithm")
    expect(page.get_by_text("rationale: rationale of variant 0")).to_be_visible()
    decided_without_scrolling(page)
    expect(page.get_by_text("the reference problem", exact=True)).to_be_visible()  # a seed beside the problem it replaces
    shot(page, "gate_kernel")
    click(page, "gate_approve")
    gate(page, "Verdict gate · algorithm")
    expect(page.get_by_text("passed every check").first).to_be_visible()
    decided_without_scrolling(page)
    page.locator("h2").first.click()  # the focus out of any text box: the shortcut is the page's
    page.keyboard.press("Alt+a")  # Approve, by its keyboard shortcut
    gate(page, "Kernel gate · algorithm · gate 3")  # the transformation of the seed
    # its diff: side by side, both columns the same width
    row = page.locator("table.eggdiff tr:has(td:nth-child(4))").first
    left, right = (row.locator("td").nth(i).bounding_box()["width"] for i in (1, 3))
    assert abs(left - right) <= 2 and left > 300, (left, right)
    click(page, "gate_approve")
    gate(page, "Verdict gate · algorithm")
    click(page, "gate_approve")
    gate(page, "Stage end · algorithm")
    shot(page, "gate_stage_end")
    click(page, "gate_approve")

    gate(page, "Plan gate · parallel_mapping")
    expect(page.get_by_text("The bottleneck report")).to_be_visible()
    shot(page, "gate_plan")
    click(page, "gate_approve")

    gate(page, "Kernel gate · parallel_mapping")
    editor = page.locator("textarea").filter(has_text="class ModelNew").first
    source = editor.input_value()
    editor.fill(source.replace("# variant", "# edited in the browser, variant", 1))
    editor.press("Control+Enter")
    settled(page)
    click(page, "gate_edit")
    gate(page, "Verdict gate · parallel_mapping")
    expect(page.get_by_text("passed every check").first).to_be_visible()
    expect(page.get_by_text("median").first).to_be_visible()
    shot(page, "gate_verdict")

    from pipeline import api

    store = api.open_store(server.db)
    [session] = api.list_sessions(store)
    edited = [d for d in store.decisions(session.id) if d.action == "edit"]
    assert len(edited) == 1 and "# edited in the browser, variant" in edited[0].after
    assert [c.author for c in store.candidates(session.id)][-1] == "person"
    api.cancel(store, session.id)


def test_an_uploaded_file_is_checked_by_the_problem_loader(server, page, tmp_path):
    latin, not_a_problem = tmp_path / "latin.py", tmp_path / "notes.py"
    latin.write_bytes(b"# caf\xe9\nimport torch\n")
    not_a_problem.write_text("import torch\n\nclass Model(torch.nn.Module):\n    pass\n")
    page.goto(server.url)
    settled(page)
    radio(page, "problem_kind", "upload a .py")
    upload = page.locator(".st-key-problem_upload input[type=file]")
    upload.set_input_files(str(latin))
    settled(page)
    expect(page.get_by_text("latin.py: not UTF-8 text (byte 0xe9 at offset 5): save it as UTF-8")).to_be_visible()
    upload.set_input_files(str(not_a_problem))
    settled(page)
    radio(page, "backend_kind", "nobody: plans by rules, you write every kernel")
    click(page, "start_session")
    expect(page.get_by_text("not a KernelBench problem, it does not define get_inputs, get_init_inputs")).to_be_visible()
    from pipeline import api

    assert api.list_sessions(api.open_store(server.db)) == []



def test_a_fresh_servers_first_visitor_on_a_deep_link_gets_egg_and_a_closed_second_tab_leaves_no_trace(server, page):
    """The first request of a fresh `egg ui` is a deep link (/bench): egg's navigation and page, not a sidebar listing
    the files of pages/ (Streamlit's old multipage mode before app.py's first run). Then a second tab opened and
    closed mid-load: the server's log stays clean (the fixture checks it)."""
    page.goto(f"{server.url}/bench")
    settled(page)
    nav = page.locator("[data-testid=stSidebarNav]")
    expect(nav.get_by_text("New session", exact=True)).to_be_visible()
    for stray in ("_context", "app", "new session"):
        expect(nav.get_by_text(stray, exact=True)).to_have_count(0)
    expect(page.locator("[data-testid=stHeading]").first).to_contain_text("Bench")
    for delay_ms in (0, 150, 600):
        other = page.context.new_page()
        other.goto(f"{server.url}/sessions", wait_until="commit")
        other.wait_for_timeout(delay_ms)
        other.close()
    page.reload()
    settled(page)
    expect(page.locator("[data-testid=stHeading]").first).to_contain_text("Bench")
