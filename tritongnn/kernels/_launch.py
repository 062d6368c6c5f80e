"""Shared launch helpers: which backend runs a call, and launch settings.

A call runs the Triton kernel when its output lives on a CUDA device, or on the
CPU when Triton's interpreter is switched on (``TRITON_INTERPRET=1`` set before
any kernel module is imported: that is how CI tests the kernels without a GPU).
Otherwise it runs the pure-torch reference in ``reference.py``, which is also
the CPU path of the loader.
"""
from __future__ import annotations

import os

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(device: torch.device) -> bool:
    """True when the Triton kernels (compiled or interpreted) serve ``device``."""
    return device.type == "cuda" or INTERPRET


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def check_readable(t: torch.Tensor, device: torch.device, name: str) -> None:
    """A kernel on ``device`` reads ``t`` directly: it must live on that device,
    or (through UVA) in pinned host memory."""
    if t.device == device:
        return
    if device.type == "cuda" and t.device.type == "cpu" and t.is_pinned():
        return
    raise ValueError(
        f"{name} lives on {t.device} and is not readable from {device}: pass it "
        f"on {device}, or in pinned host memory (tensor.pin_memory())")
