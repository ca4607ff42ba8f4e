"""The method's stages, their objectives, and the typed records that travel between them."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.types import EvalResult


@dataclass(frozen=True)
class Stage:
    name: str
    objective: str


ALGORITHM = Stage("algorithm", "a correct kernel with the best algorithmic structure: fusion, dataflow, algebra")
HARDWARE_STAGES = (
    Stage("parallel_mapping", "map the operator's dimensions onto the grid so the 132 SMs are full"),
    Stage("tiling", "tile sizes that trade registers and shared memory for reuse, without spills"),
    Stage("memory", "coalesced access, wide vector loads and software pipelining (num_stages)"),
)
STAGE_NAMES = (ALGORITHM.name,) + tuple(s.name for s in HARDWARE_STAGES)

# Seeds follow explicitly different paradigms (multi-seed search); the first `seeds` of these are asked for.
PARADIGMS = (
    "one program per output row (or tile) with the whole reduction held in registers: a single pass",
    "keep any library GEMM/convolution (cuBLAS/cuDNN) and fuse everything around it into one Triton kernel",
    "a 2D tiled grid over the output, looping over the reduced dimension in blocks",
    "a streaming (online) formulation that reads each input exactly once, even for long rows",
    "split the work into two kernels (partial results, then a small combine) to expose more parallelism",
)


@dataclass(frozen=True)
class Budget:
    """How much a run may spend. Counts are per problem."""

    seeds: int = 3
    transforms: bool = True  # stage 1: expert transformations applied to every correct seed
    rounds: int = 2  # profile -> diagnose -> rewrite rounds per hardware sub-stage
    debug_rounds: int = 2  # repairs per failing candidate
    max_llm_calls: int = 120
    max_cost_usd: float | None = None
    max_wall_s: float | None = None
    roofline_stop: float = 0.9  # stop a sub-stage once floor / measured reaches this
    tune_evals: int = 6  # judged configurations per tuning search (GPU only), over the tunables an agent names


@dataclass(frozen=True)
class Decision:
    """A finalized choice: the only thing, with the best kernel, that travels from one stage to the next."""

    stage: str
    summary: str
    candidate_id: int | None
    median_ms: float | None


@dataclass(frozen=True)
class Attempt:
    """One judged candidate, for the report."""

    candidate_id: int
    stage: str
    origin: str  # seed, transform, debug, rewrite, tune
    status: str
    reason: str
    median_ms: float | None
    accepted: bool
    note: str = ""


@dataclass
class Progress:
    """The state of one problem's run: the best candidate so far, decisions, and every attempt."""

    best_id: int | None = None
    best_source: str | None = None
    best_ms: float | None = None
    decisions: list[Decision] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    stopped: str = ""  # why the run stopped early (budget), if it did
    best_result: EvalResult | None = None
