"""The judge on a CUDA GPU: timing, and the cheats only a GPU can show. Run on the GPU machine: pytest -m gpu."""

from __future__ import annotations

import pathlib

import pytest
import torch

from pipeline.judge.judge import Judge
from pipeline.problems.loader import load_problem
from pipeline.types import EvalOptions, Status

from ..judge.conftest import candidate, problem

pytestmark = pytest.mark.gpu
SOFTMAX = "level1/23_Softmax.py"


@pytest.fixture(scope="module")
def gpu_judge():
    if not torch.cuda.is_available():
        pytest.fail("tests marked gpu need a CUDA GPU")
    with Judge(EvalOptions(device="cuda", timing_trials=30)) as judge:
        yield judge


def no_static_findings(source, reference_dtypes=frozenset()):
    return ()


def test_honest_candidate_is_timed_against_both_baselines(gpu_judge):
    result = gpu_judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert result.status is Status.OK, (result.reason, result.log_tail)
    assert result.timing and result.timing.trials == 30 and result.timing.method == "cuda_events"
    assert result.timing.ci95_low_ms <= result.timing.median_ms <= result.timing.ci95_high_ms
    assert set(result.baselines) == {"eager", "compile"} and set(result.speedups) == {"eager", "compile"}
    checks = {c.name: c for c in result.checks}
    assert checks["side_stream"].passed and checks["physical_limit"].passed and checks["timing_bracket"].passed
    # five timed trials, chosen by the judge after each returned, were compared with the reference's outputs
    assert sum(t.name.startswith("timed_") for t in result.trials) == 5


def test_side_stream_work_is_caught_at_run_time():
    """The static audit is switched off: the full-device sync against the events must catch it."""
    with Judge(EvalOptions(device="cuda", timing_trials=30), auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("gpu_side_stream.py"))
    # the hidden work also makes the trials outlast their times on the judge's clock: whichever check comes first
    # names the ban, and the side-stream check fails on its own
    checks = {c.name: c for c in result.checks}
    assert result.status is Status.BANNED and result.reason.split(":")[0] in {"side_stream", "timing_bracket"}, (result.reason, result.log_tail)
    assert checks["side_stream"].passed is False, checks["side_stream"].detail


def test_stale_memory_is_poisoned(gpu_judge):
    """The block the candidate's torch.empty gets back was filled with NaN first, so an output never written reads NaN."""
    result = gpu_judge.evaluate(problem(SOFTMAX), candidate("cheat_stale_memory.py"))
    assert result.status is Status.MISMATCH and result.reason.startswith("correctness: trial_1:"), result.reason
    assert "non-finite mismatch" in result.reason and "candidate nan" in result.reason, result.reason


def test_patched_cuda_timer_is_caught_at_run_time():
    with Judge(EvalOptions(device="cuda", timing_trials=10), auditor=no_static_findings) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("cheat_timer_patch.py"))
    assert result.status is Status.BANNED and result.reason.startswith("judge_integrity:"), result.reason
    assert "torch.cuda.Event.elapsed_time" in result.reason


def test_phase_switch_is_caught_in_the_timed_calls(gpu_judge):
    """Right for every correctness call, wrong from the 41st call on: only the timed calls' outputs show it."""
    result = gpu_judge.evaluate(problem(SOFTMAX), candidate("gpu_phase_switch_late.py"))
    assert result.status is Status.MISMATCH and result.reason.startswith("correctness: timed_"), result.reason
    assert all(t.passed for t in result.trials if not t.name.startswith("timed_"))


def test_graph_replay_is_timed_when_asked():
    with Judge(EvalOptions(device="cuda", timing_trials=20, cuda_graph=True)) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert result.status is Status.OK, result.reason
    assert {"eager_graph", "compile_graph"} <= set(result.baselines)


SUITE = pathlib.Path(__file__).resolve().parents[2] / "data" / "problems" / "suite"


def unaudited(**options):
    return Judge(EvalOptions(device="cuda", **options), auditor=no_static_findings)


def test_a_small_side_stream_kernel_is_caught_where_the_old_allowance_hid_it():
    """All the work on a side stream, about a tenth of a millisecond of it: within 25% + 0.25 ms of the events
    (the old allowance), beyond what the reference's own gap allows."""
    with unaudited(timing_trials=30) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("gpu_side_stream_small.py"))
    assert (result.status, result.reason.split(":")[0]) == (Status.BANNED, "side_stream"), (result.reason, result.log_tail)


def test_numpy_on_the_host_is_delegation_on_the_gpu_too():
    with unaudited(timing_trials=10) as judge:
        result = judge.evaluate(problem(SOFTMAX), candidate("gpu_host_numpy.py"))
    assert result.status is Status.BANNED and result.reason.startswith("torch_delegation: "), result.reason
    assert "go to the host" in result.reason


def test_a_cache_keyed_on_scale_free_contents_is_caught_on_the_timed_trials():
    """Every timed trial's inputs are scaled by a factor of its own: a key that ignores scale replays a stale
    product, and the trials the judge compares show it."""
    with unaudited(timing_trials=30) as judge:
        result = judge.evaluate(problem("level1/1_GEMM_Square.py"), candidate("gpu_ratio_cache.py"))
    assert result.status is Status.MISMATCH and result.reason.startswith("correctness: timed_"), result.reason


def test_times_rewritten_through_the_frames_are_caught_by_the_judges_own_clock():
    with unaudited(timing_trials=30, baselines=("eager",)) as judge:
        result = judge.evaluate(load_problem(SUITE / SOFTMAX), candidate("gpu_frames_timing.py"))
    assert result.status is Status.BANNED, result.reason
    assert result.reason.startswith(("timing_bracket: reported times far below", "physical_limit: faster than physically possible")), result.reason


def test_item_on_the_device_counts_as_bytes_to_the_host():
    """`.item()` (aten._local_scalar_dense) moves a value off the GPU without a copy op: the third held-out red team
    moved a whole answer that way, uncounted. Each value is now bytes to the host in the call's work."""
    from pipeline.judge.probes import Work, WorkRecorder

    x = torch.arange(64, dtype=torch.float32, device="cuda")
    work = Work()
    with WorkRecorder(work):
        values = [x[i].item() for i in range(16)]
    assert values == list(range(16)) and work.to_host_bytes == 16 * 4


def test_a_check_leaves_no_device_memory_reserved_in_the_judges_process(gpu_judge):
    """The judge compares outputs on the GPU in its own process; once a check ends, torch's caching allocator gives
    that memory back, so the next check's workers (a re-verification's reference among them) can have it: a 16 GB
    pooling problem's re-verification ran out of device memory beside 52 GB left reserved (session 27)."""
    result = gpu_judge.evaluate(problem(SOFTMAX), candidate("softmax_ok.py"))
    assert result.status is Status.OK, result.reason
    cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()  # at most the rest of a segment still in use
    assert cached <= 20 << 20, (torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
