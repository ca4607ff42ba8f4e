"""Inputs of other shapes, made inside a worker: the problem's own draws at another size.

A derived input set (pipeline.judge.shapes says why the judge asks for them) is the problem's `get_inputs()` under
the set's seed, with the leading size of one tensor input (its anchor: the k-th tensor input with a leading
dimension) set to another value: cut, or grown by further draws of `get_inputs()` (the same generator, so every
process draws the same values). Either every tensor input of the anchor's leading size changes with it (a batch
shared by several inputs) or the anchor alone; an integer input equal to the anchor's size follows a shared change
(a row count passed beside the tensors), and at a few sizes changes alone (`tensors: False`).

A set may vary another dimension instead (`dim` > 0: a row length, a channel count, a spatial size): every
dimension of that size of every tensor input (a reduction length shared by two operands; the anchor's own leading
size excepted), or that dimension alone, cut or grown the same way. A kernel that writes a row length as a literal is
right only at the problem's. The first two sizes of 2 or more are varied one at a time; a dimension of size 1 (a kept
dimension, one channel) is grown; a size met in several places is also cut in one place alone (a square GEMM's N
apart from its K: each place a set of the family, of which a check draws one); and one set cuts every later size at once (`together`: a third size no set varied alone, a kernel
wrong only where two sizes both leave the problem's). Two more sets keep the problem's sizes in views that are not
contiguous, and contiguous but not at the start of their memory (`layout`, as a user's sliced tensor is).

The reference's first run (its facts) probes which derivations it runs on: `plans` lists them in the order tried.

Imports: torch and the standard library (the worker's own).
"""

from __future__ import annotations

import math
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
DIM_SIZES = ("odd", "doubled_plus_one")  # the sizes tried for another dimension: odd below, and odd above twice it
MAX_DIMS = 2  # other dimensions tried one at a time: each distinct size of 2 or more past the first, in order
MAX_TOGETHER = 8  # later sizes cut at once in the `together` set, in order
MOST_FACTOR = 16  # a size drawn for a check above the problem's goes up to 16n + 15 (pipeline.judge.draw), growth allowing
# (a plan above the problem's keeps `most`, that size, and `bytes`, the growth limit: the outputs the judge takes there)
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
            most = {"most": _most(n, new, lambda m: nominal + growing * (m - n) / n <= limit), "bytes": int(limit)} if new > n else {}

            def plan(suffix: str, group: str, **how) -> dict[str, Any]:
                return {"name": f"shape_{size}_{k}{suffix}", "group": group, "size": size, "anchor": k, "nominal": n,
                        "new": new, **most, **how}

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
    return [*found, *_dim_plans(inputs, output_bytes, nominal, limit)]


def dim_anchors(inputs: list[Any]) -> list[tuple[int, int]]:
    """Other dimensions to vary one at a time, as (index into `tensor_positions`, dimension): each distinct size of a
    dimension past the first, 2 or more, in the inputs' order (MAX_DIMS of them), then the first of size 1 (grown)."""
    chosen, seen, unit = [], set(), []
    for k, i in enumerate(tensor_positions(inputs)):
        for d in range(1, inputs[i].dim()):
            size = inputs[i].shape[d]
            if size >= 2 and size not in seen and len(chosen) < MAX_DIMS:
                seen.add(size)
                chosen.append((k, d))
            elif size == 1 and not unit:
                unit.append((k, d))
    return chosen + unit


def _dim_plans(inputs: list[Any], output_bytes: int, nominal: int, limit: float) -> list[dict[str, Any]]:
    """For each other dimension and DIM_SIZES size: every dimension of that size changed (shared), then that one
    alone; a size above the problem's only while the whole stays below the growth limit. Then the `together` set."""
    positions, found = tensor_positions(inputs), []
    for k, d in dim_anchors(inputs):
        n = inputs[positions[k]].shape[d]
        powers = [(inputs[i].numel() * inputs[i].element_size(), sum(1 for s in inputs[i].shape if s == n)) for i in positions]

        def fits(new: int) -> bool:
            grown = sum(b * ((new / n) ** p - 1) for b, p in powers if p)
            return nominal + grown + output_bytes * (new / n - 1) <= limit

        for size, rule in SIZES:
            new = rule(n)
            # never down to 1: a dimension of 2 or 3 cut to one row is another problem (the row that set the scale gone)
            if size not in DIM_SIZES or new < 2 or new == n or new > n and not fits(new):
                continue
            base = {"size": size, "anchor": k, "dim": d, "nominal": n, "new": new}
            if new > n:
                base.update(most=_most(n, new, fits), bytes=int(limit))
            found += [{"name": f"shape_dim{d}_{size}_{k}", "group": f"dim{d}_{size}_{k}", **base, "shared": True},
                      {"name": f"shape_dim{d}_{size}_{k}_alone", "group": f"dim{d}_{size}_{k}", **base, "shared": False}]
            if size == DIM_SIZES[0]:  # and each place of that size alone, where it has several (a square GEMM's N
                # apart from K): every one the reference runs on is kept, and each check draws one (the `family`)
                places = [(j, e) for j, i in enumerate(positions) for e, s in enumerate(inputs[i].shape)
                          if s == n and (e > 0 or j != k)][:MAX_ANCHORS]
                if len(places) > 1:
                    found += [{"name": f"shape_dim{e}_{size}_{j}_apart", "group": f"dim{e}_{size}_{j}_apart", **base,
                               "anchor": j, "dim": e, "shared": False, "family": f"dim{d}_{size}_{k}_apart"} for j, e in places]
    return found + _together(inputs) + _layout(inputs, nominal, limit)


LAYOUTS = ("strided", "offset", "padded", "transposed")


def _layout(inputs: list[Any], nominal: int, limit: float) -> list[dict[str, Any]]:
    """Four sets at the problem's own sizes with every tensor input a view of another layout (`strided`, `offset`,
    `padded`, `transposed`): a user's sliced or transposed tensor, which a kernel that assumes a row stride or an
    offset of zero reads wrong, or writes wrong into `torch.empty_like` of it.
    Only while twice the inputs stay below the growth limit (each view lies in a buffer twice its size)."""
    positions = tensor_positions(inputs)
    inputs_bytes = sum(inputs[i].numel() * inputs[i].element_size() for i in positions)
    if not positions or nominal + inputs_bytes > limit:
        return []
    n = inputs[positions[0]].shape[0]
    return [{"name": f"shape_{layout}", "group": layout, "size": layout, "anchor": 0, "nominal": n, "new": n, "shared": True,
             "layout": layout} for layout in LAYOUTS]


def strided(inputs: list[Any], layout: str = "strided") -> list[Any]:
    """Each tensor input with a dimension, the same values in a view of a buffer of its own (made where torch's
    default device is): `strided`, its last dimension at stride 2 and one element in (not contiguous); `offset`,
    contiguous one element in (a slice of a larger tensor, which `.contiguous()` leaves as it is); `padded`, its
    last dimension at stride 1 and each row 3 elements longer in memory than it is (`x[:, :k]` of a wider tensor: a
    kernel that takes the row stride to be the row length with a unit last stride reads other rows; red team 20's
    c05); `transposed`, dense with its last two dimensions swapped in memory (`y.t()` of a user's `y`: a kernel that
    writes `torch.empty_like(x)`, which keeps those strides, as if it were contiguous returns the transpose; red team
    21's l02). A tensor of one dimension has no rows: there `padded` and `transposed` are the `offset` view."""

    def view(x: torch.Tensor) -> torch.Tensor:
        if layout == "transposed" and x.dim() > 1:
            out = torch.empty((*x.shape[:-2], x.shape[-1], x.shape[-2]), dtype=x.dtype, device=x.device).transpose(-1, -2)
        elif layout == "padded" and x.dim() > 1:
            out = torch.empty((*x.shape[:-1], x.shape[-1] + 3), dtype=x.dtype, device=x.device)[..., :x.shape[-1]]
        elif layout in ("offset", "padded", "transposed"):
            out = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:].view(x.shape)
        else:
            out = torch.empty((*x.shape[:-1], 2 * x.shape[-1] + 1), dtype=x.dtype, device=x.device)[..., 1::2]
        out.copy_(x)
        return out

    return [view(x) if isinstance(x, torch.Tensor) and x.dim() > 0 and x.numel() > 0 else x for x in inputs]


def _together(inputs: list[Any]) -> list[dict[str, Any]]:
    """One set that cuts several sizes at once, each to its odd size below (every dimension of that size, as a shared
    set does): the first leading size with every distinct later size of 4 or more, or, where the reference refuses
    that, the later sizes alone (where there are two or more): a kernel right while each size changes alone (a batch
    and a row length both off the problem's; a third later size) is met there. Its first later size stands as the
    set's own."""
    positions, sizes = tensor_positions(inputs), []
    seen = {inputs[positions[0]].shape[0]} if positions else set()
    for k, i in enumerate(positions):
        for d in range(1, inputs[i].dim()):
            n = inputs[i].shape[d]
            if n >= 4 and n not in seen and len(sizes) < MAX_TOGETHER:
                seen.add(n)
                sizes.append([k, d, n, dict(SIZES)["odd"](n)])
    if not sizes:
        return []
    k, d, n, new = sizes[0]
    base = {"group": "dims_together", "size": "odd", "anchor": k, "dim": d, "nominal": n, "new": new, "shared": True}
    found = []
    if (batch := inputs[positions[0]].shape[0]) >= 4:
        found.append({"name": "shape_all_together", **base, "together": [[0, 0, batch, dict(SIZES)["odd"](batch)], *sizes]})
    if len(sizes) > 1:
        found.append({"name": "shape_dims_together", **base, "together": sizes})
    return found


def most_within(plan: dict[str, Any], before: list[int], after: list[int]) -> int:
    """The plan's `most` cut to the largest size whose inputs and outputs stay within its `bytes`, read off the
    reference's run at `new`: `before` and `after` are the bytes of each tensor (inputs, then outputs) at the problem's
    size and at `new`. Each tensor grows as a power of the size, whose exponent that run measures, so the whole at a
    size m is at most the run's at `new` times (m / new) ** p, p the largest exponent (an output that grows with two
    sizes of the input, a convolution's image, outgrows the plan's estimate, which took outputs as growing with one:
    level3/8's reference handed over 1.27 GB past a limit of 1 GiB on the GPU). Tensors that do not pair up take
    p = 3."""
    n, new = int(plan["nominal"]), int(plan["new"])
    if "most" not in plan or new <= n:
        return int(plan.get("most", new))
    ratio = new / n
    if len(before) == len(after):
        p = max([math.log(b / a) / math.log(ratio) for a, b in zip(before, after) if a > 0 and b > 0] or [1.0])
    else:
        p = 3.0
    total = sum(after)
    return min(int(plan["most"]), _most(n, new, lambda m: total * (m / new) ** max(p, 0.0) <= plan["bytes"]))


def _most(n: int, new: int, fits: Callable[[int], bool]) -> int:
    """The largest size up to MOST_FACTOR * n + 15 that `fits`, at least `new` (which does)."""
    most = MOST_FACTOR * n + 15
    while most > new and not fits(most):
        most = max(new, (most + new) // 2)
    return most


def resize(inputs: list[Any], spec: dict[str, Any], draw_more: Callable[[], list[Any]]) -> list[Any]:
    """`inputs` with the anchor's size along spec["dim"] (the leading one unless given; shared: that dimension of
    every input of that leading size, or, past the first dimension, every dimension of that size of every tensor
    input; `together`: each of its sizes so) set to spec["new"]: cut, or grown by further draws (`draw_more()` gives
    another set of the problem's inputs, drawn as needed and shared by every input, so every process draws the same
    values)."""
    if spec.get("layout"):  # the problem's own sizes: the layout is set once the values are drawn (strided)
        return list(inputs)
    positions = tensor_positions(inputs)
    changes = spec.get("together") or [[spec["anchor"], spec.get("dim", 0), None, spec["new"]]]
    chosen: dict[int, dict[int, int]] = {}  # input -> its dimensions that change -> their new size
    for k, dim, _, new in changes:
        k, dim, new = int(k), int(dim), int(new)
        if k >= len(positions) or dim >= inputs[positions[k]].dim():
            raise ValueError(f"the problem has no tensor input {k + 1} with a dimension {dim} to vary")
        size = inputs[positions[k]].shape[dim]
        if not spec["shared"]:
            picked = {positions[k]: [dim]}
        elif dim == 0:
            picked = {i: [0] for i in positions if inputs[i].shape[0] == size}
        else:  # the anchor's own leading size stays (the leading sizes have their own sets: a table's row count that
            # an index input's values point into is not changed under it)
            picked = {i: [e for e, s in enumerate(inputs[i].shape) if s == size and (e > 0 or i != positions[k])] for i in positions}
        for i, dims in picked.items():
            chosen.setdefault(i, {}).update({e: new for e in dims})
    if not spec.get("tensors", True):  # the integer inputs alone
        chosen = {}
    size, new = inputs[positions[int(spec["anchor"])]].shape[int(spec.get("dim", 0))], int(spec["new"])
    pool: list[list[Any]] = []

    def further(i: int, j: int) -> Any:  # input i of the j-th further draw
        while len(pool) <= j:
            pool.append(list(draw_more()))
        return pool[j][i]

    def derived(i: int, x: Any) -> Any:
        if chosen.get(i):
            return _sized(x, chosen[i], lambda j: x if j == 0 else further(i, j - 1))
        if spec["shared"] and spec.get("counts", True) and type(x) is int and x == size:
            return new
        return x

    return [derived(i, x) for i, x in enumerate(inputs)]


def _sized(x: torch.Tensor, sizes: dict[int, int], draw: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """x with each dimension d of `sizes` set to sizes[d]: cut, or grown by concatenating further draws (`draw(0)`
    is x itself, each cut where a dimension shrinks)."""

    def cut(t: torch.Tensor) -> torch.Tensor:
        for d, new in sizes.items():
            if new < t.shape[d]:
                t = t.narrow(d, 0, new)
        return t

    grow = [d for d, new in sizes.items() if new > x.shape[d]]
    if not grow:
        t = cut(x)
        # one copy, contiguous (`.contiguous().clone()` made two of a cut view: a 16 GB input held three times
        # over ran the reference's worker out of an H100's memory, bench/results/2026-12-07-s26)
        return t.clone(memory_format=torch.contiguous_format)
    count = iter(range(1 << 62))

    def build(depth: int) -> torch.Tensor:
        if depth == len(grow):
            return cut(draw(next(count)))
        d = grow[depth]
        return torch.cat([build(depth + 1) for _ in range(-(-sizes[d] // x.shape[d]))], d).narrow(d, 0, sizes[d])

    return build(0).contiguous()


def shapes(inputs: list[Any]) -> list[list[int]]:
    """The tensor inputs' shapes (every tensor, 0-dim ones too), as the verdict prints them."""
    return [list(x.shape) for x in inputs if isinstance(x, torch.Tensor)]
