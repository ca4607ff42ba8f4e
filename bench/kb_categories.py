"""Issue 24's category walk: for every problem of a KernelBench checkout, which of the expert backend's rules
handle it, or why none does, grouped by the kind of problem (convolutions, GEMMs, reductions, norms, losses,
softmax, attention, scans, pooling, activations, ...).

Runs on the CPU (nothing is compiled, run or timed): each problem is captured on meta tensors in the sandboxed
capture child, as `egg optimize` does, then lowered by every seed paradigm; the first usable seed's rules and
kernels are what egg would start from. Whether a seed is correct and fast is the judge's and the H200's to say
(bench/kb_bench.sh); this says what the rules cover.

    python bench/kb_categories.py KERNELBENCH_DIR --out DIR [--level 1] [--only NAME ...]

KERNELBENCH_DIR is a checkout's KernelBench/ folder (level1/, level2/, level3/ in it), never committed here.
Writes DIR/kb_categories.json (a row per problem) and DIR/kb_categories.md (the table per category).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.bench.problems import discover, parse_levels  # noqa: E402
from pipeline.expert.lowering import Lowering  # noqa: E402
from pipeline.expert.seeds import alternatives  # noqa: E402
from pipeline.judge.audit import audit_source  # noqa: E402

# (category, pattern over the problem's name), first match wins: the order puts the specific before the general.
CATEGORIES = (
    ("attention", r"attention|attn|transformer|vit|swin|mamba"),
    ("transposed convolution", r"conv_?transpose|convtranspose|deconv"),
    ("convolution", r"conv"),
    ("scan", r"cumsum|cumprod|scan|cummax|cummin"),
    ("loss", r"loss|crossentropy|kldiv|hinge|huber|mse"),
    ("softmax", r"softmax"),
    ("norm", r"norm|frobenius"),
    ("pooling", r"pool"),
    ("GEMM", r"matmul|gemm|bmm|matrix|linear|mlp|einsum|matvec|diag"),
    ("reduction", r"sum|mean|max|min|argmax|argmin|prod|reduction|reduce"),
    ("activation", r"relu|gelu|sigmoid|tanh|swish|silu|elu|selu|softplus|softsign|hardtanh|hardsigmoid|mish|leaky"),
)


def category(name: str) -> str:
    stem = name.rsplit("/", 1)[-1].lower()
    for label, pattern in CATEGORIES:
        if re.search(pattern, stem):
            return label
    return "other"


def rules_of(source: str) -> list[str]:
    """The rules a seed's record line names (its first line: `# egg-expert: {...}`)."""
    first = source.split("\n", 1)[0]
    try:
        return list(json.loads(first.split(":", 1)[1])["rules"])
    except (IndexError, ValueError, KeyError):
        return []


def audit_findings(seeds, lowering) -> list[str]:
    """What the judge's static audit says of each seed's source (empty: every seed clean), given the dtypes of the
    reference's outputs as the judge gives them."""
    ids = lambda o: [o] if isinstance(o, int) else [i for x in o for i in ids(x)]  # noqa: E731
    dtypes = frozenset(lowering.graph.node(i).dtype for i in ids(lowering.graph.outputs))
    found = []
    for seed in seeds:
        for finding in audit_source(seed.lowered.source, reference_dtypes=dtypes):
            found.append(f"{seed.paradigm.name}: {finding.rule}: {finding.message} (line {finding.line})")
    return found


def walk_one(path: Path) -> dict:
    started = time.perf_counter()
    row: dict = {}
    try:
        lowering = Lowering.of(path.read_text())
    except Exception as error:  # noqa: BLE001 - every way a capture or a decomposition fails is the row's story
        row.update(handled=False, why=f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}")
    else:
        try:
            seeds, notes = alternatives(lowering)
        except Exception as error:  # noqa: BLE001 - the backend says the same (its rules failed) and keeps the reference
            seeds, notes = [], [f"the rules failed: {type(error).__name__}: {str(error)[:200]}"]
        if seeds:
            first = seeds[0]
            kinds = [k.kind for k in first.lowered.schedule.kernels()]
            why = lowering.why_specialised(first.lowered.source)
            row.update(handled=True, paradigm=first.paradigm.name, rules=rules_of(first.lowered.source),
                       kernels=kinds, kept_in_torch=sorted(first.lowered.kept_ops), seeds=len(seeds),
                       audit=audit_findings(seeds, lowering),
                       batch="general" if why == "" else f"specialised: {why}" if why else "specialised")
        else:
            library = sorted({n.fn for n in lowering.graph.nodes if n.op == "library"})
            why = f"no rule lowers {', '.join(library)} (kept as library calls)" if library else "; ".join(notes)[:500] or "no seed"
            row.update(handled=False, why=why)
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def report(rows: list[dict], command: str) -> str:
    by_category: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row)
    handled = sum(r["handled"] for r in rows)
    lines = ["# The expert backend's rules over KernelBench, by category", "", f"Command: `{command}`", "",
             f"{handled} of {len(rows)} problems have a seed (rules that lower them to Triton kernels); whether each "
             "seed passes the judge and how fast it is are measured on the H200 (bench/kb_bench.sh), not here.", "",
             "| category | problems | with a seed | rules used (problems) | kernel kinds | without a seed: why |", "|---|---|---|---|---|---|"]
    seeded = [r for r in rows if r["handled"]]
    general = sum(r.get("batch") == "general" for r in seeded)
    lines[-3:-3] = [f"{general} of the {len(seeded)} first seeds are general in the batch (sizes read from the first input's "
                    "shape[0]); the others keep their shape guard, each for the reason in the `batch` column below.", ""]
    for label in sorted(by_category, key=lambda c: (-len(by_category[c]), c)):
        group = by_category[label]
        rules: dict[str, int] = defaultdict(int)
        kinds: dict[str, int] = defaultdict(int)
        for row in group:
            for rule in row.get("rules", []):
                rules[rule] += 1
            for kind in set(row.get("kernels", [])):
                kinds[kind] += 1
        missing = [f"{r['problem'].rsplit('/', 1)[-1]}: {r['why'][:140]}" for r in group if not r["handled"]]
        lines.append(f"| {label} | {len(group)} | {sum(r['handled'] for r in group)} | "
                     + ", ".join(f"{k} ({n})" for k, n in sorted(rules.items(), key=lambda kv: -kv[1])) + " | "
                     + ", ".join(f"{k} ({n})" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])) + " | "
                     + ("<br>".join(m.replace("|", "\\|") for m in missing) or "-") + " |")
    lines += ["", "## Every problem", "", "| problem | category | seed | rules | kernels | kept in torch | batch |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["handled"]:
            lines.append(f"| {row['problem']} | {row['category']} | {row['paradigm']} ({row['seeds']} seeds) | {', '.join(row['rules'])} | "
                         f"{', '.join(row['kernels'])} | {', '.join(row['kept_in_torch']) or '-'} | {row.get('batch', '').replace('|', '/')[:160]} |")
        else:
            lines.append(f"| {row['problem']} | {row['category']} | none | - | - | {row['why'][:200].replace('|', '/')} | - |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernelbench", type=Path, help="a checkout's KernelBench/ folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--level", default="1,2,3")
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in discover([args.kernelbench], levels=parse_levels(args.level), only=args.only or None):
        row = {"problem": problem.name, "level": problem.level, "category": category(problem.name), **walk_one(problem.path)}
        rows.append(row)
        print(f"{problem.name}: {row.get('paradigm') or 'no seed'} {row.get('rules') or row.get('why', '')[:100]} ({row['seconds']} s)", flush=True)
        (args.out / "kb_categories.json").write_text(json.dumps(rows, indent=1))
    command = "python bench/kb_categories.py KernelBench " + " ".join(sys.argv[2:]).replace(str(args.out), "OUT")
    (args.out / "kb_categories.md").write_text(report(rows, command))


if __name__ == "__main__":
    main()
