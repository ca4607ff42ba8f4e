"""The judge's footprint: a stated multiple of what the problem needs, limits that follow it and the machine, and a
verdict with the numbers for a problem the machine cannot hold (CPU, deterministic, no timings)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pipeline.judge import compare, limits, sandbox, worker
from pipeline.judge.judge import Judge, Reference
from pipeline.judge.tensorfile import file_name
from pipeline.problems.loader import load_candidate
from pipeline.types import EvalOptions, Status

from .conftest import FIXTURES, problem

GB = 2**30


def test_the_device_footprint_is_the_stated_multiple_of_the_problem():
    """I = O = 4 GB, no weights, two sets ahead, three timed sets: the timed calls decide, the candidate's
    (T + 1)I + 2O beside the reference's I + O (it may still compute the verified timed trials' outputs), 5I + 3O,
    plus two contexts' slack; the checked calls' 2I + 5O and the comparison's chunks come below it."""
    footprint = limits.Footprint(4 * GB, 4 * GB, 0, ahead_sets=2, timed_sets=3)
    assert footprint.problem_bytes == 8 * GB
    checked = 2 * 4 * GB + 5 * 4 * GB + limits.COMPARE_BYTES
    expected = 5 * 4 * GB + 3 * 4 * GB + 2 * limits.DEVICE_RESERVE_BYTES
    assert expected > checked + 2 * limits.DEVICE_RESERVE_BYTES
    assert footprint.device_bytes() == expected
    assert footprint.device_bytes() < 80 * GB  # the norm problem that ran out of memory on an 80 GB H100 fits


def test_kernelbench_s_8_gib_norms_fit_an_80_gb_card():
    """level1/38_L1Norm_ and 39_L2Norm_: 32768 x 65535 float32 in and out (session 19's H100 refused them at 95.5 GB)."""
    norm = 32768 * 65535 * 4
    footprint = limits.Footprint(norm, norm, 0, ahead_sets=2, timed_sets=3)
    assert footprint.device_bytes() < 72 * GB
    assert not footprint.does_not_fit("cuda", 128 * GB, int(79.2 * GB))


def test_the_timed_phase_decides_when_inputs_dwarf_outputs():
    footprint = limits.Footprint(10 * GB, 1, 0, ahead_sets=2, timed_sets=3)
    assert footprint.device_bytes() == 4 * 10 * GB + 2 + (10 * GB + 1) + 2 * limits.DEVICE_RESERVE_BYTES


def test_a_gpu_times_as_many_input_sets_as_fit_beside_the_reference():
    """KernelBench's level1/45 (average pooling, a 16 GB input, 0.14 GB out): its check passed on an 80 GB H100, then
    its re-verification ran the reference out of GPU memory while the candidate held three timed sets and their
    buffer (bench/results/2026-12-07-s25). Two timed sets fit beside the reference; a small problem keeps three."""
    pooling = limits.Footprint(16 * GB, 16 * 64 * 186 * 186 * 4, 0, ahead_sets=2, timed_sets=3)
    card = int(79.18 * GB)
    assert pooling.device_bytes() > card
    assert limits.fitting_timed_sets(pooling, card) == 2
    assert not limits.Footprint(16 * GB, pooling.output_bytes, 0, 2, 2).does_not_fit("cuda", 128 * GB, card)
    assert limits.fitting_timed_sets(limits.Footprint(GB, GB, 0, 2, 3), card) == 3
    assert limits.fitting_timed_sets(limits.Footprint(40 * GB, GB, 0, 2, 3), card) == 1  # then does_not_fit says why


def test_weights_count_once_per_process_that_holds_the_model():
    light, heavy = limits.Footprint(GB, GB, 0), limits.Footprint(GB, GB, 5 * GB)
    assert heavy.device_bytes() - light.device_bytes() == 2 * 5 * GB  # candidate and reference at once


def test_a_small_problem_keeps_the_default_limit(monkeypatch):
    monkeypatch.delenv(limits.MEMORY_VARIABLE, raising=False)
    small = limits.Footprint(1 << 20, 1 << 20, 1 << 20)
    assert limits.problem_limits(small, "cuda") == limits.default_limits()
    assert limits.problem_limits(small, "cpu") == limits.default_limits()


def test_a_large_problem_raises_the_limit_but_never_past_the_machine(monkeypatch):
    monkeypatch.delenv(limits.MEMORY_VARIABLE, raising=False)
    monkeypatch.setattr(limits, "machine_memory_bytes", lambda: 128 * GB)
    conv = limits.Footprint(GB, 8 * GB, 0, ahead_sets=2)  # the 2-D convolution with an 8 GB output
    assert conv.job_host_bytes("cuda") == limits.BASE_HOST_BYTES + GB + 3 * 8 * GB  # files of A + 1 sets at most
    assert limits.problem_limits(conv, "cuda").memory_bytes == 64 * GB  # within the default: unchanged
    bigger = limits.Footprint(GB, 20 * GB, 0, ahead_sets=2)
    assert limits.problem_limits(bigger, "cpu").memory_bytes == limits.BASE_HOST_BYTES + 2 * GB + 4 * 20 * GB
    huge = limits.Footprint(100 * GB, 100 * GB)
    assert limits.problem_limits(huge, "cpu").memory_bytes == 128 * GB


def test_an_explicit_memory_limit_is_kept_as_is(monkeypatch):
    monkeypatch.setenv(limits.MEMORY_VARIABLE, "2")
    huge = limits.Footprint(100 * GB, 100 * GB)
    assert limits.problem_limits(huge, "cpu").memory_bytes == 2 * GB


def test_does_not_fit_names_needed_and_available_bytes():
    footprint = limits.Footprint(30 * GB, 30 * GB, 0, ahead_sets=2, timed_sets=3)
    why = footprint.does_not_fit("cuda", 1024 * GB, 80 * GB)
    assert why.startswith("the problem cannot be judged on this GPU")
    assert f"{footprint.device_bytes() / GB:.3g} GB of GPU memory" in why and "the GPU has 80 GB" in why
    assert "one input set 30 GB, its outputs 30 GB" in why
    host = footprint.does_not_fit("cpu", 64 * GB, None)
    assert host.startswith("the problem cannot be judged on this machine") and "the machine has 64 GB" in host
    assert limits.Footprint(GB, GB).does_not_fit("cuda", 128 * GB, 80 * GB) == ""


def test_the_gpu_host_need_leaves_out_the_file_fallback():
    """Output files are a fallback the job's limit allows for; they do not make a problem unjudgeable."""
    conv = limits.Footprint(GB, 8 * GB, 0, ahead_sets=2)
    assert conv.host_need_bytes("cuda") == 2 * limits.BASE_HOST_BYTES + GB
    assert conv.does_not_fit("cuda", 64 * GB, 80 * GB) == ""


def _judge(device: str = "cpu") -> Judge:
    judge = object.__new__(Judge)  # no worker pool: only the arithmetic is under test
    judge.options = EvalOptions(device=device, correctness_trials=5, timing=False)
    return judge


def _reference(outputs: list[list[int]], **sizes) -> Reference:
    structure = {"trial_1": {"kind": "tensor", "tensors": [{"dtype": "float32", "shape": s} for s in outputs]}}
    return Reference({"structure": structure, **sizes}, compare.Degeneracy(False), ("signed", "scaled", "outliers"))


def test_the_judge_reads_the_footprint_from_the_reference_facts():
    reference = _reference([[1024, 1024]], input_bytes=3 << 20, weight_bytes=1 << 20, min_bytes=8 << 20)
    footprint = _judge().footprint(reference)
    assert (footprint.input_bytes, footprint.output_bytes, footprint.weight_bytes) == (3 << 20, 4 << 20, 1 << 20)
    assert footprint.ahead_sets == 5 + 3  # 2 GiB of 4 MiB sets covers every checked set
    assert footprint.timed_sets == 0


def test_facts_cached_before_the_sizes_were_recorded_still_give_a_footprint():
    reference = _reference([[1024, 1024]], min_bytes=10 << 20)
    footprint = _judge().footprint(reference)
    assert footprint.input_bytes == 6 << 20 and footprint.weight_bytes == 0


def test_large_outputs_run_at_most_two_sets_ahead():
    reference = _reference([[1 << 30]], input_bytes=GB)  # 4 GiB of float32
    assert _judge()._ahead(reference) == 2
    assert _judge().footprint(reference).ahead_sets == 2


def test_a_problem_the_machine_cannot_hold_gets_a_verdict_with_the_numbers(monkeypatch):
    """The check needs more host memory than the machine has: an infra_error that says so, naming both sizes,
    before any candidate call (never a memory kill, never the candidate's fault)."""
    monkeypatch.setattr(limits, "BASE_HOST_BYTES", 1 << 50)  # the parent's arithmetic only
    options = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=1, compile_timeout_s=60, run_timeout_s=60)
    with Judge(options, cache_dir=None) as judge:
        result = judge.evaluate(problem("level1/23_Softmax.py"), load_candidate(FIXTURES / "candidates" / "softmax_ok.py"))
    assert result.status is Status.INFRA_ERROR
    assert result.reason.startswith("the problem cannot be judged on this machine: the judge needs about")
    assert f"the machine has {limits.machine_memory_bytes() / GB:.3g} GB" in result.reason
    assert not result.trials


def test_a_read_output_file_is_deleted(tmp_path):
    """Files a job hands outputs over in are memory on /dev/shm: gone once the judge has read them."""
    for i in range(2):
        (tmp_path / file_name("trial_1", i)).write_bytes(b"\0" * 8)
    (tmp_path / file_name("trial_2", 0)).write_bytes(b"\0" * 8)
    sandbox.Job._remove_files(SimpleNamespace(workdir=tmp_path), "trial_1", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [file_name("trial_2", 0)]


def test_the_mutation_copy_of_cpu_inputs_is_a_clone_and_still_sees_a_write():
    inputs = [torch.arange(6.0), 3, torch.ones(2, dtype=torch.int64)]
    before = worker.mutation_copy(inputs, output_bytes=24)
    assert before[1] is None and before[0] is not inputs[0]
    inputs[0][2] = -1.0
    assert not worker.same_tensor(before[0], inputs[0]) and worker.same_tensor(before[2], inputs[2])


def test_a_float64_sum_chunk_by_chunk_gives_the_same_degeneracy(monkeypatch):
    t = torch.full((1000,), 3.0)
    whole = compare.DegeneracyWatch()
    whole.add([t])
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 7)
    chunked = compare.DegeneracyWatch()
    chunked.add([t])
    assert whole.verdict() == chunked.verdict() and chunked.verdict().degenerate
    assert compare._sum64(torch.arange(1000.0)) == pytest.approx(499500.0)


def _outliers_whole(value: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The outlier trial as it was drawn before it went chunk by chunk."""
    picked = torch.rand(value.shape, generator=gen) < worker.OUTLIER_SHARE
    size = 50 + 950 * torch.rand(value.shape, generator=gen)
    out = torch.where(picked, (size * torch.where(value < 0, -1.0, 1.0)).to(value.dtype), value)
    out.view(-1)[0], out.view(-1)[-1] = value.reshape(-1)[0], value.reshape(-1)[-1]  # kept as drawn since session 28
    return out


def test_outliers_drawn_chunk_by_chunk_are_the_same_values_on_inputs_of_one_chunk(monkeypatch):
    for value in (torch.randn(16, 64), torch.randn(3, 5, 7).half(), torch.randn(8, 6).t()):
        whole = _outliers_whole(value, torch.Generator().manual_seed(3))
        assert torch.equal(worker._with_outliers(value, torch.Generator().manual_seed(3)), whole)
    monkeypatch.setattr(worker, "CHUNK", 1000)
    value = torch.randn(100_000)
    drawn = worker._with_outliers(value, torch.Generator().manual_seed(5))
    share = float((drawn != value).float().mean())
    assert drawn.shape == value.shape and 0.005 < share < 0.015 and float(drawn.abs().max()) >= 50


def _comparer(repeats: int = 2):
    from pipeline.judge.draw import Draw
    from pipeline.judge.judge import Comparer

    options = EvalOptions(device="cpu", correctness_trials=2, repeat_calls=repeats, subsample_above=64, timing=False)
    draw = Draw.new(options, (), 0)
    comparer = Comparer(draw, compare.Degeneracy(False), "cpu", repeats)
    released = []
    comparer.on_release = lambda: released.append(1)
    return comparer, draw, released


def test_the_first_trial_s_reference_goes_back_once_the_trial_is_compared_and_repeats_use_their_subsamples():
    """The judge kept the first trial's whole reference until its last repeat (one more output set on the card);
    it now keeps each repeat's subsample only, and the repeats are compared against exactly those elements."""
    comparer, draw, released = _comparer()
    ref = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    comparer.reference_outputs("trial_1", [ref.clone()])
    comparer.candidate_outputs("trial_1", [ref.clone()])
    assert "trial_1" not in comparer.reference and released == [1]
    assert set(comparer.repeat_refs) == {"repeat_1", "repeat_2"}
    assert all(r[0].numel() < ref.numel() for r in comparer.repeat_refs.values())
    wrong = ref.clone()
    wrong[compare.subsample(torch.arange(4096), draw.sample("repeat_2"))] += 1  # every element repeat_2 looks at
    comparer.candidate_outputs("repeat_1", [compare.subsample(ref.clone(), draw.sample("repeat_1"))])
    comparer.candidate_outputs("repeat_2", [compare.subsample(wrong, draw.sample("repeat_2"))])
    assert comparer.results["repeat_1"].passed and not comparer.results["repeat_2"].passed
    assert not comparer.repeat_refs and not comparer.candidate


def test_repeats_that_arrive_before_the_reference_are_compared_when_it_comes():
    comparer, draw, released = _comparer()
    ref = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    comparer.candidate_outputs("trial_1", [ref.clone()])
    comparer.candidate_outputs("repeat_1", [compare.subsample(ref.clone(), draw.sample("repeat_1"))])
    comparer.reference_outputs("trial_1", [ref.clone()])
    comparer.candidate_outputs("repeat_2", [compare.subsample(ref.clone(), draw.sample("repeat_2"))])
    assert all(comparer.results[c].passed for c in ("trial_1", "repeat_1", "repeat_2"))
    assert released == [1] and not comparer.reference and not comparer.repeat_refs


def test_a_worker_keeps_a_copy_on_the_gpu_only_where_the_others_keep_their_room():
    """level1/45 (a 16 GB input, 80 GB card): the candidate's held call and mutation copy, taken while the GPU had
    them free, left the reference 10 GB; each copy now leaves the reference's and the judge's share free."""
    gb = 1 << 30
    pooling = limits.Footprint(16 * gb, gb // 7, 0, ahead_sets=2, timed_sets=2)
    reserve = pooling.beside_candidate_bytes()
    assert 16 * gb < reserve < 26 * gb  # the reference W + I + O, the judge (A + 1)·O + C, two processes' slack
    free = 79 * gb - 16 * gb - 16 * gb  # the candidate's inputs and the reference's
    assert worker.device_room(free, 16 * gb, reserve)  # the mutation copy: 47 GB free, 31 left
    assert not worker.device_room(free - 16 * gb, 2 * 16 * gb, reserve)  # a held call besides: none left
    assert worker.device_room(free - 16 * gb, 2 * 15 * gb, 0)  # the rule before: whatever was free at the time
