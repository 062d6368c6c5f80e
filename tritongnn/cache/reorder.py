"""FastGL's match-reorder: within a group of sampled batches, the order that
makes each batch follow the one it shares most nodes with.

With match-reuse (``cache/reuse.py``) a batch copies on the GPU the rows it
shares with the batch before it, so the order of a group of batches decides
how many host reads reuse saves. The loader samples ``group`` batches, then
gathers them in this order. The match degree of batch ``b`` after ``a`` is
``|a & b| / |b|``, the share of ``b``'s rows ``a`` holds. Greedy: start with
the group's first batch, then repeatedly take the remaining batch with the
highest match degree after the last one taken. Only nodes outside the static
cache count (``num_static``): rows the cache serves cost no host read either
way, and counting them (hubs, shared by every batch) drowns the signal.

The shared counts come from one GPU pass: every node of the group gets a
bitmask of the batches that hold it (``group <= 63``), and each batch sums
its nodes' bits, one count per other batch. Only the ``group x group``
counts reach the host. Reordering changes when a batch comes, not what it
holds: every seed still appears once per epoch.
"""
from __future__ import annotations

import torch

MAX_GROUP = 63  # batches per group: one bit each in an int64 mask


def check_group(group) -> int:
    """``group`` when it is a valid ``reorder_group`` (2 .. 63), else ValueError."""
    if not isinstance(group, int) or isinstance(group, bool) or not 2 <= group <= MAX_GROUP:
        raise ValueError(f"reorder_group must be an int in [2, {MAX_GROUP}] (1: no reordering), "
                         f"got {group!r}")
    return group


class MatchReorder:
    """Orders groups of batches by shared nodes, and counts what it gained.

    Args:
        num_nodes: N (node ids of the batches are in ``[0, N)``).
        group: batches per group, 2 .. 63.
        device: where the batches' node ids live.
        num_static: F, nodes ``< F`` (the static cache's) are not counted.
    """

    def __init__(self, num_nodes: int, group: int, device, num_static: int = 0):
        self.group, self.num_static = check_group(group), num_static
        self._mask = torch.zeros(num_nodes, dtype=torch.int64, device=device)
        self.reset()

    def reset(self) -> None:
        """Zero the counts (the loader does at each epoch)."""
        self.pairs = 0
        self.shared_before = self.shared_after = 0  # rows shared with the batch before
        self.match_before = self.match_after = 0.0  # summed match degrees

    def shared(self, nodes: list[torch.Tensor]) -> torch.Tensor:
        """``[G, G]`` int64 on the host: ``[a, b]`` = rows of batch ``a``
        (of nodes ``>= num_static``) whose node batch ``b`` holds too; the
        diagonal, each batch's rows. Without repeated seeds it is symmetric
        (a repeated seed is two rows of one node)."""
        g = len(nodes)
        bits = torch.arange(g, device=self._mask.device)
        for i, node in enumerate(nodes):
            # or, not add: a repeated seed puts its id in the batch twice (a
            # gather and a scatter: the repeats write the same value)
            self._mask[node] = self._mask[node] | (1 << i)
        rows = [(((self._mask[node][:, None] >> bits) & 1) * (node >= self.num_static)[:, None]).sum(0)
                for node in nodes]
        for node in nodes:
            self._mask[node] = 0
        return torch.stack(rows).cpu()

    def order(self, nodes: list[torch.Tensor]) -> list[int]:
        """The greedy order of one group's batches (``nodes``: each batch's
        ids); the counts before and after are added up."""
        g = len(nodes)
        if g < 2:
            return list(range(g))
        shared = self.shared(nodes).T  # [a, b]: rows of b whose node a holds
        sizes = shared.diagonal().clamp(min=1).double()
        degree = shared.double() / sizes[None, :]  # degree[a, b]: share of b's rows a holds
        order, left = [0], set(range(1, g))
        while left:
            last = order[-1]
            nxt = max(left, key=lambda b: (float(degree[last, b]), -b))
            order.append(nxt)
            left.remove(nxt)
        for before, after in zip(zip(range(g - 1), range(1, g)), zip(order, order[1:])):
            self.shared_before += int(shared[before])
            self.shared_after += int(shared[after])
            self.match_before += float(degree[before])
            self.match_after += float(degree[after])
        self.pairs += g - 1
        return order

    def as_dict(self) -> dict:
        pairs = max(self.pairs, 1)
        return dict(reorder_match_before=self.match_before / pairs, reorder_match_after=self.match_after / pairs,
                    reorder_shared_rows_before=self.shared_before, reorder_shared_rows_after=self.shared_after)
