"""Is the judge fair to a long fp32 dot product? Issue 39's evidence, on the CPU or a GPU.

An fp32 GEMM with a long K and signed values (the judge's signed trial draws randn) is compared with the fp32
reference at atol = rtol = 1e-4. This script measures, against the same product in float64 (the truth), the
reference's own error and a candidate's (the K axis cut into slices summed in turn, as egg's exact split-K plan
does), counts the elements the judge's plain comparison fails, and asks the judge's float64 referee
(pipeline.judge.compare.referee: within the tolerance of the truth plus twice the reference's own error there, or
its typical own error around that element where that is larger) whether it passes.

    python bench/fp32_noise.py [--k 524288] [--m 64] [--slices 64] [--device cpu]
"""

from __future__ import annotations

import argparse

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.judge.compare import referee  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--k", type=int, default=524288)
    parser.add_argument("--slices", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    m, k, s = args.m, args.k, args.slices
    a, b = torch.randn(m, k, device=args.device), torch.randn(k, m, device=args.device)
    reference, truth = a @ b, a.double() @ b.double()
    candidate = sum(a[:, i * k // s:(i + 1) * k // s] @ b[i * k // s:(i + 1) * k // s] for i in range(s))
    judged = ((candidate - reference).abs() > 1e-4 + 1e-4 * reference.abs()).sum().item()
    own, mine = (reference.double() - truth).abs(), (candidate.double() - truth).abs()
    passed, detail = referee([candidate], [reference], [truth], device=args.device)
    print(f"M = N = {m}, K = {k}, randn operands, {s} slices, device {args.device}")
    print(f"the fp32 reference's own error against float64: max {own.max():.2e}, median {own.median():.2e}")
    print(f"the sliced candidate's error against float64:   max {mine.max():.2e}, median {mine.median():.2e}")
    print(f"elements the judge fails (candidate against the fp32 reference, 1e-4): {judged} of {m * m}")
    print(f"the judge's float64 referee: {'passes' if passed else 'fails'}: {detail}")


if __name__ == "__main__":
    main()
