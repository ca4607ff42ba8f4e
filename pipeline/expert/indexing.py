"""Addresses inside a kernel: a tensor's offset at a point of the kernel's domain, written as Triton source.

A kernel walks a domain (the shape it computes over) through a few index variables, each covering some of the
domain's axes: a row kernel's `xindex` covers the kept axes and `rindex` the reduced ones; a GEMM's `rm` covers M
and `rn` N. A tensor read at that point has its own strides (0 where it is broadcast); its offset is the sum, per
index variable, of the variable decomposed into the axes it covers. Axes that are adjacent in the variable and in
memory are merged first, so a contiguous read is `xindex * 64 + rindex` rather than a chain of divisions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IndexVar:
    """An index variable of a kernel: its name, the domain axes it covers (outer to inner), its mask (if any)."""

    name: str
    axes: tuple[int, ...]
    mask: str | None = None


def aligned(shape: tuple[int, ...], stride: tuple[int, ...], rank: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A tensor's shape and strides left-padded to `rank` axes, strides 0 where the size is 1 (broadcast)."""
    pad = rank - len(shape)
    sizes = (1,) * pad + tuple(shape)
    strides = (0,) * pad + tuple(s if n > 1 else 0 for s, n in zip(stride, shape))
    return sizes, strides


def linear_index(var: str, sizes: list[int], strides: list[int]) -> str | None:
    """The offset contributed by index variable `var` decomposed row-major into axes of `sizes` (outer to inner),
    each moving `strides` elements (0: not used). None when no axis is used."""
    merged: list[list[int]] = []  # [size, stride] outer to inner, adjacent axes merged when memory allows
    for size, stride in zip(sizes, strides):
        if size == 1:
            continue
        if merged and stride and merged[-1][1] == stride * size:
            merged[-1] = [merged[-1][0] * size, stride]
        elif merged and not stride and not merged[-1][1]:
            merged[-1] = [merged[-1][0] * size, 0]
        else:
            merged.append([size, stride])
    terms, divisor = [], 1
    for position in range(len(merged) - 1, -1, -1):
        size, stride = merged[position]
        if stride:
            index = var if divisor == 1 else f"({var} // {divisor})"
            if position > 0:
                index = f"({index} % {size})"
            terms.append(index if stride == 1 else f"{index} * {stride}")
        divisor *= size
    return " + ".join(reversed(terms)) if terms else None


def offset(shape: tuple[int, ...], stride: tuple[int, ...], domain: tuple[int, ...], variables: list[IndexVar]) -> tuple[str, list[IndexVar]]:
    """(offset expression, the index variables it depends on) of a tensor read at the domain's point. The tensor's
    shape must broadcast to the domain."""
    sizes, strides = aligned(shape, stride, len(domain))
    terms, used = [], []
    for var in variables:
        var_sizes = [domain[a] for a in var.axes]
        var_strides = [strides[a] if sizes[a] > 1 else 0 for a in var.axes]
        term = linear_index(var.name, var_sizes, var_strides)
        if term is not None:
            terms.append(term)
            used.append(var)
    return (" + ".join(terms) if terms else "0"), used


def mask_of(used: list[IndexVar]) -> str | None:
    masks = [v.mask for v in used if v.mask]
    if not masks:
        return None
    return masks[0] if len(masks) == 1 else " & ".join(f"({m})" if " " in m else m for m in masks)
