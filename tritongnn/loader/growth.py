"""The feature cache grown into the GPU memory the first pass left.

With ``cache_budget="auto"`` and ``memory_reserve="auto"`` the build leaves
the model an estimate of what it will take (``memory.model_reserve``). The
first whole pass measures it: at the end of the build the loader notes its
own GPU peak (``loader.stats["build_gpu_peak"]``) and resets torch's peak
counters once, so the pass's peaks are its own (the build's chunked
temporaries set a peak no pass repeats). What the pass needed is its
allocated peak plus the allocator's peak of free pieces it could not hand
back (``pass_need_bytes``: the fragmentation between batches and
activations of different sizes on different streams, which the allocated
bytes alone leave out: at a 24 GB cap, a model that had allocated 16 GB could
not find 1.5 GB in the 6 GB its allocator held). Its reserved peak says
nothing under a cap: the allocator keeps every block until an allocation
fails, so any varied pass reserves up to the cap. Before the next pass the
feature cache grows, once, into what is left of the memory the process may
use, less a margin, in the plan's order (the next-hottest rows:
``cache.allocator``)."""
from __future__ import annotations

import torch

from ..memory import device_total_bytes, size

# left unused: a twentieth of what the process may use, at least this much
# (a batch longer than the first pass saw)
MIN_MARGIN = 1 << 30
MARGIN_SHARE = 20
# less than this is not worth a new tier (the regather reads it through PCIe)
MIN_GROWTH = 256 << 20


def build_peaks(device: torch.device) -> dict:
    """The process's GPU peaks on ``device`` so far (since the user last
    reset them, if they did): ``reserved`` and ``allocated`` bytes."""
    return dict(reserved=torch.cuda.max_memory_reserved(device), allocated=torch.cuda.max_memory_allocated(device))


def pass_need_bytes(device: torch.device) -> int:
    """GPU bytes the work since the peak counters' reset needed at most: its
    allocated peak plus the peak of the allocator's inactive split blocks
    (free pieces of segments still in use, which it cannot hand back to
    make room). Two peaks of different moments: a bound from above."""
    stats = torch.cuda.memory_stats(device)
    return stats.get("allocated_bytes.all.peak", 0) + stats.get("inactive_split_bytes.all.peak", 0)


class CacheGrowth:
    """Whether and how much the loader's feature cache grows after its first
    whole pass (``after_pass``); ``grown`` says what happened, in a line."""

    def __init__(self, cache, device: torch.device, *, eligible: bool):
        self.cache, self.device = cache, device
        self.pending = bool(eligible and cache is not None and cache.row_map is not None and cache.warm_x is None
                            and cache.dynamic is None)
        self.grown = None
        self.build_peak = None

    def start(self) -> None:
        """At the end of the build: note its GPU peak (``build_peak``) and,
        where the cache may grow, reset torch's peak counters, so the first
        pass measures its own."""
        if self.device.type != "cuda":
            return
        self.build_peak = build_peaks(self.device)
        if self.pending:
            torch.cuda.reset_peak_memory_stats(self.device)

    def after_pass(self, profile=None) -> bool:
        """Grow the cache once, sized by what the pass needed; True if it grew."""
        if not self.pending:
            return False
        self.pending = False
        cache = self.cache
        plan, num_nodes = cache.plan, cache.order.numel()
        row_bytes = cache.x.size(1) * cache.x.element_size()
        total = device_total_bytes(self.device)
        need = pass_need_bytes(self.device)
        margin = max(MIN_MARGIN, total // MARGIN_SHARE)
        # short of every row: that is another layout (x relabelled on the device)
        rows = min(max(0, total - need - margin) // row_bytes, num_nodes - 1 - plan.num_feature)
        measured = (f"the pass needed {size(need)} (allocated and fragmented peaks) of the {size(total)} the "
                    f"process may use, margin {size(margin)}")
        if rows * row_bytes < MIN_GROWTH:
            self.grown = f"not grown after the first pass: {measured}"
            return False
        if not cache.grow_features(plan.num_feature + rows, profile):
            self.grown = f"not grown after the first pass: the GPU refused {size(rows * row_bytes)} more; {measured}"
            return False
        self.grown = f"features of {rows:,} more nodes ({size(rows * row_bytes)}) after the first pass: {measured}"
        return True
