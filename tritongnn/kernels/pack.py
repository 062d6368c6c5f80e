"""Valid prefixes of bounded buffers packed one after another, sizes on the device.

A mini-batch captured whole in one CUDA graph (sampling, copy-out, feature
gather) cannot tell the host how many nodes or edges a hop found: every
buffer has ``bound`` slots, a host-side upper bound, and its valid prefix is
a device scalar (``outputs.py``). ``pack_prefixes`` lays those prefixes end
to end, e.g. each hop's new nodes into one ``n_id``, with the offsets
computed on the device (one ``cumsum``) and read by the kernels from device
memory: no host sync, so the call can be captured, and the caller learns the
packed length as a device scalar too.

One launch per part, its grid covering the part's bound; a program past the
part's count stores nothing. Packing never writes past ``out``: the caller
compares the returned end with ``out.numel()`` to tell an overflow.

``pack_segments`` is the super-batch's counterpart: one hop's buffer holds K
sub-batches' parts back to back (``ptr``), and each goes to its own sub-batch's
place in ``out`` (``starts``), offsets again read on the device. A super-batch
of K batches comes out as one ``node`` and one ``edge_index`` buffer per pass,
each batch a slice of it: K slices on the host instead of K concatenations.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import reference
from ._launch import BITS_OF_SIZE, interpreted_block, on_device_of, use_triton

# elements per program (under the interpreter, where the cost is per op,
# fewer larger programs; the tests shrink it to meet several programs a part)
BLOCK = interpreted_block(1024, 4096)

# the kernel moves bits: every dtype goes through the integer of its width (BITS_OF_SIZE)


@triton.jit(do_not_specialize=["k", "numel", "capacity"])
def _pack_kernel(
    part,      # [numel] the part (its bound)
    count,     # [1] int64 its valid prefix
    offsets,   # [K + 1] int64 where each part starts in `out` (offsets[K]: the end)
    out,       # [capacity]
    k,         # this part's index in offsets
    numel,
    capacity,
    BLOCK: tl.constexpr,
):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    # clamped to the part: a count past its bound reads nothing beyond it
    valid = tl.minimum(tl.load(count), numel)
    pos = tl.load(offsets + k) + i
    m = (i < valid) & (pos >= 0) & (pos < capacity)  # never outside out
    tl.store(out + pos, tl.load(part + i, mask=m), mask=m)


@triton.jit
def _segment_of(ptr, x, num_segments, SEARCH_STEPS: tl.constexpr):
    # the last k < K with ptr[k] <= x (0 where none), for a scalar or each
    # element of a block: a branch-free binary search over ptr (in L1)
    k = x * 0
    for s in tl.static_range(SEARCH_STEPS):
        up = k + (1 << (SEARCH_STEPS - 1 - s))
        fits = up < num_segments
        k = tl.where(fits & (tl.load(ptr + up, mask=fits, other=0) <= x), up, k)
    return k


@triton.jit
def _place(part, out, i, pos, m, capacity):
    # part[i] to out[pos], where inside out
    m = m & (pos >= 0) & (pos < capacity)
    tl.store(out + pos, tl.load(part + i, mask=m), mask=m)


@triton.jit(do_not_specialize=["numel", "capacity", "num_segments"])
def _segments_kernel(
    part,          # [numel] K segments back to back, from ptr[0] to ptr[K]
    starts,        # [K] int64 where segment k goes in out
    part_b,        # (TWO) a second part of the same segments, e.g. a hop's columns beside its rows
    starts_b,      # (TWO) its places in out
    ptr,           # [K + 1] int64, non-decreasing: segment k is part[ptr[k]:ptr[k + 1]]
    out,           # [capacity]
    numel,
    capacity,
    num_segments,  # K >= 1
    TWO: tl.constexpr,
    SEARCH_STEPS: tl.constexpr,  # 2^SEARCH_STEPS >= K
    BLOCK: tl.constexpr,
):
    first = tl.program_id(0).to(tl.int64) * BLOCK
    lo = tl.load(ptr)
    hi = tl.minimum(tl.load(ptr + num_segments), numel)
    # the grid covers the part's bound: a block outside [ptr[0], ptr[K]) is done
    if (first < hi) & (first + BLOCK > lo):
        i = first + tl.arange(0, BLOCK)
        m = (i >= lo) & (i < hi)
        # segments are long: most blocks lie in one, found once for the block
        k_first = _segment_of(ptr, tl.maximum(first, lo), num_segments, SEARCH_STEPS)
        k_last = _segment_of(ptr, tl.minimum(first + BLOCK, hi) - 1, num_segments, SEARCH_STEPS)
        if k_first == k_last:
            shift = tl.load(starts + k_first) - tl.load(ptr + k_first)  # part[i] goes to out[i + shift]
            if TWO:
                shift_b = tl.load(starts_b + k_first) - tl.load(ptr + k_first)
            else:
                shift_b = shift
            whole = (first >= lo) & (first + BLOCK <= hi) & (tl.minimum(shift, shift_b) >= -first) \
                & (first + BLOCK + tl.maximum(shift, shift_b) <= capacity)
            if whole:  # every element valid and inside out: no masks (vector loads)
                tl.store(out + i + shift, tl.load(part + i))
                if TWO:
                    tl.store(out + i + shift_b, tl.load(part_b + i))
            else:
                _place(part, out, i, i + shift, m, capacity)
                if TWO:
                    _place(part_b, out, i, i + shift_b, m, capacity)
        else:  # a block across segment boundaries: each element's own
            k = _segment_of(ptr, i, num_segments, SEARCH_STEPS)
            at = i - tl.load(ptr + k, mask=m, other=0)  # each element's place in its segment
            _place(part, out, i, tl.load(starts + k, mask=m, other=0) + at, m, capacity)
            if TWO:
                _place(part_b, out, i, tl.load(starts_b + k, mask=m, other=0) + at, m, capacity)


def _check_per_part(parts, per_part, name: str) -> None:
    """``parts`` and ``per_part`` (named ``name``) are lists of one length."""
    if not isinstance(parts, (list, tuple)) or not isinstance(per_part, (list, tuple)):
        raise TypeError(f"parts and {name} must be lists of tensors, got {type(parts).__name__} "
                        f"and {type(per_part).__name__}")
    if len(parts) != len(per_part):
        raise ValueError(f"parts and {name} must have one entry per part, got {len(parts)} parts "
                         f"and {len(per_part)} {name}")


def _check_scalar(t, device: torch.device, name: str) -> None:
    """``t`` is a one-element int64 tensor on ``device`` (attribute checks
    only: this runs inside graph captures, once per part)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64:
        raise TypeError(f"{name} must be an int64 tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if t.numel() != 1 or t.dim() > 1:
        raise ValueError(f"{name} must hold one value (shape [1] or []), got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} lives on {t.device}, out on {device}: pass it on {device}")


@on_device_of("out")
def pack_prefixes(parts: list[torch.Tensor], counts: list[torch.Tensor], out: torch.Tensor,
                  start: torch.Tensor | None = None) -> torch.Tensor:
    """Write ``parts[k][:counts[k]]`` one after another into ``out`` from
    position ``start`` on, with no host sync: the offsets are a ``cumsum``
    on the device and every launch reads its count and offset there, so the
    call can be captured in a CUDA graph.

    Args:
        parts: 1-D contiguous tensors of ``out``'s dtype on its device,
            each a buffer of ``bound`` slots with a valid prefix.
        counts: one ``[1]`` (or 0-d) int64 tensor per part, on ``out``'s
            device: its valid prefix, ``0 <= counts[k] <= parts[k].numel()``.
            A count past its part copies the whole part only, and the next
            part still starts ``counts[k]`` after it (the positions between
            are not written); a negative one copies nothing.
        out: 1-D contiguous destination (it may be a view into a larger
            buffer, e.g. ``flat[E:]``). Positions from ``out.numel()`` on
            are skipped, not written.
        start: ``[1]`` (or 0-d) int64 on ``out``'s device, the first
            position written (>= 0; positions below 0 are skipped too), or
            None for 0.

    Returns:
        ``[1]`` int64 on ``out``'s device: ``start + sum(counts)``, the end
        of the packed data. Greater than ``out.numel()``: ``out`` was too
        small, and what did not fit was dropped.

    Example:
        >>> end = pack_prefixes([seeds, hop1.new_nodes], [num_seeds, hop1.num_new], n_id)
    """
    if not isinstance(out, torch.Tensor) or out.dim() != 1:
        raise ValueError(f"out must be a 1-D tensor, got shape {tuple(getattr(out, 'shape', ()))}")
    if out.stride(0) != 1 and out.numel() > 1:
        raise ValueError(f"out must be contiguous (the kernel writes it with stride 1), got stride {out.stride()}")
    _check_per_part(parts, counts, "counts")
    device = out.device
    if start is not None:
        _check_scalar(start, device, "start")
    for k, (part, count) in enumerate(zip(parts, counts)):
        if not isinstance(part, torch.Tensor) or part.dtype != out.dtype:
            raise TypeError(f"parts[{k}] must be a tensor of out's dtype {out.dtype}, got "
                            f"{getattr(part, 'dtype', type(part).__name__)}")
        _check_flat(part, f"parts[{k}]")
        if part.device != device:
            raise ValueError(f"parts[{k}] lives on {part.device}, out on {device}: pass it on {device}")
        _check_scalar(count, device, f"counts[{k}]")
    if out.element_size() not in BITS_OF_SIZE:
        raise TypeError(f"out's dtype {out.dtype} is not supported (elements of 1, 2, 4 or 8 bytes)")
    if not parts:
        return start.view(1) if start is not None else torch.zeros(1, dtype=torch.int64, device=device)
    if not use_triton(device):
        return reference.pack_prefixes(parts, counts, out, start)
    first = start.view(1) if start is not None else torch.zeros(1, dtype=torch.int64, device=device)
    # [start, start + c0, start + c0 + c1, ...]: part k starts at offsets[k], offsets[K] is the end
    offsets = torch.cumsum(torch.cat([first] + [c.view(1) for c in counts]), 0)
    bits = BITS_OF_SIZE[out.element_size()]
    flat = out.view(bits)
    block = BLOCK
    for k, (part, count) in enumerate(zip(parts, counts)):
        if part.numel() == 0:
            continue
        _pack_kernel[(triton.cdiv(part.numel(), block),)](
            part.view(bits), count, offsets, flat, k, part.numel(), out.numel(), BLOCK=block)
    return offsets[len(parts):]


def _check_flat(t, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if t.dim() != 1 or (t.stride(0) != 1 and t.numel() > 1):
        raise ValueError(f"{name} must be 1-D and contiguous, got shape {tuple(t.shape)} strides {t.stride()}")


def _check_offsets(t, name: str) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != 1:
        raise TypeError(f"{name} must be a 1-D int64 tensor, got {getattr(t, 'dtype', type(t).__name__)} "
                        f"of shape {tuple(getattr(t, 'shape', ()))}")


@on_device_of("out")
def pack_segments(parts: list[torch.Tensor], ptr: torch.Tensor, starts: list[torch.Tensor],
                  out: torch.Tensor) -> None:
    """Copy each segment of each part to its own place in ``out``:
    ``parts[j][ptr[k]:ptr[k + 1]]`` to ``out[starts[j][k]:]`` for every
    ``k < K``, with ``ptr`` and ``starts`` read on the device (no host sync:
    the call can be captured in a CUDA graph). Parts split by the same
    ``ptr`` (a hop's rows and columns) go two to a launch.

    Args:
        parts: 1-D contiguous tensors of ``out``'s dtype and device, each a
            buffer of ``bound`` slots whose valid prefix holds K segments
            back to back (a super-batch's hop: its sub-batches in order).
        ptr: ``[K + 1]`` int64 on ``out``'s device, non-decreasing, from
            ``ptr[0] >= 0`` (what lies before it and from ``ptr[K]`` on is
            not copied, nor anything past a part's end). Where it is not
            non-decreasing, what is written is unspecified, but never
            outside ``out``.
        starts: one ``[K]`` int64 tensor per part, on ``out``'s device.
        out: 1-D contiguous destination; positions outside it are skipped.

    Example:
        >>> pack_segments([hop.local, edges.dst], edges.edge_ptr, [row_starts, col_starts], edge_buffer)
    """
    _check_flat(out, "out")
    _check_per_part(parts, starts, "starts")
    _check_offsets(ptr, "ptr")
    device = out.device
    for j, (part, start) in enumerate(zip(parts, starts)):
        _check_flat(part, f"parts[{j}]")
        if part.dtype != out.dtype:
            raise TypeError(f"parts[{j}] must be of out's dtype {out.dtype}, got {part.dtype}")
        _check_offsets(start, f"starts[{j}]")
        if ptr.numel() != start.numel() + 1:
            raise ValueError(f"ptr must hold one entry more than starts[{j}] (K + 1 and K), got "
                             f"{ptr.numel()} and {start.numel()}")
        for name, t in ((f"parts[{j}]", part), ("ptr", ptr), (f"starts[{j}]", start)):
            if t.device != device:
                raise ValueError(f"{name} lives on {t.device}, out on {device}: pass it on {device}")
    if out.element_size() not in BITS_OF_SIZE:
        raise TypeError(f"out's dtype {out.dtype} is not supported (elements of 1, 2, 4 or 8 bytes)")
    if not use_triton(device):
        for part, start in zip(parts, starts):
            reference.pack_segments(part, ptr, start, out)
        return
    launch_segments(parts, ptr.contiguous(), [start.contiguous() for start in starts], out)


def launch_segments(parts, ptr, starts, out) -> None:
    """``pack_segments`` without its checks, on the current device (the
    sampler's launches, whose arguments it made: ``sampler._pack_plan``):
    ``ptr`` and ``starts`` contiguous. Parts of one bound go two to a launch.

    Tried and dropped (thirty-eighth session, dab549a): a super-batch's
    seven launches a pass as one, every job's arguments in tuples. On the
    H200 (Chung-Lu 5x10^7 nodes, [15, 10, 5], old and new trees in turn in
    one call) it was no faster: K=8 0.623 / 0.648 ms a batch against 0.612 /
    0.596 at batch 8000, K=2 0.396 against 0.338 at batch 1024; and Triton
    specialises the ints inside tuples (three variants over eight sizes),
    so a pass of new sizes compiled again while timed."""
    num_segments = ptr.numel() - 1
    if num_segments < 1:
        return
    bits = BITS_OF_SIZE[out.element_size()]
    flat = out.view(bits)
    steps = max(1, (num_segments - 1).bit_length())
    j = 0
    while j < len(parts):
        part, start = parts[j], starts[j]
        two = j + 1 < len(parts) and parts[j + 1].numel() == part.numel()
        part_b, start_b = (parts[j + 1], starts[j + 1]) if two else (part, start)
        j += 2 if two else 1
        if part.numel():
            _segments_kernel[(triton.cdiv(part.numel(), BLOCK),)](
                part.view(bits), start, part_b.view(bits), start_b, ptr, flat,
                part.numel(), out.numel(), num_segments, TWO=two, SEARCH_STEPS=steps, BLOCK=BLOCK)
