"""Feature row gather from GPU memory or pinned host memory (UVA).

``out[i] = table[ids[i]]`` for float32, bfloat16, float16 (any dtype, in
fact: where ``out`` has the table's dtype the kernel only moves bits). A
floating ``out`` may be wider than the table: stored float16 or bfloat16
features come out as float32 batches, converted in the same pass (the
loader's ``feature_dtype``: half the bytes through UVA and in the cache). The table is split in up to three tiers
that the caches fill: rows ``< num_hot`` are read from ``hot`` (the static
cache in GPU memory; hot-first relabelled ids make "cached?" one
comparison); a row ``r >= num_hot`` with ``slot[r - num_hot] >= 0`` from that
row of ``dynamic`` (the dynamic cache, ``cache.dynamic``); failing that,
with ``prev_slot[r - num_hot] >= 0``, from that row of ``previous`` (the
previous batch's rows, FastGL's match-reuse); the others from ``cold`` (any
readable memory, usually the pinned host table). With one tier
only, pass the same table twice and ``num_hot = N`` (all in GPU memory) or
``0`` (all through UVA).

Why rows that come from the host are visited in sorted id order, by few
programs (bench/gather_uva_sweep.py, results in bench/results/): the H200
reads 512-byte host rows through UVA at 16-17 GB/s in random order. Sorted,
the rate is set by how many 64 KB pages of the table the rows touch: 47-53
GB/s (the bulk copy: 55) while consecutive rows are at most 16 KB apart, 36
at 32 KB, 17-23 at 64 KB and beyond, i.e. some 35-45 million distinct 64 KB
pages per second. 10^6 random ids of 2^24 rows (8 KB apart on average) reach
52 GB/s; a batch's 10^5 (80 KB apart) 25-29. Huge-page backing and
write-combined host memory change nothing, so the remedy is fewer distinct
pages per read: hot rows in the GPU cache, hot-first ids that pack the rows
read together, several batches gathered at once. A persistent grid of a
quarter of the SMs' worth of programs walking the sorted rows together helps
sparse ids (29-31 GB/s at 2^17 ids, against 23-27 with a full grid) and
costs dense ids nothing (52 at 2^20 either way). Sorting 10^5 ids costs
~0.1 ms; reading their rows ~2 ms. The write side (HBM, scattered rows) is
cheap either way.

From GPU memory alone (one tier, no sort) a full grid of 16-row blocks moves
1.8-2.0 TB/s of useful bytes (torch.index_select: 0.83).

With both a GPU tier and host rows (the dual cache), the host's rows are
gathered first, packed, by the small UVA grid, then the rows the GPU tiers
serve (static and dynamic cache, previous batch) by a full grid: two
launches over one sorted order whose split the kernel reads on the device
(``_cold_first_order``; why there). Measured on the H200
(bench/results/README.md): host rows 1.1-2.6x faster than one pass over all
rows in host order (3x10^6 ids: 50 % cached 33.4 against 29.8 GB/s, 70 %
32.2 against 22.3, 90 % 25.8 against 9.8), and the papers100M-scale
GraphSAGE epoch at the 24 GB budget 3.92 s against 4.81 s.

A pass of host rows reads them at the sort's keys (the host rows in
visiting order), so a block's host reads wait for one load (its rows)
instead of the chain order -> ids -> slot maps -> ``row_map``. On the H200
that makes a mixed gather's host rows 1.3-1.4x faster where they are dense
in the table (2^20 ids, 50 % cached: 46.5 against 33.3 GB/s; 70 %: 42.9
against 30.6; 3x2^20 ids, 90 %: 34.8 against 26.0), and the 50M-node
benchmark's 8 GB epoch 1.84 -> 1.35-1.39 s with the dynamic cache; at the
papers100M scale, where a batch's host rows fall about one to a 64 KB page,
it is 3-10 % slower (3.90-4.18 s an epoch against 3.71-3.81;
bench/results/README.md).

A warm copy (``warm``) of the rows next in hotness after the GPU tiers,
packed in pinned host memory, is read before the user's table: with
hot-first ids a batch's misses concentrate there, so more of them share a
page (the papers100M-scale epoch at 24 GB: 3.90-3.92 s without, 3.73 with a 16
GB copy, 3.29 with 32 GB).
"""
from __future__ import annotations

import torch
import triton

from . import reference
from ._launch import BITS_OF_SIZE, check_ids_in_range, check_readable, host_list, on_device_of, use_triton
from .gather_kernel import _gather_kernel, _launch_settings, _num_programs


def _reads_host(table: torch.Tensor, num_hot: int, device: torch.device) -> bool:
    """Whether some rows come from a table in another device's memory (pinned
    host memory, read through UVA)."""
    return num_hot < table.size(0) and table.device != device


def _cold_first_order(ids: torch.Tensor, host_row: torch.Tensor, num_hot: int, num_rows: int,
                      slots=(), num_warm: int = 0, valid: torch.Tensor | None = None):
    """The visiting order of a gather whose rows ``>= num_hot`` live in host
    memory: the rows read from there first, packed (the warm copy's rows,
    then the host table's, each in row order: neighbours share 64 KB
    pages), then the rows GPU tiers serve; and ``bounds = [0, warm rows,
    host rows, n]`` on the device, so no count comes back to the host.

    Why: mixed in one host-ordered pass, the cached rows (70 % of a batch at
    the 24 GB budget of the papers100M-scale run) dilute every block of the
    small UVA grid, so each program has fewer host reads in flight; there the
    loader's gather moved its 0.5 GB of misses a batch at 12 GB/s, against
    25 GB/s with no cache at all (bench/results/README.md). Packed, each
    block of the UVA grid reads host rows only, and the cached rows get a
    full grid of their own.

    Args:
        ids: ``[n]`` int64 ids gathered.
        host_row: ``[n]`` int64 row of the host table each id reads.
        num_hot: ids below it are cached on the GPU.
        num_rows: rows of the host table (a key offset, so cached rows sort last).
        slots: slot maps of the other GPU tiers (the dynamic cache's
            ``slot``, the previous batch's ``prev_slot``): an id ``i >=
            num_hot`` with ``slot[i - num_hot] >= 0`` is served there, so it
            goes with the cached rows too.
        num_warm: ids ``num_hot .. num_hot + num_warm - 1`` not served by a
            GPU tier are read from the warm copy, at row ``id - num_hot``.
        valid: ``[n]`` bool, the positions gathered (``gather_rows``'s
            ``count``: a prefix), or None for all: the others sort after
            every gathered one and ``bounds[3]`` ends before them, so no
            pass visits them (their ids must still be in ``[0, N)``).

    Returns:
        ``(order, bounds, rows)``: ``[n]`` int64 positions of ``ids``,
        ``[4]`` int64, and ``[n]`` int64 holding, in visiting order, the
        row each host read reads (of the warm copy in ``bounds[0:2]``, of
        the host table in ``bounds[1:3]``: the sort's keys, so the UVA
        passes read them without a lookup through ``ids``).
    """
    cold = (ids - num_hot).clamp_(min=0)
    cached = ids < num_hot
    for slot in slots:
        cached |= slot[cold] >= 0
    # keys: warm rows [-num_warm, 0), host rows [0, num_rows), cached [num_rows, 2 num_rows),
    # positions not gathered 2 num_rows (after all)
    keys = host_row + cached.to(torch.int64) * num_rows
    if num_warm:
        warm = ~cached & (cold < num_warm)  # (an id below num_hot is cached)
        keys = torch.where(warm, cold - num_warm, keys)
    if valid is not None:
        keys = torch.where(valid, keys, 2 * num_rows)
        cached &= valid
    rows, order = torch.sort(keys)
    bounds = torch.zeros(4, dtype=torch.int64, device=ids.device)
    if num_warm:
        bounds[1] = (warm & valid).sum() if valid is not None else warm.sum()
        rows = torch.where(rows < 0, rows + num_warm, rows)  # warm keys -> rows of the warm copy
    gathered = ids.numel() if valid is None else valid.sum()
    bounds[2] = gathered - cached.sum()
    bounds[3] = gathered
    return order, bounds, rows


def _gather_one_tier(table: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, order: torch.Tensor | None,
                     grid: int, block_rows: int, num_warps: int = 4, ids_sorted: bool = False) -> torch.Tensor:
    """``out[i] = table[ids[i]]`` through ``_gather_kernel`` with every row
    from ``table`` and the launch given: visiting ``order`` (None: as
    ``ids`` come), ``grid`` programs, ``block_rows`` rows each; with
    ``ids_sorted``, ``ids`` come in visiting order instead
    (``out[order[j]] = table[ids[j]]``). For the benchmarks that measure
    launch shapes and orders (``gather_rows`` chooses its own); no checks."""
    n, width = ids.numel(), table.size(1)
    block_d = _launch_settings(width * table.element_size(), table.element_size(), True)[1]
    _gather_kernel[(grid,)](table, table, table, ids, table, ids, ids, ids, order if order is not None else ids,
                            ids, out, n, 0, triton.cdiv(n, block_rows), width, table.stride(0), table.stride(0),
                            table.stride(0), table.stride(0), out.stride(0), TIERS=1, REUSE=False, MAPPED=False,
                            ORDERED=order is not None, BOUNDED=False, IDS_SORTED=ids_sorted,
                            BLOCK_ROWS=block_rows, BLOCK_D=block_d, num_warps=num_warps)
    return out


def _check_slot_tier(table, num_hot, rows, slot, rows_name, slot_name, exact, dtypes):
    if (rows is None) != (slot is None):
        raise ValueError(f"{rows_name} and {slot_name} come together: pass both or neither")
    if rows is None:
        return
    if rows.shape[1:] != table.shape[1:] or rows.dtype not in dtypes:
        raise ValueError(f"{rows_name} must hold rows like table's ({table.size(1)} x "
                         f"{' or '.join(map(str, dict.fromkeys(dtypes)))}), got {tuple(rows.shape)} {rows.dtype}")
    need = table.size(0) - num_hot
    if slot.dtype != torch.int32 or slot.dim() != 1 or (slot.numel() != need if exact else slot.numel() < need):
        raise ValueError(f"{slot_name} must be a 1-D int32 tensor of {'' if exact else 'at least '}{need} "
                         f"entries (one per row from num_hot on), got {slot.dtype} {tuple(slot.shape)}")


def _widens(stored: torch.dtype, out: torch.dtype) -> bool:
    """Whether a gather of ``stored`` rows may write ``out``: the same dtype,
    or floating into a wider floating dtype (no precision the table had is
    lost; float16 into bfloat16 would lose some)."""
    return out == stored or (stored.is_floating_point and out.is_floating_point and out.itemsize > stored.itemsize)


@on_device_of("ids")
def gather_rows(
    table: torch.Tensor,
    ids: torch.Tensor,
    out: torch.Tensor | None = None,
    hot: torch.Tensor | None = None,
    num_hot: int = 0,
    dynamic: torch.Tensor | None = None,
    slot: torch.Tensor | None = None,
    previous: torch.Tensor | None = None,
    prev_slot: torch.Tensor | None = None,
    row_map: torch.Tensor | None = None,
    warm: torch.Tensor | None = None,
    validate: bool = True,
    *,
    count: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gather ``table[ids]`` (``table[row_map[ids]]`` with ``row_map``) into
    ``out`` on ``ids``'s device.

    Args:
        table: ``[N, D]`` the full table (GPU memory, or pinned host memory
            read through UVA).
        ids: ``[n]`` int64 row ids in ``[0, N)``.
        out: ``[n, D]`` preallocated output on ``ids``'s device: the table's
            dtype, or, for a floating table, a strictly wider floating
            dtype (rows are converted: float16 or bfloat16 tables into
            float32 batches).
        hot: ``[num_hot, D]`` GPU copy of the first ``num_hot`` rows, or None.
        num_hot: rows ``< num_hot`` are read from ``hot``.
        dynamic: ``[K, D]`` GPU rows of the dynamic cache, or None.
        slot: with ``dynamic``: ``[N - num_hot]`` int32, the row of
            ``dynamic`` that holds table row ``num_hot + j``, or -1.
        previous: ``[P, D]`` GPU rows of the previous batch (the table's
            dtype or ``out``'s), or None.
        prev_slot: with ``previous``: int32, at least ``N - num_hot``
            entries, the row of ``previous`` holding table row
            ``num_hot + j``, or -1 (rows the caches serve are read there).
        row_map: ``[N]`` int64 on ``ids``'s device, or None: ``table`` is
            in other ids, id ``i``'s row is ``table[row_map[i]]`` (the dual
            cache's hot-first ids over the user's host table, which is then
            never copied in the new order). The other tiers are in ``ids``.
        warm: ``[W, D]`` rows of ids ``num_hot .. num_hot + W - 1`` in host
            memory, or None: those of them no GPU tier serves are read
            here rather than from ``table`` (the dual cache's copy of the
            rows next in hotness after its GPU tiers, packed so that a
            batch's misses share 64 KB pages; ``tritongnn.cache.dual``).
        validate: check that ``ids`` are in range (one host sync; two
            with ``count``, which is checked to be in ``[0, n]`` too); the
            loader and the caches pass False for ids they made themselves.
        count: ``[1]`` int64 on ``ids``'s device, or None for all: only
            ``ids[:count]`` are gathered, into ``out[:count]``; the rows of
            ``out`` from ``count`` on are left as they were. For a batch
            whose length the host does not know yet (a mini-batch captured
            in one CUDA graph): ``ids`` and ``out`` are sized by a bound,
            and every pass reads ``count`` on the device, no host sync.
            ``ids`` past ``count`` may hold anything (stale ids of an
            earlier batch, never-written memory): no row is read for them
            (the host paths' sort sees them as id 0). Clamped to ``[0,
            n]`` on the device.

    Returns:
        ``out``.

    Example:
        >>> x = gather_rows(features_pinned, n_id)   # UVA read into GPU memory
    """
    if table.dim() != 2:
        raise ValueError(f"table must be 2-D [num_rows, dim], got shape {tuple(table.shape)}")
    if ids.dtype != torch.int64 or ids.dim() != 1:
        raise TypeError(f"ids must be a 1-D int64 tensor, got {ids.dtype} of shape {tuple(ids.shape)}")
    if count is not None:  # attribute checks only: no sync, so a graph can capture the call
        if not isinstance(count, torch.Tensor) or count.dtype != torch.int64:
            raise TypeError(f"count must be an int64 tensor, got {getattr(count, 'dtype', type(count).__name__)}")
        if count.numel() != 1 or count.device != ids.device:
            raise ValueError(f"count must be a [1] int64 tensor on ids's device {ids.device}, got shape "
                             f"{tuple(count.shape)} on {count.device}")
    if validate:
        checked = ids
        if count is not None:
            num_valid = host_list(count.view(1))[0]
            if not 0 <= num_valid <= ids.numel():
                raise ValueError(f"count = {num_valid} is outside [0, {ids.numel()}] (the ids given)")
            checked = ids[:num_valid]
        check_ids_in_range(checked, table.size(0), "ids", "row id")
    ids = ids.contiguous()  # the kernels read every index array with stride 1
    row_map, slot, prev_slot = (None if t is None else t.contiguous() for t in (row_map, slot, prev_slot))
    for name, tier in (("hot", hot), ("dynamic", dynamic)):
        if tier is not None and tier.dtype != table.dtype:
            raise TypeError(f"{name} must have table's dtype {table.dtype}, got {tier.dtype}")
    device = ids.device
    if out is None:
        out = torch.empty((ids.numel(), table.size(1)), dtype=table.dtype, device=device)
    if out.shape != (ids.numel(), table.size(1)) or not _widens(table.dtype, out.dtype) or out.device != device:
        raise ValueError(f"out must be a [{ids.numel()}, {table.size(1)}] tensor of {table.dtype} (or a wider "
                         f"floating dtype) on {device}, got {tuple(out.shape)} {out.dtype} on {out.device}")
    if previous is not None and previous.dtype not in (table.dtype, out.dtype):
        raise TypeError(f"previous must have table's dtype {table.dtype} or out's {out.dtype}, "
                        f"got {previous.dtype}")
    if hot is None:  # one tier: all rows in GPU memory, or all through UVA (or mapped)
        hot, num_hot = (table, table.size(0)) if table.device == device and row_map is None else (table[:0], 0)
    if not 0 <= num_hot <= table.size(0) or hot.size(0) < num_hot or hot.shape[1:] != table.shape[1:]:
        raise ValueError(f"num_hot = {num_hot} with hot of shape {tuple(hot.shape)}: need 0 <= num_hot "
                         f"<= {table.size(0)} rows of width {table.size(1)} in hot")
    # the tiers found through a slot map: the dynamic cache (one slot per row
    # from num_hot on) and the previous batch (a spare entry allowed)
    _check_slot_tier(table, num_hot, dynamic, slot, "dynamic", "slot", exact=True, dtypes=(table.dtype,))
    _check_slot_tier(table, num_hot, previous, prev_slot, "previous", "prev_slot", exact=False,
                     dtypes=(table.dtype, out.dtype))
    if row_map is not None and (row_map.dtype != torch.int64 or row_map.dim() != 1
                                or row_map.numel() != table.size(0) or row_map.device != device):
        raise ValueError(f"row_map must be a 1-D int64 tensor of {table.size(0)} entries on {device}, got "
                         f"{row_map.dtype} of shape {tuple(row_map.shape)} on {row_map.device}")
    if warm is not None and (warm.dim() != 2 or warm.shape[1:] != table.shape[1:] or warm.dtype != table.dtype
                             or warm.size(0) > table.size(0) - num_hot):
        raise ValueError(f"warm must hold at most {table.size(0) - num_hot} rows (the rows from num_hot on) "
                         f"like table's ({table.size(1)} x {table.dtype}), got {tuple(warm.shape)} {warm.dtype}")
    if warm is not None and warm.size(0) == 0:
        warm = None
    if not use_triton(device):
        return reference.gather_rows(table, ids, out, hot, num_hot, dynamic, slot, previous, prev_slot, row_map,
                                     warm, count)
    check_readable(table, device, "table")
    check_readable(hot, device, "hot")
    for name, t in (("dynamic", dynamic), ("slot", slot), ("previous", previous), ("prev_slot", prev_slot),
                    ("warm", warm)):
        if t is not None:
            check_readable(t, device, name)
    if table.stride(1) != 1 or hot.stride(1) != 1 or out.stride(1) != 1 or (warm is not None and warm.stride(1) != 1):
        raise ValueError("table, hot, warm and out rows must be contiguous (stride 1 along dim 1)")
    n = ids.numel()
    if n == 0:
        return out
    from_host = _reads_host(table, num_hot, device)
    if num_hot == table.size(0):  # every row from the GPU tier
        table, num_hot, dynamic, previous, row_map = hot, 0, None, None, None
    if not from_host:
        warm = None
    tiers = 3 if dynamic is not None else 2 if num_hot > 0 or previous is not None else 1
    if dynamic is None:
        dynamic, slot = table, ids  # not read
    reuse = previous is not None
    if not reuse:
        previous, prev_slot = table, ids  # not read
    mapped = row_map is not None
    # with a count, positions [0, count) only: every pass reads where they
    # end on the device (bounds), none visits the others
    bounded = valid = None
    if count is not None:
        gathered = count.view(1).clamp(0, n)
        bounded = torch.cat([gathered.new_zeros(1), gathered])  # [0, count): a single pass's bounds
        if from_host:
            # the sort's lookups (row_map, the slot maps) read every
            # position: those past count, which may hold anything, read id
            # 0 (they sort last, after the bounds' end)
            valid = torch.arange(n, device=device) < gathered
            ids = torch.where(valid, ids, 0)
    host_row = (row_map[ids] if mapped else ids) if from_host else None
    if not mapped:
        row_map = ids  # not read

    def launch(order, bounds, uva, rows=None, host=table):
        """One pass over ``order`` (``bounds``: its part), shaped for rows
        read through UVA (``uva``) or from GPU memory. With ``rows`` (the
        host rows in visiting order) every row of the
        pass is ``host[rows[j]]`` (the table, or the warm copy), with no
        lookup through ``ids``, ``row_map`` or the slots before the host
        read."""
        block_rows, block_d, num_warps = _launch_settings(table.size(1) * table.element_size(),
                                                          table.element_size(), uva)
        resolved = rows is not None
        _gather_kernel[(_num_programs(n, block_rows, uva, device, bounds is not None),)](
            hot, host, dynamic, slot, previous, prev_slot, rows if resolved else ids, row_map, order,
            bounds if bounds is not None else ids, out, n, num_hot, triton.cdiv(n, block_rows), table.size(1),
            hot.stride(0), host.stride(0), dynamic.stride(0), previous.stride(0), out.stride(0),
            TIERS=1 if resolved else tiers, REUSE=reuse and not resolved, MAPPED=mapped and not resolved,
            ORDERED=from_host, BOUNDED=bounds is not None, IDS_SORTED=resolved,
            BLOCK_ROWS=block_rows, BLOCK_D=block_d, num_warps=num_warps)

    if not from_host:
        launch(ids, bounded, uva=False)
    elif tiers > 1 or warm is not None:
        # the host's rows first, packed, by the UVA grid (the warm copy's,
        # then the table's), read at their sorted rows; then the GPU tiers'
        # rows by a full grid
        slots = ([slot] if tiers == 3 else []) + ([prev_slot] if reuse else [])
        order, bounds, rows = _cold_first_order(ids, host_row, num_hot, table.size(0), slots,
                                                0 if warm is None else warm.size(0), valid)
        if warm is not None:
            launch(order, bounds[0:2], uva=True, rows=rows, host=warm)
        launch(order, bounds[1:3], uva=True, rows=rows)
        if tiers > 1:
            launch(order, bounds[2:4], uva=False)
    else:  # every row from the host, read at its sorted row
        if valid is not None:  # positions past count sort last (host rows are < table.size(0))
            host_row = torch.where(valid, host_row, table.size(0))
        rows, order = torch.sort(host_row)
        launch(order, bounded, uva=True, rows=rows)
    return out


def take_node_rows(value: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``value[ids[:count]]`` along dim 0 into ``out[:count]`` (a node
    attribute of the loader: any dtype and trailing shape), for a batch
    whose length the device holds (a replayed slot's ``n_id`` buffer, sized
    by the sampler's bound). ``ids`` are the loader's own: not checked.

    Why not ``torch.index_select`` over the whole bound: on the H200 (int64
    labels of 1.1x10^8 nodes, 3x10^6 of 7.3x10^6 ids, CUDA-graph replays,
    ``bench/bench_gather_bounded.py --labels``) it took 0.215 ms, this
    0.105. For an exact length the two tie on the GPU (0.095 / 0.094 ms)
    and index_select takes less host time (42 against 65 us a call), so
    the producer's path keeps it. Contiguous rows of some bytes go through
    ``gather_rows(count=)``, their elements moved as integers of their
    size (any dtype of 1, 2, 4 or 8 bytes: bools, float8, complex64);
    others (non-contiguous, empty rows, 16-byte elements, a device the
    kernels do not serve) through ``index_select`` of every id, which must
    then all be in range."""
    bits = BITS_OF_SIZE.get(value.element_size())
    if (bits is not None and use_triton(ids.device) and value.device == ids.device and value.dim() >= 1
            and value.numel() > 0 and value.is_contiguous() and out.is_contiguous()):
        gather_rows(value.view(bits).view(value.size(0), -1), ids, out.view(bits).view(ids.numel(), -1),
                    validate=False, count=count)
        return out
    return torch.index_select(value, 0, ids, out=out)
