"""CUDA graphs captured through the driver, not through ``torch.cuda.graph``.

The loader captures while the user's threads may use the GPU. torch's
capture entry point puts torch's default CUDA generator into capture state for
every thread (a dropout drawn meanwhile fails: "Offset increment outside graph
capture"), and synchronizes the whole device and empties the allocator's
cache on entry. A capture here is the driver's, on a stream only ours use, in
relaxed mode; its allocations go to a private ``torch.cuda.MemPool`` that
lives as long as the graph. torch's generators and the user's streams never
see it. Our sampling draws no torch RNG on the device (Philox seeds are
drawn on the CPU from the loader's own generator), so a graph needs none.

A capture must also not overlap the user's own device-wide calls
(``torch.cuda.synchronize()``, ``empty_cache()``, their own capture's entry):
CUDA refuses those while any stream captures. So a producer thread asks the
loop's thread to capture (``captures_on``), which does so inside ``next()``,
where none of the user's code runs on it.

``relax_thread`` puts a thread of ours into relaxed capture interaction
mode: a user's capture in global mode (``torch.cuda.graph``'s default) on
another thread then neither fails our calls nor is invalidated by them.
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
import warnings

import torch

from . import cuda_driver
from .cuda_driver import check, lib as driver
from .host_memory import capturing, release_after_capture
from .kernels._launch import new_stream

# CUstreamCaptureMode
_RELAXED = 2
# One capture at a time in the process, on a stream per GPU that nothing else
# launches on (``new_stream(reserve=True)``): a capture takes in whatever any
# thread launches on its stream, so two loaders' producers must not share one
# at once.
_CAPTURE_LOCK = threading.Lock()
_capture_streams: dict[int, torch.cuda.Stream] = {}
_warned = False
_local = threading.local()  # .run: where this thread's captures are run (``captures_on``)


class CaptureAbandoned(Exception):
    """The loop asked to run a capture stopped first (an epoch left early):
    the capture never ran, and may be asked for again."""


@contextlib.contextmanager
def captures_on(run):
    """Within: this thread's captures are handed to ``run(work)``, which runs
    ``work()`` on another thread (the loop's) and returns its result."""
    previous = getattr(_local, "run", None)
    _local.run = run
    try:
        yield
    finally:
        _local.run = previous


class CaptureRequest:
    """A capture asked of the loop's thread: ``run`` it there; the asking
    thread ``wait``s for its result."""

    def __init__(self, work):
        self.work, self.done = work, threading.Event()
        self.result = self.error = None

    def run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as error:  # raised again on the asking thread
            self.error = error
        self.done.set()

    def wait(self, stopped: threading.Event):
        while not self.done.wait(0.05):
            if stopped.is_set():
                raise CaptureAbandoned("the loop stopped before it ran the capture")
        if self.error is not None:
            raise self.error
        return self.result


def relax_thread() -> None:
    """Set the calling thread's capture interaction mode to relaxed (module
    docstring); a no-op without a CUDA driver."""
    if not torch.cuda.is_available():
        return
    mode = ctypes.c_int(_RELAXED)
    check(driver().cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)), "cuThreadExchangeStreamCaptureMode")


class Graph:
    """An instantiated CUDA graph and the memory pool its buffers live in."""

    def __init__(self, graph: ctypes.c_void_p, pool: torch.cuda.MemPool):
        self._graph, self._pool = graph, pool
        self._exec = ctypes.c_void_p()
        lib = driver()
        try:
            check(lib.cuGraphInstantiateWithFlags(ctypes.byref(self._exec), graph, ctypes.c_ulonglong(0)),
                  "cuGraphInstantiateWithFlags")
        except RuntimeError:
            lib.cuGraphDestroy(graph)
            self._graph = None
            raise

    def replay(self) -> None:
        """Launch the graph on the current stream."""
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        check(driver().cuGraphLaunch(self._exec, stream), "cuGraphLaunch")

    def release(self) -> None:
        """Destroy the graph and free its pool. A launch still in flight
        completes first: the driver frees the executable once it is done."""
        lib = cuda_driver._driver  # (loaded: this graph was made through it)
        if lib is not None:
            if self._exec:
                lib.cuGraphExecDestroy(self._exec)
            if self._graph:
                lib.cuGraphDestroy(self._graph)
        self._exec = self._graph = None
        self._pool = None  # its blocks go back to the device here, never inside a capture

    def __del__(self):
        # Collected while a capture is open (the cyclic GC runs in any thread, the capturing one too):
        # freeing the pool then empties allocator blocks mid-capture, which aborts the process.
        if sys.is_finalizing() or not release_after_capture(self):
            self.release()


def _warn_once(error: BaseException) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"tritongnn: a CUDA graph capture failed ({error}); the batches it was for are built "
                      f"eagerly instead (slower, same results)", RuntimeWarning, stacklevel=3)


def capture(fn):
    """``fn()`` run once (compiling every kernel it launches), then captured
    into a CUDA graph on the current GPU; returns ``(graph, result)``, the
    result being the captured run's (its tensors are what a replay
    overwrites). RuntimeError where the capture fails (a sync in ``fn``),
    after one warning per process: the caller then runs ``fn`` eagerly.
    Pinned host memory freed meanwhile is unregistered after it
    (``host_memory.capturing``). On a thread under ``captures_on`` the
    capture itself runs where that says (the warm-up run stays here)."""
    fn()
    index = torch.cuda.current_device()
    run = getattr(_local, "run", None)
    if run is not None:
        def work():
            with torch.cuda.device(index):
                return _capture(fn, index)
        return run(work)
    return _capture(fn, index)


def _capture(fn, index: int):
    with _CAPTURE_LOCK:
        if index not in _capture_streams:
            _capture_streams[index] = new_stream(index, reserve=True)
        stream = _capture_streams[index]
        # The driver's capture, not torch.cuda.graph: torch's puts its default CUDA generator into capture
        # state for every thread (a user's dropout then fails) and syncs the device; this touches neither.
        pool = torch.cuda.MemPool()
        handle, graph = ctypes.c_void_p(stream.cuda_stream), ctypes.c_void_p()
        lib = driver()
        try:
            with capturing(), torch.cuda.stream(stream), torch.cuda.use_mem_pool(pool, index):
                check(lib.cuStreamBeginCapture_v2(handle, _RELAXED), "cuStreamBeginCapture")
                try:
                    result = fn()
                finally:
                    ended = lib.cuStreamEndCapture(handle, ctypes.byref(graph))
                check(ended, "cuStreamEndCapture")
            captured = Graph(graph, pool)
        except RuntimeError as error:
            if graph:
                lib.cuGraphDestroy(graph)
            _warn_once(error)
            raise RuntimeError(f"CUDA graph capture failed: {error}") from error
    return captured, result
