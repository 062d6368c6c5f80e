"""The sampler's arguments checked before anything is built: PyG's
``num_neighbors`` (also the loader's check), the fanouts the kernels get for
it (above ``MAX_FANOUT`` only where every neighbour is taken anyway), and the
adjacency cache's expected hit rate."""
from __future__ import annotations

import math

from ..graph import CSCGraph
from ..kernels.sample import MAX_FANOUT


def check_num_neighbors(num_neighbors) -> list[int]:
    """Validate PyG's ``num_neighbors`` (a list of per-hop fanouts)."""
    if isinstance(num_neighbors, dict):
        raise TypeError("num_neighbors as a dict (by edge type) is for a HeteroData: pass a list of fanouts")
    if not isinstance(num_neighbors, (list, tuple)):
        raise TypeError(f"num_neighbors must be a list of ints, got {type(num_neighbors).__name__}")
    for hop, fanout in enumerate(num_neighbors):
        if not isinstance(fanout, int) or isinstance(fanout, bool):
            raise TypeError(f"num_neighbors[{hop}] must be an int, got {fanout!r}")
        if fanout < -1:
            raise ValueError(f"num_neighbors[{hop}] = {fanout}: a fanout must be >= 0, or -1 for all neighbours")
    return list(num_neighbors)


def within_kernel_fanouts(num_neighbors: list[int], graph: CSCGraph, replace: bool) -> list[int]:
    """``num_neighbors`` with each fanout above the kernels' ``MAX_FANOUT``
    that no node's degree reaches (without replacement: every neighbour is
    taken, as with -1, in the same order) written as -1; ValueError for one
    that cannot be (with replacement, or a node of higher degree)."""
    if all(fanout <= MAX_FANOUT for fanout in num_neighbors):
        return num_neighbors
    max_degree = int(graph.degree().max()) if graph.num_nodes else 0
    out = []
    for hop, fanout in enumerate(num_neighbors):
        if fanout > MAX_FANOUT:
            if replace or fanout < max_degree:
                raise ValueError(
                    f"num_neighbors[{hop}] = {fanout}: the sampling kernels draw at most {MAX_FANOUT} "
                    f"neighbours per node" + ("" if replace else f" (a node here has {max_degree})")
                    + "; -1 takes every neighbour")
            fanout = -1
        out.append(fanout)
    return out


def check_hit_rate(adjacency_hit_rate) -> float | None:
    """``adjacency_hit_rate`` when it is a number in [0, 1], None for None or
    NaN (a cache plan without a profile: unknown); TypeError or ValueError
    otherwise."""
    if adjacency_hit_rate is None:
        return None
    if not isinstance(adjacency_hit_rate, (int, float)) or isinstance(adjacency_hit_rate, bool):
        raise TypeError(f"adjacency_hit_rate must be a float in [0, 1] or None, got {adjacency_hit_rate!r}")
    if math.isnan(adjacency_hit_rate):
        return None
    if not 0 <= adjacency_hit_rate <= 1:
        raise ValueError(f"adjacency_hit_rate must be in [0, 1], got {adjacency_hit_rate}")
    return adjacency_hit_rate
