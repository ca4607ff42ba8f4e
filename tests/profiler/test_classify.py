"""Classification: synthetic kernels of known character, and every captured NCU CSV under tests/fixtures/ncu/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.profiler import ceilings
from pipeline.profiler.classify import (
    Context,
    classify_kernel,
    classify_profiles,
    predict_kernel,
)
from pipeline.profiler.costs import ProblemCosts
from pipeline.profiler.counters import profile_from_metrics, profiles_from_rows
from pipeline.profiler.ncu import parse_raw_csv
from pipeline.profiler.report import Ceilings, KernelProfile
from tests.profiler import archetypes as A

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
CTX = Context(ceilings.nominal())


def kernel(name: str, metrics: dict, grid=(), block=()) -> KernelProfile:
    return profile_from_metrics(name, grid, block, metrics)


@pytest.mark.parametrize(
    ("metrics", "kind"),
    [(A.copy(), "memory_bound"), (A.gemm(), "compute_bound_tensor"), (A.fma_bound(), "compute_bound_fma"),
     (A.chase(), "occupancy_limited_registers"), (A.tiny_row(), "launch_bound"), (A.latency(), "latency_bound")],
)  # fmt: skip
def test_each_archetype_gets_its_class_with_evidence(metrics, kind):
    cls = classify_kernel(kernel("k", metrics), CTX)
    assert cls.kind == kind
    assert cls.evidence and all(e.metric and e.meaning for e in cls.evidence)
    assert not cls.predicted


def test_memory_bound_distance_is_measured_against_the_copy_ceiling():
    cls = classify_kernel(kernel("copy", A.copy()), CTX)
    achieved = 2 * 1.074e9 / 520e-6
    assert cls.roofline_distance_pct == pytest.approx(100 * (1 - achieved / 4.3e12), abs=0.1)
    assert any(e.metric == "achieved_bw_pct_of_copy" for e in cls.evidence)


def test_latency_bound_names_the_dominant_stall():
    cls = classify_kernel(kernel("k", A.latency()), CTX)
    assert "barrier" in cls.evidence[2].metric
    assert "barrier" in cls.summary or "__syncthreads" in cls.summary


def test_shared_memory_limited_kernel():
    m = A.chase()
    m.update({"launch__occupancy_limit_shared_mem": 2, "launch__occupancy_limit_registers": 12, "launch__shared_mem_per_block_dynamic": 100_000})
    cls = classify_kernel(kernel("k", m, block=(32,)), CTX)
    assert cls.kind == "occupancy_limited_shared"


def test_a_saturated_unit_wins_over_too_few_blocks():
    m = A.copy()
    cls = classify_kernel(kernel("persistent", m, grid=(100,)), CTX)
    assert cls.kind == "memory_bound"


def test_too_few_blocks_for_132_sms_is_launch_bound():
    m = A.latency()
    cls = classify_kernel(kernel("small_grid", m, grid=(64,)), CTX)
    assert cls.kind == "launch_bound" and "68 SMs get no work" in cls.summary


def test_many_tiny_launches_make_the_candidate_launch_bound():
    rows = parse_raw_csv(A.write_csv([("scale_row_kernel", (1,), (128,), A.tiny_row())] * 40))
    _, overall = classify_profiles(profiles_from_rows(rows), CTX, counters=True)
    assert overall.kind == "launch_bound"
    assert overall.evidence[0].value == 40


def test_candidate_takes_the_kind_of_the_kernel_with_most_time():
    copy_k = kernel("copy_kernel", A.copy())
    tiny_k = kernel("tiny", A.tiny_row())
    ctx = Context(ceilings.nominal(), ProblemCosts(flops=0, min_bytes=2 * 1024**3, dtypes=("float32",)))
    _, overall = classify_profiles([copy_k, tiny_k], ctx, counters=True)
    assert overall.kind == "memory_bound"
    assert overall.evidence[0].value == "copy_kernel"
    assert overall.roofline_distance_pct == pytest.approx(100 * (1 - (2 * 1024**3 / 4.3e12) / (520e-6 + 2.1e-6)), abs=0.2)


def test_without_counters_the_problem_intensity_predicts_the_bound():
    ctx = Context(ceilings.nominal(), ProblemCosts(flops=2 * 8192**3, min_bytes=3 * 2 * 8192**2, dtypes=("float16",)))
    k = KernelProfile(name="gemm", grid=(2048,), block=(256,), registers_per_thread=64, shared_bytes_per_block=1000)
    cls = predict_kernel(k, ctx)
    assert cls.predicted and cls.kind == "compute_bound_fma"  # no static facts saying wgmma: the FMA pipe
    assert cls.evidence[0].metric == "arithmetic_intensity"


def _fixture_cases() -> list:
    expected = json.loads((FIXTURES / "expected.json").read_text())["fixtures"]
    cases = []
    for name, want in expected.items():
        marks = [] if (FIXTURES / name).exists() else [pytest.mark.skip(reason=f"{name} not captured yet (bench/profile_h200.py)")]
        cases.append(pytest.param(name, want, id=name, marks=marks))
    return cases


@pytest.mark.parametrize(("name", "want"), _fixture_cases())
def test_captured_ncu_csv_gets_the_expected_class(name, want):
    rows = parse_raw_csv((FIXTURES / name).read_text())
    assert rows, f"{name}: no kernel rows"
    kernels, overall = classify_profiles(profiles_from_rows(rows), CTX, counters=True)
    dominant = max(kernels, key=lambda k: k.duration_ms or 0.0)
    assert dominant.classification.kind == want["kernel_kind"], [e.meaning for e in dominant.classification.evidence]
    assert overall.kind == want["kind"]


# The H200 captures, checked for values as well as classes (ceilings measured the same day: bench/results/2026-11-29-s2).
H200 = Context(Ceilings("NVIDIA H200", 132, 4.1917e12, {"fp32": 51.1e12, "tf32": 404e12, "bf16": 756e12}, "measured"))


def captured(name: str) -> list[KernelProfile]:
    kernels, _ = classify_profiles(profiles_from_rows(parse_raw_csv((FIXTURES / name).read_text())), H200, counters=True)
    return kernels


@pytest.mark.parametrize(
    ("name", "total_ms", "calls"),
    [("h200_copy.csv", 0.520352, 1), ("h200_gemm.csv", 1.588256, 1), ("h200_chase.csv", 0.283072, 1), ("h200_tiny.csv", 0.136512, 64)],
)  # fmt: skip
def test_captured_kernel_times_are_in_milliseconds(name, total_ms, calls):
    (k,) = captured(name)
    assert k.calls == calls and k.duration_ms == pytest.approx(total_ms, rel=1e-4)


def test_the_captured_copy_runs_near_the_measured_copy_bandwidth():
    (k,) = captured("h200_copy.csv")
    assert k.dram_bytes == pytest.approx(2.123e9, rel=1e-3)
    assert k.achieved_bw_bytes_per_s == pytest.approx(4.08e12, rel=1e-2)
    evidence = {e.metric: e.value for e in k.classification.evidence}
    assert evidence["achieved_bw_pct_of_copy"] == pytest.approx(97.3, abs=0.5)
    assert evidence["roofline_floor_ms"] == pytest.approx(0.5066, rel=1e-3)
    assert k.classification.roofline_distance_pct == pytest.approx(2.6, abs=0.2)


def test_the_captured_gemm_and_chase_read_their_launch_resources():
    (gemm,) = captured("h200_gemm.csv")
    assert gemm.registers_per_thread == 204 and gemm.shared_bytes_per_block == 147_456  # dynamic + static
    assert gemm.classification.roofline_distance_pct == pytest.approx(100 - 82.1, abs=0.1)  # the tensor pipe's idle share
    (chase,) = captured("h200_chase.csv")
    assert chase.registers_per_thread == 156 and chase.shared_bytes_per_block == 512
    assert chase.occupancy_limiter == "registers" and chase.theoretical_occupancy_pct == pytest.approx(18.75)


def test_the_captured_tiny_launches_are_2_us_each():
    (tiny,) = captured("h200_tiny.csv")
    assert tiny.mean_duration_us == pytest.approx(2.13, abs=0.05)
    assert tiny.dram_bytes < 1e6  # 64 launches reading a 4 KiB row each, bytes added up
