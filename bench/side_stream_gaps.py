"""The side-stream check's margins on the H200: what an honest Triton candidate's host-to-sync gap is against the
allowance the reference's calibration gives, and what the small side-stream cheat's is.

Run on the GPU machine from the repository root: `python3 bench/side_stream_gaps.py --out DIR [--repeats 3]`. For
each repeat, a fresh Judge (so the reference's calibration is measured afresh) checks tests' softmax_ok.py (honest)
and gpu_side_stream_small.py (all its work on a side stream), with and without CUDA-graph timing, and records the
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
            with Judge(EvalOptions(device="cuda", timing_trials=30, cuda_graph=graph), cache_dir=tempfile.mkdtemp(prefix="egg-gaps-")) as judge:
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


if __name__ == "__main__":
    main()
