"""How fast the web app's pages are on a full store, as a person waits in a browser.

    python bench/app_pages.py --out bench/results/DATE-app [--repeats 5] [--no-browser]

Seeds a store with 50 sessions and, in one of them, 1,000 candidates (each with a verdict of realistic size, two
gates and an event), then measures:
- server render: every page through Streamlit's AppTest (the page's script run, median of --repeats);
- in Chromium against `egg ui`: the time from navigating to each page to its main content on screen (the gate's
  header, the candidates' table and its first plot, the sessions' table, a replayed gate, ...), median of
  --repeats fresh navigations;
- a decision: from the click on Approve to the next gate's header on screen, the next gate written the moment the
  decision is in the store (as a worker whose next step is instant);
- a gate row written into the store (as a worker writes it) to its header on screen.
Runs on the CPU machine: nothing here touches a GPU. Writes pages.json and README.md under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import api  # noqa: E402
from pipeline.problems.loader import fingerprint_text  # noqa: E402
from pipeline.sessions.gatekinds import KernelPayload, VerdictPayload  # noqa: E402
from pipeline.store import Store  # noqa: E402

SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
KERNEL = (ROOT / "examples" / "candidates" / "softmax_triton.py").read_text()
PAGES = ("pages/new_session.py", "pages/session.py", "pages/candidates.py", "pages/sessions.py", "pages/learn.py", "pages/settings.py")


def verdict(index: int, source_fp: str) -> dict:
    """A passing verdict with every check, 16 compared calls and timings, as the judge writes one (~6 KB)."""
    ms = 1.0 + (index % 37) / 100
    checks = [{"name": n, "passed": True, "detail": f"{n}: a sentence of detail as the judge writes it " * 2} for n in
              ("static_audit", "timer_integrity", "output_types", "input_mutation", "background_threads", "triton_launched",
               "torch_delegation", "same_inputs", "output_structure", "correctness", "side_stream", "physical_limit")]
    timing = {"median_ms": ms, "mean_ms": ms, "std_ms": 0.002, "ci95_low_ms": ms - 0.001, "ci95_high_ms": ms + 0.001, "trials": 100, "method": "cuda_events"}
    base = {"median_ms": 2.0, "mean_ms": 2.0, "std_ms": 0.003, "ci95_low_ms": 1.999, "ci95_high_ms": 2.001, "trials": 100, "method": "cuda_events"}
    return {"status": "ok", "reason": "passed every check",
            "problem": {"path": str(SOFTMAX), "name": "23_Softmax", "level": 1, "problem_id": 23, "fingerprint": "pfp"},
            "candidate": {"path": f"/x/c{index}.py", "fingerprint": source_fp}, "device": "cuda", "checks": checks,
            "trials": [{"name": f"trial_{i}", "passed": True, "max_abs_err": 1e-7, "max_rel_err": 1e-6, "detail": ""} for i in range(16)],
            "timing": timing, "baselines": {"eager": base, "compile": {**base, "median_ms": 1.5}},
            "speedups": {"eager": round(2.0 / ms, 4), "compile": round(1.5 / ms, 4)}, "physical_floor_ms": 0.4,
            "kernels_launched": {"softmax_row_kernel": 120}, "flags": [], "log_tail": "", "duration_s": 6.0, "phase_s": {}, "environment": {"gpu": "NVIDIA H200"}}


def seed(db: Path, sessions: int, big: int) -> str:
    """The store: `sessions` sessions, the first with `big` candidates (the others 20); returns the big one's id."""
    store = Store(db)
    source = SOFTMAX.read_text()
    problem_fp = fingerprint_text(source)
    ids = []
    for s in range(sessions):
        session_id = uuid.uuid4().hex[:12]
        ids.append(session_id)
        store.create_session(session_id, problem_path=str(SOFTMAX), problem_name="23_Softmax", problem_fp=problem_fp, problem_source=source,
                             backend={"kind": "expert", "describe": "expert backend (no model)"}, review="every", device="cuda",
                             settings={"options_key": "bench"}, work_dir=str(db.parent / "sessions" / session_id), label=f"bench {s}")
        count = big if s == 0 else 20
        with store.db.atomic():
            for i in range(count):
                text = f"# candidate {s}-{i}\n{KERNEL}"
                fp = fingerprint_text(text)
                cid = store.add_candidate(session_id, ("algorithm", "parallel_mapping", "tiling", "memory")[i % 4], "rewrite", text, fp,
                                          None, "bench", "expert", f"k{i}")
                store.save_verdict(problem_fp, fp, "bench", "ok", verdict(i, fp))
                payloads = {"kernel": KernelPayload(step="rewrite", label=f"rewrite {i}", proposal=text, author="expert", rationale="bench",
                                                    parent_source=KERNEL, parent_id=1),
                            "verdict": VerdictPayload(candidate_id=cid, verdict=verdict(i, fp))}
                for kind, payload in payloads.items():
                    gate = store.open_gate(session_id, f"g/{kind}/{i}", "tiling", kind, i, True, payload.model_dump(mode="json"))
                    store.add_decision(gate.id, session_id, "approve", "person", None, None)
                store.add_event(session_id, "verdict", f"candidate {cid} (rewrite): ok, 1.0 ms - passed every check")
        store.update_session(session_id, status="done" if s else "waiting", stage="tiling",
                             outcome={"headline": "a verified kernel, 1.9x vs eager"} if s else {})
    open_plan_gate(store, ids[0])
    return ids[0]


def open_plan_gate(store: Store, session_id: str) -> None:
    """The big session waits at a plan gate with a real profile report (static facts, computed here on the CPU)."""
    from pipeline.expert.diagnosis import diagnose
    from pipeline.agents.backend import Measurements
    from pipeline.profiler.profiling import ProfileOptions, profile_candidate
    from pipeline.types import to_jsonable

    candidate = ROOT / "examples" / "candidates" / "softmax_triton.py"
    report = profile_candidate(candidate, SOFTMAX, ProfileOptions(mode="static_only"))
    plan = diagnose(Measurements(None, report), "tiling")
    store.open_gate(session_id, "open/plan", "tiling", "plan", 99, True,
                    {"proposal": plan.model_dump(mode="json"), "note": "", "author": "expert", "kernel_id": 1, "objective": "tiles",
                     "measurements": {"note": "bench"}, "report": to_jsonable(report)})


def time_pages(db: Path, session_id: str, repeats: int) -> dict[str, float]:
    from streamlit.testing.v1 import AppTest

    os.environ["EGG_DB"] = str(db)
    results = {}
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
        at.run()
        if page != "pages/new_session.py":
            at.switch_page(page)
        at.query_params["id"] = session_id
        seconds = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            at.run()
            seconds.append(time.perf_counter() - start)
            assert not at.exception, (page, [e.value for e in at.exception])
        results[page] = round(statistics.median(seconds[1:]), 4)  # the first run fills the caches a server keeps warm
    return results


# Each page's main content: what a person came to the page for (a selector that is on screen once it is drawn).
MAIN_CONTENT = {
    "new session": ("/", "[data-testid=stHeading]:has-text('New session')"),
    "session (open gate)": ("/session?id={id}", "h2:has-text('Plan gate')"),
    "candidates": ("/candidates?id={id}", "[data-testid=stDataFrame] canvas, [data-testid=stDataFrame] table"),
    "candidates (first plot)": ("/candidates?id={id}", ".js-plotly-plot .main-svg, [data-testid=stAlertContentInfo]"),
    "sessions": ("/sessions", "[data-testid=stDataFrame] canvas, [data-testid=stDataFrame] table"),
    "learn (a replayed gate, drawn in its tab)": ("/learn", "h3:has-text(' gate ') >> visible=false"),
    "settings": ("/settings", "[data-testid=stHeading]:has-text('Settings')"),
}


def browser_pages(page, url: str, session_id: str, repeats: int) -> dict[str, float]:
    """Seconds from navigation to each page's main content, median of `repeats` fresh loads (the first is not
    counted: a server keeps its caches warm)."""
    results = {}
    for name, (path, selector) in MAIN_CONTENT.items():
        seconds = []
        for _ in range(repeats + 1):
            page.goto("about:blank")
            start = time.perf_counter()
            page.goto(url + path.format(id=session_id), wait_until="commit")
            hidden = selector.endswith(" >> visible=false")  # drawn in a tab not shown first: on the page is what counts
            page.locator(selector.removesuffix(" >> visible=false")).first.wait_for(state="attached" if hidden else "visible", timeout=60_000)
            seconds.append(time.perf_counter() - start)
        results[name] = round(statistics.median(seconds[1:]), 3)
    return results


def decision_latency(page, url: str, store: Store, session_id: str, trials: int) -> list[float]:
    """Seconds from a click on Approve to the next gate's header on screen; the next gate is written the moment the
    decision is stored (a worker whose next step takes no time)."""
    import threading

    latencies = []
    page.goto(f"{url}/session?id={session_id}")
    for trial in range(trials):
        current = store.gates(session_id, open_only=True)[0]
        page.locator("h2").filter(has_text=f"gate {api.gate_number(store, current)}").first.wait_for(timeout=60_000)
        page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")

        def worker() -> None:
            while store.gate(current.id).decision is None:
                time.sleep(0.01)
            store.open_gate(session_id, f"decision/{trial}", "memory", "verdict", 2000 + trial, True,
                            VerdictPayload(candidate_id=1, verdict=verdict(trial, "fp"), would_keep=True).model_dump(mode="json"))

        thread = threading.Thread(target=worker)
        thread.start()
        start = time.perf_counter()
        page.locator(".st-key-gate_approve button:visible").click()
        page.locator("h2").filter(has_text=f"Verdict gate · memory · gate {api.gate_number(store, current) + 1}").first.wait_for(timeout=60_000)
        latencies.append(round(time.perf_counter() - start, 3))
        thread.join()
    return latencies


def in_browser(db: Path, session_id: str, trials: int, repeats: int) -> dict:
    """Chromium against `egg ui`: page loads, decisions and gates written by a worker, as a person sees them."""
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_FLAGS
    from tests.conftest import free_port

    port = free_port()
    env = {**os.environ, "EGG_DB": str(db), "EGG_PORT": str(port)}
    server = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "ui"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        store = Store(db)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            pages = browser_pages(page, url, session_id, repeats)
            decisions = decision_latency(page, url, store, session_id, trials)
            for gate in store.gates(session_id, open_only=True):  # the page shows the oldest open gate: clear the way
                store.add_decision(gate.id, session_id, "approve", "bench", None, None)
            page.goto(f"{url}/session?id={session_id}")
            page.wait_for_selector("h1", timeout=60_000)
            latencies = []
            for trial in range(trials):
                time.sleep(1.5)
                gate = store.open_gate(session_id, f"latency/{trial}", "memory", "verdict", 1000 + trial, True,
                                       VerdictPayload(candidate_id=1, verdict=verdict(trial, "fp"), would_keep=True).model_dump(mode="json"))
                written = time.perf_counter()
                page.locator("h2").filter(has_text=f"gate {api.gate_number(store, gate)}").first.wait_for(timeout=30_000)
                latencies.append(round(time.perf_counter() - written, 3))
                store.add_decision(gate.id, session_id, "approve", "bench", None, None)
            browser.close()
        return {"page_to_main_content_s": pages, "click_to_next_gate_s": decisions, "gate_to_screen_s": latencies}
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency-trials", type=int, default=10)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.out / "bench.sqlite"
    for stale in args.out.glob("bench.sqlite*"):
        stale.unlink()
    started = time.perf_counter()
    big = seed(db, args.sessions, args.candidates)
    seeded_s = round(time.perf_counter() - started, 1)
    pages = time_pages(db, big, args.repeats)
    browser = {} if args.no_browser else in_browser(db, big, args.latency_trials, args.repeats)
    latencies = browser.get("gate_to_screen_s", [])
    results = {"sessions": args.sessions, "candidates_in_big_session": args.candidates, "seed_s": seeded_s, "page_render_s": pages,
               **browser, "db_bytes": db.stat().st_size, "command": " ".join(sys.argv), "cpus": os.cpu_count()}
    (args.out / "pages.json").write_text(json.dumps(results, indent=1))
    lines = ["# Web app pages on a full store", "", f"Command: `python {' '.join(sys.argv)}`", "",
             f"{args.sessions} sessions, {args.candidates} candidates in one of them (20 in each other), every candidate with a "
             f"verdict and two decided gates; store {db.stat().st_size / 1e6:.1f} MB.", "",
             "| page | render s (median of %d) |" % args.repeats, "|---|---|"]
    lines += [f"| {page} | {seconds:.3f} |" for page, seconds in pages.items()]
    if browser:
        lines += ["", f"In Chromium (egg ui, {os.cpu_count()} CPUs): navigation to the page's main content, median of {args.repeats} fresh loads", "",
                  "| page | main content | seconds |", "|---|---|---|"]
        lines += [f"| {name} | `{MAIN_CONTENT[name][1]}` | {seconds:.2f} |" for name, seconds in browser["page_to_main_content_s"].items()]
        clicks = browser["click_to_next_gate_s"]
        lines += ["", f"Click on Approve -> the next gate's header on screen, {len(clicks)} trials: median {statistics.median(clicks):.2f} s, "
                      f"max {max(clicks):.2f} s ({', '.join(f'{v:.2f}' for v in clicks)})."]
    if latencies:
        lines += ["", f"Gate written -> header on screen in Chromium (egg ui), {len(latencies)} trials: median {statistics.median(latencies):.2f} s, "
                      f"max {max(latencies):.2f} s ({', '.join(f'{v:.2f}' for v in latencies)})."]
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for leftover in args.out.glob("bench.sqlite*"):
        leftover.unlink()


if __name__ == "__main__":
    main()
