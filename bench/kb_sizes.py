"""The KernelBench problems with the largest tensors: per problem, the bytes of its inputs, its parameters and
buffers, and its outputs, as recorded by the expert's capture (the problem runs on meta tensors in the sandboxed
capture child: nothing is allocated). Issue 39 judges the largest on the GPU machine: the judge must fit what the
reference fits.

    python bench/kb_sizes.py KERNELBENCH_DIR --out DIR [--level 1,2] [--top 12]

Writes DIR/kb_sizes.json (a row per problem) and DIR/kb_sizes.md (the largest, by inputs + outputs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.bench.problems import discover, parse_levels  # noqa: E402
from pipeline.expert.lowering import Lowering  # noqa: E402
from pipeline.expert.rowkernel import dtype_size  # noqa: E402


def _ids(outputs) -> list[int]:
    return [outputs] if isinstance(outputs, int) else [i for o in outputs for i in _ids(o)]


def sizes(path: Path) -> dict:
    """Bytes of the problem's inputs, parameters/buffers and outputs, or why they could not be recorded."""
    try:
        graph = Lowering.of(path.read_text()).graph
    except Exception as error:  # noqa: BLE001 - a problem that does not capture is a row that says why
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"}
    nbytes = lambda n: n.numel * dtype_size(n.dtype)  # noqa: E731
    inputs = sum(nbytes(n) for n in graph.nodes if n.op == "input")
    params = sum(nbytes(n) for n in graph.nodes if n.op == "param")
    outputs = sum(nbytes(graph.node(i)) for i in _ids(graph.outputs))
    return {"input_bytes": inputs, "param_bytes": params, "output_bytes": outputs}


def report(rows: list[dict], top: int, command: str) -> str:
    measured = sorted((r for r in rows if "error" not in r), key=lambda r: -(r["input_bytes"] + r["output_bytes"]))
    lines = ["# KernelBench's problems with the largest tensors", "", f"Command: `{command}`", "",
             f"{len(measured)} of {len(rows)} problems recorded; the {top} largest by inputs + outputs:", "",
             "| problem | inputs GB | parameters GB | outputs GB |", "|---|---|---|---|"]
    for r in measured[:top]:
        lines.append(f"| {r['problem']} | {r['input_bytes'] / 1e9:.2f} | {r['param_bytes'] / 1e9:.2f} | {r['output_bytes'] / 1e9:.2f} |")
    failed = [r for r in rows if "error" in r]
    if failed:
        lines += ["", "Not recorded: " + "; ".join(f"{r['problem']} ({r['error'][:80]})" for r in failed)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernelbench", type=Path, help="a checkout's KernelBench/ folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--level", default="1,2,3")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{"problem": p.name, **sizes(p.path)} for p in discover([args.kernelbench], levels=parse_levels(args.level))]
    (args.out / "kb_sizes.json").write_text(json.dumps(rows, indent=1))
    command = "python bench/kb_sizes.py KernelBench " + " ".join(sys.argv[2:]).replace(str(args.out), "OUT")
    (args.out / "kb_sizes.md").write_text(report(rows, args.top, command))
    print((args.out / "kb_sizes.md").read_text())


if __name__ == "__main__":
    main()
