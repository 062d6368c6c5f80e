"""Seeds split across data-parallel ranks, as ``DistributedSampler`` splits them.

Every rank shuffles the same way (a generator seeded with ``seed + epoch``, the
same on every rank), then takes every ``world_size``-th position starting at
its rank: the shards of one epoch are disjoint, and together they cover every
seed once. So that every rank runs the same number of batches (a rank with
one batch more would wait for the others' gradients forever), the seed list
is first made a multiple of ``world_size``, as ``DistributedSampler`` does:
padded with seeds from its own start when ``drop_last`` is False (a few seeds
then appear twice in the epoch), cut short when it is True (a few are left
out that epoch). A new epoch reshuffles: ``set_epoch`` sets it, and the loader
also moves to the next epoch by itself after each pass.
"""
from __future__ import annotations

import torch


def resolve_ranks(rank, world_size) -> tuple[int, int]:
    """``(rank, world_size)``: the given pair, or ``torch.distributed``'s when
    both are None and a process group is initialised, else ``(0, 1)``."""
    if rank is None and world_size is None:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    if rank is None or world_size is None:
        raise ValueError(f"rank and world_size come together: got rank={rank!r}, world_size={world_size!r}")
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need world_size >= 1 and 0 <= rank < world_size, got rank={rank}, "
                         f"world_size={world_size}")
    return rank, world_size


class SeedShards:
    """This rank's positions in the seed list, epoch by epoch.

    Args:
        num_seeds: seeds in the whole list (every rank's).
        rank, world_size: this rank and the number of ranks.
        shuffle: reshuffle every epoch (else the list order).
        drop_last: cut the list to a multiple of ``world_size`` (else pad).
        seed: the shuffle seed, the same on every rank.
    """

    def __init__(self, num_seeds: int, rank: int, world_size: int, shuffle: bool, drop_last: bool, seed: int):
        self.num_seeds, self.rank, self.world_size = num_seeds, rank, world_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        if drop_last and num_seeds < world_size:
            raise ValueError(f"drop_last with {num_seeds} seeds and world_size={world_size} leaves "
                             f"a rank without seeds")

    def __len__(self) -> int:
        """Seeds per rank per epoch."""
        if self.drop_last:
            return self.num_seeds // self.world_size
        return -(-self.num_seeds // self.world_size)

    def positions(self, epoch: int) -> torch.Tensor:
        """``[len(self)]`` int64 positions into the seed list for ``epoch``."""
        n = self.num_seeds
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + epoch))
        else:
            order = torch.arange(n)
        total = len(self) * self.world_size
        if total <= n:
            order = order[:total]
        else:  # pad from the start (more than once when there are fewer seeds than ranks)
            order = order.repeat(-(-total // n))[:total]
        return order[self.rank::self.world_size]
