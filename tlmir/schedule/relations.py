"""How a stage's loops derive from its axes: split and fuse relations, and the trip
count of every loop they make."""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.tensor import IterVar


@dataclass(eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


def ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def derive_trip_counts(relations: list, dom: dict[int, int]) -> None:
    """Add to `dom` (id(IterVar) -> trip count, holding the split and fused loops' roots)
    the trip count of every loop the `relations` derive: a split of n by f runs
    ceil(n / f) x min(f, n), a fuse the product of its two loops."""
    for rel in relations:
        if isinstance(rel, Split):
            n = dom[id(rel.parent)]
            outer = ceildiv(n, rel.factor)
            dom[id(rel.outer)], dom[id(rel.inner)] = outer, (rel.factor if outer > 1 else n)
        else:
            dom[id(rel.fused)] = dom[id(rel.outer)] * dom[id(rel.inner)]
