"""A scripted model for the web app's tests: enough replies for a whole session, every kernel an honest softmax."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
KERNEL = (ROOT / "examples" / "candidates" / "softmax_triton.py").read_text()
DIAGNOSIS = {"bottlenecks": [{"name": "launch_bound", "evidence": [{"metric": "launch__grid_size", "value": "16", "interpretation": "16 blocks for 132 SMs"}],
                              "fixes": [{"change": "more programs per row block", "expected_gain_pct": 10}]}]}


def code_reply(variant: str) -> str:
    meta = json.dumps({"paradigm": "one row per program", "rationale": f"rationale of {variant}", "tunables": [{"name": "num_warps", "values": [4, 8]}]})
    return f"```json\n{meta}\n```\n\n```python\n# {variant}\n{KERNEL}```\n"


def write_script(path: Path) -> Path:
    """Seeds, transforms, rewrites and plans for one session, as a YAML script file."""
    path.write_text(yaml.safe_dump({"code": [code_reply(f"variant {i}") for i in range(8)],
                                    "profile": ["```json\n" + json.dumps(DIAGNOSIS) + "\n```"] * 4}))
    return path
