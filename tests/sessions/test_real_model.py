"""A session on a real local model (llama.cpp's server, Gemma 3 270M) in review mode `plans`: the base model's
nonsense never wedges a gate; every gate shows why nothing usable was proposed and takes a decision."""

from __future__ import annotations

from tests.sessions.driver import SOFTMAX, SOFTMAX_KERNEL, Egg


def test_nonsense_replies_never_wedge_a_gate(tmp_path, llama_server):
    config = tmp_path / "egg.yaml"
    config.write_text("llm:\n  max_tokens: 32\n  structured_repairs: 1\n")
    egg = Egg(tmp_path / "egg.sqlite", tmp_path)
    session_id = egg.start(SOFTMAX, "--llm", f"openai:gemma@{llama_server.url}", "--config", str(config), "--review", "plans",
                           "--device", "cpu", "--seeds", "1", "--rounds", "1", "--no-transforms", "--debug-rounds", "0")
    seen = []
    while (gate := egg.wait_gate(session_id)) is not None:
        seen.append(gate)
        payload = gate["payload"]
        if gate["kind"] == "kernel":
            if payload["proposal"] is None:
                assert "malformed reply" in payload["note"] or "model call failed" in payload["note"], payload["note"]
                refused = egg.decide(session_id, gate["id"], "approve", check=False)
                assert refused.returncode == 2 and "nothing was proposed" in refused.stderr
            # the reviewer writes the kernel the model could not (a 270M base model's code block is no kernel)
            egg.decide(session_id, gate["id"], "edit", file=SOFTMAX_KERNEL)
        elif gate["kind"] == "plan" and payload["proposal"] is None:
            egg.decide(session_id, gate["id"], "skip")
        else:
            egg.decide(session_id, gate["id"], "approve")
    shown = egg.show(session_id)
    assert shown["status"] == "done", shown
    kinds = [(g["stage"], g["kind"]) for g in seen]
    assert kinds[0] == ("algorithm", "kernel") and ("parallel_mapping", "plan") in kinds
    assert shown["outcome"]["final_status"] == "ok" and not shown["outcome"]["best_is_reference"]  # the person's kernel
