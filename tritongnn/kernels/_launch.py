"""Shared launch helpers: which backend runs a call, launch settings, the
GPU a call runs on (``on_device_of``) and the streams of our own
(``new_stream``).

A call runs the Triton kernel when its output lives on a CUDA device, or on the
CPU when Triton's interpreter is switched on (``TRITON_INTERPRET=1`` set before
any kernel module is imported: that is how CI tests the kernels without a GPU).
Otherwise it runs the pure-torch reference in ``reference.py``, which is also
the CPU path of the loader.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import os
import threading
import weakref

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_force_reference = False


def use_triton(device: torch.device) -> bool:
    """True when the Triton kernels (compiled or interpreted) serve ``device``."""
    if _force_reference and device.type != "cuda":
        return False
    return device.type == "cuda" or INTERPRET


@contextlib.contextmanager
def reference_on_cpu():
    """Run CPU calls through the pure-torch references even under the
    interpreter: tests that train a model for many batches use it, since the
    interpreter runs each kernel op in Python (kernels get their own tests)."""
    global _force_reference
    previous, _force_reference = _force_reference, True
    try:
        yield
    finally:
        _force_reference = previous


def _device_of(value) -> torch.device | None:
    if isinstance(value, torch.device):
        return value
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        try:
            return torch.device(value)
        except (RuntimeError, TypeError, ValueError):
            return None  # the call's own checks name a bad value
    device = getattr(value, "device", None)
    return device if isinstance(device, torch.device) else None


def on_device_of(name: str):
    """Decorator: run the call with the CUDA device of its argument ``name``
    (a tensor, an object with a ``device``, e.g. ``self``, or a device as
    ``torch.device``, str or int, e.g. a ``device=`` argument) made current.
    Triton launches on the current device's current stream, not on the
    device its tensors live on: a call on ``cuda:1`` tensors while ``cuda:0``
    is current would run unordered with the torch work on ``cuda:1`` that
    wrote its inputs. A no-op when that device is already current (one
    ``current_device`` query) and off CUDA. Every public entry point that
    launches kernels carries it (``tritongnn.kernels``' functions, ``IdMap``,
    ``NeighborSampler``, whose CUDA graphs replay on the current device)."""
    def wrap(fn):
        position = list(inspect.signature(fn).parameters).index(name)  # found once: calls stay cheap

        @functools.wraps(fn)
        def call(*args, **kwargs):
            device = _device_of(args[position] if len(args) > position else kwargs.get(name))
            if device is not None and device.type == "cuda" and device.index is not None \
                    and device.index < torch.cuda.device_count() and device.index != torch.cuda.current_device():
                with torch.cuda.device(device):
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)
        return call
    return wrap


def interpreted_block(block: int, interpreted: int) -> int:
    """Block size of a launch: ``interpreted`` under the interpreter, where the
    cost is per operation, not per element, so fewer, larger programs win."""
    return interpreted if INTERPRET else block


# Kernels are declared with ``do_not_specialize`` on every size or seed that
# changes from batch to batch: Triton otherwise compiles one variant per
# divisibility-by-16 pattern of its int arguments, and new patterns keep
# appearing mid-epoch (seen on the H200: 7 batches/s for the first ~50
# batches, while each new variant compiled, then 550).


_host_reads = threading.local()  # per thread: a pinned buffer per (device, dtype), an event per device


def host_list(t: torch.Tensor) -> list:
    """``t.tolist()`` of a small tensor, waited for without stalling other
    threads' launches. On a GPU ``.tolist()`` copies into pageable memory, a
    copy during which the CUDA runtime holds back every other host thread's
    launches: measured, the loader's one per-batch sizes copy stalled the
    training loop's launches 1.6-2.3 ms a batch. Here the copy goes to
    pinned memory, asynchronously, and only this thread waits (on an event,
    without the interpreter lock). The pinned buffer and the event are
    the calling thread's, kept for its next call (each call has waited for
    its copy before it returns): a loader's producer calls this once a
    batch, and every torch call it spares is interpreter time the training
    loop does not wait for."""
    if t.device.type != "cuda":
        return t.tolist()
    kept = _host_reads.__dict__
    key = (t.device, t.dtype)
    host = kept.get(key)
    if host is None or host.numel() < t.numel():
        host = kept[key] = torch.empty(max(t.numel(), 64), dtype=t.dtype, pin_memory=True)
    copied = kept.get(t.device)
    if copied is None:
        copied = kept[t.device] = torch.cuda.Event()
    part = host[:t.numel()]
    part.copy_(t.reshape(-1), non_blocking=True)  # on t's device's current stream
    copied.record(torch.cuda.current_stream(t.device))  # that stream, whichever GPU is current
    copied.synchronize()
    return part.view(t.shape).tolist()


# Kernels that only move elements take every dtype as the integer of its
# width (NaN payloads and -0.0 untouched; bool, float8 and complex64 need no
# Triton type of their own): ``t.view(BITS_OF_SIZE[t.element_size()])``.
BITS_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def check_ids_in_range(ids, size: int, name: str, what: str = "node id") -> None:
    """``ValueError`` naming ``name`` and the first offender's kind unless
    every entry of ``ids`` is in ``[0, size)``: one host sync (its min and
    max in one copy)."""
    if ids.numel():
        lo, hi = host_list(torch.stack(torch.aminmax(ids)))
        if lo < 0 or hi >= size:
            raise ValueError(f"{name} holds {what} {lo if lo < 0 else hi}, outside [0, {size})")


def l2_bytes(device: torch.device) -> int:
    """Bytes of a CUDA device's L2 cache: what the rules that ask whether an
    array stays on chip compare with (``sample.sorts_frontier``,
    ``id_map.seen_filters``)."""
    return torch.cuda.get_device_properties(device).L2_cache_size


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def check_readable(t: torch.Tensor, device: torch.device, name: str) -> None:
    """A kernel on ``device`` reads ``t`` directly: it must live on that device,
    or (through UVA) in pinned host memory. ``"cuda"`` without an index is
    the current device, as torch reads it."""
    if t.device == device or (t.device.type == device.type == "cuda" and _index(t.device) == _index(device)):
        return
    if device.type == "cuda" and t.device.type == "cpu" and t.is_pinned():
        return
    raise ValueError(
        f"{name} lives on {t.device} and is not readable from {device}: pass it "
        f"on {device}, or in pinned host memory (tensor.pin_memory())")


def check_dense_index(t: torch.Tensor, name: str, dtypes: tuple) -> None:
    """A kernel reads ``t`` as a dense 1-D array of one of ``dtypes``: a view
    with other strides, or another dtype, is refused, not copied (these may
    be gigabytes of pinned host memory)."""
    if not isinstance(t, torch.Tensor) or t.dtype not in dtypes or t.dim() != 1:
        raise TypeError(f"{name} must be a 1-D tensor of {' or '.join(map(str, dtypes))}, got "
                        f"{getattr(t, 'dtype', type(t).__name__)} of shape {tuple(getattr(t, 'shape', ()))}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (the kernels read it with stride 1), got strides {t.stride()}")


def on_device(t: torch.Tensor, device: torch.device) -> bool:
    """``t`` lives on ``device`` ("cuda" without an index: the current GPU)."""
    if t.device.type != device.type:
        return False
    if device.type != "cuda" or device.index is None:
        return device.type != "cuda" or t.device.index == torch.cuda.current_device()
    return t.device.index == device.index


# Streams of tritongnn's own. torch hands streams out round robin from a pool
# of 32 per GPU (and priority), process-wide, so a stream made later may be
# one handed out before. A CUDA graph capture takes in whatever any thread
# launches on its stream, so the streams kept for captures (and their side
# streams) are reserved: no other stream of ours is drawn as one of them,
# and a reserved one is not drawn as a stream of ours still in use. A stream
# is in use while its ``owner`` lives (a loader, a cache); the owner is
# watched, not the stream: torch's stream objects drop their weak references
# without calling them back, and the callbacks left pending crashed the
# interpreter at exit (weakref.finalize's exit hook, on the H200). Streams
# the user makes are outside this (they draw from the same pool).
_STREAMS_LOCK = threading.RLock()  # reentrant: a finalizer (``_release``) may run inside ``new_stream``
_reserved: set[tuple[int, int]] = set()  # (device index, handle)
_alive: collections.Counter = collections.Counter()  # of ours not reserved, by (device index, handle)


def _key(stream) -> tuple[int, int]:
    return stream.device.index, stream.cuda_stream


def _release(key) -> None:
    with _STREAMS_LOCK:
        _alive[key] -= 1
        if _alive[key] <= 0:
            del _alive[key]


def new_stream(device, reserve: bool = False, owner=None) -> torch.cuda.Stream:
    """A stream of ``device`` from torch's pool that is not a reserved one
    (``reserve``: nor one of ours in use, and reserved from now on, for
    good: the capture streams of the process). A stream not reserved is in
    use while ``owner`` lives (None: for good)."""
    with _STREAMS_LOCK:
        for _ in range(4 * 32):  # the pool goes round: past a handful of draws, something holds them all
            stream = torch.cuda.Stream(device)
            key = _key(stream)
            if key not in _reserved and not (reserve and key in _alive):
                break
        else:
            raise RuntimeError(f"no CUDA stream of {device} is free of tritongnn's reserved streams")
        if reserve:
            _reserved.add(key)
        else:
            _alive[key] += 1
    if not reserve and owner is not None:
        weakref.finalize(owner, _release, key)
    return stream


def reserved(stream) -> bool:
    """Whether ``stream`` is one kept for captures (``new_stream(reserve=True)``)."""
    with _STREAMS_LOCK:
        return _key(stream) in _reserved
