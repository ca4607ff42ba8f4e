"""egg optimize end to end on the CPU: a scripted model, real servers on loopback, the real judge."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import CassetteConfig, LLMConfig
from pipeline.judge import evaluate
from pipeline.llm.spec import parse_spec
from pipeline.api import ModelChoice, optimize
from pipeline.stages.method import Budget
from pipeline.problems.loader import fingerprint_text, load_candidate, load_problem
from pipeline.store import Store
from pipeline.types import EvalOptions, Status
from tests.llm.http_stub import StubServer, _send

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "data" / "problems" / "tiny" / "level1" / "23_Softmax.py"
SCRIPT = ROOT / "examples" / "scripts" / "softmax_demo.yaml"
CPU = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1)
DEMO_BUDGET = Budget(seeds=3, rounds=1)
EXPECTED = [  # (stage, origin, status) of every candidate the demo script leads to, in order
    ("algorithm", "seed", "ok"),
    ("algorithm", "seed", "mismatch"),
    ("algorithm", "debug", "ok"),
    ("algorithm", "seed", "banned"),
    ("algorithm", "debug", "ok"),
    ("algorithm", "transform", "ok"),
    ("algorithm", "transform", "ok"),
    ("algorithm", "transform", "ok"),
    ("parallel_mapping", "rewrite", "ok"),
    ("tiling", "rewrite", "ok"),
    ("memory", "rewrite", "ok"),
]


def attempts(outcome) -> list[tuple[str, str, str]]:
    return [(a.stage, a.origin, a.status) for a in outcome.progress.attempts]


def test_scripted_run_walks_every_path(tmp_path):
    outcome = optimize(SOFTMAX, tmp_path, ModelChoice(script=SCRIPT), CPU, DEMO_BUDGET)
    assert attempts(outcome) == EXPECTED
    # the malformed third seed went back to the model once, then the cheat came, was banned and repaired;
    # then each of the three correct seeds was transformed
    banned = outcome.progress.attempts[3]
    assert banned.reason.startswith("triton_launched:")
    assert [d.stage for d in outcome.progress.decisions] == ["algorithm", "parallel_mapping", "tiling", "memory"]
    assert outcome.progress.best_id == 1 and outcome.final.status is Status.OK  # cpu: the first correct seed stays
    by_agent = {k: v.calls for k, v in outcome.ledger.totals("agent").items()}
    assert by_agent == {"code": 10, "debug": 2, "profile": 3}
    evidence = json.loads((tmp_path / "evidence.json").read_text())
    assert evidence["verdict"]["status"] == "ok" and evidence["best_is_reference"] is False
    assert evidence["llm"]["total"]["calls"] == 15 and evidence["beats_eager"] is None
    report = (tmp_path / "report.md").read_text()
    assert "| algorithm | 8 | 6 | 1 |" in report and "correctness only" in report
    best = evaluate(load_problem(SOFTMAX), load_candidate(tmp_path / "best.py"), CPU)
    assert best.status is Status.OK, best.reason
    store = Store(tmp_path / "egg.sqlite")
    assert len(store.candidates(outcome.run_id)) == 11 and len(store.calls(outcome.run_id)) == 15
    assert store.session(outcome.run_id).status == "done"


def test_budget_exhaustion_keeps_the_best_so_far(tmp_path):
    outcome = optimize(SOFTMAX, tmp_path, ModelChoice(script=SCRIPT), CPU, Budget(seeds=3, rounds=1, max_llm_calls=2))
    assert outcome.progress.stopped == "2 model calls (limit 2)"
    assert attempts(outcome) == EXPECTED[:2] and outcome.final.ok
    assert "budget exhausted (2 model calls (limit 2))" in (tmp_path / "report.md").read_text()


def test_a_wall_budget_bounds_the_search_and_the_kept_kernel_is_re_verified_even_past_it(tmp_path):
    """The first check is judged; then no check starts that would end past the budget; the kernel that best.py will
    be is judged again in a fresh process all the same (never left unverified for the budget), and every output
    says by how much that ran past the budget."""
    outcome = optimize(SOFTMAX, tmp_path, ModelChoice(script=SCRIPT), CPU, Budget(seeds=3, rounds=1, max_wall_s=1.0))
    assert outcome.progress.stopped.startswith("1 s of wall time") and "kept for the winner's re-verification" in outcome.progress.stopped
    assert attempts(outcome) == EXPECTED[:1]  # the first seed only: the second would have ended past the budget
    assert not outcome.reverify_skipped and outcome.final.ok and outcome.verify_seed is not None
    assert outcome.reverify_past_budget_s > 0 and outcome.headline().startswith("a verified kernel")
    evidence = json.loads((tmp_path / "evidence.json").read_text())
    assert evidence["reverified"] is True and evidence["reverify_past_budget_s"] > 0
    assert "past the wall budget: a kernel kept as best.py is always judged again" in (tmp_path / "report.md").read_text()


def test_a_wall_budget_with_room_re_verifies_the_winner(tmp_path):
    outcome = optimize(SOFTMAX, tmp_path, ModelChoice(script=SCRIPT), CPU, Budget(seeds=1, rounds=1, max_wall_s=900.0))
    assert not outcome.reverify_skipped and outcome.verify_seed is not None and outcome.final.ok
    assert json.loads((tmp_path / "evidence.json").read_text())["reverified"] is True


def test_a_killed_run_resumes_where_it_stopped(tmp_path):
    command = [sys.executable, "-m", "pipeline.cli", "optimize", str(SOFTMAX), "--script", str(SCRIPT), "--device", "cpu",
               "--seeds", "3", "--rounds", "1", "--out", str(tmp_path)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in process.stderr:
        if "candidate 3 (debug)" in line:  # two seeds and a repair judged: kill it in the middle of stage 1
            os.killpg(process.pid, signal.SIGKILL)
            break
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    # The kill lands a moment after the line: the next seed's request may have been answered and stored meanwhile.
    with sqlite3.connect(tmp_path / "egg.sqlite") as db:
        stored = db.execute("SELECT COUNT(*) FROM llm_exchanges").fetchone()[0]
    assert stored >= 3  # seed 1, seed 2 and the repair
    outcome = optimize(SOFTMAX, tmp_path, ModelChoice(script=SCRIPT), EvalOptions(device="cpu"), DEMO_BUDGET, resume=True)
    assert attempts(outcome) == EXPECTED and outcome.final.ok
    assert outcome.replayed_calls == stored  # every stored answer is replayed, none asked again


def test_resume_refuses_a_folder_without_a_run(tmp_path):
    from pipeline.api import RunError

    with pytest.raises(RunError, match="nothing to resume"):
        optimize(SOFTMAX, tmp_path, ModelChoice(script=SCRIPT), CPU, DEMO_BUDGET, resume=True)


def chat_completion(text: str):
    """A stub action: an OpenAI chat completion whose message is `text`."""

    def act(handler, body):
        payload = {
            "id": "c1", "object": "chat.completion", "created": 0, "model": "stub",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }
        _send(handler, 200, json.dumps(payload).encode(), {})

    return act


@pytest.fixture
def same_kernel_server():
    kernel = (ROOT / "examples" / "candidates" / "softmax_triton.py").read_text()
    import threading

    server = StubServer([chat_completion(f"Here it is.\n\n```python\n{kernel}```\n")])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def test_a_server_answering_one_correct_kernel_gives_a_best_py_that_passes_egg_check(tmp_path, same_kernel_server):
    llm = LLMConfig(spec=parse_spec(f"openai:any@{same_kernel_server.url}"))
    outcome = optimize(SOFTMAX, tmp_path / "run", ModelChoice(llm=llm), CPU, Budget(seeds=2, rounds=1))
    assert outcome.final.ok and not outcome.best_is_reference
    check = subprocess.run([sys.executable, "-m", "pipeline.cli", "check", str(tmp_path / "run" / "best.py"), "--ref", str(SOFTMAX), "--device", "cpu"],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_model_that_repeats_a_judged_kernel_is_asked_for_another_and_the_repeat_is_not_judged(tmp_path, same_kernel_server):
    """The stub answers one kernel to every request: each repeat is sent back to the model (no gate for a person,
    no second verdict), and after the last try the earlier verdict stands."""
    llm = LLMConfig(spec=parse_spec(f"openai:any@{same_kernel_server.url}"))
    outcome = optimize(SOFTMAX, tmp_path / "run", ModelChoice(llm=llm), CPU, Budget(seeds=2, rounds=1))
    store = Store(tmp_path / "run" / "egg.sqlite")
    same = [e for e in store.events(outcome.run_id) if e.kind == "same_kernel"]
    assert any("asking for a different one" in e.message for e in same), [e.message for e in same]
    candidates = store.candidates(outcome.run_id)
    fingerprints = [c.source_fp for c in candidates if c.author != "expert"]
    assert len(fingerprints) == len(set(fingerprints)), "a repeated kernel was judged again"
    offered = [g for g in store.gates(outcome.run_id) if g.kind == "kernel" and g.payload.get("proposal")
               and fingerprint_text(g.payload["proposal"]) == candidates[0].source_fp]
    assert len(offered) == 1, "a repeated kernel was offered at a gate again"


def test_a_whole_run_replays_offline_from_its_cassette(tmp_path, same_kernel_server):
    cassette = tmp_path / "run.cassette.jsonl"
    recording = LLMConfig(spec=parse_spec(f"openai:any@{same_kernel_server.url}"), cassette=CassetteConfig(mode="record", path=cassette))
    first = optimize(SOFTMAX, tmp_path / "a", ModelChoice(llm=recording), CPU, Budget(seeds=2, rounds=1))
    same_kernel_server.shutdown()
    replaying = LLMConfig(spec=parse_spec("openai:any@http://127.0.0.1:9/v1"), cassette=CassetteConfig(mode="replay", path=cassette))
    second = optimize(SOFTMAX, tmp_path / "b", ModelChoice(llm=replaying), CPU, Budget(seeds=2, rounds=1))
    assert attempts(second) == attempts(first) and second.final.ok
    assert [r.request_key for r in second.ledger.records] == [r.request_key for r in first.ledger.records]
    assert all(r.replayed for r in second.ledger.records)


def test_nonsense_from_a_real_local_model_ends_cleanly_with_the_expert_seed(tmp_path, llama_server):
    """A base model's replies are never usable kernels: its seed gives nothing, and the run ends with the seed the
    expert backend adds to every model's multi-seed search (the last one)."""
    # Greedy decoding: at the server's default temperature a 32-token reply once parsed (CI, stop 29), so no repair
    llm = LLMConfig(spec=parse_spec(f"openai:gemma@{llama_server.url}"), max_tokens=32, structured_repairs=1, temperature=0.0)
    outcome = optimize(SOFTMAX, tmp_path, ModelChoice(llm=llm), CPU, Budget(seeds=2, rounds=1, debug_rounds=1))
    assert outcome.model.endswith("+ expert seeds") and outcome.final.ok
    by_agent = {k: v.calls for k, v in outcome.ledger.totals("agent").items()}
    assert by_agent["code"] == 2  # the model's seed, asked twice (one repair of its malformed reply), then the expert's seed
    best = (tmp_path / "best.py").read_text()
    assert "egg-expert" in best and "ModelNew = Model" not in best


def test_optimize_exits_1_when_no_candidate_passed(tmp_path):
    """An unreachable model: the run ends cleanly with the reference as best.py, and the exit status says so."""
    command = [sys.executable, "-m", "pipeline.cli", "optimize", str(SOFTMAX), "--llm", "openai:any@http://127.0.0.1:9/v1",
               "--device", "cpu", "--seeds", "1", "--rounds", "0", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "connection_error" in result.stderr and "no candidate passed the judge" in result.stdout
    assert "ModelNew = Model" in (tmp_path / "best.py").read_text()


@pytest.fixture
def seed_fitted_kernel_server():
    """Answers every request with an honest kernel that re-seeds torch itself before making its weights: right
    under the run's seed, wrong under any other."""
    kernel = (ROOT / "examples" / "candidates" / "gemm_epilogue_triton.py").read_text()
    fitted = kernel.replace("        super().__init__()\n", "        super().__init__()\n        torch.manual_seed(42)\n", 1)
    assert fitted != kernel
    import threading

    server = StubServer([chat_completion(f"```python\n{fitted}```\n")])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def test_a_kernel_fitted_to_the_search_seed_fails_the_held_out_re_verification(tmp_path, seed_fitted_kernel_server):
    linear = ROOT / "data" / "problems" / "tiny" / "level2" / "1_Linear_GELU_Scale.py"
    llm = LLMConfig(spec=parse_spec(f"openai:any@{seed_fitted_kernel_server.url}"))
    outcome = optimize(linear, tmp_path, ModelChoice(llm=llm), CPU, Budget(seeds=1, transforms=False, rounds=0))
    assert [a.status for a in outcome.progress.attempts] == ["ok"]  # the search judged it on seed 42: it passed
    assert outcome.verify_seed == CPU.seed + 1_000_003
    assert outcome.final.status is Status.MISMATCH and outcome.best_is_reference
    assert "ModelNew = Model" in (tmp_path / "best.py").read_text()
    assert json.loads((tmp_path / "evidence.json").read_text())["verification_seed"] == outcome.verify_seed
