"""The producer thread: a pass's batches prepared on side CUDA streams,
``prefetch`` ahead of the training loop, and handed over in order.

Why a thread and not just a side stream: a training step usually ends in
``loss.item()``, which leaves the GPU idle until the host asks for the next
batch; sampling needs a few host decisions per batch, so it must run on the
host while the model's kernels run, not after them. ``.item()`` and CUDA
syncs release the GIL, so the two threads interleave well.

The producer builds batches (``Schedule.batches``: sampling on one stream,
the gather and assembly on another, group staging on a third) or replays
them from CUDA graphs (``replay.ReplayedBatches``). Captures never run on
the producer: they are handed to the loop's thread, which runs them in
``next()``, so none of the user's device-wide calls (the model's dropout
drawing from the CUDA generator, among them) can overlap a capture.
"""
from __future__ import annotations

import contextlib
import queue
import threading

import torch
from torch_geometric.data import Data

from ..cuda_graph import CaptureAbandoned, CaptureRequest, captures_on, relax_thread
from .replay import ReplayedBatches


def hand_over(batch: Data, ready, device, built: bool = True) -> torch.cuda.Stream:
    """Order a batch built on the producer's streams (done at ``ready``)
    before the work of the stream current on ``device``, and (``built``:
    its tensors allocated there, not a replayed slot's views) keep its
    tensors from reuse by those streams until that work is done (freed by
    the loop, not by the streams that made them). Returns that stream."""
    consumer = torch.cuda.current_stream(device)
    consumer.wait_event(ready)
    if not built:  # a slot's buffers: reused only once found free (``replay._Slot.found_free``)
        input_id = batch.get("input_id")  # the schedule's, not the slot's: freed with the pass
        if isinstance(input_id, torch.Tensor) and input_id.is_cuda:
            input_id.record_stream(consumer)
        return consumer
    for store in batch.stores:  # (a HeteroData's every node and edge type)
        for value in store.values():
            if isinstance(value, torch.Tensor) and value.is_cuda:
                value.record_stream(consumer)
    return consumer


class Prefetcher:
    """Runs ``loader.build_batches`` in a producer thread on the loader's
    side streams, ``loader.prefetch`` batches ahead of the consumer; with
    ``replay``, a ``ReplayedBatches`` instead (``prefetch`` in flight, one
    queued: each holds a slot).

    It reads the loader's ``device``, ``prefetch``, ``streams()`` and
    ``build_batches``."""

    _DONE = object()

    def __init__(self, loader, batches, replay: bool = False):
        self.loader, self.batches = loader, batches
        self.cuda = loader.device.type == "cuda"
        self.queue = queue.Queue(maxsize=1 if replay else loader.prefetch)
        self.stop = threading.Event()
        # sampling, gather with assembly, and group staging (``GroupReuse``):
        # the loader's own three streams, not new ones a pass
        self.stream = self.gather_stream = self.staging_stream = self.consumer = None
        if self.cuda:
            self.stream, self.gather_stream, self.staging_stream = loader.streams()
            self.consumer = torch.cuda.current_stream(loader.device)
        # made here, on the loop's thread: it reads the loop's stream
        self.replay = ReplayedBatches(loader, batches) if replay else None
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.thread.start()

    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _items(self):
        """``(batch, ready, built)`` of each batch, in order (``hand_over``)."""
        if self.replay is not None:
            yield from self.replay
            return
        # closed inside the stream's context: its end (the group staging's
        # release) is queued on the producer's streams
        with torch.cuda.stream(self.stream), contextlib.closing(
                self.loader.build_batches(self.batches, self.gather_stream, self.staging_stream)) as batches:
            for batch in batches:
                ready = torch.cuda.Event()
                ready.record(self.gather_stream)  # after the sampling it waited for
                yield batch, ready, True

    def _produce(self) -> None:
        try:
            if self.cuda:
                torch.cuda.set_device(self.loader.device)
                # a user's capture on another thread neither fails this one's calls nor is broken by them
                relax_thread()
                # The epoch's input ids were made on the consumer's stream: wait
                # for them once, here, not per batch, or every batch would also
                # wait for the training steps queued behind them.
                self.stream.wait_stream(self.consumer)
            # closed here, on a stop too: its end (the group staging's
            # release, the pipeline's fences) is queued before the consumer
            # fences its streams. Captures are run by the loop's thread, in
            # ``next()``: none of the user's device-wide calls can overlap them.
            with captures_on(self._ask_loop), contextlib.closing(self._items()) as items:
                for item in items:
                    if self.stop.is_set() or not self._put(item) or self.stop.is_set():
                        return
        except BaseException as error:  # handed to the consumer, raised there
            self._put(error)
            return
        self._put(self._DONE)

    def _ask_loop(self, work):
        """Run ``work`` (a capture) on the loop's thread; its result."""
        request = CaptureRequest(work)
        if not self._put(request):
            raise CaptureAbandoned("the loop stopped before it ran the capture")
        return request.wait(self.stop)

    def __iter__(self):
        consumer = self.consumer
        try:
            while True:
                item = self.queue.get()
                if item is self._DONE:
                    return
                if isinstance(item, CaptureRequest):
                    item.run()
                    continue
                if isinstance(item, BaseException):
                    raise item
                batch, ready, built = item
                if self.cuda:
                    # the stream current where this batch is asked for: a loop
                    # may step its model under a stream of its own
                    consumer = hand_over(batch, ready, self.loader.device, built)
                    if self.replay is not None:
                        self.replay.read_on(consumer)
                yield batch
        finally:
            self.stop.set()
            # A producer blocked on the full queue would notice the stop only at
            # its put's timeout (0.1 s): draining the queue lets its put
            # through, and it returns at once (once stopped it puts at most
            # one more item, which finds room).
            try:
                while True:
                    self.queue.get_nowait()
            except queue.Empty:
                pass
            self.thread.join()
            if not self.cuda:
                return
            # work the producer queued and nobody consumed (an epoch left
            # early) may still run on its streams: the consumer's stream, which
            # the next epoch's producer waits for first, waits for it, so the
            # next batches cannot overlap it in the sampler's id map and buffers
            # (and the stream of the last batch asked for, if another)
            for stream in dict.fromkeys((self.consumer, consumer)):
                for producer in (self.stream, self.gather_stream, self.staging_stream):
                    stream.wait_stream(producer)
