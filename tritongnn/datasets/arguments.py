"""Argument checks of the synthetic graph generators (``datasets.synthetic``):
sizes, probabilities, seeds and dtypes refused with a TypeError or ValueError
naming the argument before anything is drawn, and the default device."""

from __future__ import annotations

import math
import numbers

import torch


def resolve_device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def check_positive_int(name: str, value: object) -> None:
    # bool is an Integral but a size of True is a bug, not 1.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


def check_real(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")


def check_probability(name: str, value: float) -> None:
    check_real(name, value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")


def check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {seed!r} ({type(seed).__name__})")
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be in [0, 2**63), got {seed}")


def check_signal(signal: float) -> None:
    check_real("signal", signal)
    if not (math.isfinite(signal) and signal >= 0):
        raise ValueError(f"signal must be finite and >= 0, got {signal}")


def check_split(train_fraction: float, val_fraction: float, test_fraction: float) -> None:
    for name, value in (
        ("train_fraction", train_fraction),
        ("val_fraction", val_fraction),
        ("test_fraction", test_fraction),
    ):
        check_probability(name, value)
    total = train_fraction + val_fraction + test_fraction
    if total > 1.0 + 1e-9:
        raise ValueError(
            "train_fraction + val_fraction + test_fraction must be <= 1, got "
            f"{train_fraction} + {val_fraction} + {test_fraction} = {total}"
        )


def check_float_dtype(dtype: torch.dtype) -> None:
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
