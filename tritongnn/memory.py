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
    if get_fraction is None:
        return 1.0
    # torch asks for an index: "cuda" alone is the current device
    return get_fraction(device.index if device.index is not None else torch.cuda.current_device())


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


# GPU bytes a cache keeps per node of the graph besides its tiers: the
# hot-first order and its inverse (int64 each), the id map's direct table and
# the hit counters. 4.15 GB at 1.11e8 nodes in a build measured on an H100.
CACHE_BYTES_PER_NODE = 40


def batch_bound(batch_size: int, num_neighbors, num_nodes: int, num_edges: int) -> tuple[int, int]:
    """``(nodes, edges)`` one batch of ``batch_size`` seeds can hold at most
    with fanouts ``num_neighbors`` (-1: every neighbour), within the graph's."""
    nodes = frontier = batch_size
    edges = 0
    for fanout in num_neighbors:
        frontier = num_edges if fanout < 0 else frontier * fanout
        edges += frontier
        nodes += frontier
    return min(nodes, num_nodes), min(edges, num_edges)


def batch_working_set(nodes: int, edges: int, row_bytes: int, columns: int, batches: int) -> int:
    """GPU bytes for ``batches`` batches of ``nodes`` rows of ``row_bytes``
    and ``edges`` edges held at once (in flight, handed out, in the loop:
    ``n_id``, and an edge's ``edge_index`` column and ``e_id``, int64),
    plus what a model's first layer takes over one: its float32 input and
    per-edge messages, and their gradients."""
    batch = nodes * (row_bytes + 8) + edges * 24
    return batches * batch + 2 * (nodes + edges) * 4 * columns


def model_reserve(device, reserve="auto", working: int = 0) -> int:
    """GPU bytes to leave for what the loader does not hold at build time
    (the model, its optimiser and activations, the batches in flight):
    ``reserve`` bytes, or for ``"auto"`` the largest of 4 GiB, a tenth of
    what the process may use on ``device`` and ``working``, the batches'
    working set (``batch_working_set``)."""
    if check_reserve(reserve) == "auto":
        return max(4 << 30, device_total_bytes(device) // 10, working)
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
