"""With egg's own expert backend (no model), a reviewer's decisions change what comes next: a rejection's feedback
is read for what a rule can act on, and an edited plan is the plan the rewrite follows. Driven through `pipeline.api`
against a real worker process and the real CPU judge."""

from __future__ import annotations

import json
import time

from pipeline import api
from pipeline.expert.steering import topics_of
from pipeline.sessions.backends import BackendSpec
from pipeline.stages.method import Budget
from pipeline.types import EvalOptions
from tests.sessions.driver import SOFTMAX, Egg
from tests.sessions.test_decisions_reach_agents import wait_open_gate

CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)
XBLOCK_FEEDBACK = "dim=64 fits in registers: try a variant with XBLOCK>1"


def fix_topics(plan: dict) -> set[str]:
    return {t for b in plan["bottlenecks"] for f in b["fixes"] for t in topics_of(f["change"])}


def test_feedback_and_plan_edits_steer_the_expert_backend(tmp_path):
    store = api.open_store(tmp_path / "egg.sqlite")
    session = api.create_session(store, problem_path=SOFTMAX, backend=BackendSpec("expert"), review="every", device="cpu",
                                 budget=Budget(seeds=2, rounds=1, debug_rounds=0, transforms=False), options=CPU)
    api.start_worker(store, session.id)
    seen: dict[str, object] = {}
    while (gate := wait_open_gate(store, session.id)) is not None:
        payload = gate.payload
        if gate.kind == "kernel" and payload.get("label") == "seed 2 of 2" and "rejected_seed" not in seen:
            seen["rejected_seed"] = payload["proposal"]
            assert "XBLOCK=1," in payload["proposal"]
            api.decide(store, session.id, gate.id, "reject", feedback=XBLOCK_FEEDBACK)
        elif gate.kind == "kernel" and payload.get("label") == "seed 2 of 2" and "steered_seed" not in seen:
            seen["steered_seed"] = payload
            api.decide(store, session.id, gate.id, "reject", feedback="still not what I want")
        elif gate.kind == "kernel" and payload.get("label") == "seed 2 of 2" and "other_paradigm" not in seen:
            seen["other_paradigm"] = payload  # seed 1's paradigm, now with the bound the feedback set
            api.decide(store, session.id, gate.id, "reject", feedback="no")
        elif gate.kind == "kernel" and payload.get("label") == "seed 2 of 2" and "no_other_seed" not in seen:
            seen["no_other_seed"] = payload
            api.decide(store, session.id, gate.id, "skip")
        elif gate.kind == "plan" and gate.stage == "memory" and "plan_rejected" not in seen:
            topic = sorted(fix_topics(payload["proposal"]))[0]  # the tiny softmax's plan: one fix (launch-bound)
            seen["plan_rejected"] = topic
            api.decide(store, session.id, gate.id, "reject", feedback=f"no {topic.replace('_', ' ')}")
        elif gate.kind == "plan" and gate.stage == "memory":
            seen["plan_after_reject"] = payload
            edited = {"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "m", "value": "1", "interpretation": "mine"}],
                                       "fixes": [{"change": "vector width: shorter runs per thread", "expected_gain_pct": 5}]}]}
            api.decide(store, session.id, gate.id, "edit", edit_text=json.dumps(edited))
        elif gate.kind == "kernel" and gate.stage == "memory" and payload.get("step") == "rewrite":
            seen["memory_rewrite"] = payload
            api.decide(store, session.id, gate.id, "skip")
        else:
            api.decide(store, session.id, gate.id, "approve")
    assert api.get_session(store, session.id).status == "done", api.events(store, session.id)[-5:]

    steered = seen["steered_seed"]
    assert "XBLOCK=2," in steered["proposal"] and "XBLOCK=1," not in steered["proposal"]
    assert "Feedback acted on: XBLOCK>1" in steered["rationale"] and "launches with XBLOCK=2 (was 1)" in steered["rationale"]
    other = seen["other_paradigm"]
    assert other["paradigm"] == "fused_triton" and "XBLOCK=2," in other["proposal"] and other["proposal"] != steered["proposal"]
    assert seen["no_other_seed"]["proposal"] is None and "Write a kernel here" in seen["no_other_seed"]["note"]
    after = seen["plan_after_reject"]  # its only fix refused: the gate says so and the person writes the plan
    assert after["proposal"] is None and "every fix the rules had for this kernel was rejected" in after["note"]
    # The edited plan names only the vector width, which a row kernel does not have: the same kernel for its numbers
    # (already judged, so no gate), never a pipelining or chunk variant.
    assert "memory_rewrite" not in seen
    same = [e for e in api.events(store, session.id) if e.kind == "same_kernel" and e.data.get("stage") == "memory"]
    assert len(same) == 1 and same[0].data["rationale"].startswith("rule tune_only:")
    assert "pipelining" not in same[0].data["rationale"] and "chunk" not in same[0].data["rationale"]


def test_egg_gate_from_a_terminal_steers_the_same_way(tmp_path):
    """`egg gate decide ... reject --feedback 'XBLOCK>1'`: the next gate `egg gate list` shows has XBLOCK=2."""
    egg = Egg(tmp_path / "egg.sqlite", tmp_path)
    session_id = egg.start(SOFTMAX, "--expert", "--review", "plans", "--device", "cpu", "--seeds", "1", "--rounds", "1", "--no-transforms")
    first = egg.wait_gate(session_id)
    assert first["kind"] == "kernel" and "XBLOCK=1," in first["payload"]["proposal"]
    egg.decide(session_id, first["id"], "reject", feedback="XBLOCK>=4 please")
    deadline = time.monotonic() + 120
    while (again := egg.wait_gate(session_id)) is not None and again["id"] == first["id"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert again["kind"] == "kernel" and "XBLOCK=4," in again["payload"]["proposal"]
    assert "Feedback acted on: XBLOCK>=4" in again["payload"]["rationale"] and "'please'" not in again["payload"]["rationale"]
    assert again["payload"]["heard"] == [{"gate_key": first["key"], "what": "feedback", "text": "XBLOCK>=4 please", "calls": [], "agents": []}]
    listed = egg.run("gate", "list", session_id, "--all").stdout
    assert f"gate {again['id']} (no. 2): kernel in algorithm (open) seed" in listed, listed
    assert "answers your feedback at gate no. 1: no model prompt (the expert's rules read it" in listed, listed
    egg.run("session", "cancel", session_id)
