"""Sessions with review gates on the CPU, against real processes: a worker per session, the CLI for every decision."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.sessions.driver import SOFTMAX, SOFTMAX_KERNEL, Egg, wait_gone

NO_MODEL = ("--no-llm", "--review", "every", "--device", "cpu", "--seeds", "1", "--rounds", "1", "--no-transforms")


@pytest.fixture
def egg(tmp_path) -> Egg:
    return Egg(tmp_path / "egg.sqlite", tmp_path)


def drive_to_the_end(egg: Egg, session_id: str) -> list[dict]:
    """A person's kernel at every kernel gate, every other gate approved; the gates seen, in order."""
    seen = []
    while (gate := egg.wait_gate(session_id)) is not None:
        seen.append(gate)
        if gate["kind"] == "kernel":
            egg.decide(session_id, gate["id"], "edit", file=SOFTMAX_KERNEL)
        else:
            egg.decide(session_id, gate["id"], "approve")
    return seen


def test_a_person_drives_a_session_with_no_model_to_a_best_py_that_passes_egg_check(egg, tmp_path):
    session_id = egg.start(SOFTMAX, *NO_MODEL)
    seen = drive_to_the_end(egg, session_id)
    kinds = [(g["stage"], g["kind"]) for g in seen]
    assert kinds[:3] == [("algorithm", "kernel"), ("algorithm", "verdict"), ("algorithm", "stage_end")]
    for stage in ("parallel_mapping", "tiling", "memory"):
        assert [k for s, k in kinds if s == stage] == ["plan", "kernel", "verdict", "stage_end"]
    first = seen[0]["payload"]
    assert first["proposal"] is None and first["note"].startswith("no model")
    plan = next(g for g in seen if g["kind"] == "plan")["payload"]
    assert plan["proposal"]["bottlenecks"] and plan["report"]["source"] == "static_only"  # the rules read the profile
    assert egg.show(session_id)["status"] == "done"
    egg.run("session", "export", session_id, "--out", str(tmp_path / "export"))
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["best.py", "evidence.json", "report.md"]
    check = subprocess.run([sys.executable, "-m", "pipeline.cli", "check", str(tmp_path / "export" / "best.py"), "--ref", str(SOFTMAX),
                            "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    decisions = egg.show(session_id)["decisions"]
    assert {d["who"] for d in decisions} == {"person"} and len(decisions) == len(seen)


def test_bad_decisions_get_one_line_and_change_nothing(egg, tmp_path):
    session_id = egg.start(SOFTMAX, *NO_MODEL)
    gate = egg.wait_gate(session_id)
    broken = tmp_path / "broken.py"
    broken.write_text("class ModelNew(:\n")
    refusals = {
        "approve": egg.decide(session_id, gate["id"], "approve", check=False),
        "unparsable edit": egg.decide(session_id, gate["id"], "edit", file=broken, check=False),
        "unknown gate": egg.decide(session_id, 999, "approve", check=False),
        "unknown session": egg.run("gate", "decide", "nosuchsession", "1", "skip", check=False),
        "reject with nobody to read it": egg.decide(session_id, gate["id"], "reject", check=False),
    }
    for name, done in refusals.items():
        assert done.returncode == 2, name
        assert len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
    assert "nothing was proposed" in refusals["approve"].stderr and "does not parse: line 1" in refusals["unparsable edit"].stderr
    assert "nobody reads a rejection in this session (backend none" in refusals["reject with nobody to read it"].stderr
    assert egg.show(session_id)["decisions"] == [] and egg.open_gates(session_id)[0]["id"] == gate["id"]
    egg.decide(session_id, gate["id"], "skip")
    closed = egg.decide(session_id, gate["id"], "skip", check=False)
    assert closed.returncode == 2 and f"gate {gate['id']} is closed" in closed.stderr
    egg.run("session", "cancel", session_id)
    assert egg.wait_status(session_id, ("cancelled",))["status"] == "cancelled"


def test_a_worker_killed_at_a_gate_resumes_at_the_same_gate_while_another_session_runs(egg):
    first = egg.start(SOFTMAX, *NO_MODEL)
    second = egg.start(SOFTMAX, *NO_MODEL, "--label", "the other one")
    gate = egg.wait_gate(first)
    other_gate = egg.wait_gate(second)
    shown = egg.show(first)
    assert shown["status"] == "waiting" and shown["worker_alive"] and egg.show(second)["worker_alive"]
    os.killpg(shown["worker_pid"], signal.SIGKILL)
    wait_gone(shown["worker_pid"])
    killed = egg.show(first)
    assert killed["status"] == "waiting" and not killed["worker_alive"]
    egg.decide(second, other_gate["id"], "edit", file=SOFTMAX_KERNEL)  # the other session goes on meanwhile
    assert egg.wait_gate(second)["kind"] == "verdict"
    egg.run("session", "resume", first, "--detach")
    again = egg.wait_gate(first)
    assert (again["id"], again["key"]) == (gate["id"], gate["key"])
    assert len(egg.json("gate", "list", first, "--all")) == 1  # the resumed worker made no new gate
    egg.decide(first, gate["id"], "edit", file=SOFTMAX_KERNEL)
    verdict = egg.wait_gate(first)
    assert verdict["kind"] == "verdict" and verdict["payload"]["verdict"]["status"] == "ok"
    for session_id in (first, second):
        egg.run("session", "cancel", session_id)


def drive_past_the_first_plan(egg: Egg, session_id: str) -> list[dict]:
    """As drive_to_the_end, up to the gate after the first plan gate (left open); the gates seen, in order."""
    seen = []
    while (gate := egg.wait_gate(session_id)) is not None:
        seen.append(gate)
        if any(g["kind"] == "plan" for g in seen[:-1]):
            return seen
        if gate["kind"] == "kernel":
            egg.decide(session_id, gate["id"], "edit", file=SOFTMAX_KERNEL)
        else:
            egg.decide(session_id, gate["id"], "approve")
    return seen


def test_a_branch_starts_at_its_gate_with_everything_before_it(egg):
    session_id = egg.start(SOFTMAX, *NO_MODEL)
    seen = drive_past_the_first_plan(egg, session_id)
    egg.run("session", "cancel", session_id)  # a branch needs no finished parent, only the gate's record
    egg.wait_status(session_id, ("cancelled",))
    plan = next(g for g in seen if g["kind"] == "plan")
    before = [g for g in seen if g["id"] < plan["id"]]
    branch = egg.json("session", "branch", session_id, str(plan["id"]))["id"]
    egg.run("session", "resume", branch, "--detach")
    reached = egg.wait_gate(branch)
    assert reached["key"] == plan["key"] and reached["kind"] == "plan"
    gates = egg.json("gate", "list", branch, "--all")
    assert [g["key"] for g in gates[:-1]] == [g["key"] for g in before]
    assert [g["decision"]["action"] for g in gates[:-1]] == [g["decision"]["action"] for g in egg.json("gate", "list", session_id, "--all")[: len(before)]]
    assert gates[-1]["decision"] is None
    assert not [e for e in egg.json("session", "events", branch) if e["kind"] == "judging"]  # nothing judged twice
    shown = egg.show(branch)
    assert shown["parent_id"] == session_id and shown["branch_gate_key"] == plan["key"]
    egg.decide(branch, reached["id"], "stop")  # the branch takes another road from the same gate
    assert egg.wait_gate(branch)["kind"] == "stage_end"
    egg.run("session", "cancel", branch)
