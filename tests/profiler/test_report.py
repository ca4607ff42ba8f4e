"""ProfileReport and its parts round-trip through JSON; bad kinds and sources are refused."""

from __future__ import annotations

import json

import pytest

from pipeline.profiler import ceilings
from pipeline.profiler.classify import Context, classify_profiles
from pipeline.profiler.costs import ProblemCosts
from pipeline.profiler.counters import profile_from_metrics
from pipeline.profiler.report import Classification, ProfileReport
from pipeline.profiler.static import StaticFacts
from pipeline.types import from_jsonable, to_jsonable
from tests.profiler import archetypes as A

FACTS = StaticFacts("copy_kernel", 8, 3, {"BLOCK": 4096, "EVEN": True}, 32, 0, 0, False, False, "ab" * 32, 0.2)


def sample_report() -> ProfileReport:
    ctx = Context(ceilings.nominal(), ProblemCosts(0, 2 * 1024**3, ("float32",)))
    kernel = profile_from_metrics("copy_kernel", (65536,), (256,), A.copy())
    kernels, overall = classify_profiles([kernel.__class__(**{**kernel.__dict__, "static": FACTS})], ctx, counters=True)
    return ProfileReport(
        source="ncu", candidate_path="/c.py", candidate_sha256="c" * 64, problem_path="/p.py", problem_fingerprint="p" * 64,
        kernels=tuple(kernels), overall=overall, ceilings=ctx.ceilings, costs=ctx.costs, total_kernel_ms=0.52,
        floor_ms=ctx.floor_ms(False), notes=("a note",), environment={"gpu": "NVIDIA H200"}, raw_report="/r.ncu-rep", profile_s=12.5,
    )  # fmt: skip


def test_profile_report_round_trips_through_json():
    report = sample_report()
    again = from_jsonable(ProfileReport, json.loads(json.dumps(to_jsonable(report))))
    assert again == report
    assert again.kernels[0].static.constexprs == {"BLOCK": 4096, "EVEN": True}
    assert again.overall.kind == "memory_bound" and again.counters


def test_unknown_kinds_and_sources_are_refused():
    with pytest.raises(ValueError):
        Classification("slow", None, (), "")
    with pytest.raises(ValueError):
        ProfileReport("guess", "", "", "", "", (), None, None, None, None, None)


def test_the_agents_view_is_compact_and_invents_nothing():
    from pipeline.profiler.report import compact

    view = compact(sample_report())
    assert view["source"] == "ncu" and view["hardware_counters"]
    assert view["bound"]["kind"] == "memory_bound" and view["bound"]["evidence"][0]["metric"]
    (kernel,) = view["kernels"]
    assert kernel["name"] == "copy_kernel" and kernel["static"]["num_warps"] == 8
    assert "metrics" not in kernel and "tensor_pipe_pct" in kernel
    assert len(json.dumps(view)) < 4000
    assert "null" not in json.dumps(view)
