"""The wall budget is spent in the order that ends with a verified kernel: a failing only candidate is repaired
before a second seed is asked for, and the repair's check is expected to cost a candidate's check, not a second
reference (the judge keeps the reference's facts), while the winner's re-verification stays reserved."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.llm.scripted import scripted_client
from pipeline.stages.method import Budget
from pipeline.types import Candidate, EvalOptions, EvalResult, Problem, Status, Timing
from tests.stages.test_acceptance import auto_optimizer

FIRST_CHECK_S, REFERENCE_FACTS_S, LATER_CHECK_S = 20.0, 12.0, 8.0


class Clock:
    """Wall seconds that pass only when the scripted judge says a check took them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CostedJudge:
    """A test double of the judge: a candidate whose source says `# verdict: mismatch` fails, any other passes; the
    first check computes the reference's facts (20 s, 12 of them the facts), every later one finds them (8 s)."""

    options = EvalOptions(device="cuda")

    def __init__(self, clock: Clock) -> None:
        self.clock, self.checks = clock, 0

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        first = self.checks == 0
        self.checks += 1
        self.clock.now += FIRST_CHECK_S if first else LATER_CHECK_S
        phases = {"reference_facts": REFERENCE_FACTS_S} if first else {}
        source = Path(candidate.path).read_text()
        common = dict(judge_phase_s=phases, reference_source="computed" if first else "memory")
        if re.search(r"# verdict: mismatch", source):
            return EvalResult(Status.MISMATCH, "correctness: 4 of 8388608 elements outside atol=rtol=1e-4", problem, candidate, "cuda", **common)
        timing = Timing(1.0, 1.0, 0.01, 0.99, 1.01, 100, "cuda_events")
        return EvalResult(Status.OK, "passed every check", problem, candidate, "cuda", timing=timing, speedups={"eager": 2.0}, **common)


def kernel(tag: str) -> str:
    return f'```json\n{{"paradigm": "p", "rationale": "r", "tunables": []}}\n```\n```python\n# {tag}\nclass ModelNew: pass\n```\n'


REPAIR = '```json\n{"cause": "TF32 products: every tl.dot in exact fp32"}\n```\n```python\n# repaired\nclass ModelNew: pass\n```\n'


def test_a_failing_only_candidate_is_repaired_before_a_second_seed_within_a_small_budget(tmp_path):
    clock = Clock()
    client, provider = scripted_client([kernel("verdict: mismatch"), REPAIR, kernel("seed 2")])
    optimizer = auto_optimizer(tmp_path, CostedJudge(clock), client, Budget(seeds=2, rounds=0, transforms=False, max_wall_s=60.0),
                               clock=clock)
    progress = optimizer.run()
    assert [(a.origin, a.status) for a in progress.attempts] == [("seed", "mismatch"), ("debug", "ok")]
    assert progress.best_source is not None and "# repaired" in progress.best_source
    # 28 s spent; the re-verification's 25 s (1.25 x the first check) are still there for the winner
    assert progress.stopped.startswith("60 s of wall time") and "25 s of it kept for the winner's re-verification" in progress.stopped
    assert 60.0 - (clock() - optimizer.started) >= optimizer.reverify_estimate_s()
    assert len(provider.requests) == 2  # the second seed was never asked for: its check would not have fit


def test_the_next_check_is_expected_to_cost_a_candidates_check():
    from pipeline.stages.optimize import _without_reference

    problem, candidate = Problem("/p.py", "p", None, None, "fp"), Candidate("/c.py", "fp")
    computed = EvalResult(Status.OK, "", problem, candidate, "cuda", judge_phase_s={"reference_facts": 12.0}, reference_source="computed")
    cached = EvalResult(Status.OK, "", problem, candidate, "cuda", judge_phase_s={"reference_facts": 12.0}, reference_source="disk")
    assert _without_reference(20.0, computed) == 8.0 and _without_reference(20.0, cached) == 20.0


def test_a_round_whose_profile_would_eat_the_re_verification_is_not_begun(tmp_path):
    """After the seed's 20 s check, a round needs a profile (assumed as long as a check until one is measured) and
    a check: 20 + 8 + 8 + the 25 s reserve pass 60 s, so no profile is taken and the reserve stays whole."""
    clock = Clock()
    profiled = []

    def profiler(candidate: str, problem: str):
        profiled.append(candidate)
        clock.now += 40.0  # an NCU profile of a large kernel
        raise RuntimeError("not reached")

    client, _ = scripted_client([kernel("seed 1")])
    optimizer = auto_optimizer(tmp_path, CostedJudge(clock), client, Budget(seeds=1, rounds=1, transforms=False, max_wall_s=60.0),
                               clock=clock, profiler=profiler)
    progress = optimizer.run()
    assert profiled == [] and [(a.origin, a.status) for a in progress.attempts] == [("seed", "ok")]
    assert progress.stopped.startswith("60 s of wall time")
    assert 60.0 - (clock() - optimizer.started) >= optimizer.reverify_estimate_s()


def test_only_the_kernel_best_py_will_be_is_re_verified():
    """A verified kernel slower than eager leaves best.py the reference: it is not judged again, and says why; one
    that beats eager (or an untimed one, on the CPU) always is."""
    from pipeline.sessions.runner import _not_kept

    problem, candidate = Problem("/p.py", "p", None, None, "fp"), Candidate("/c.py", "fp")
    slow = EvalResult(Status.OK, "", problem, candidate, "cuda", speedups={"eager": 0.442, "compile": 0.44})
    fast = EvalResult(Status.OK, "", problem, candidate, "cuda", speedups={"eager": 1.5})
    untimed = EvalResult(Status.OK, "", problem, candidate, "cpu")
    assert _not_kept(slow) == "best.py is the reference: the fastest verified kernel reached 0.442x of eager"
    assert _not_kept(fast) == _not_kept(untimed) == _not_kept(None) == ""
