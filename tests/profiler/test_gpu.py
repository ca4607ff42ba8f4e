"""The profiler on a CUDA GPU with Nsight Compute (run on the H200: `pytest -m gpu tests/profiler`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.profiler.profiling import ProfileOptions, profile_candidate

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "profiler"


@pytest.fixture(autouse=True)
def needs_a_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.fail("tests marked gpu need a CUDA GPU")


def test_ceilings_are_measured_near_what_an_h200_does():
    from pipeline.profiler.ceilings import measure

    c = measure()
    assert c.source == "measured" and c.sms >= 100
    assert 2e12 < c.copy_bytes_per_s < 6e12
    assert c.matmul_flops_per_s["bf16"] > c.matmul_flops_per_s["tf32"] > c.matmul_flops_per_s["fp32"] > 1e13


@pytest.mark.parametrize("mode", ["ncu", "torch_profiler"])
def test_a_large_copy_profiles_memory_bound(mode, tmp_path):
    from pipeline.profiler.cache import ProfileCache

    report = profile_candidate(FIXTURES / "copy_triton.py", FIXTURES / "copy_problem.py", ProfileOptions(mode=mode), ProfileCache(tmp_path))
    assert report.source == mode
    assert report.overall.kind == "memory_bound", report.overall.summary
    (kernel,) = report.kernels
    assert kernel.name == "copy_kernel" and kernel.duration_ms > 0.3
    assert kernel.static is not None and kernel.static.registers == kernel.registers_per_thread
    if mode == "ncu":
        assert Path(report.raw_report).exists()
        assert kernel.memory_throughput_pct > 60


@pytest.mark.parametrize("mode", ["ncu", "torch_profiler"])
def test_a_candidate_that_starts_a_shell_is_profiled_inside_the_sandbox(mode, tmp_path):
    """Its survey, its driver and NCU with its target all run in the judge's sandbox: the shell's file stays in the
    sandbox's own /tmp, and NCU still reads the counters there."""
    from pipeline.profiler.cache import ProfileCache

    marker = Path("/tmp/egg-spawning-copy-marker")
    marker.unlink(missing_ok=True)
    report = profile_candidate(FIXTURES / "spawning_copy_triton.py", FIXTURES / "copy_problem.py", ProfileOptions(mode=mode), ProfileCache(tmp_path))
    assert report.source == mode, report.notes
    assert report.overall.kind == "memory_bound", report.overall.summary
    assert not marker.exists(), "the candidate's shell wrote to the machine's /tmp"

