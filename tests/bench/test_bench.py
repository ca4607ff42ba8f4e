"""`egg bench` for real on the CPU: problems found as KernelBench lays them out, one session per problem in the
store, results.jsonl/csv/report.md, a driver killed with SIGKILL resumed, a worker that dies or hangs recorded
with its story while the suite goes on, and the same jobs as Ray tasks on a local Ray."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.bench.problems import SuiteError, discover, parse_levels

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "data" / "problems" / "tiny"
SLOW = ROOT / "tests" / "fixtures" / "bench"
FAST = ["--device", "cpu", "--seeds", "1", "--rounds", "0", "--debug-rounds", "0"]


def egg(*args: str, db: Path, timeout: float = 600, check: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "bench", *args, "--db", str(db)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})
    if check and done.returncode != 0:
        raise AssertionError(f"egg bench {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def results(out: Path) -> dict[str, dict]:
    return {row["problem"]: row for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def items(db: Path) -> dict[str, dict]:
    """The store's bench items by problem (none while the store is still being made)."""
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        try:
            return {r["problem"]: dict(r) for r in conn.execute("SELECT * FROM bench_items")}
        except sqlite3.OperationalError:
            return {}


def write_problem(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text or (TINY / "level1" / "15_Swish.py").read_text())


def test_problems_are_found_as_kernelbench_lays_them_out(tmp_path):
    kb = tmp_path / "KernelBench"
    for name in ("level1/19_ReLU.py", "level1/2_Other.py", "level2/1_Conv.py", "level3/5_Net.py", "level1/.hidden/9_X.py"):
        write_problem(kb / name)
    (kb / "level1" / "__init__.py").write_text("")
    (kb / "level1" / "helpers.py").write_text("def get_inputs():\n    return []\n")  # no class Model: not a problem
    found = discover([kb])
    assert [(p.name, p.level) for p in found] == [("level1/2_Other", 1), ("level1/19_ReLU", 1), ("level2/1_Conv", 2), ("level3/5_Net", 3)]
    assert [p.name for p in discover([kb], levels=parse_levels("2,3"))] == ["level2/1_Conv", "level3/5_Net"]
    assert [p.name for p in discover([kb], only=["ReLU"])] == ["level1/19_ReLU"]
    assert [p.name for p in discover([kb], only=["level*/1_*"])] == ["level2/1_Conv"]
    assert [(p.name, p.level) for p in discover([kb / "level2"])] == [("1_Conv", 2)]  # a level folder given itself
    with pytest.raises(SuiteError, match="no such folder"):
        discover([tmp_path / "missing"])
    with pytest.raises(SuiteError, match="matches --only"):
        discover([kb], only=["nothing"])
    with pytest.raises(SuiteError, match="--level takes"):
        parse_levels("one")


def test_bad_input_is_one_line_and_creates_nothing(tmp_path):
    db = tmp_path / "egg.sqlite"
    done = egg(str(tmp_path / "nope"), "--out", str(tmp_path / "out"), *FAST, db=db)
    assert done.returncode == 2 and "no such folder" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    done = egg(str(TINY), "--resume", "--out", str(tmp_path / "out"), *FAST, db=db)
    assert done.returncode == 2 and "no bench run to resume" in done.stderr


@pytest.mark.timeout(900)
def test_a_suite_runs_is_killed_with_sigkill_and_resumes_where_it_stopped(tmp_path):
    """Two problems one at a time; the driver is killed with SIGKILL once the first has ended (the second's worker
    outlives it); --resume keeps the first, waits for or reruns the second; `egg bench report` rebuilds the files."""
    db, out = tmp_path / "egg.sqlite", tmp_path / "out"
    args = [str(TINY), "--only", "15_Swish", "--only", "23_Softmax", "--out", str(out), *FAST]
    driver = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "bench", *args, "--db", str(db)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None:
        if (out / "results.jsonl").exists() and any(r["status"] == "done" for r in results(out).values()):
            break
        time.sleep(0.2)
    assert driver.poll() is None, driver.communicate()
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    before = items(db)
    first_done = {name for name, item in before.items() if item["status"] == "done"}
    assert len(first_done) >= 1 and len(before) == 2
    kept_sessions = {name: before[name]["session_id"] for name in first_done}

    # --resume waits for the worker that outlived the driver; that worker then dies too: the session runs again
    resumed = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "bench", *args, "--resume", "--db", str(db)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    orphan = _orphan_waited_for(db, resumed)
    if orphan is not None:
        os.killpg(orphan, signal.SIGKILL)
    stdout, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stdout + stderr
    done = subprocess.CompletedProcess(resumed.args, resumed.returncode, stdout, stderr)
    after = items(db)
    assert {name: item["status"] for name, item in after.items()} == dict.fromkeys(before, "done"), {n: i["story"] for n, i in after.items()}
    assert {name: after[name]["session_id"] for name in first_done} == kept_sessions  # not run again
    if orphan is not None:
        with sqlite3.connect(db) as conn:
            said = [m for (m,) in conn.execute("SELECT message FROM events WHERE message LIKE 'egg bench:%'")]
        assert any("ended before the session did; running it again" in m for m in said), said
    table = results(out)
    assert set(table) == {"level1/15_Swish", "level1/23_Softmax"}
    assert all(r["correct"] and r["level"] == 1 and r["speedup_eager"] is None for r in table.values())  # cpu: nothing timed
    with sqlite3.connect(db) as conn:  # every session is in the store, done, labelled with the run
        sessions = dict(conn.execute("SELECT id, status FROM sessions"))
        assert {after[name]["session_id"] for name in after} <= set(sessions) and set(sessions.values()) == {"done"}
    report = (out / "report.md").read_text()
    assert "2/2 done, 2 correct" in report and "| level 1 | eager | 2 | 100% |" in report
    assert (out / "results.csv").read_text().count("\n") == 3
    assert "2/2 done, 2 correct" in done.stdout

    (out / "report.md").unlink()
    (out / "results.jsonl").unlink()
    rebuilt = subprocess.run([sys.executable, "-m", "pipeline.cli", "bench", "report", str(out)], capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "2/2 done, 2 correct" in (out / "report.md").read_text() and set(results(out)) == set(table)
    again = egg(*args, db=db)  # OUT holds a run: a second start without --resume is refused
    assert again.returncode == 2 and "--resume goes on with it" in again.stderr


def _orphan_waited_for(db: Path, resumed: subprocess.Popen, within_s: float = 60) -> int | None:
    """The pid of the worker a resumed driver says it waits for (None when the orphan ended before it looked)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and resumed.poll() is None:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT message FROM events WHERE message LIKE '%outlived its bench driver%'").fetchone()
        if row:
            return int(row[0].split("(pid ")[1].split(")")[0])
        time.sleep(0.1)
    return None


@pytest.mark.timeout(900)
def test_a_worker_that_dies_or_hangs_is_recorded_and_the_suite_goes_on(tmp_path):
    db, out = tmp_path / "egg.sqlite", tmp_path / "out"
    args = [str(TINY / "level1" / "15_Swish.py"), str(TINY / "level1" / "23_Softmax.py"), str(SLOW), "--jobs", "2",
            "--timeout-s", "40", "--out", str(out), *FAST]
    driver = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "bench", *args, "--db", str(db)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and time.monotonic() < deadline and driver.poll() is None:  # the softmax session's worker dies
        row = None
        if db.exists():
            with sqlite3.connect(db) as conn:
                try:
                    row = conn.execute("SELECT s.worker_pid FROM bench_items b JOIN sessions s ON s.id = b.session_id "
                                       "WHERE b.problem = '23_Softmax' AND s.worker_pid IS NOT NULL AND s.status = 'running'").fetchone()
                except sqlite3.OperationalError:  # the store is being made
                    pass
        if row:
            killed = row[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.2)
    assert killed is not None, driver.communicate()
    stdout, stderr = driver.communicate(timeout=600)
    assert driver.returncode == 0, stderr
    table = results(out)
    assert table["15_Swish"]["status"] == "done" and table["15_Swish"]["correct"]
    assert table["23_Softmax"]["status"] == "crashed" and "SIGKILL" in table["23_Softmax"]["story"]
    assert table["level1/1_SlowInit"]["status"] == "hang" and "no result within 40 s" in table["level1/1_SlowInit"]["story"]
    assert "crashed 1, done 1, hang 1" in (out / "report.md").read_text()
    assert "1_SlowInit: hang" in stderr
    crashed = items(db)["23_Softmax"]["session_id"]
    egg(*args, "--resume", db=db, check=True)  # a crash is a cut: resumed from its session; the hang is kept
    table = results(out)
    assert table["23_Softmax"]["status"] == "done" and table["23_Softmax"]["correct"] and table["23_Softmax"]["session_id"] == crashed
    assert table["level1/1_SlowInit"]["status"] == "hang" and table["15_Swish"]["status"] == "done"


@pytest.mark.timeout(900)
def test_the_same_jobs_run_as_ray_tasks_on_a_local_ray(tmp_path):
    import ray  # noqa: F401  (egg's optional extra, pip install 'egg[ray]'; the test extras install it)

    db, out = tmp_path / "egg.sqlite", tmp_path / "out"
    done = egg(str(TINY), "--only", "15_Swish", "--only", "23_Softmax", "--executor", "ray", "--out", str(out), *FAST, db=db, check=True)
    table = results(out)
    assert {r["status"] for r in table.values()} == {"done"} and all(r["correct"] for r in table.values())
    assert all(r["slot"].startswith("ray:") for r in table.values())
    with sqlite3.connect(db) as conn:  # the tasks' sessions were gathered into the driver's store
        assert conn.execute("SELECT COUNT(*) FROM sessions WHERE status = 'done'").fetchone()[0] == 2
    assert "2/2 done, 2 correct" in done.stdout


@pytest.mark.timeout(900)
def test_ctrl_c_stops_cleanly_and_resume_finishes_the_cut_problem(tmp_path):
    db, out = tmp_path / "egg.sqlite", tmp_path / "out"
    config = tmp_path / "egg.yaml"  # per-problem budgets from the config (a flag would win)
    config.write_text("bench:\n  max_wall_s: 300\n  max_llm_calls: 7\n  timeout_s: 900\n")
    # the tiny Swish, slowed: every construction of its model waits 2 s, so its session runs for half a minute and the
    # Ctrl-C always lands inside it (on a loaded machine the plain problem's 16 s could end first)
    problems = tmp_path / "problems" / "level1"
    problems.mkdir(parents=True)
    swish = (TINY / "level1" / "15_Swish.py").read_text()
    (problems / "15_Swish.py").write_text("import time\n" + swish.replace("def get_init_inputs():\n", "def get_init_inputs():\n    time.sleep(2)\n"))
    args = [str(problems.parent), "--only", "15_Swish", "--out", str(out), "--config", str(config), *FAST]
    # Ctrl-C as a terminal delivers it: SIGINT at its default in the driver (a test worker may run with SIGINT ignored,
    # which a child inherits, and then Python never turns it into KeyboardInterrupt)
    driver = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "bench", *args, "--db", str(db)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None:  # its worker is running the session
        if db.exists() and items(db).get("level1/15_Swish", {}).get("status") == "running":
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT COUNT(*) FROM sessions WHERE status = 'running'").fetchone()[0]:
                    break
        time.sleep(0.2)
    driver.send_signal(signal.SIGINT)
    stdout, stderr = driver.communicate(timeout=60)
    assert driver.returncode == 1, stderr
    assert "stopped: everything finished is kept" in stderr and "--resume" in stderr
    cut = items(db)["level1/15_Swish"]
    assert cut["status"] == "interrupted" and cut["session_id"]
    # where it was cut, in words that hold after any time (a session cut at 98 s once read "stopped ... at the start")
    assert cut["story"].startswith("stopped by an interrupt (Ctrl-C or SIGINT) during stage ") or \
        cut["story"].startswith("stopped by an interrupt (Ctrl-C or SIGINT) before its first stage ended ("), cut["story"]
    with sqlite3.connect(db) as conn:  # its worker is gone: nothing runs the session any more
        pid = conn.execute("SELECT worker_pid FROM sessions WHERE id = ?", (cut["session_id"],)).fetchone()[0]
    assert pid is None or not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    with sqlite3.connect(db) as conn:
        settings = json.loads(conn.execute("SELECT args_json FROM bench_runs").fetchone()[0])["settings"]
    assert settings["budget"]["max_wall_s"] == 300 and settings["budget"]["max_llm_calls"] == 7 and settings["timeout_s"] == 900
    egg(*args, "--resume", db=db, check=True)
    after = items(db)["level1/15_Swish"]
    assert after["status"] == "done" and after["session_id"] == cut["session_id"]  # the same session, gone on with


def test_a_resumed_run_with_only_runs_just_those_problems(tmp_path):
    """--resume keeps the run's list and settings; --only on that call picks which of its pending problems run now
    (on the H100 a resumed call with --only ran the run's next problems instead)."""
    from pipeline.bench.execute import BenchSettings
    from pipeline.bench.suite import Suite, open_run
    from pipeline.sessions.backends import BackendSpec
    from pipeline.stages.method import Budget
    from pipeline.store import Store
    from pipeline.types import EvalOptions

    store, out = Store(tmp_path / "egg.sqlite"), tmp_path / "out"
    problems = discover([TINY], only=["15_Swish", "23_Softmax", "12_Sum_Dim1"])
    settings = BenchSettings(BackendSpec("expert"), "cpu", Budget(), EvalOptions(device="cpu"), 60.0)
    run = open_run(store, out, [TINY], problems, settings, {}, resume=False)
    assert sorted(i.problem for i in Suite(store, run, out, settings).pending()) == sorted(p.name for p in problems)
    resumed = open_run(store, out, [TINY], discover([TINY], only=["23_Softmax"]), settings, {}, resume=True)
    chosen = Suite(store, resumed, out, settings, chosen={"level1/23_Softmax"}).pending()
    assert [i.problem for i in chosen] == ["level1/23_Softmax"]


def test_a_session_made_just_before_the_driver_was_killed_is_taken_up_not_made_again(tmp_path):
    """A driver killed between making an item's session and recording it on the item leaves a session nobody runs;
    the resumed driver takes that one up (the store must not keep a session that stays `created` for ever)."""
    import threading

    from pipeline import api
    from pipeline.bench.execute import BenchSettings, ItemRunner
    from pipeline.sessions.backends import BackendSpec
    from pipeline.stages.method import Budget
    from pipeline.types import EvalOptions

    store = api.open_store(tmp_path / "egg.sqlite")
    path = TINY / "level1" / "15_Swish.py"
    store.create_bench_run("r1", out_dir=str(tmp_path / "out"), dirs=[str(TINY)], args={},
                           items=[{"problem": "level1/15_Swish", "path": str(path), "level": 1, "ordinal": 0}])
    settings = BenchSettings(BackendSpec("expert"), "cpu", Budget(seeds=1, rounds=0), EvalOptions(device="cpu"))
    left = api.create_session(store, problem_path=str(path), backend=settings.backend, review="auto", device="cpu",
                              budget=settings.budget, options=settings.options, label="bench r1: level1/15_Swish")
    other = api.create_session(store, problem_path=str(path), backend=settings.backend, review="auto", device="cpu",
                               budget=settings.budget, options=settings.options, label="bench r0: level1/15_Swish")
    runner = ItemRunner(store, store.bench_run("r1"), settings, threading.Event())
    item = store.bench_items("r1")[0]
    assert runner.session_for(item) == left.id
    assert store.bench_items("r1")[0].session_id == left.id
    assert {s.id for s in store.sessions()} == {left.id, other.id}  # none made; another run's session is not taken


def test_a_worker_that_claims_the_session_after_the_drivers_look_is_waited_for(tmp_path, monkeypatch):
    """A driver killed just after starting a worker leaves one that claims the session a moment later: the resumed
    driver may look before that claim, start its own worker, and see it exit with EXIT_CLAIMED. It then waits for the
    holder like any outliving worker and runs the session again once the holder lets go (the flaky CI of session 23)."""
    import threading
    import uuid

    from pipeline import api
    from pipeline.bench.execute import BenchSettings, ItemRunner
    from pipeline.sessions.backends import BackendSpec
    from pipeline.stages.method import Budget
    from pipeline.types import EvalOptions

    store = api.open_store(tmp_path / "egg.sqlite")
    path = TINY / "level1" / "15_Swish.py"
    store.create_bench_run("r1", out_dir=str(tmp_path / "out"), dirs=[str(TINY)], args={},
                           items=[{"problem": "level1/15_Swish", "path": str(path), "level": 1, "ordinal": 0}])
    settings = BenchSettings(BackendSpec("expert"), "cpu", Budget(seeds=1, rounds=0), EvalOptions(device="cpu"))
    session = api.create_session(store, problem_path=str(path), backend=settings.backend, review="auto", device="cpu",
                                 budget=settings.budget, options=settings.options, label="bench r1: level1/15_Swish")
    store.update_bench_item("r1", "level1/15_Swish", session_id=session.id)
    token = uuid.uuid4().hex  # this test process is the other worker: it holds the session and beats
    assert store.claim_session(session.id, token, os.getpid(), 10.0)
    looks = []
    real_alive = api.worker_alive
    monkeypatch.setattr(api, "worker_alive", lambda record, now=None: bool(looks.append(1) or len(looks) > 1) and real_alive(record, now))
    let_go = threading.Event()

    def hold() -> None:  # beat until the driver says it waits for us, then let go of the session
        beating = api.open_store(tmp_path / "egg.sqlite")
        while not let_go.wait(0.3):
            beating.heartbeat(session.id, token)
            if any("outlived its bench driver" in e.message for e in beating.events(session.id)):
                beating.release_session(session.id, token)
                return

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        runner = ItemRunner(store, store.bench_run("r1"), settings, threading.Event())
        ended = runner.run_item(store.bench_items("r1")[0], "cpu0")
    finally:
        let_go.set()
        holder.join()
    said = [e.message for e in store.events(session.id)]
    assert any("run by another live worker" in line for line in (Path(session.work_dir) / "worker.log").read_text().splitlines()), said
    assert any("outlived its bench driver" in m for m in said) and any("ended before the session did" in m for m in said), said
    assert ended.status == "done", ended.story
