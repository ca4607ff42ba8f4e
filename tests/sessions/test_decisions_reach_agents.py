"""What a reviewer decides reaches the agents: an edited plan is the plan the Code Agent is shown, a rejection's
feedback is in the next call; asserted on the requests the session's model was sent (kept in the store)."""

from __future__ import annotations

import json
import time

import yaml

from pipeline import api
from pipeline.sessions.backends import BackendSpec
from pipeline.stages.method import Budget
from pipeline.types import EvalOptions
from tests.sessions.driver import SOFTMAX, SOFTMAX_KERNEL

CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)
KERNEL = SOFTMAX_KERNEL.read_text()
DIAGNOSIS = {"bottlenecks": [{"name": "launch_bound", "evidence": [{"metric": "launch__grid_size", "value": "16", "interpretation": "few blocks"}],
                              "fixes": [{"change": "more programs", "expected_gain_pct": 10}]}]}
EDITED = {"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "dram_throughput_pct", "value": "91", "interpretation": "PLAN-MARKER"}],
                           "fixes": [{"change": "vectorize the loads (PLAN-MARKER)", "expected_gain_pct": 30}]}]}


def code_reply(variant: str) -> str:
    meta = json.dumps({"paradigm": "one row per program", "rationale": f"variant {variant}", "tunables": []})
    return f"```json\n{meta}\n```\n\n```python\n# variant {variant}\n{KERNEL}```\n"


def wait_open_gate(store, session_id: str, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gates = api.gates(store, session_id, open_only=True)
        if gates:
            return gates[0]
        if api.get_session(store, session_id).finished:
            return None
        time.sleep(0.2)
    raise AssertionError(f"no gate in {timeout_s} s: {api.session_view(store, session_id).to_json()}")


def user_text(request: dict) -> str:
    return request["messages"][-1]["content"]


def test_an_edited_plan_and_a_rejections_feedback_reach_the_agents(tmp_path):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({
        "code": [code_reply("seed"), code_reply("transform-1"), code_reply("transform-2"), code_reply("rewrite")],
        "profile": ["```json\n" + json.dumps(DIAGNOSIS) + "\n```"] * 3,
    }))
    store = api.open_store(tmp_path / "egg.sqlite")
    session = api.create_session(store, problem_path=SOFTMAX, backend=BackendSpec("script", str(script)), review="plans", device="cpu",
                                 budget=Budget(seeds=1, rounds=1, debug_rounds=0), options=CPU)
    api.start_worker(store, session.id)
    actions = []
    while (gate := wait_open_gate(store, session.id)) is not None:
        step = gate.payload.get("step")
        if gate.kind == "kernel" and step == "transform" and not any(a == ("kernel", "transform", "reject") for a in actions):
            api.decide(store, session.id, gate.id, "reject", feedback="REJECT-MARKER: keep the row in registers")
            actions.append(("kernel", "transform", "reject"))
        elif gate.kind == "plan" and gate.stage == "parallel_mapping":
            refused = None
            try:
                api.decide(store, session.id, gate.id, "edit", edit_text='{"bottlenecks": []}')
            except api.ApiError as error:
                refused = str(error)
            assert refused and "not a valid Diagnosis" in refused and "bottlenecks" in refused
            api.decide(store, session.id, gate.id, "edit", edit_text=json.dumps(EDITED))
            actions.append(("plan", gate.stage, "edit"))
        elif gate.kind == "plan":
            api.decide(store, session.id, gate.id, "skip")
            actions.append(("plan", gate.stage, "skip"))
        else:
            api.decide(store, session.id, gate.id, "approve")
            actions.append((gate.kind, step, "approve"))
    assert api.get_session(store, session.id).status == "done", api.events(store, session.id)[-5:]
    requests = [r for r in store.requests(session.id)]
    code = [user_text(r) for r in requests if r["system"].startswith("egg agent: code")]
    assert len(code) == 4
    assert "REJECT-MARKER" not in code[1] and "REJECT-MARKER: keep the row in registers" in code[2]  # the transform, asked again
    rewrite = code[3]
    assert "PLAN-MARKER" in rewrite and '"name": "memory_bound"' in rewrite and "launch_bound" not in rewrite
    decisions = store.decisions(session.id)
    rejected = next(d for d in decisions if d.action == "reject")
    assert rejected.feedback.startswith("REJECT-MARKER") and "variant transform-1" in rejected.before
    edited = next(d for d in decisions if d.action == "edit")
    assert edited.before == DIAGNOSIS and edited.after == EDITED
    # each proposal that answers a decision names it and the prompt that carried it (the gate shows that prompt)
    gates = api.gates(store, session.id)
    by_key = {g.key: g for g in gates}
    answered = [(g, h) for g in gates for h in g.data.heard]
    assert {h.what for _, h in answered} == {"feedback", "edited plan"}, answered
    for gate, heard in answered:
        asked = by_key[heard.gate_key]
        assert asked.id < gate.id and asked.decision is not None
        assert heard.calls and heard.agents == ["code"] * len(heard.calls)
        prompts = api.heard_prompts(store, session.id, heard)
        assert len(prompts) == len(heard.calls) and all(heard.text in user_text(p) for p in prompts)
    feedback = next(h for g, h in answered if h.what == "feedback")
    assert by_key[feedback.gate_key].decision.action == "reject" and feedback.text == rejected.feedback
    plan = next((g, h) for g, h in answered if h.what == "edited plan")
    assert plan[0].data.step == "rewrite" and by_key[plan[1].gate_key].kind == "plan" and "PLAN-MARKER" in plan[1].text
