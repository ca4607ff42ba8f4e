"""KernelBench's own harness on one candidate, in this process: the side of the judge-speed comparison that is not
ours.

Run on the GPU machine from the repository root, with a checkout of KernelBench's repository (fetched, never
committed here) whose `src/kernelbench` this imports unchanged:
    python3 bench/kernelbench_harness.py --kernelbench DIR --candidate FILE --problem FILE [--trials 5] [--perf-trials 100]

It calls `kernelbench.eval.eval_kernel_against_ref` as KernelBench's own scripts do (seed 42, the correctness
trials, then the timed trials with CUDA events, backend "triton") and prints one JSON line: the harness's result,
and the seconds from this process's start to its end. KernelBench's package imports helpers for calling language
models (litellm, openai, python-dotenv, tqdm) that its evaluation never uses; when one of those is not installed, an empty
stand-in module is put in its place, and the JSON lists which.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

STARTED = time.monotonic()
UNUSED_BY_THE_EVALUATION = ("litellm", "dotenv", "tqdm", "openai")


def stand_in(name: str) -> None:
    module = types.ModuleType(name)
    module.completion = None  # litellm
    module.load_dotenv = lambda *args, **kwargs: False  # dotenv
    module.tqdm = lambda iterable=None, *args, **kwargs: iterable  # tqdm
    module.OpenAI = None  # openai
    sys.modules[name] = module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernelbench", required=True, help="a checkout of KernelBench's repository")
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--problem", required=True)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--perf-trials", type=int, default=100)
    args = parser.parse_args()
    stood_in = []
    for name in UNUSED_BY_THE_EVALUATION:
        try:
            __import__(name)
        except ImportError:
            stand_in(name)
            stood_in.append(name)
    sys.path.insert(0, str(Path(args.kernelbench) / "src"))
    from kernelbench.eval import eval_kernel_against_ref

    result = eval_kernel_against_ref(
        Path(args.problem).read_text(), Path(args.candidate).read_text(), seed_num=42, num_correct_trials=args.trials,
        num_perf_trials=args.perf_trials, measure_performance=True, backend="triton", timing_method="cuda_event",
    )
    data = result.model_dump() if hasattr(result, "model_dump") else dict(result)
    print(json.dumps({"result": data, "process_s": round(time.monotonic() - STARTED, 2), "stood_in": stood_in}, default=str), flush=True)


if __name__ == "__main__":
    main()
