"""The gate registry is the one contract between the engine and the faces: every gate ever recorded reads back
typed, each kind's decisions and edits are checked by its entry, the review modes are read off it, and no face or
engine module reads a payload by string key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.gate import RENDERERS, Allowed
from pipeline import api
from pipeline.sessions.gatekinds import KINDS, REVIEWED, DecisionError, Gate, check_decision
from pipeline.store.records import GATE_KINDS, GateRecord

ROOT = Path(__file__).resolve().parents[2]


def test_every_recorded_gate_reads_back_typed_with_a_summary(tmp_path):
    store = api.open_store(tmp_path / "egg.sqlite")
    sessions = api.import_recorded(store)
    assert sessions
    seen = set()
    for session in sessions:
        for gate in api.gates(store, session.id):
            assert isinstance(gate.data, KINDS[gate.kind].payload)
            assert gate.summary.strip()
            seen.add(gate.kind)
    assert seen == set(GATE_KINDS)


def test_the_registry_names_every_kind_once_with_its_renderer_and_review_modes():
    assert tuple(KINDS) == GATE_KINDS and set(RENDERERS) == set(KINDS)
    assert REVIEWED == {"every": frozenset(GATE_KINDS), "plans": frozenset({"plan", "kernel"}), "stage_ends": frozenset({"stage_end"}),
                        "auto": frozenset()}
    for spec in KINDS.values():
        assert set(spec.meaning) <= {"approve", "edit", "reject", "skip", "stop"} and {"skip", "stop"} <= set(spec.meaning)


def gate(kind: str, payload: dict) -> GateRecord:
    return GateRecord(1, "s", f"x/{kind}/0/f", "algorithm", kind, 0, True, payload, "now")


KERNEL = "class ModelNew:\n    pass\n"


@pytest.mark.parametrize("kind, payload, action, text, refusal", [
    ("plan", {"proposal": None}, "approve", None, "nothing was proposed at this plan gate"),
    ("plan", {"proposal": None}, "edit", '{"bottlenecks": []}', "not a valid Diagnosis"),
    ("kernel", {"proposal": None}, "approve", None, "nothing was proposed at this kernel gate"),
    ("kernel", {"proposal": KERNEL}, "edit", "def f(:\n", "does not parse"),
    ("kernel", {"proposal": KERNEL}, "edit", "x = 1\n", "no class ModelNew"),
    ("kernel", {"proposal": KERNEL}, "edit", "  ", "needs the edited text"),
    ("verdict", {"candidate_id": 1, "verdict": {}}, "edit", KERNEL, "a verdict is not edited"),
    ("stage_end", {"proposal": {"decisions": [], "best_id": None}}, "reject", None, "a stage end is approved, edited"),
    ("stage_end", {"proposal": {"decisions": [], "best_id": None}, "choices": [{"id": 4, "stage": "algorithm"}]}, "edit",
     '{"decisions": [], "best_id": 9}', "best_id 9 is not a passing candidate of this session ([4])"),
    ("kernel", {"proposal": KERNEL}, "launch", None, "unknown decision"),
])
def test_each_kind_refuses_what_its_entry_does_not_take(kind, payload, action, text, refusal):
    with pytest.raises(DecisionError, match=re.escape(refusal)):
        check_decision(gate(kind, payload), action, text)


def test_each_kind_takes_what_its_entry_allows_and_the_buttons_agree():
    assert check_decision(gate("kernel", {"proposal": KERNEL}), "edit", KERNEL) == KERNEL
    end = check_decision(gate("stage_end", {"proposal": {"decisions": [], "best_id": None}, "choices": [{"id": 4, "stage": "algorithm"}]}),
                         "edit", '{"decisions": [{"stage": "algorithm", "summary": "one row per program"}], "best_id": 4}')
    assert end == {"decisions": [{"stage": "algorithm", "summary": "one row per program"}], "best_id": 4}
    with pytest.raises(DecisionError, match="nobody reads a rejection"):
        check_decision(gate("kernel", {"proposal": KERNEL}), "reject", None, feedback_heard=False)
    plan = json.dumps({"bottlenecks": [{"name": "memory_bound", "evidence": [{"metric": "dram_throughput_pct", "value": "91", "interpretation": "near the roof"}],
                                        "fixes": [{"change": "vectorize the loads", "expected_gain_pct": 30}]}]})
    edits = {"plan": plan, "kernel": KERNEL, "verdict": KERNEL, "stage_end": json.dumps({"decisions": [], "best_id": None})}
    for kind, payload in (("plan", {"proposal": None}), ("plan", {"proposal": json.loads(plan)}), ("kernel", {"proposal": KERNEL}),
                          ("kernel", {"proposal": None}), ("verdict", {"candidate_id": 1, "verdict": {}}),
                          ("stage_end", {"proposal": {"decisions": [], "best_id": None}})):
        typed = Gate.of(gate(kind, payload))
        for heard in (True, False):
            buttons = Allowed.of(typed, feedback_heard=heard)
            for action in ("approve", "edit", "reject", "skip", "stop"):
                try:
                    check_decision(typed, action, edits[kind] if action == "edit" else None, feedback_heard=heard)
                    taken = True
                except DecisionError:
                    taken = False
                assert getattr(buttons, action) == taken, (kind, payload, heard, action)


def test_no_face_or_engine_module_reads_a_gate_payload_by_string_key():
    """Payloads are read through their typed models (Gate.data); a string key would fail silently on a rename."""
    reads = re.compile(r"""payload(\.get\(|\[)["'](?!proposal["'])""")
    offenders = [f"{path.relative_to(ROOT)}:{n}" for folder in ("pipeline", "components", "pages") for path in (ROOT / folder).rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), 1) if reads.search(line)]
    assert not offenders, offenders
