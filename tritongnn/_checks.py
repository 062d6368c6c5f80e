"""Argument checks shared by the public entry points (the kernels' own are in
``kernels._launch``, with ``check_ids_in_range``)."""
from __future__ import annotations


def check_positive_int(name: str, value) -> int:
    """``value`` when it is an int >= 1 (not a bool), else ``ValueError``
    naming ``name`` and the value."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


