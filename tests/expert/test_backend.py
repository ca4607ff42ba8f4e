"""The expert backend's five answers: what each role proposes, why (its rule named), and what it does after a
rejection; every answer a deterministic function of its inputs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pipeline.agents.backend import Measurements, NoProposal
from pipeline.agents.replies import Bottleneck, DebugReply, Diagnosis, Evidence, Fix, KernelReply
from pipeline.expert.backend import ExpertBackend
from pipeline.expert.capture import cached, forget
from pipeline.problems.loader import fingerprint_text
from pipeline.expert.record import read
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.stages.tunables import tuned_kernel
from pipeline.types import EvalResult, Status, Timing
from tests.expert.judging import CPU, Judge, judge_source, verdict_text
from tests.expert.problems import ROOT, fixture, tiny

BACKEND = ExpertBackend()


def source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def seed(path: Path, index: int = 1, feedback: str = "") -> KernelReply | NoProposal:
    return BACKEND.seed(source(path), "any paradigm a model would be asked for", index, 3, feedback)


def verdict(status: Status, reason: str, log: str = "", path: Path = tiny("1_Linear_GELU_Scale")) -> EvalResult:
    problem = load_problem(path)
    return EvalResult(status, reason, problem, load_candidate(path), "cpu", log_tail=log)


# seeds ----------------------------------------------------------------------------------------------------------


def test_seeds_are_structurally_different_paradigms_each_with_its_rule_and_tunables():
    replies = [seed(tiny("1_Linear_GELU_Scale"), i) for i in (1, 2, 3)]
    assert all(isinstance(r, KernelReply) for r in replies)
    assert [r.paradigm for r in replies] == ["fused_triton", "library_core", "streaming_exact"]
    assert len({r.kernel for r in replies}) == 3
    for reply in replies:
        assert reply.rationale.startswith(f"rule {reply.paradigm}:") and reply.tunables
        assert read(reply.kernel).options.paradigm == reply.paradigm
    assert "torch.matmul(" in replies[1].kernel and 'input_precision="ieee"' in replies[2].kernel


def test_no_seed_repeats_another_and_the_list_ends_with_a_reason():
    assert isinstance(seed(tiny("15_Swish"), 1), KernelReply)
    ended = seed(tiny("15_Swish"), 2)
    assert isinstance(ended, NoProposal) and "no further seed" in ended.reason and "same kernels" in ended.reason


def test_a_rejected_seed_is_never_proposed_again():
    first = seed(tiny("8_LayerNorm"), 1)
    again = seed(tiny("8_LayerNorm"), 1, feedback="too many registers")
    assert isinstance(again, KernelReply) and again.kernel != first.kernel
    assert isinstance(seed(tiny("15_Swish"), 1, feedback="no"), NoProposal)


def test_answers_are_the_same_from_a_fresh_backend_and_a_fresh_capture():
    path = tiny("6_Linear_ReLU_LogSumExp")
    before = seed(path, 2).kernel
    forget(source(path))
    assert not cached(fingerprint_text(source(path)))
    assert ExpertBackend().seed(source(path), "p", 2, 3).kernel == before


def test_stage_two_finds_the_sessions_problem_without_the_capture_cache():
    """A session resumed on another machine (no capture of its problem there): the rewrite rules are given the
    session's problem, not left to the cache; without it they say what is missing."""
    path = tiny("23_Softmax")
    kernel = seed(path).kernel
    forget(source(path))
    try:
        lost = ExpertBackend().rewrite(kernel, "tiling", "o", plan_of("latency_bound"), [], "1 ms")
        assert isinstance(lost, NoProposal) and "neither this session's nor in this machine's capture cache" in lost.reason
        reply = ExpertBackend(source(path)).rewrite(kernel, "tiling", "o", plan_of("latency_bound"), [], "1 ms")
        assert isinstance(reply, KernelReply) and reply.rationale.startswith("rule rows_in_registers_or_streamed:")
        other = ExpertBackend(source(tiny("15_Swish"))).rewrite(kernel, "tiling", "o", plan_of("latency_bound"), [], "1 ms")
        assert isinstance(other, KernelReply)  # the capture above came back into the cache: another session's backend finds it
    finally:
        seed(path)  # the cache as the other tests expect it


def test_the_problem_runs_in_a_child_without_secrets(tmp_path, monkeypatch):
    problem = tmp_path / "spy.py"
    problem.write_text(source(tiny("23_Softmax")).replace(
        "def get_inputs():",
        "import os\nos.environ['EGG_EXPERT_SIDE_EFFECT'] = '1'\n"
        "assert 'OPENAI_API_KEY' not in os.environ, 'a secret reached the problem'\n\n\ndef get_inputs():"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    reply = BACKEND.seed(source(problem), "p", 1, 3)
    assert isinstance(reply, KernelReply)
    assert "EGG_EXPERT_SIDE_EFFECT" not in os.environ


def test_a_problem_that_cannot_run_is_a_reason_not_a_crash():
    broken = source(tiny("23_Softmax")).replace("return torch.softmax(x, dim=-1)", "raise RuntimeError('no forward here')")
    reply = BACKEND.seed(broken, "p", 1, 3)
    assert isinstance(reply, NoProposal) and "no forward here" in reply.reason


# transformations ------------------------------------------------------------------------------------------------


def test_transform_applies_the_rules_that_fire_and_names_them():
    path = tiny("10_Conv2d_GroupNorm_Tanh_MaxPool")
    reply = BACKEND.transform(source(path), seed(path).kernel, "p")
    assert isinstance(reply, KernelReply) and "rule reshape_sinking" in reply.rationale
    assert read(reply.kernel).options.algebra
    assert isinstance(BACKEND.transform(source(path), reply.kernel, "p"), NoProposal)  # nothing left to apply
    assert isinstance(BACKEND.transform(source(path), seed(path).kernel, "p", feedback="no"), NoProposal)


def test_transform_says_so_when_no_rule_applies_or_the_kernel_is_not_its_own():
    path = tiny("23_Softmax")
    none = BACKEND.transform(source(path), seed(path).kernel, "p")
    assert isinstance(none, NoProposal) and "no expert transformation applies" in none.reason
    foreign = BACKEND.transform(source(path), source(ROOT / "examples" / "candidates" / "softmax_triton.py"), "p")
    assert isinstance(foreign, NoProposal) and "not written by the expert backend" in foreign.reason


# diagnosis and rewrites -----------------------------------------------------------------------------------------


def timed_verdict(ms: float, floor_ms: float) -> EvalResult:
    base = verdict(Status.OK, "passed every check")
    timing = Timing(ms, ms, 0.01, ms * 0.99, ms * 1.01, 100, "cuda_events")
    return EvalResult(base.status, base.reason, base.problem, base.candidate, "cuda", timing=timing, physical_floor_ms=floor_ms)


def test_without_a_profile_the_plan_rests_on_the_judges_time_against_the_floor():
    kernel = seed(tiny("23_Softmax")).kernel
    plan = BACKEND.diagnose(kernel, Measurements(timed_verdict(2.0, 0.5)), "memory", "objective")
    assert isinstance(plan, Diagnosis)
    top = plan.bottlenecks[0]
    assert top.name == "unprofiled" and {e.metric for e in top.evidence} == {"median_ms", "physical_floor_ms"}
    assert all("4.0x physical_floor_ms" in f.change for f in top.fixes)
    assert isinstance(BACKEND.diagnose(kernel, Measurements(None), "memory", "objective"), NoProposal)


def test_an_underfilled_gemm_is_diagnosed_from_its_tile_count_and_rewritten_with_split_k():
    kernel = seed(fixture("small_gemm_long_k")).kernel
    plan = BACKEND.diagnose(kernel, Measurements(timed_verdict(0.2, 0.01)), "parallel_mapping", "objective")
    top = plan.bottlenecks[0]
    assert top.name == "underfilled_grid" and top.evidence[0].metric == "output_tiles" and "output_tiles = 1" in top.fixes[0].change
    reply = BACKEND.rewrite(kernel, "parallel_mapping", "objective", plan, [], "0.2 ms")
    assert isinstance(reply, KernelReply) and reply.rationale.startswith("rule split_k:")
    assert "split_k_8" in read(reply.kernel).rules
    names = [t.name for t in reply.tunables]
    assert names and tuned_kernel(reply.kernel, names) is not None
    second = BACKEND.rewrite(kernel, "parallel_mapping", "objective", plan, [], "0.2 ms", feedback="slower")
    assert second.rationale.startswith("rule grouped_tile_order:") and second.kernel != reply.kernel
    rejected_plan = BACKEND.diagnose(kernel, Measurements(timed_verdict(0.2, 0.01)), "parallel_mapping", "o", feedback="wrong")
    assert isinstance(rejected_plan, Diagnosis) and rejected_plan.bottlenecks[0].name == "unprofiled"  # its one fix was refused


def plan_of(kind: str) -> Diagnosis:
    evidence = [Evidence(metric="m", value="1", interpretation="i")]
    return Diagnosis(bottlenecks=[Bottleneck(name=kind, evidence=evidence, fixes=[Fix(change="c", expected_gain_pct=5)])])


@pytest.mark.parametrize("stage,kind,rule,gemm", [
    ("tiling", "occupancy_limited_registers", "smaller_gemm_tile", "1_GEMM_Square"),
    # in fp16: fp32's exact GEMM already starts at its largest tile (two accumulators spill past 64x128)
    ("tiling", "compute_bound_tensor", "larger_gemm_tile", "6_GEMM_Square_FP16"),
    ("memory", "memory_bound", "deeper_pipelining", "1_GEMM_Square"),
    ("memory", "occupancy_limited_shared", "shallower_pipelining", "1_GEMM_Square"),
])
def test_the_bottleneck_decides_which_structural_variant_comes_first(stage, kind, rule, gemm):
    kernel = seed(ROOT / "data" / "problems" / "suite" / "level1" / f"{gemm}.py").kernel  # 4096^3
    reply = BACKEND.rewrite(kernel, stage, "objective", plan_of(kind), [], "1 ms")
    assert isinstance(reply, KernelReply) and reply.rationale.startswith(f"rule {rule}:")
    assert reply.kernel != kernel and read(reply.kernel) is not None


def test_rewrites_of_row_kernels_and_the_end_of_the_list():
    kernel = seed(tiny("23_Softmax")).kernel
    streamed = BACKEND.rewrite(kernel, "tiling", "o", plan_of("latency_bound"), [], "1 ms")
    assert streamed.rationale.startswith("rule rows_in_registers_or_streamed:") and "for r0 in range" in streamed.kernel
    numbers = BACKEND.rewrite(kernel, "tiling", "o", plan_of("latency_bound"), [], "1 ms", feedback="no")
    assert numbers.rationale.startswith("rule tune_only:") and numbers.kernel == kernel and numbers.tunables
    assert isinstance(BACKEND.rewrite(kernel, "tiling", "o", plan_of("latency_bound"), [], "1 ms", feedback="no\nno"), NoProposal)


def test_a_kernel_no_template_describes_gets_its_launch_numbers_tuned_and_the_reviewers_bounds():
    """A person's kernel (no record line): its launch options go to the tuning engine; a bound on a number its launch
    computes is named as one no rule sets; a rejection with nothing new to act on says so and offers writing one."""
    foreign = source(ROOT / "examples" / "candidates" / "softmax_triton.py")
    reply = BACKEND.rewrite(foreign, "tiling", "o", plan_of("latency_bound"), [], "1 ms")
    assert reply.rationale.startswith("rule launch_numbers:") and reply.kernel == foreign
    assert [t.name for t in reply.tunables] == ["num_warps"]
    bounded = BACKEND.rewrite(foreign, "tiling", "o", plan_of("latency_bound"), [], "1 ms", feedback="num_warps>=8, BLOCK_SIZE>=2048")
    assert "num_warps=8" in bounded.kernel and "launches with num_warps=8 (was 4)" in bounded.rationale
    assert "BLOCK_SIZE>=2048: softmax_row_kernel's launch computes BLOCK_SIZE" in bounded.rationale
    assert bounded.tunables is None or all(v >= 8 for t in bounded.tunables for v in t.values)
    again = BACKEND.rewrite(foreign, "tiling", "o", plan_of("latency_bound"), [], "1 ms", feedback="slower")
    assert isinstance(again, NoProposal) and "Write a kernel here" in again.reason


# repairs --------------------------------------------------------------------------------------------------------


def test_shared_memory_overflow_is_repaired_with_smaller_tiles():
    path = tiny("1_GEMM_Square")
    kernel = seed(path).kernel
    failed = verdict(Status.COMPILE_ERROR, "out of resource: shared memory, Required: 262144, Hardware limit: 232448", path=path)
    reply = BACKEND.repair(kernel, failed, source(path))
    assert isinstance(reply, DebugReply) and reply.cause.startswith("rule smaller_tiles:")
    assert read(reply.kernel).options.gemm_tile is not None and "num_stages=2" in reply.kernel


def test_a_tensor_core_mismatch_is_repaired_with_exact_fp32_and_the_repair_passes(tmp_path):
    from pipeline.expert.lowering import Lowering
    from pipeline.expert.options import Options

    path = tiny("7_Linear_Residual_Tanh")
    kernel = Lowering.of(source(path)).lower(Options(precision="tf32x3")).source  # a reviewer asked for TF32x3
    assert 'input_precision="tf32x3"' in kernel
    reply = BACKEND.repair(kernel, verdict(Status.MISMATCH, "correctness: 10 of 512 elements outside atol=rtol=1e-4", path=path), source(path))
    assert reply.cause.startswith("rule exact_fp32_dot:") and 'input_precision="ieee"' in reply.kernel and "tf32x3" not in reply.kernel
    with Judge(CPU) as judge:
        result = judge_source(judge, path, reply.kernel, tmp_path, "repaired")
    assert result.status is Status.OK, verdict_text(result)


def test_a_foreign_kernel_gets_the_source_repairs(tmp_path):
    path = tiny("1_GEMM_Square")
    exact = source(ROOT / "examples" / "candidates" / "matmul_triton.py")
    tf32 = exact.replace('tl.dot(a, b, input_precision="ieee")', 'tl.dot(a, b, input_precision="tf32")')
    banned = verdict(Status.BANNED, "precision_downgrade (line 24): tl.dot asks for TF32 inputs", path=path)
    fixed = BACKEND.repair(tf32, banned, source(path))
    assert 'tl.dot(a, b, input_precision="ieee")' in fixed.kernel and 'tl.dot(a, b, input_precision="tf32")' not in fixed.kernel
    layout = BACKEND.repair(exact, verdict(Status.RUNTIME_ERROR, "RuntimeError: view size is not compatible with input tensor's size and stride", path=path), source(path))
    assert layout.cause.startswith("rule contiguous_inputs:") and "A = A.contiguous()" in layout.kernel
    smaller = BACKEND.repair(exact, verdict(Status.COMPILE_ERROR, "OutOfResources: out of resource: shared memory", path=path), source(path))
    assert smaller.cause.startswith("rule smaller_tiles:") and "block_k = max(16, block_k // 2)" in smaller.kernel
    with Judge(CPU) as judge:
        for name, repaired in (("exact", fixed.kernel), ("contiguous", layout.kernel), ("smaller", smaller.kernel)):
            result = judge_source(judge, path, repaired, tmp_path, name)
            assert result.status is Status.OK, verdict_text(result)


def test_an_illegal_address_gets_wide_indices_and_then_the_safer_lowerings_until_none_is_left():
    path = tiny("1_Linear_GELU_Scale")
    kernel = seed(path).kernel
    failed = verdict(Status.RUNTIME_ERROR, "CUDA error: an illegal memory access was encountered", path=path)
    rules = []
    for rejected in range(6):
        reply = BACKEND.repair(kernel, failed, source(path), feedback="\n".join(["no"] * rejected))
        if isinstance(reply, NoProposal):
            break
        rules.append(re.match(r"rule (\w+):", reply.cause).group(1))
    assert rules == ["wide_index", "streamed_rows", "library_gemm"]
    assert "to(tl.int64)" in BACKEND.repair(kernel, failed, source(path)).kernel


def test_the_tunables_belong_to_the_kernel_that_moves_the_most_and_it_comes_first():
    kernel = seed(tiny("5_Linear_LayerNorm_Swish")).kernel  # a GEMM, then a row kernel with its own XBLOCK
    reply = BACKEND.rewrite(kernel, "memory", "objective", plan_of("memory_bound"), [], "1 ms")
    names = [t.name for t in reply.tunables]
    first = re.search(r"@triton\.jit\ndef (\w+_kernel)\((?!x\):)", reply.kernel).group(1)
    assert tuned_kernel(reply.kernel, names) == first and first.startswith("gemm")


def test_a_variant_of_the_row_kernels_hands_the_row_kernels_numbers_to_the_tuning_engine():
    kernel = seed(ROOT / "data" / "problems" / "suite" / "level2" / "5_Linear_LayerNorm_Swish.py").kernel  # rows of 4096
    gemm = BACKEND.rewrite(kernel, "tiling", "objective", plan_of("latency_bound"), [], "1 ms")
    rows = BACKEND.rewrite(kernel, "tiling", "objective", plan_of("latency_bound"), [], "1 ms", feedback="no")
    assert gemm.rationale.startswith("rule smaller_gemm_tile:") and rows.rationale.startswith("rule rows_in_registers_or_streamed:")
    assert tuned_kernel(gemm.kernel, [t.name for t in gemm.tunables]).startswith("gemm")
    names = [t.name for t in rows.tunables]
    assert names and "BLOCK_M" not in names and tuned_kernel(rows.kernel, names).startswith("fused")
