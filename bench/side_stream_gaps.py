"""The side-stream check's margins on the H200: what an honest Triton candidate's host-to-sync gap is against the
allowance the reference's calibration gives, and what the small side-stream cheat's is.

Run on the GPU machine from the repository root: `python3 bench/side_stream_gaps.py --out DIR [--repeats 3]`. For
each repeat, a fresh Judge (so the reference's calibration is measured afresh) checks tests' softmax_ok.py (honest)
and gpu_side_stream_small.py (all its work on a side stream; the static audit is off so the run-time check
is what decides), with and without CUDA-graph timing, and records the
calibration (the reference's eager, graph and Triton-probe gaps) and the side_stream check's numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from pipeline.judge.judge import Judge
    from pipeline.types import EvalOptions
    from tests.judge.conftest import candidate, problem

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    softmax = problem("level1/23_Softmax.py")
    for repeat in range(args.repeats):
        for graph in (False, True):
            with Judge(EvalOptions(device="cuda", timing_trials=30, cuda_graph=graph), cache_dir=tempfile.mkdtemp(prefix="egg-gaps-"),
                       auditor=lambda source, reference_dtypes=frozenset(): ()) as judge:  # the cheat reaches the run-time check
                for name in ("softmax_ok.py", "gpu_side_stream_small.py"):
                    t0 = time.monotonic()
                    result = judge.evaluate(softmax, candidate(name))
                    facts = next(iter(judge._references.values()), None)
                    check = next((c for c in result.checks if c.name == "side_stream"), None)
                    row = {"repeat": repeat, "cuda_graph": graph, "candidate": name, "status": result.status.value,
                           "reason": result.reason[:300], "side_stream": check.detail if check else None,
                           "calibration": facts.calibration if facts else None, "wall_s": round(time.monotonic() - t0, 1)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    (out / "side_stream_gaps.json").write_text(json.dumps(rows, indent=1))
    probes(out, rows)


def probes(out: Path, rows: list) -> None:
    """In this process: the judge's bare one-block Triton launch against the same kernel launched as a candidate
    does (a module's forward that allocates its output and computes its grid), each timed three times."""
    import dataclasses

    import torch
    import triton

    from pipeline.judge import timing
    from pipeline.types import EvalOptions

    opts = dataclasses.asdict(EvalOptions(device="cuda"))
    device = torch.device("cuda")
    flush = timing.L2Flush(opts["l2_flush_bytes"], device)
    kernel = timing._probe_source()
    x = torch.zeros(128, device=device)

    class Launch(torch.nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
            return y

    module = Launch()
    for repeat in range(3):
        bare = timing.time_triton_launch(device, warmup=opts["warmup"], trials=opts["timing_trials"], flush=flush, **timing.timing_args(opts))
        like = timing.time_calls(lambda: module(x), lambda i: None, warmup=max(opts["warmup"], 1), trials=opts["timing_trials"], flush=flush,
                                 **timing.timing_args(opts))
        gaps = {name: sorted(w - e for w, e in zip(s.wall_ms, s.event_ms)) for name, s in (("bare", bare), ("module", like))}
        row = {"probe_repeat": repeat, **{f"{n}_gap_ms_p10_p50_p90": [g[len(g) // 10], g[len(g) // 2], g[9 * len(g) // 10]] for n, g in gaps.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / "side_stream_gaps.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
