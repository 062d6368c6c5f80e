"""Argument checks shared by the public entry points."""
from __future__ import annotations

import torch


def check_positive_int(name: str, value) -> int:
    """``value`` when it is an int >= 1 (not a bool), else ``ValueError``
    naming ``name`` and the value."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_ids_in_range(ids, size: int, name: str, what: str = "node id") -> None:
    """``ValueError`` naming ``name`` and the first offender's kind unless
    every entry of ``ids`` is in ``[0, size)``: one host sync (its min and
    max in one copy)."""
    if ids.numel():
        from .kernels._launch import host_list  # (the kernels import this module's neighbours)
        lo, hi = host_list(torch.stack(torch.aminmax(ids)))
        if lo < 0 or hi >= size:
            raise ValueError(f"{name} holds {what} {lo if lo < 0 else hi}, outside [0, {size})")
