"""Pinned host memory the kernels read through UVA: exact-size pinned tables
(``pinned_empty``), the caller's tensors registered in place (``as_pinned``:
no second copy of a 57 GB table), and registrations that wait out an open
CUDA graph capture (``capturing``). The copy of the host arrays shared by the
ranks of a host is in ``shared_host``.

Pinned in place: a mapping or a tensor is registered with CUDA (through the
driver, ``_register``) instead of ``.pin_memory()`` (which would copy it into
a fresh pinned buffer). The registration lasts as long as the memory: the
tensors handed out keep it alive, and when the last of them is freed it
waits for the device, unregisters, then unmaps.
"""
from __future__ import annotations

import contextlib
import math
import mmap
import operator
import sys
import threading
import warnings
import weakref

import torch

from .cuda_driver import check, lib as driver
from .memory import size

# cudaHostRegisterPortable | cudaHostRegisterMapped: every CUDA context may
# use it, at a device address (on UVA systems the host address itself, which
# is what Triton's launcher asks the driver for). Default (0) means the same
# on UVA systems; the flags say it outright.
_REGISTER_FLAGS = 1 | 2
_READ_ONLY = 8  # CU_MEMHOSTREGISTER_READ_ONLY: the GPU only reads it (a read-only mapping needs it)


def _register(ptr: int, nbytes: int, device, read_only: bool = False) -> None:
    """Register ``nbytes`` at ``ptr`` with CUDA for ``device``, through the driver: a
    refusal raises RuntimeError here and leaves no error behind, where the
    runtime's ``cudaHostRegister`` leaves it as the last error for torch's
    next kernel launch to raise as its own. ``read_only``: try the pages as
    read by the GPU only first (a read-only file mapping takes no other)."""
    if torch.cuda.is_available():
        torch.cuda.mem_get_info(device)  # a runtime call: the device's primary context current on this thread
    cuda = driver()
    if read_only and cuda.cuMemHostRegister_v2(ptr, nbytes, _REGISTER_FLAGS | _READ_ONLY) == 0:
        return
    check(cuda.cuMemHostRegister_v2(ptr, nbytes, _REGISTER_FLAGS), "cuMemHostRegister")


def _unregister(ptr: int) -> None:
    driver().cuMemHostUnregister(ptr)


def memory_usage() -> dict[str, int]:
    """This process's resident memory and the host's, in bytes, from ``/proc``.

    Pages of a shared host copy count in the ``rss`` of every rank that maps
    them (``rss_shmem``) but only once in the host's ``host_shmem``: to
    compare runs, add the ranks' ``rss - rss_shmem`` and the host's
    ``host_shmem`` once, or read ``host_used``.

    Returns:
        A dict with, where ``/proc`` has them (Linux): ``rss``, ``rss_anon``,
        ``rss_file``, ``rss_shmem`` (this process: ``VmRSS``, ``RssAnon``,
        ``RssFile``, ``RssShmem``), ``host_shmem`` (``Shmem``: tmpfs and
        shared memory of the whole host), ``host_used`` (``MemTotal -
        MemAvailable``) and ``host_total`` (``MemTotal``). Empty elsewhere.
    """
    fields = {"VmRSS": "rss", "RssAnon": "rss_anon", "RssFile": "rss_file", "RssShmem": "rss_shmem",
              "Shmem": "host_shmem", "MemTotal": "host_total", "MemAvailable": "_available"}
    out = {}
    for path in ("/proc/self/status", "/proc/meminfo"):
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(":")
                    if name in fields:
                        out[fields[name]] = int(value.split()[0]) * 1024  # kB
        except OSError:
            continue
    if "host_total" in out and "_available" in out:
        out["host_used"] = out["host_total"] - out.pop("_available")
    out.pop("_available", None)
    return out


# Pinned mappings freed while the process captures a CUDA graph (any
# thread: the cyclic GC runs where it likes, the capturing thread too):
# unregistering one then (a device-wide sync first) would fail and break
# the capture, and skipping it left the range registered past its unmap, so
# that a later mapping at the same address failed to register (seen on the
# H200 with a gather graph captured every batch). They wait here, alive,
# until no capture is open (``capturing``).
_captures = 0
_deferred: list = []
_deferred_lock = threading.RLock()  # (reentrant: a __del__ may run inside it, in the same thread)


def release_after_capture(resource) -> bool:
    """Keep ``resource`` (anything with ``release()``) alive until no capture
    is open, when one is: True then, and ``capturing`` releases it; False
    when none is open (the caller releases it now)."""
    with _deferred_lock:
        if _captures:
            _deferred.append(resource)
            return True
    return False


@contextlib.contextmanager
def capturing():
    """Wrap a CUDA graph capture: pinned host memory freed meanwhile is
    unregistered and unmapped once no capture is open, not during one."""
    global _captures
    with _deferred_lock:
        _captures += 1
    try:
        yield
    finally:
        with _deferred_lock:
            _captures -= 1
            pending = list(_deferred) if _captures == 0 else []
            if pending:
                _deferred.clear()
        for mapping in pending:
            mapping.release()


class _Mapping(mmap.mmap):
    """An ``mmap`` that, when pinned, unregisters itself from CUDA before it
    is unmapped. Tensors made by ``torch.frombuffer`` hold a reference to it,
    so that happens after the last of them is freed (after the capture open
    then, if one is: ``capturing``)."""

    def pin(self, ptr: int, nbytes: int, device: torch.device) -> None:
        _register(ptr, nbytes, device)
        self.pinned = (ptr, device)

    def unregister(self) -> None:
        pinned, self.pinned = getattr(self, "pinned", None), None
        if pinned is None:
            return
        ptr, device = pinned
        try:
            torch.cuda.synchronize(device)  # no kernel may still be reading it
            _unregister(ptr)
        except Exception:  # __del__ must not raise; the unmap that follows frees the pages either way
            pass

    def release(self) -> None:
        """Unregister and unmap (a mapping kept past its ``__del__``)."""
        self.unregister()
        try:
            self.close()
        except BufferError:  # still exported (cannot be: it was freed); unmapped when collected
            pass

    def __del__(self):
        if getattr(self, "pinned", None) is None or sys.is_finalizing():  # at exit CUDA may be gone before us
            return
        if not release_after_capture(self):  # (alive again until the capture ends: a finalizer runs once)
            self.unregister()


def pinned_empty(shape, dtype: torch.dtype, device=None) -> torch.Tensor:
    """An uninitialised host tensor page-locked for ``device`` (a GPU) that
    takes exactly its own bytes: anonymous shared memory (forked workers
    read the same pages, with no copy) registered in place with
    ``cudaHostRegister`` (unregistered and freed with the last tensor viewing
    it). ``torch.empty(..., pin_memory=True)`` and ``.pin_memory()`` go
    through torch's caching host allocator, which rounds every block up to a
    power of two: a 57 GB feature table takes 68.7 GB of host memory there.
    Plain host memory when ``device`` is not a GPU; torch's pinned memory,
    with a warning, if the registration fails.

    Example:
        >>> x = pinned_empty((num_nodes, 128), torch.float32, "cuda")
    """
    device = torch.device(device) if device is not None else None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    try:
        shape = tuple(operator.index(size) for size in shape)
    except TypeError:
        raise TypeError(f"shape must be a sequence of ints, got {shape!r}") from None
    if any(size < 0 for size in shape):
        raise ValueError(f"shape must hold sizes >= 0, got {shape}")
    numel = math.prod(shape)
    nbytes = numel * dtype.itemsize
    if device is None or device.type != "cuda":
        return torch.empty(shape, dtype=dtype)
    if not torch.cuda.is_available():
        raise RuntimeError(f"pinned host memory for {device} needs a CUDA GPU, and none is available")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    # Shared, not private: a forked process (a DataLoader worker) maps the
    # same pages. Pinned pages of a private mapping are copied eagerly at
    # fork, so 8 workers over a 57 GB private table asked for 8 x 57 GB.
    mapping = _Mapping(-1, nbytes, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frombuffer's "non-writable" warning cannot apply: it is writable
        tensor = torch.frombuffer(mapping, dtype=dtype, count=numel).view(shape)
    try:
        mapping.pin(tensor.data_ptr(), nbytes, device)
    except RuntimeError as error:
        warnings.warn(f"cudaHostRegister of {size(nbytes)} failed ({error}); using torch's pinned "
                      f"memory, which rounds the block up to a power of two")
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    return tensor


def pinned_copy(tensor: torch.Tensor, device=None) -> torch.Tensor:
    """``tensor`` copied into ``pinned_empty`` memory (from any device: a GPU
    tensor is copied straight into it, with no pageable copy on the way)."""
    return pinned_empty(tensor.shape, tensor.dtype, device).copy_(tensor)


class _InPlace:
    """A range of the caller's host memory registered with CUDA in place
    (``as_pinned``): unregistered once the last tensor handed out over it is
    freed, after a device sync (and after any open capture: ``capturing``)."""

    def __init__(self, ptr: int, nbytes: int, device: torch.device):
        _register(ptr, nbytes, device, read_only=True)  # the caller's: the GPU only reads it
        self.ptr, self.end, self.device, self.users = ptr, ptr + nbytes, device, 0

    def covers(self, ptr: int, nbytes: int) -> bool:
        return self.ptr <= ptr and ptr + nbytes <= self.end

    def hand_out(self, tensor: torch.Tensor) -> torch.Tensor:
        """An alias of ``tensor`` (the same storage) that holds the registration."""
        alias = tensor.view(tensor.shape)
        self.users += 1
        weakref.finalize(alias, self.drop)
        return alias

    def drop(self) -> None:
        with _deferred_lock:
            self.users -= 1
            if self.users:
                return
            _in_place.remove(self)
            if release_after_capture(self):
                return
        self.release()

    def release(self) -> None:
        if sys.is_finalizing():  # at exit CUDA may be gone before us
            return
        try:
            torch.cuda.synchronize(self.device)  # no kernel may still be reading it
            _unregister(self.ptr)
        except Exception:  # a finalizer must not raise; the caller's memory stays theirs either way
            pass


_in_place: list[_InPlace] = []


def as_pinned(tensor: torch.Tensor, device) -> torch.Tensor:
    """What a kernel on ``device`` reads through UVA: ``tensor`` itself where
    it already is contiguous pinned host memory; a contiguous CPU tensor
    registered in place (``cudaHostRegister``: no second copy of a 57 GB
    table; its values untouched, unregistered with the last tensor handed
    out over it); else, or where registering fails, a ``pinned_copy``."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        return pinned_copy(tensor, device)  # exact bytes, not torch's power-of-two blocks
    ptr, nbytes = tensor.data_ptr(), tensor.numel() * tensor.element_size()
    with _deferred_lock:
        for region in _in_place:
            if nbytes and region.covers(ptr, nbytes):
                return region.hand_out(tensor)
        if tensor.is_pinned():  # torch's pinned memory, or registered by the caller
            return tensor
        if nbytes:
            try:
                region = _InPlace(ptr, nbytes, torch.device(device))
            except RuntimeError as error:
                warnings.warn(f"cudaHostRegister of the caller's {size(nbytes)} failed ({error}); "
                              f"copying it into pinned memory instead")
            else:
                _in_place.append(region)
                return region.hand_out(tensor)
    return pinned_copy(tensor, device)
