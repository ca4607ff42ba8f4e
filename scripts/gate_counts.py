"""How many gates a person meets per review mode: egg's expert backend on a bundled tiny problem, on the CPU, every
gate approved. Prints a Markdown table (the README's).

    .venv/bin/python scripts/gate_counts.py [--problem data/problems/tiny/level1/23_Softmax.py]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

from pipeline import api
from pipeline.sessions.backends import BackendSpec
from pipeline.sessions.gatekinds import REVIEW_MODES
from pipeline.stages.method import Budget
from pipeline.types import EvalOptions


def count(problem: Path, review: str, folder: Path) -> collections.Counter:
    store = api.open_store(folder / f"{review}.sqlite")
    session = api.create_session(store, problem_path=problem, backend=BackendSpec("expert"), review=review, device="cpu",
                                 budget=Budget(), options=EvalOptions(device="cpu"))
    api.start_worker(store, session.id)
    seen: collections.Counter = collections.Counter()
    while not api.get_session(store, session.id).finished:
        for gate in api.gates(store, session.id, open_only=True):
            seen[gate.kind] += 1
            api.decide(store, session.id, gate.id, "approve" if "approve" in gate.spec.allowed(gate.data) else "skip")
        time.sleep(0.2)
    status = api.get_session(store, session.id).status
    if status != "done":
        sys.exit(f"{review}: the session ended {status}")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, default=Path("data/problems/tiny/level1/23_Softmax.py"))
    args = parser.parse_args()
    kinds = ("kernel", "verdict", "plan", "stage_end")
    print(f"| review mode | gates | {' | '.join(kinds)} |\n|---|---|{'---|' * len(kinds)}")
    with tempfile.TemporaryDirectory() as folder:
        for review in REVIEW_MODES:
            seen = count(args.problem, review, Path(folder))
            print(f"| `{review}` | {sum(seen.values())} | {' | '.join(str(seen[k]) for k in kinds)} |", flush=True)


if __name__ == "__main__":
    main()
