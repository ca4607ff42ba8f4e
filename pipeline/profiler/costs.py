"""A problem's analytic costs: the FLOPs its reference computes and the fewest bytes any implementation moves.

Computed on `meta` tensors (shapes only), so a 2 GiB problem costs nothing on a laptop. The judge computes the same
numbers on real tensors (pipeline.judge.worker.ReferenceRun.record_costs); this is the roofline's floor.
Imports: torch (inside the functions) and the standard library only: the types load without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProblemCosts:
    """FLOPs of one forward call and the fewest DRAM bytes: inputs and weights read once, outputs written once."""

    flops: int
    min_bytes: int
    dtypes: tuple[str, ...]  # floating dtypes of the inputs, e.g. ("float32",): picks the compute ceiling

    def floor_ms(self, bandwidth_bytes_per_s: float, flops_per_s: float) -> float:
        """The roofline floor: no implementation on this device can take less time."""
        return 1e3 * max(self.min_bytes / bandwidth_bytes_per_s, self.flops / flops_per_s if flops_per_s else 0.0)

    def intensity(self) -> float:
        """Arithmetic intensity at the floor, FLOP per byte."""
        return self.flops / self.min_bytes if self.min_bytes else 0.0


def tensor_bytes(values: Any) -> int:
    import torch

    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    return 0


def problem_costs(problem: Any, seed: int = 42, device: str = "meta") -> ProblemCosts:
    """Costs of `problem` (a loaded KernelBench module), built the way the judge builds it (seed 42)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device(device):
        torch.manual_seed(seed)
        init = problem.get_init_inputs()
        torch.manual_seed(seed)
        model = problem.Model(*init)
        torch.manual_seed(seed)
        inputs = list(problem.get_inputs())
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            out = model(*inputs)
    weights = list(model.parameters()) + list(model.buffers())
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()})
    return ProblemCosts(
        flops=int(counter.get_total_flops()),
        min_bytes=tensor_bytes(inputs) + tensor_bytes(weights) + tensor_bytes(out),
        dtypes=tuple(dtypes),
    )
