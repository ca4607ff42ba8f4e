"""The static survey: a candidate's launches intercepted in a subprocess, on meta tensors, compiled for sm_90."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.profiler.counters import profiles_from_rows
from pipeline.profiler.ncu import parse_raw_csv
from pipeline.profiler.static import candidate_static_facts
from pipeline.profiler.survey import survey_candidate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SUITE = ROOT / "data" / "problems" / "suite" / "level1"


@pytest.fixture(scope="module")
def softmax_survey():
    return survey_candidate(ROOT / "examples" / "candidates" / "softmax_triton.py", SUITE / "23_Softmax.py")


def test_a_2_gib_problem_is_surveyed_on_meta_tensors(softmax_survey):
    s = softmax_survey
    assert s.ran_on == "meta" and s.errors == ()
    (launch,) = s.launches
    assert launch.facts.kernel == "softmax_row_kernel" and launch.grid == (65536,) and launch.calls == 1
    assert launch.facts.constexprs["BLOCK_SIZE"] == 8192 and launch.facts.registers > 0
    assert s.costs.min_bytes == 2 * 65536 * 8192 * 4 and s.costs.flops == 0 and s.costs.dtypes == ("float32",)
    assert s.forward_launches == 1


def test_candidate_static_facts_is_the_list_of_compiled_configurations(softmax_survey):
    facts = candidate_static_facts(ROOT / "examples" / "candidates" / "softmax_triton.py", SUITE / "23_Softmax.py")
    assert [f.binary_sha256 for f in facts] == [l.facts.binary_sha256 for l in softmax_survey.launches]


def test_every_autotune_configuration_is_compiled():
    s = survey_candidate(FIXTURES / "audit" / "autotuned_matmul.py", SUITE / "1_GEMM_Square.py")
    assert s.errors == ()
    assert sorted(l.facts.constexprs["BLOCK_M"] for l in s.launches) == [64, 128]
    assert all(l.autotuned for l in s.launches)
    assert {l.facts.num_warps for l in s.launches} == {4, 8}
    assert s.forward_launches == 1


def test_a_forward_that_reads_values_is_retried_on_cpu_tensors():
    s = survey_candidate(FIXTURES / "profiler" / "reads_values_triton.py", FIXTURES / "problems" / "1_TinyScale.py")
    assert s.ran_on == "cpu"
    assert "meta" in s.errors[0]
    assert [l.grid for l in s.launches] == [(4,)]


def test_a_failing_forward_is_data_not_an_exception():
    s = survey_candidate(FIXTURES / "candidates" / "forward_raises.py", FIXTURES / "problems" / "1_TinyScale.py")
    assert s.ran_on == "" and s.launches == ()
    assert any("shapes not supported" in e for e in s.errors)


def test_a_hanging_survey_times_out_as_data():
    s = survey_candidate(FIXTURES / "candidates" / "hang_first_call.py", FIXTURES / "problems" / "1_TinyScale.py", timeout_s=3)
    assert s.launches == () and "timed out" in s.errors[0]


@pytest.mark.parametrize(
    ("candidate", "problem", "capture"),
    [("gemm_fp16_triton.py", SUITE / "6_GEMM_Square_FP16.py", "h200_gemm.csv"),
     ("chase_triton.py", FIXTURES / "profiler" / "chase_problem.py", "h200_chase.csv")],
)  # fmt: skip
def test_static_shared_memory_is_what_ncu_measured_on_the_h200(candidate, problem, capture):
    """Both sides count dynamic + static shared memory per block, without the 1 KiB the driver reserves for every
    block (cuobjdump counts that window as static; NCU puts it in launch__shared_mem_per_block_driver)."""
    (launch,) = survey_candidate(FIXTURES / "profiler" / candidate, problem).launches
    (measured,) = profiles_from_rows(parse_raw_csv((FIXTURES / "ncu" / capture).read_text()))
    assert launch.facts.kernel == measured.name
    assert launch.facts.registers == measured.registers_per_thread
    assert launch.facts.shared_bytes == measured.shared_bytes_per_block > 0
