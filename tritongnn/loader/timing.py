"""Where an epoch's time goes: sampling, gathering, the model, waiting.

The loader marks each batch's stages on the streams they run on: with a
GPU, CUDA events give the time from a stage's first launch to its last
kernel's end (sampling with id mapping; the feature gather, which waits for
the sampling). With stages overlapping each other and the model, these are
spans, not exclusive costs: ``wait`` says whether loading was hidden. On the
CPU, wall time. The training loop's side is wall
time: ``model`` is how long the loop held each batch before asking for the
next (its forward, backward and step), ``wait`` how long it waited for a
batch. With loading hidden behind compute, ``wait`` is near zero and the
epoch takes ``model`` seconds.
"""
from __future__ import annotations

import threading
import time

import torch

_FOLD_EVERY = 64  # completed events are summed and dropped this often


class StageTimes:
    """Per-epoch stage times of one loader (``as_dict`` for the numbers)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        # the producer thread adds and folds marks while the loop may read
        # ``loader.stats``: folding the same marks in both double-counted them
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.batches = 0
            self.sampling = self.gather = 0.0  # seconds, completed batches
            self.model = self.wait = 0.0
            self._marks: list[tuple] = []  # (start, sampled, gather start, gathered, shares) per batch not yet summed

    def mark(self, stream: torch.cuda.Stream | None = None):
        """A point in the work of ``stream`` (None: the loader's GPU's
        current stream) as an event, or in wall time."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            # the loader's GPU, whichever is current (a stream given: no lookup)
            event.record(stream if stream is not None else torch.cuda.current_stream(self.device))
            return event
        return time.perf_counter()

    def add_batch(self, start, sampled, gather_start, gathered, share: float = 1.0,
                  gather_share: float = 1.0) -> None:
        """Marks of one batch: sampling ran from ``start`` to ``sampled``,
        the gather from ``gather_start`` to ``gathered`` (another stream's
        marks when the two overlap). ``share``: the batch's part of the
        sampling span, ``1 / K`` when K batches were sampled in one pass (a
        super-batch: each of its batches carries the same two marks);
        ``gather_share`` the same of the gather span, where K were gathered
        in one."""
        with self._lock:
            self.batches += 1
            self._marks.append((start, sampled, gather_start, gathered, share, gather_share))
            if len(self._marks) >= _FOLD_EVERY:
                self._fold(wait=False)

    def _fold(self, wait: bool) -> None:
        """Sum the marks whose work is done (``wait``: all of them); the
        caller holds the lock."""
        keep = []
        for marks in self._marks:
            start, sampled, gather_start, gathered, share, gather_share = marks
            if self.cuda:
                if not wait and not gathered.query():
                    keep.append(marks)
                    continue
                gathered.synchronize()
                self.sampling += share * start.elapsed_time(sampled) / 1e3
                self.gather += gather_share * gather_start.elapsed_time(gathered) / 1e3
            else:
                self.sampling += share * (sampled - start)
                self.gather += gather_share * (gathered - gather_start)
        self._marks = keep

    def consumer(self, batches):
        """Yield ``batches``, timing the loop around them (``wait``/``model``)."""
        iterator = iter(batches)
        try:
            tick = time.perf_counter()
            for batch in iterator:
                got = time.perf_counter()
                self.wait += got - tick
                yield batch
                tick = time.perf_counter()
                self.model += tick - got
        finally:  # a loop that breaks early stops the producer now
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def as_dict(self) -> dict:
        with self._lock:
            self._fold(wait=True)
            return dict(batches=self.batches, sampling_seconds=self.sampling, gather_seconds=self.gather,
                        model_seconds=self.model, wait_seconds=self.wait,
                        epoch_seconds=self.model + self.wait)
