"""The feature cache grown into the GPU memory the first pass left.

With ``cache_budget="auto"`` and ``memory_reserve="auto"`` the build leaves
the model an estimate of what it will take (``memory.model_reserve``). The
first whole pass measures it: the GPU memory torch's allocator reserved
for the pass (the model, its optimiser and activations, the batches in
flight, and the fragmentation between them, which the allocated bytes
alone leave out: at a 24 GB cap, a model that had allocated 16 GB could not
find 1.5 GB in the 6 GB its allocator held) says what was taken
(``pass_peak_bytes``), and before the next pass the
feature cache grows, once, into what is left of the memory the process may
use, less a margin, in the plan's order (the next-hottest rows:
``cache.allocator``). A pass whose allocator held everything it could
grows nothing."""
from __future__ import annotations

import torch

from ..memory import device_total_bytes, size

# left unused: a twentieth of what the process may use, at least this much
# (a batch longer than the first pass saw)
MIN_MARGIN = 1 << 30
MARGIN_SHARE = 20
# less than this is not worth a new tier (the regather reads it through PCIe)
MIN_GROWTH = 256 << 20


def peak_bytes(device: torch.device) -> int:
    """The process's peak of reserved GPU memory on ``device`` (since the
    user last reset it, if they did)."""
    return torch.cuda.max_memory_reserved(device)


def pass_peak_bytes(device: torch.device, build_peak: int) -> int:
    """GPU memory reserved at the peak of the first pass, with
    ``build_peak`` the process's reserved peak when the loader was built.
    Where the pass set a new peak, that peak. Else the pass stayed below
    the build's temporaries (handed back at the end of the build, with
    ``empty_cache``: peaks no later pass repeats) and the peak counter
    cannot tell it apart (the loader resets no counter of the user's):
    what the allocator holds now stands in, since it keeps every block a
    pass asked for until someone empties its cache."""
    peak = peak_bytes(device)
    return peak if peak > build_peak else torch.cuda.memory_reserved(device)


class CacheGrowth:
    """Whether and how much the loader's feature cache grows after its first
    whole pass (``after_pass``); ``grown`` says what happened, in a line."""

    def __init__(self, cache, device: torch.device, *, eligible: bool):
        self.cache, self.device = cache, device
        self.pending = bool(eligible and cache is not None and cache.row_map is not None and cache.warm_x is None
                            and cache.dynamic is None)
        self.grown = None
        self._build_peak = peak_bytes(device) if self.pending and device.type == "cuda" else 0

    def after_pass(self, profile=None) -> bool:
        """Grow the cache once, sized by the GPU peak so far; True if it grew."""
        if not self.pending:
            return False
        self.pending = False
        cache = self.cache
        plan, num_nodes = cache.plan, cache.order.numel()
        row_bytes = cache.x.size(1) * cache.x.element_size()
        total = device_total_bytes(self.device)
        peak = pass_peak_bytes(self.device, self._build_peak)
        margin = max(MIN_MARGIN, total // MARGIN_SHARE)
        # short of every row: that is another layout (x relabelled on the device)
        rows = min(max(0, total - peak - margin) // row_bytes, num_nodes - 1 - plan.num_feature)
        measured = f"GPU peak {size(peak)} reserved of the {size(total)} the process may use, margin {size(margin)}"
        if rows * row_bytes < MIN_GROWTH:
            self.grown = f"not grown after the first pass: {measured}"
            return False
        if not cache.grow_features(plan.num_feature + rows, profile):
            self.grown = f"not grown after the first pass: the GPU refused {size(rows * row_bytes)} more; {measured}"
            return False
        self.grown = f"features of {rows:,} more nodes ({size(rows * row_bytes)}) after the first pass: {measured}"
        return True
