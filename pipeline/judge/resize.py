"""Inputs of other shapes, made inside a worker: the problem's own draws at another leading size.

A derived input set (pipeline.judge.shapes says why the judge asks for them) is the problem's `get_inputs()` under
the set's seed, with the leading size of one tensor input (its anchor: the k-th tensor input with a leading
dimension) set to another value: cut, or grown by further draws of `get_inputs()` (the same generator, so every
process draws the same values). Either every tensor input of the anchor's leading size changes with it (a batch
shared by several inputs) or the anchor alone; an integer input equal to the anchor's size follows a shared change
(a row count passed beside the tensors), and at a few sizes changes alone (`tensors: False`).

The reference's first run (its facts) probes which derivations it runs on: `plans` lists them in the order tried.

Imports: torch and the standard library (the worker's own).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

# Each size a function of the anchor's leading size n, in the order the candidate is called with them: below (a
# user's smaller batch first: a kernel wrong only on the first other shape it meets is wrong there), odd below, 1,
# a residue of 2 mod 4 above, a multiple of 8 above (a guard that lets multiples of 8 through), odd above, and well
# above (a grid capped at a few programs).
SIZES: tuple[tuple[str, Callable[[int], int]], ...] = (
    ("halved", lambda n: n // 2),
    ("odd", lambda n: n - 1 if n % 2 == 0 else n - 2),
    ("one", lambda n: 1),
    ("plus_two", lambda n: n + 2),
    ("doubled", lambda n: 2 * n),
    ("doubled_plus_one", lambda n: 2 * n + 1),
    ("large", lambda n: 4 * n + 3),
)
LATER_ANCHORS = ("halved", "odd", "doubled_plus_one")  # the sizes tried for a later carrier of a batch
APART = ("halved", "doubled_plus_one")  # also tried for the anchor alone, and with integers kept, where that differs
# what the reference's worker says when the reference refuses a set of another shape it took in its first run
OTHER_SHAPE_FAILED = "the reference failed on inputs of another shape drawn afresh"
MAX_ANCHORS = 6  # tensor inputs tried as the batch's carrier: each distinct leading size, in order
GROWTH_BYTES = 1 << 30  # a size above the problem's is tried while its inputs and outputs stay below this...
GROWTH_FACTOR, GROWTH_MOST = 2.2, 8 << 30  # ...or below 2.2x the problem's own, and never above 8 GiB


def tensor_positions(inputs: list[Any]) -> list[int]:
    """The positions of the tensor inputs with a leading dimension (anchors count these, and only these)."""
    return [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.dim() > 0]


def anchors(inputs: list[Any]) -> list[int]:
    """Anchors to vary, as indices into `tensor_positions`: the first tensor input of each distinct leading size."""
    chosen, seen = [], set()
    for k, i in enumerate(tensor_positions(inputs)):
        size = inputs[i].shape[0]
        if size not in seen and len(chosen) < MAX_ANCHORS:
            seen.add(size)
            chosen.append(k)
    return chosen


def plans(inputs: list[Any], output_bytes: int) -> list[dict[str, Any]]:
    """Every derivation worth trying on these (nominal) inputs, in order, as `resize` specs. For each anchor and
    size, a group: the shared change first, then the anchor alone (the first the reference runs on is kept); for
    the first anchor's APART sizes (a later anchor's first), where other inputs share its size, also the anchor
    alone and each other such input alone, and, for the first, where an integer input equals it, the tensors changed with the integers kept and the integers
    changed alone (groups of their own: inputs of two batch sizes, a count that does not follow). A size above the problem's only while the inputs that grow keep the whole below
    the growth limit; each size once per anchor."""
    positions = tensor_positions(inputs)
    nominal = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor)) + output_bytes
    limit = max(GROWTH_BYTES, min(GROWTH_FACTOR * nominal, GROWTH_MOST))
    found = []
    for rank, k in enumerate(anchors(inputs)):
        n = inputs[positions[k]].shape[0]
        shared = [i for i in positions if inputs[i].shape[0] == n]
        growing = sum(inputs[i].numel() * inputs[i].element_size() for i in shared) + output_bytes
        counts = any(type(x) is int and x == n for x in inputs)
        seen = {n}
        for size, rule in SIZES:
            new = rule(n)
            if rank > 0 and size not in LATER_ANCHORS or new < 1 or new in seen:
                continue
            if new > n and nominal + growing * (new - n) / n > limit:
                continue
            seen.add(new)

            def plan(suffix: str, group: str, **how) -> dict[str, Any]:
                return {"name": f"shape_{size}_{k}{suffix}", "group": group, "size": size, "anchor": k, "nominal": n,
                        "new": new, **how}

            found += [plan("", f"{size}_{k}", shared=True), plan("_alone", f"{size}_{k}", shared=False)]
            if (rank == 0 and size in APART or size == APART[0]) and len(shared) > 1:
                found.append(plan("_apart", f"{size}_{k}_apart", shared=False))
                # each other input of the batch alone too (a kernel that reads the second's size off the first)
                for j in [positions.index(i) for i in shared if i != positions[k]][: MAX_ANCHORS - 1]:
                    found.append({**plan(f"_apart_{j}", f"{size}_{j}_apart", shared=False), "anchor": j})
            if rank == 0 and size in APART:
                if counts:
                    found.append(plan("_counts_kept", f"{size}_{k}_counts", shared=True, counts=False))
                    # and the integers alone, the tensors as they were (a count the kernel reads off a tensor)
                    found.append(plan("_counts_only", f"{size}_{k}_counts_only", shared=True, tensors=False))
    return found


def resize(inputs: list[Any], spec: dict[str, Any], draw_more: Callable[[], list[Any]]) -> list[Any]:
    """`inputs` with the anchor's leading size (and, shared, every input of that size) set to spec["new"]: cut, or
    grown by further draws (`draw_more()` gives another set of the problem's inputs)."""
    positions = tensor_positions(inputs)
    k, new = int(spec["anchor"]), int(spec["new"])
    if k >= len(positions):
        raise ValueError(f"the problem has no tensor input {k + 1} with a leading dimension to vary")
    size = inputs[positions[k]].shape[0]
    chosen = [i for i in positions if inputs[i].shape[0] == size] if spec["shared"] else [positions[k]]
    if not spec.get("tensors", True):  # the integer inputs alone
        chosen, new_rows = [], size
    else:
        new_rows = new
    extra = [list(draw_more()) for _ in range(-(-(new_rows - size) // size))] if new_rows > size else []

    def derived(i: int, x: Any) -> Any:
        if i in chosen:
            return torch.cat([x, *(more[i] for more in extra)])[:new] if extra else x[:new].clone()
        if spec["shared"] and spec.get("counts", True) and type(x) is int and x == size:
            return new
        return x

    return [derived(i, x) for i, x in enumerate(inputs)]


def shapes(inputs: list[Any]) -> list[list[int]]:
    """The tensor inputs' shapes (every tensor, 0-dim ones too), as the verdict prints them."""
    return [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]
