"""A lesson per stage of the method: what it is for, which metrics decide it, and the knowledge base's rules."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from pipeline.profiler.report import KINDS


@dataclass(frozen=True)
class Lesson:
    stage: str
    title: str
    purpose: str
    metrics: tuple[tuple[str, str], ...]  # (NCU metric or derived number, why it matters here)
    topics: tuple[str, ...]  # knowledge-base topics (pipeline/expert/knowledge/*.md)


LESSONS = (
    Lesson("algorithm", "Stage 1: algorithmic structure",
           "Find a correct kernel whose structure is right before tuning any number: fuse the passes so every byte crosses DRAM "
           "once, reorganize the dataflow to reuse what is loaded, simplify the algebra. Several seeds of different paradigms "
           "are tried, because tuning cannot rescue a wrong structure (the paper's ablation: seeds 1.0x, refinement 2.0x).",
           (("dram__bytes_read.sum + dram__bytes_write.sum", "bytes moved against the problem's minimum: extra passes show here"),
            ("gpu__time_duration.sum", "the kernels' time against eager and torch.compile"),
            ("analytic floor", "the fewest bytes or FLOPs any implementation needs: how much a better structure could win")),
           ("rules", "fusion", "structures")),
    Lesson("parallel_mapping", "Stage 2a: parallel mapping",
           "Map the operator's dimensions onto the grid so all 132 SMs of an H200 have work, in a few waves, with the contiguous "
           "dimension inside each program.",
           (("launch__grid_size", "programs launched: fewer than the SMs leaves SMs idle"),
            ("launch__waves_per_multiprocessor", "below 1: part of the GPU idles; a fraction: the last wave is partly empty"),
            ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "compute speed of light: low with a small grid means latency-bound")),
           ("parallel_mapping", "hopper")),
    Lesson("tiling", "Stage 2b: tensor tiling",
           "Choose tile sizes B with G = ceil(d / B): larger tiles reuse more data from registers and shared memory, smaller ones "
           "keep more warps resident. Spills and occupancy decide.",
           (("launch__registers_per_thread", "registers per thread: past 128, occupancy halves"),
            ("launch__occupancy_limit_registers / _shared_mem", "which resource stops more blocks from being resident"),
            ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy: warps available to hide latency"),
            ("sm__pipe_tensor_op_hmma_cycles_active", "tensor-core use of a GEMM: tiles must be large enough to feed it")),
           ("tiling", "precision")),
    Lesson("memory", "Stage 2c: memory optimization",
           "Make every access count: coalesced global loads (full 32-byte sectors), wide vector accesses, and software pipelining "
           "(num_stages) so loads overlap the arithmetic.",
           (("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM speed of light: near 100% means memory-bound, well done"),
            ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct", "coalescing: useful bytes per sector of global loads"),
            ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "warps waiting on global memory"),
            ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "shared-memory bank conflicts")),
           ("memory", "hopper")),
)
PREDICTABLE = KINDS  # the classes a learner chooses from before the plan is shown


def render_lesson(lesson: Lesson, knowledge: str) -> None:
    st.subheader(lesson.title)
    st.markdown(lesson.purpose)
    st.markdown("**Metrics that decide it**")
    st.dataframe([{"metric": m, "why": why} for m, why in lesson.metrics], hide_index=True, width="stretch")
    with st.expander("The knowledge base's rules for this stage (what the agents are told)"):
        st.markdown(knowledge)


def top_bottleneck(plan: dict | None) -> str | None:
    """The plan's first bottleneck, as the plan names it."""
    if not plan or not plan.get("bottlenecks"):
        return None
    return plan["bottlenecks"][0]["name"]


def answer(plan: dict | None, report_kind: str | None) -> str | None:
    """What a prediction is scored against: the plan's top bottleneck when it is one of the profiler's classes, else
    the class the profiler measured (a model or a script may name a bottleneck in words of its own)."""
    named = top_bottleneck(plan)
    return named if named in PREDICTABLE else report_kind or named
