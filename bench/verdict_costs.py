"""Every verdict in egg stores (egg bench's egg.sqlite) with the other-shapes check's seconds against the rest of its
check (issue 40's cost), its status, generality and first line of reason; the median and the largest share at the end.

    python bench/verdict_costs.py egg-out/kb27a/egg.sqlite egg-out/kb27b/egg.sqlite > verdicts.txt
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys


def rows(path: str):
    db = sqlite3.connect(path)
    names = dict(db.execute("select problem_fp, problem_name from sessions"))
    for fp, created, result_json in db.execute("select problem_fp, created_at, result_json from verdicts order by created_at"):
        result = json.loads(result_json)
        phases = result.get("judge_phase_s") or {}
        other, total = phases.get("worker_other_shapes"), phases.get("total")
        share = other / (total - other) if other is not None and total and total > other else None
        yield created[:19], names.get(fp, fp[:12]), result, other, total, share


def main(paths: list[str]) -> int:
    shares = []
    for path in paths:
        print(f"# {path.split('/')[-2] if '/' in path else path}")
        for created, name, result, other, total, share in rows(path):
            shares += [share] if share is not None else []
            print(f"{created} {name[:45]:45s} status={result['status']:12s} gen={result.get('generality', '')!r:40s} "
                  f"other={other} total={total} share={'-' if share is None else f'{share:.3f}'}")
            print(f"    {result.get('reason', '')[:300]}")
    if shares:
        print(f"\n{len(shares)} checks ran other shapes: median share {statistics.median(shares):.3f}, largest {max(shares):.3f}, "
              f"{sum(s > 0.15 for s in shares)} above 0.15")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
