"""GPU memory the process may still use, and work sized to fit it.

The process may use the card, or the share ``torch.cuda.set_per_process_memory_fraction``
gives it; what torch's allocator already holds but does not use counts as
free. E-sized steps (building the CSC, relabelling) work through the edges
in chunks of ``chunk_items``, so their temporaries stay within that.
"""
from __future__ import annotations

import torch

# a chunk's share of the free memory: the rest is left to what runs beside
# (the output arrays, the caller's tensors, fragmentation)
_WORK_SHARE = 4
_MIN_ITEMS = 1 << 16
_CPU_ITEMS = 1 << 25  # on the CPU: ~1-2 GB of temporaries a chunk at tens of bytes an item


def _fraction(device: torch.device) -> float:
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    return get_fraction(device) if get_fraction is not None else 1.0


def device_total_bytes(device) -> int:
    """Bytes the process may use on CUDA ``device`` in all: the card's,
    times its per-process memory fraction."""
    device = torch.device(device)
    return int(_fraction(device) * torch.cuda.get_device_properties(device).total_memory)


def device_free_bytes(device) -> int:
    """Bytes the process may still allocate on CUDA ``device``: the free
    memory of the card, within the per-process fraction, plus what torch's
    allocator holds unused."""
    device = torch.device(device)
    free, total = torch.cuda.mem_get_info(device)
    reserved, allocated = torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device)
    allowed = int(_fraction(device) * total) - reserved
    return max(0, min(free, allowed) + reserved - allocated)


def chunk_items(device, bytes_per_item: int, num_items: int) -> int:
    """How many items (edges) one chunk of work on ``device`` takes at
    ``bytes_per_item`` of temporaries each: all of them where that fits a
    quarter of the free memory, at least 65,536."""
    device = torch.device(device)
    if device.type == "cuda":
        most = device_free_bytes(device) // (_WORK_SHARE * max(1, bytes_per_item))
    else:
        most = _CPU_ITEMS
    return max(1, min(num_items, max(_MIN_ITEMS, most)))


def model_reserve(device, reserve="auto") -> int:
    """GPU bytes to leave for what the loader does not hold (the model, its
    optimiser and activations, the batches in flight): ``reserve`` bytes, or
    for ``"auto"`` the larger of 4 GiB and a tenth of what the process may
    use on ``device``."""
    if check_reserve(reserve) == "auto":
        return max(4 << 30, device_total_bytes(device) // 10)
    return reserve


def check_reserve(reserve):
    """``reserve`` (``memory_reserve``) if an int >= 0 or ``"auto"``, else ValueError."""
    if reserve != "auto" and (not isinstance(reserve, int) or isinstance(reserve, bool) or reserve < 0):
        raise ValueError(f"memory_reserve must be an int number of bytes >= 0 or 'auto', got {reserve!r}")
    return reserve


def size(nbytes: float) -> str:
    """``nbytes`` for a message: ``"1.50 GB"``, ``"12.00 MB"``, ``"512 B"``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{int(nbytes)} B"
