"""The feature cache grown into the GPU memory the first pass left.

With ``cache_budget="auto"`` and ``memory_reserve="auto"`` the build leaves
the model an estimate of what it will take (``memory.model_reserve``). The
first whole pass measures it: the process's GPU peak
(``torch.cuda.max_memory_allocated``: the model, its optimiser and
activations, the batches in flight, the build) says what was taken, and
before the next pass the feature cache grows, once, into what is left of the
memory the process may use, less a margin, in the plan's order (the
next-hottest rows: ``cache.allocator``)."""
from __future__ import annotations

import torch

from ..memory import device_total_bytes, size

# left unused: a tenth of what the process may use, at least this much
# (the allocator's rounding and fragmentation, a longer batch than the first pass saw)
MIN_MARGIN = 2 << 30
MARGIN_SHARE = 10
# less than this is not worth a new tier (the regather reads it through PCIe)
MIN_GROWTH = 256 << 20


def peak_bytes(device: torch.device) -> int:
    """The process's GPU peak on ``device`` (since the user last reset it, if they did)."""
    return torch.cuda.max_memory_allocated(device)


class CacheGrowth:
    """Whether and how much the loader's feature cache grows after its first
    whole pass (``after_pass``); ``grown`` says what happened, in a line."""

    def __init__(self, cache, device: torch.device, *, eligible: bool):
        self.cache, self.device = cache, device
        self.pending = bool(eligible and cache is not None and cache.row_map is not None and cache.warm_x is None
                            and cache.dynamic is None)
        self.grown = None

    def after_pass(self, profile=None) -> bool:
        """Grow the cache once, sized by the GPU peak so far; True if it grew."""
        if not self.pending:
            return False
        self.pending = False
        cache = self.cache
        plan, num_nodes = cache.plan, cache.order.numel()
        row_bytes = cache.x.size(1) * cache.x.element_size()
        total = device_total_bytes(self.device)
        peak = peak_bytes(self.device)
        margin = max(MIN_MARGIN, total // MARGIN_SHARE)
        # short of every row: that is another layout (x relabelled on the device)
        rows = min(max(0, total - peak - margin) // row_bytes, num_nodes - 1 - plan.num_feature)
        measured = f"GPU peak {size(peak)} of the {size(total)} the process may use, margin {size(margin)}"
        if rows * row_bytes < MIN_GROWTH:
            self.grown = f"not grown after the first pass: {measured}"
            return False
        cache.grow_features(plan.num_feature + rows, profile)
        self.grown = f"features of {rows:,} more nodes ({size(rows * row_bytes)}) after the first pass: {measured}"
        return True
