"""The fp32 dot-product error model (pipeline.expert.precision) against the GPU: a plain Triton GEMM in each scheme
(tf32, tf32x3, ieee) against torch's fp32 GEMM (TF32 off), at several K, on randn operands (the judge's signed
trial) and on a Linear layer's ranges (rand inputs, weights uniform in +-1/sqrt(K)). Per case: the largest error,
the elements past the judge's atol = rtol = 1e-4, the model's expected largest error, and the scheme it plans.

    python bench/precision_gpu.py --out DIR [--ks 256,1024,2048,4096,8192] [--size 4096]

Writes DIR/precision.json and DIR/precision.md. Imports torch, triton and egg's precision module only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.expert.precision import FP32_TOLERANCE, expected_max_error, plan  # noqa: E402

SCHEMES = ("tf32", "tf32x3", "ieee")


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                PRECISION: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemm(a: torch.Tensor, b: torch.Tensor, scheme: str) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    block = 64 if scheme == "ieee" else 128
    gemm_kernel[(triton.cdiv(m, block), triton.cdiv(n, 128))](a, b, c, m, n, k, BLOCK_M=block, BLOCK_N=128, BLOCK_K=32,
                                                               PRECISION=scheme, num_warps=8 if block == 128 else 4)
    return c


def operands(kind: str, size: int, k: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """(A, B, rms of A, rms of B): randn both, or a Linear layer's ranges."""
    if kind == "randn":
        a = torch.randn(size, k, device="cuda", generator=generator)
        b = torch.randn(k, size, device="cuda", generator=generator)
        return a, b, 1.0, 1.0
    bound = k ** -0.5
    a = torch.rand(size, k, device="cuda", generator=generator)
    b = (torch.rand(k, size, device="cuda", generator=generator) * 2 - 1) * bound
    return a, b, 3 ** -0.5, bound / 3 ** 0.5


def case(kind: str, size: int, k: int, seed: int) -> list[dict]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a, b, rms_a, rms_b = operands(kind, size, k, generator)
    reference = a @ b
    rows = []
    for scheme in SCHEMES:
        c = gemm(a, b, scheme)
        error = (c - reference).abs()
        outside = int((error > FP32_TOLERANCE + FP32_TOLERANCE * reference.abs()).sum())
        rows.append({"operands": kind, "K": k, "outputs": size * size, "scheme": scheme, "max_error": float(error.max()),
                     "outside_1e-4": outside, "model_max_error": expected_max_error(scheme, k, size * size, rms_a, rms_b),
                     "model_max_error_rms1": expected_max_error(scheme, k, size * size), "planned": plan(k, size * size)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ks", default="256,1024,2048,4096,8192")
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [row for kind in ("randn", "linear") for i, k in enumerate(int(x) for x in args.ks.split(","))
            for row in case(kind, args.size, k, seed=1000 + i)]
    (args.out / "precision.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    lines = [f"# fp32 dot products against the error model ({torch.cuda.get_device_name()})", "",
             f"Command: `python bench/precision_gpu.py --out OUT --ks {args.ks} --size {args.size}`", "",
             "| operands | K | scheme | largest error | past 1e-4 | model (these ranges) | model (rms 1, as planned) | planned |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['operands']} | {r['K']} | {r['scheme']} | {r['max_error']:.2e} | {r['outside_1e-4']:,} | "
                     f"{r['model_max_error']:.2e} | {r['model_max_error_rms1']:.2e} | {r['planned']} |")
    (args.out / "precision.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
