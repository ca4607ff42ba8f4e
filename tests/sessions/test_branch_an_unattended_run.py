"""An `egg optimize` run is a session in mode auto: any of its gates can be branched into a session that waits there."""

from __future__ import annotations

import time

from pipeline import api
from pipeline.stages.method import Budget
from pipeline.api import ModelChoice, optimize
from pipeline.types import EvalOptions
from tests.sessions.driver import ROOT, SOFTMAX

SCRIPT = ROOT / "examples" / "scripts" / "softmax_demo.yaml"


def test_a_gate_of_an_optimize_run_branches_into_a_session_that_waits_there(tmp_path):
    outcome = optimize(SOFTMAX, tmp_path, ModelChoice(script=SCRIPT), EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1),
                       Budget(seeds=3, rounds=1))
    store = api.open_store(tmp_path / "egg.sqlite")
    gates = store.gates(outcome.run_id)
    assert gates and all(g.decision.who == "auto" for g in gates)  # every gate of the run is a row, decided by auto
    plan = next(g for g in gates if g.kind == "plan")
    branch = api.branch(store, outcome.run_id, plan.id)
    assert branch.review == "every"
    api.start_worker(store, branch.id)
    deadline = time.monotonic() + 240
    while not store.open_gate_ids(branch.id):
        assert time.monotonic() < deadline and not store.session(branch.id).finished, api.events(store, branch.id)[-3:]
        time.sleep(0.2)
    waiting = store.gate(store.open_gate_ids(branch.id)[0])
    assert (waiting.key, waiting.kind, waiting.payload["proposal"]) == (plan.key, "plan", plan.payload["proposal"])
    assert not [e for e in api.events(store, branch.id) if e.kind == "judging"]  # replayed: every verdict came from the store
    api.cancel(store, branch.id)
