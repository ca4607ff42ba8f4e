"""How an fp32 dot product is computed: the scheme planned before the first candidate, so that it meets the judge's
tolerance with a margin on every draw, never one that passes by luck and is repaired after it fails.

The error model. A K-long dot product computed with scheme s differs from the exact fp32 reference by a sum of K
rounding errors of relative size u_s, random in sign, so per output element its spread is

    sigma = u_s * sqrt(K) * rms(a) * rms(b)

and the largest of N outputs is about z(N) * sigma, z(N) = sqrt(2 ln N). Near a zero output the tolerance is the
absolute one, so a scheme is planned when MARGIN * z(N) * sigma <= atol. The operands' rms is taken as 1: the judge's
signed trial draws randn inputs (rms 1), and the problem's weights are not known before the run (a Linear's are
smaller, which only widens the margin).

u_s per scheme: "tf32" 2**-11 (TF32 keeps 10 mantissa bits), "tf32x3" 2**-21 (the split operands' lost low parts;
on an H100 at K = 2,048 to 8,192 with randn inputs it left 254 to 8,344 of the outputs past 1e-4, which is this
sigma's tail), "ieee" 2**-24 (fp32 rounding, the reference's own). bench/precision_gpu.py measures each scheme's
largest error against torch's fp32 GEMM and puts it beside the model's z * sigma.

At the judge's fp32 tolerance (1e-4) this plans "ieee" for every K a tensor-core tile covers: an fp32 GEMM's speed
comes from fusion and scheduling, not from dropping precision. At 1e-2 (half-precision references, or older
KernelBench) "tf32x3" is planned up to very long K.
"""

from __future__ import annotations

import math

FP32_TOLERANCE = 1e-4  # the judge's atol = rtol for fp32 outputs (pipeline.judge.compare.TOLERANCE), KernelBench's
MARGIN = 2.0  # the planned error is at most half the tolerance
UNIT_ERROR = {"tf32": 2.0**-11, "tf32x3": 2.0**-21, "ieee": 2.0**-24}
FASTEST_FIRST = ("tf32", "tf32x3", "ieee")
PLANNED = "planned"  # Options.precision: choose by the model (any other value is a scheme, taken as given)


def expected_max_error(scheme: str, k: int, outputs: int, rms_a: float = 1.0, rms_b: float = 1.0) -> float:
    """The model's largest error over `outputs` elements of a K-long dot product computed with `scheme`."""
    sigma = UNIT_ERROR[scheme] * math.sqrt(max(k, 1)) * rms_a * rms_b
    return math.sqrt(2.0 * math.log(max(outputs, 2))) * sigma


def plan(k: int, outputs: int, atol: float = FP32_TOLERANCE) -> str:
    """The fastest scheme whose expected largest error, with the margin, stays within `atol`; "ieee" if none does."""
    for scheme in FASTEST_FIRST:
        if MARGIN * expected_max_error(scheme, k, outputs) <= atol:
            return scheme
    return "ieee"


def scheme_for(requested: str, dtype: str, k: int, outputs: int) -> str:
    """The scheme a kernel's fp32 tl.dot uses: the plan when `requested` is PLANNED, else `requested`. Half-precision
    operands multiply exactly on tensor cores: their dots take no precision argument (the value is unused)."""
    if requested != PLANNED:
        return requested
    return plan(k, outputs) if dtype == "float32" else "ieee"


def why(scheme: str, k: int, outputs: int, atol: float = FP32_TOLERANCE) -> str:
    """One line for a kernel's summary: the scheme and the margin the model gives it."""
    error = expected_max_error(scheme, k, outputs)
    return f"{scheme} (expected largest error {error:.1e} at K = {k} over {outputs:,} outputs, tolerance {atol:g})"
