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

(A super-batch is packed on the host, which reads its boundaries anyway:
``sampler.sample_many`` lays each sub-batch's slices end to end with one
``torch.cat`` a buffer: packing it on the device, a Triton launch a hop and
part, costs more host time than the copies it replaces; bench/results.)
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
