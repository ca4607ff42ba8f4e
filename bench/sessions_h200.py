"""Sessions through the web app's worker on the H200, reviewed by a script, recorded for the Learn page.

    PYTHONPATH=. python bench/sessions_h200.py --out OUTDIR [--only softmax,layernorm] [--backend script|expert]
                                               [--review plans] [--profile-mode ncu] [--deadline-s 480]

For each problem a session is created and run exactly as the New session page does it (`pipeline.api.create_session`
and `api.start_worker`: a worker process of its own); the sessions run at once, and the device lock lets one of them
time a kernel at a time. A reviewer script decides every gate the review mode stops at: it approves what was
proposed and skips where nothing was. Each finished session is exported as a bundle (`api.export_bundle`) into
OUTDIR/recorded/<name>.json, with the replies said to be scripted or the expert backend's; OUTDIR/sessions.json
and OUTDIR/sessions.md summarise them (status, gates, candidates, the winner's speedups). The backend `script`
uses examples/scripts/h200_<name>.yaml (hand-written replies); `expert` uses egg's expert backend.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import api  # noqa: E402
from pipeline.sessions.backends import BackendSpec  # noqa: E402
from pipeline.stages.method import Budget  # noqa: E402
from pipeline.types import EvalOptions  # noqa: E402

PROBLEMS = {"softmax": "level1/23_Softmax.py", "layernorm": "level1/8_LayerNorm.py", "gelu_scale_bias": "level1/16_GELU_Scale_Bias.py",
            # for Learn, recordings whose bottlenecks differ: a tensor-core GEMM, small problems (launch- or latency-bound),
            # a wide-row reduction and a convolution
            "gemm_fp16": "level1/6_GEMM_Square_FP16.py", "crossentropy": "level1/18_CrossEntropy_PerSample.py",
            "conv3x3": "level1/22_Conv2d_3x3.py", "small_softmax": "tiny:level1/23_Softmax.py", "small_gemm": "tiny:level1/1_GEMM_Square.py",
            # fp32 GEMMs through tf32x3's split operands: candidates for a register-limited kernel
            "gemm_fp32": "level1/1_GEMM_Square.py", "bmm": "level1/3_BMM.py", "matmul_tb": "level1/4_Matmul_TransposedB.py"}
# roofline_stop above 1: every sub-stage profiles its best kernel (with NCU) and shows a plan, even one already near
# the physical floor, so each recording has its three plan gates.
BUDGET = Budget(seeds=2, rounds=1, debug_rounds=1, tune_evals=0, roofline_stop=1.01)


def backend(kind: str, name: str) -> BackendSpec:
    if kind == "script":
        return BackendSpec("script", str(ROOT / "examples" / "scripts" / f"h200_{name}.yaml"))
    return BackendSpec(kind)


def review_open_gates(store, session_id: str, log: list) -> None:
    """The reviewer script: approve what was proposed, skip where nothing was (it writes no kernel itself)."""
    for gate in api.gates(store, session_id, open_only=True):
        action = "approve" if "approve" in gate.spec.allowed(gate.data) else "skip"
        api.decide(store, session_id, gate.id, action, who="reviewer script")
        log.append({"gate": gate.id, "kind": gate.kind, "stage": gate.stage, "action": action, "at": time.time()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default=",".join(PROBLEMS))
    parser.add_argument("--problems", default="suite", help="suite (full size, GPU) or tiny (CPU-sized, for a dry run)")
    parser.add_argument("--backend", default="script", choices=["script", "expert"])
    parser.add_argument("--review", default="plans")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--profile-mode", default="ncu")
    parser.add_argument("--deadline-s", type=float, default=480)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recorded").mkdir(exist_ok=True)
    store = api.open_store(args.out / "sessions.sqlite")
    started = time.monotonic()
    sessions = {}
    for name in args.only.split(","):
        folder, _, relative = PROBLEMS[name].rpartition(":")  # "tiny:..." is a CPU-sized problem, run on the GPU as it is
        problem = ROOT / "data" / "problems" / (folder or args.problems) / relative
        record = api.create_session(store, problem_path=problem, backend=backend(args.backend, name), review=args.review, device=args.device,
                                    budget=BUDGET, options=EvalOptions(device=args.device), profile_mode=args.profile_mode,
                                    label=f"recorded on the H200 ({args.backend} replies, review {args.review})")
        api.start_worker(store, record.id)
        sessions[name] = record.id
        print(f"{name}: session {record.id}", flush=True)
    decisions: dict[str, list] = {name: [] for name in sessions}
    while time.monotonic() - started < args.deadline_s:
        running = [n for n, s in sessions.items() if not store.session(s).finished]
        if not running:
            break
        for name in running:
            review_open_gates(store, sessions[name], decisions[name])
        time.sleep(0.5)
    summary = {"command": " ".join(sys.argv), "wall_s": round(time.monotonic() - started, 1), "sessions": {}}
    for name, session_id in sessions.items():
        record = store.session(session_id)
        if not record.finished:
            api.cancel(store, session_id)
            record = store.session(session_id)
        rows = api.candidate_rows(store, session_id)
        summary["sessions"][name] = {"id": session_id, "status": record.status, "outcome": record.outcome, "error": record.error,
                                     "gates": len(store.gates(session_id)), "reviewed": len(decisions[name]), "candidates": len(rows),
                                     "passed": sum(r.status == "ok" for r in rows), "decisions": decisions[name]}
        note = (f"Recorded on an H200 through the web app's worker: {args.backend} replies "
                f"({'hand-written, examples/scripts/h200_' + name + '.yaml' if args.backend == 'script' else 'egg expert backend, no model'}), "
                f"NCU profiles ({args.profile_mode}), review mode {args.review}, every gate decided by a reviewer script (approve what was proposed).")
        (args.out / "recorded" / f"{name}.json").write_text(json.dumps(api.export_bundle(store, session_id, note)))
        print(f"{name}: {record.status} - {record.outcome.get('headline', record.error)}", flush=True)
    (args.out / "sessions.json").write_text(json.dumps(summary, indent=1))
    lines = ["# Sessions through the app's worker", "", f"Command: `{summary['command']}` ({summary['wall_s']} s)", "",
             "| problem | status | gates | reviewed | candidates | passed | outcome |", "|---|---|---|---|---|---|---|"]
    for name, s in summary["sessions"].items():
        lines.append(f"| {name} | {s['status']} | {s['gates']} | {s['reviewed']} | {s['candidates']} | {s['passed']} | {s['outcome'].get('headline', s['error'])} |")
    (args.out / "sessions.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
