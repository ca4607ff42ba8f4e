"""Issue 40's cost point: what the judge's check on inputs of other shapes adds to a check, per problem.

For each problem, the expert backend's first seed is judged with the check on inputs of other shapes and without
it, alternately, in one process on one judge (the reference's facts computed once before, as any later check
finds them), each time as a candidate never judged before (a file of its own, so its kernels compile afresh, the
other sizes' included): the share is (median with - median without) / median without, over `--repeats` pairs, and
read inside each check with them, the worker's time on other shapes over the rest of the check (`phase_share`,
the verdict's `judge_phase_s.worker_other_shapes`: no noise between two checks). The one-time
cost, the reference's probing of other shapes in its first run, is reported beside it (`derive_s`).

    python bench/shapes_cost.py PROBLEM.py ... --device cuda --repeats 3 --out results.jsonl

Writes one JSON line per problem: the seed's verdict, its generality, the medians and the share.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.expert.lowering import Lowering  # noqa: E402
from pipeline.expert.options import Options  # noqa: E402
from pipeline.judge import Judge  # noqa: E402
from pipeline.problems.loader import load_candidate, load_problem  # noqa: E402
from pipeline.types import EvalOptions  # noqa: E402


def measure(judge: Judge, problem_path: Path, folder: Path, repeats: int) -> dict:
    started = time.monotonic()
    try:
        seed = Lowering.of(problem_path.read_text()).lower(Options()).source
    except Exception as exc:  # noqa: BLE001 - a problem without a seed is a row that says so
        return {"problem": problem_path.stem, "error": f"no seed: {type(exc).__name__}: {str(exc)[:200]}"}
    path = folder / f"{problem_path.stem}_seed.py"
    path.write_text(seed)
    problem, candidate = load_problem(problem_path), load_candidate(path)
    first = judge.evaluate(problem, candidate, other_shapes=True)  # the reference's facts, probing included
    facts = judge.reference(problem).result
    row = {"problem": problem_path.stem, "status": first.status.value, "reason": first.reason[:300],
           "generality": first.generality, "derived": len(facts.get("derived", [])),
           "derive_s": facts.get("derive_s"), "first_check_s": round(time.monotonic() - started, 2)}
    if not first.ok:
        return row
    without, with_shapes, phase = [], [], []
    for k in range(repeats):
        # each check of a candidate never judged before (a comment makes another file: another Triton cache), as a
        # search judges each candidate once: the compiles at the other sizes are counted
        for shaped, times in ((False, without), (True, with_shapes)):
            fresh = folder / f"{problem_path.stem}_seed_{k}_{int(shaped)}.py"
            fresh.write_text(seed + f"\n# egg shapes_cost: pair {k}, other shapes {shaped}\n")
            result = judge.evaluate(problem, load_candidate(fresh), other_shapes=shaped)
            times.append(result.duration_s)
            if shaped:  # the same share read inside the check: the worker's calls on other shapes, their compiles included
                spent = result.judge_phase_s.get("worker_other_shapes", 0.0)
                phase.append(round(spent / max(1e-9, result.duration_s - spent), 4))
    a, b = statistics.median(without), statistics.median(with_shapes)
    row.update(without_s=without, with_s=with_shapes, share=round((b - a) / a, 4) if a > 0 else None,
               phase_shares=phase, phase_share=statistics.median(phase) if phase else None)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    missing = [str(p) for p in args.problems if not p.is_file()]
    if missing:
        print(f"shapes_cost: no such problem file: {missing[0]}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with Judge(EvalOptions(device=args.device)) as judge, tempfile.TemporaryDirectory() as tmp, args.out.open("a") as out:
        for path in args.problems:
            row = measure(judge, path, Path(tmp), args.repeats)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps({k: row.get(k) for k in ("problem", "status", "generality", "derived", "derive_s", "share", "phase_share")}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
