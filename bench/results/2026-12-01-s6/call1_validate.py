import json, os, sys, time
t0 = time.monotonic()
from pipeline.judge import Judge
from pipeline.problems.loader import load_candidate, load_problem
from pipeline.types import EvalOptions, to_jsonable
opts = EvalOptions(device="cuda", timing_trials=20, baselines=("eager",), warmup_ms=200)
ok = True
for prob, cand in [("data/problems/tiny/level1/23_Softmax.py", "examples/candidates/softmax_triton.py"),
                   ("data/problems/suite/level1/23_Softmax.py", "examples/candidates/softmax_triton.py")]:
    with Judge(opts, cache_dir=None) as j:
        for _ in range(2):
            t = time.monotonic()
            r = j.evaluate(load_problem(prob), load_candidate(cand))
            print(json.dumps({"problem": prob, "status": r.status.value, "reason": r.reason[:400], "wall": round(time.monotonic() - t, 2),
                              "iso": r.environment.get("isolation"), "missing": r.environment.get("isolation_missing"),
                              "transport": r.environment.get("output_transport"), "median": r.timing.median_ms if r.timing else None,
                              "base": {k: v.median_ms for k, v in r.baselines.items()}, "src": r.reference_source,
                              "jp": r.judge_phase_s, "ph": r.phase_s}), flush=True)
            if r.status.value != "ok":
                ok = False
                print(r.log_tail[-3000:], flush=True)
print("validate done in", round(time.monotonic() - t0, 1), "ok" if ok else "FAILED", flush=True)
sys.exit(0 if ok else 1)
