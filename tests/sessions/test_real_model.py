"""A session on a real local model (llama.cpp's server, Gemma 3 270M) in review mode `plans`: the base model's
nonsense never wedges a gate; every gate shows why nothing usable was proposed and takes a decision; a rejection's
feedback and an edited plan go verbatim into the next prompts sent over HTTP, and the gates that answer them say
which."""

from __future__ import annotations

import json

from pipeline import api
from tests.sessions.driver import SOFTMAX, SOFTMAX_KERNEL, Egg

FEEDBACK = "REAL-MARKER: one row per program, the row kept in registers"
PLAN = {"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "dram_throughput_pct", "value": "90", "interpretation": "PLAN-MARKER"}],
                         "fixes": [{"change": "vectorize the loads (PLAN-MARKER)", "expected_gain_pct": 20}]}]}


def test_nonsense_replies_never_wedge_a_gate(tmp_path, llama_server):
    config = tmp_path / "egg.yaml"
    config.write_text("llm:\n  max_tokens: 32\n  structured_repairs: 1\n")
    egg = Egg(tmp_path / "egg.sqlite", tmp_path)
    session_id = egg.start(SOFTMAX, "--llm", f"openai:gemma@{llama_server.url}", "--config", str(config), "--review", "plans",
                           "--device", "cpu", "--seeds", "1", "--rounds", "1", "--no-transforms", "--debug-rounds", "0")
    seen, rejected, edited = [], [], []
    while (gate := egg.wait_gate(session_id)) is not None:
        seen.append(gate)
        payload = gate["payload"]
        if gate["kind"] == "kernel" and not rejected:
            egg.decide(session_id, gate["id"], "reject", feedback=FEEDBACK)
            rejected.append(gate)
        elif gate["kind"] == "kernel":
            if payload["proposal"] is None:
                assert "malformed reply" in payload["note"] or "model call failed" in payload["note"], payload["note"]
                refused = egg.decide(session_id, gate["id"], "approve", check=False)
                assert refused.returncode == 2 and "nothing was proposed" in refused.stderr
            # the reviewer writes the kernel the model could not (a 270M base model's code block is no kernel)
            egg.decide(session_id, gate["id"], "edit", file=SOFTMAX_KERNEL)
        elif gate["kind"] == "plan" and not edited:
            plan_file = tmp_path / "plan.json"
            plan_file.write_text(json.dumps(PLAN))
            egg.decide(session_id, gate["id"], "edit", file=plan_file)
            edited.append(gate)
        elif gate["kind"] == "plan" and payload["proposal"] is None:
            egg.decide(session_id, gate["id"], "skip")
        else:
            egg.decide(session_id, gate["id"], "approve")
    shown = egg.show(session_id)
    assert shown["status"] == "done", shown
    kinds = [(g["stage"], g["kind"]) for g in seen]
    assert kinds[0] == ("algorithm", "kernel") and ("parallel_mapping", "plan") in kinds
    assert shown["outcome"]["final_status"] == "ok" and not shown["outcome"]["best_is_reference"]  # the person's kernel

    # what the person said went over HTTP to the server, verbatim, and the answering gates name those requests
    store = api.open_store(tmp_path / "egg.sqlite")
    gates = api.gates(store, session_id)
    keys = {g.id: g.key for g in gates}
    answered = {h.what: (g, h) for g in gates for h in g.data.heard}
    gate, heard = answered["feedback"]
    assert heard.gate_key == keys[rejected[0]["id"]] and heard.text == FEEDBACK and gate.kind == "kernel" and heard.calls
    assert all(FEEDBACK in m["content"] for m in (p["messages"][-1] for p in api.heard_prompts(store, session_id, heard)))
    gate, heard = answered["edited plan"]
    assert heard.gate_key == keys[edited[0]["id"]] and gate.data.step == "rewrite" and heard.calls
    prompts = api.heard_prompts(store, session_id, heard)
    assert prompts and all("PLAN-MARKER" in p["messages"][0]["content"] and '"name": "memory_bound"' in p["messages"][0]["content"] for p in prompts)
    sent = {c["request_key"] for c in store.calls(session_id) if c["provider"] == "openai" and not c["replayed"]}
    assert set(heard.calls) <= sent and set(answered["feedback"][1].calls) <= sent  # real calls, not replays
