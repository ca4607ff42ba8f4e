"""A reviewer's words, read for what the expert's rules can act on; launch numbers found and bounded in any file."""

from __future__ import annotations

from pipeline.agents.backend import Measurements, NoProposal
from pipeline.agents.replies import Bottleneck, Diagnosis, Evidence, Fix, KernelReply
from pipeline.expert.steering import Bound, honour_bounds, launched_kernels, read_feedback, topics_of
from pipeline.expert.variants import planned
from tests.expert.problems import ROOT, tiny
from tests.expert.test_backend import BACKEND, seed, source, timed_verdict


def test_feedback_is_read_for_bounds_topics_and_exactness_and_the_rest_is_named():
    steer = read_feedback("dim=64 fits in registers: try a variant with XBLOCK>1\nthere is only one kernel, nothing to fuse\n"
                          "BLOCK_N=128; avoid split-K; exact fp32 please; looks slow to me")
    assert {b.text() for b in steer.bounds} == {"XBLOCK>1", "BLOCK_N=128"}
    assert steer.avoid == {"fusion", "split_k"} and "rows_in_registers" in steer.prefer and steer.exact_fp32
    assert steer.unread == ("there is only one kernel", "looks slow to me")
    assert "XBLOCK>1" in steer.report() and "'looks slow to me'" in steer.report()
    nothing = read_feedback("no")
    assert not nothing.actionable and "No part of the feedback" in nothing.report()
    assert read_feedback("num_warps<=4").bounds == (Bound("num_warps", "<=", 4),)
    assert read_feedback("try a persistent grid").prefer == {"persistent"}


def test_bounds_are_written_into_literal_launches_and_computed_ones_are_named():
    kernel = seed(tiny("23_Softmax")).kernel
    launched = launched_kernels(kernel)
    assert launched and launched[0].values["XBLOCK"] == 1
    bounded, changes, cannot = honour_bounds(kernel, (Bound("XBLOCK", ">", 1), Bound("XBLOCK", "<=", 8), Bound("QBLOCK", ">", 2)))
    assert launched_kernels(bounded)[0].values["XBLOCK"] == 2 and len(changes) == 1
    assert cannot == ["QBLOCK>2: no kernel in this file has a parameter QBLOCK"]
    person = source(ROOT / "examples" / "candidates" / "softmax_triton.py")
    same, changes, cannot = honour_bounds(person, (Bound("BLOCK_SIZE", "<", 64),))
    assert same == person and not changes and "launch computes BLOCK_SIZE" in cannot[0]


def plan(*changes: str, name: str = "memory_bound") -> Diagnosis:
    evidence = [Evidence(metric="m", value="1", interpretation="i")]
    return Diagnosis(bottlenecks=[Bottleneck(name=name, evidence=evidence, fixes=[Fix(change=c, expected_gain_pct=5) for c in changes])])


def test_the_variants_tried_are_those_the_plans_fixes_name_in_its_order():
    order, note = planned("parallel_mapping", plan("a persistent grid of one program per SM", "split K across more programs",
                                                   "coalesce the loads"))
    assert [v.name for v in order] == ["persistent_grid", "split_k"] and "coalesce the loads" in note
    order, _ = planned("parallel_mapping", plan("a persistent grid of one program per SM"), avoid=frozenset({"persistent"}))
    assert order == []
    free_text, note = planned("memory", plan("make it faster"))  # a model's words: the bottleneck kinds decide
    assert free_text and "bottlenecks order them" in note


def test_a_rewrite_follows_the_edited_plan_and_a_rejected_topic_leaves_the_plan():
    gemm = seed(ROOT / "data" / "problems" / "suite" / "level1" / "1_GEMM_Square.py").kernel
    deeper = BACKEND.rewrite(gemm, "memory", "o", plan("software pipelining: num_stages 3-4"), [], "1 ms")
    assert deeper.rationale.startswith("rule deeper_pipelining:")
    only_vector = BACKEND.rewrite(gemm, "memory", "o", plan("wider vector accesses"), [], "1 ms")  # no pipelining: deleted
    assert isinstance(only_vector, KernelReply) and only_vector.rationale.startswith("rule tune_only:")
    timed = Measurements(timed_verdict(2.0, 0.5))
    full = BACKEND.diagnose(gemm, timed, "memory", "o")
    assert "pipelining" in {t for b in full.bottlenecks for f in b.fixes for t in topics_of(f.change)}
    refused = BACKEND.diagnose(gemm, timed, "memory", "o", feedback="avoid pipelining")
    left = {t for b in refused.bottlenecks for f in b.fixes for t in topics_of(f.change)}
    assert "pipelining" not in left and left
    rewrite = BACKEND.rewrite(gemm, "memory", "o", refused, [], "1 ms")
    assert "pipelining" not in rewrite.rationale.split(";")[0]


def test_a_one_kernel_file_gets_no_fusion_fix_and_nothing_to_fuse_drops_it_elsewhere():
    from tests.expert.test_grid_variants import launch_bound_profile

    def topics(kernel: str, feedback: str = "") -> set[str]:
        found = BACKEND.diagnose(kernel, launch_bound_profile(), "parallel_mapping", "o", feedback)
        return {t for b in found.bottlenecks for f in b.fixes for t in topics_of(f.change)}

    softmax = seed(tiny("23_Softmax")).kernel  # one kernel: the launch-bound plan's "fuse into one launch" is gone
    assert "fusion" not in topics(softmax) and topics(softmax)
    two = seed(tiny("6_Linear_ReLU_LogSumExp")).kernel
    assert len(launched_kernels(two)) == 2
    assert "fusion" in topics(two) and "fusion" not in topics(two, "there is only one kernel, nothing to fuse")


def test_feedback_on_an_earlier_verdict_guides_a_step_without_counting_as_its_rejection():
    from pipeline.agents.backend import VERDICT_NOTE

    own = seed(tiny("23_Softmax"), index=2)
    guided = seed(tiny("23_Softmax"), index=2, feedback=VERDICT_NOTE + "not that one, and XBLOCK>1")
    assert guided.paradigm == own.paradigm  # seed 2 is still seed 2's paradigm
    assert "XBLOCK=2," in guided.kernel and "XBLOCK=1," in own.kernel


PERSONS_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096, num_warps=4)
        return out
'''


def measured_grid(grid: tuple[int, ...], sms: int = 132) -> Measurements:
    import dataclasses

    from pipeline.profiler.ceilings import nominal
    from pipeline.profiler.report import Classification, Evidence as ProfileEvidence, KernelProfile, ProfileReport

    overall = Classification("memory_bound", 30.0, (ProfileEvidence("dram_throughput_pct", 60.0, "DRAM at 60%"),), "memory-bound")
    kernel = KernelProfile("scale_kernel", duration_ms=0.02, grid=grid, block=(128,), classification=overall)
    ceilings = dataclasses.replace(nominal(), sms=sms)
    return Measurements(None, ProfileReport("ncu", "c.py", "0" * 64, "p.py", "0" * 64, (kernel,), overall, ceilings, None, 0.02, None))


def test_any_kernels_launch_grid_is_checked_against_the_sms_in_parallel_mapping():
    """A person's kernel with no record: its measured grid against the SMs, the fix naming the block size its launch
    passes (and the tuning engine then offered that block size); a computed block size is said to be one."""
    few = BACKEND.diagnose(PERSONS_KERNEL, measured_grid((48,)), "parallel_mapping", "o")
    top = few.bottlenecks[0]
    assert top.name == "underfilled_grid" and top.evidence[0].metric == "launch__grid_size" and top.evidence[0].value == "48"
    assert "84 SMs idle" in top.evidence[0].interpretation and "a smaller BLOCK" in top.fixes[0].change
    tail = BACKEND.diagnose(PERSONS_KERNEL, measured_grid((150,)), "parallel_mapping", "o").bottlenecks[0]
    assert tail.name == "wave_tail" and tail.evidence[0].value == "1.14" and "14% of the SMs" in tail.evidence[0].interpretation
    whole = BACKEND.diagnose(PERSONS_KERNEL, measured_grid((264,)), "parallel_mapping", "o")
    assert all(b.name not in ("underfilled_grid", "wave_tail") for b in whole.bottlenecks)
    other_stage = BACKEND.diagnose(PERSONS_KERNEL, measured_grid((48,)), "memory", "o")
    assert all(b.name != "underfilled_grid" for b in other_stage.bottlenecks)
    on_a_smaller_gpu = BACKEND.diagnose(PERSONS_KERNEL, measured_grid((48,), sms=40), "parallel_mapping", "o").bottlenecks[0]
    assert on_a_smaller_gpu.name == "wave_tail"  # 48 programs on 40 SMs: 1.2 waves
    computed = (ROOT / "examples" / "candidates" / "softmax_triton.py").read_text()
    said = BACKEND.diagnose(computed, measured_grid((16,)), "parallel_mapping", "o").bottlenecks[0].fixes[0].change
    assert "its launch computes the block size" in said
    rewrite = BACKEND.rewrite(PERSONS_KERNEL, "parallel_mapping", "o", few, [], "")
    assert isinstance(rewrite, KernelReply) and any(t.name == "BLOCK" and 2048 in t.values for t in rewrite.tunables)
