"""FastGL's match-reuse: rows the previous batch gathered are copied on the
GPU instead of read again from host memory.

Consecutive batches share nodes (hubs above all). The loader keeps the
previous batch's feature rows (its own copy: the training loop may modify
``batch.x`` in place) and a map ``prev_slot`` from each node outside the
static cache to its row there, or -1. The gather kernel reads a row from the
static cache, else the dynamic cache, else the previous batch, else host
memory, in one launch. One previous batch at most is resident.

Group staging (``GroupReuse``, ``reuse="group"``) generalises it: the
distinct host rows of a whole group of batches are read once, sorted by
host row, into a staging buffer that takes the previous batch's place in
the gather; the next group is staged while this one's batches are gathered.
"""
from __future__ import annotations

import torch


def _served(rows, slot, num_static: int, node: torch.Tensor, dynamic_slot: torch.Tensor | None) -> torch.Tensor:
    """Rows of a batch (internal ids ``node``) the gather kernel reads from
    the "previous" tier ``rows``: outside the static cache, in ``slot`` (table
    row ``num_static + j`` -> its row in ``rows``, or -1) and, the dynamic
    cache serving first, not in ``dynamic_slot``. A device count."""
    if rows is None:
        return torch.zeros((), dtype=torch.int64, device=node.device)
    cold = (node - num_static).clamp(min=0)
    hit = (node >= num_static) & (slot[cold] >= 0)
    if dynamic_slot is not None:
        hit &= dynamic_slot[cold.clamp(max=dynamic_slot.numel() - 1)] < 0
    return hit.sum()


class BatchReuse:
    """The previous batch's rows and where each node sits among them.

    Args:
        num_nodes: N.
        num_static: F, nodes ``< F`` are in the static cache (never looked up).
        device: where the rows and the map live.
    """

    def __init__(self, num_nodes: int, num_static: int, device):
        self.num_static = num_static
        self._spare = num_nodes - num_static  # a spare entry: static nodes' writes land there
        self.prev_slot = torch.full((self._spare + 1,), -1, dtype=torch.int32, device=device)
        self.rows = None
        self._node = None

    def _entries(self, node: torch.Tensor) -> torch.Tensor:
        cold = node - self.num_static
        return torch.where(cold >= 0, cold, self._spare)

    def gather_args(self) -> dict:
        """Keyword arguments of ``gather_rows`` for the previous batch."""
        return {} if self.rows is None else dict(previous=self.rows, prev_slot=self.prev_slot)

    def served(self, node: torch.Tensor, dynamic_slot: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of a batch (internal ids ``node``, gathered before
        ``remember``) that came from the previous batch (a device count)."""
        return _served(self.rows, self.prev_slot, self.num_static, node, dynamic_slot)

    def remember(self, node: torch.Tensor, x: torch.Tensor) -> None:
        """Make this batch (ids ``node``, rows ``x``) the previous one."""
        if self._node is not None:
            self.prev_slot[self._entries(self._node)] = -1
        self.prev_slot[self._entries(node)] = torch.arange(node.numel(), dtype=torch.int32, device=node.device)
        self._node, self.rows = node, x.clone()


class _Staging:
    """One group's staging buffer: its rows, the map from nodes to them,
    and the events that order its writes and reads across streams."""

    def __init__(self, size: int, device):
        self.slot = torch.full((size,), -1, dtype=torch.int32, device=device)
        self.rows = None
        self.staged = None  # the staged nodes (internal ids, sorted): their rows are read from host
        self.ready = None  # staging stream: rows and slots written
        self.done = None  # gather stream: every gather that reads them issued before it

    def release(self, num_static: int) -> None:
        if self.staged is not None:
            self.slot[self.staged - num_static] = -1
        self.staged = self.rows = None


class GroupReuse:
    """Every host row a group of batches needs, read from host memory once.

    Match-reuse keeps one previous batch, so a row shared by batches further
    apart is read again; with seeds shuffled uniformly every pair of batches
    overlaps about equally and no order helps (measured: 5.5 % of rows
    reused at a 2 GB budget, reorder adding nothing). Here, once a group of
    batches has been sampled (``reorder_group``, else ``super_batch``), the
    union of their rows outside the static and dynamic caches is gathered in
    one launch, ids sorted (rows that share a 64 KB host page are read
    together: UVA reads cost per page touched, so a group's misses read
    near the bulk rate where one batch's are sparse), into a staging buffer;
    each batch's gather then reads those rows there, through the gather
    kernel's "previous" tier.

    Two buffers: the loader stages the next group (``stage``, on a stream of
    its own) while the batches of this one are gathered from the other
    (``use`` ... ``finish``), so the host reads of the next group overlap the
    training steps of this one. A buffer is staged again only after every
    gather of its last group (``finish``'s event). GPU memory: two groups'
    distinct host rows, and two int32 maps of ``num_nodes - num_static``.

    Args:
        num_nodes: N.
        num_static: F, nodes ``< F`` are in the static cache.
        device: where the staging rows and the maps live.
    """

    def __init__(self, num_nodes: int, num_static: int, device):
        self.num_static = num_static
        self._buffers = [_Staging(num_nodes - num_static + 1, device) for _ in range(2)]
        self._next = 0
        self.current = None  # the buffer the batches' gathers read now

    def stage(self, table: torch.Tensor, nodes: list[torch.Tensor], dynamic_slot: torch.Tensor | None = None,
              row_map: torch.Tensor | None = None, stream: torch.cuda.Stream | None = None) -> _Staging:
        """Gather the distinct rows of ``nodes`` (internal ids of each batch
        of a group) that no cache holds, from ``table`` (in the user's ids
        with ``row_map``, as ``gather_rows`` reads it), into the buffer the
        group before last used; returns it (``staged``: the nodes whose
        rows were read from host memory). The ids are found on the current stream; the rows
        are read on ``stream`` (None: the current one), which first waits
        for them and for the buffer's last gathers."""
        from ..kernels import gather_rows
        ids = torch.cat(nodes)
        cold = ids[ids >= self.num_static]
        if dynamic_slot is not None:
            # as the dynamic cache is now: a row it takes in or drops before
            # a batch's gather is read from there or from host memory instead
            cold = cold[dynamic_slot[cold - self.num_static] < 0]
        staged = torch.unique(cold)  # sorted
        buf = self._buffers[self._next]
        self._next = 1 - self._next
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream(staged.device))
            if buf.done is not None:
                stream.wait_event(buf.done)
            staged.record_stream(stream)
        with torch.cuda.stream(stream):  # None: a no-op
            buf.release(self.num_static)
            buf.rows = gather_rows(table, staged, row_map=row_map, validate=False)
            buf.slot[staged - self.num_static] = torch.arange(staged.numel(), dtype=torch.int32,
                                                              device=staged.device)
            buf.staged = staged
            if stream is not None:
                buf.ready = torch.cuda.Event()
                buf.ready.record(stream)
        return buf

    def use(self, buf: _Staging, stream: torch.cuda.Stream | None = None) -> None:
        """Serve the gathers issued from now on (on ``stream``, which waits
        for the rows) from ``buf``."""
        if stream is not None and buf.ready is not None:
            stream.wait_event(buf.ready)
        self.current = buf

    def finish(self, buf: _Staging, stream: torch.cuda.Stream | None = None) -> None:
        """Every gather reading ``buf`` is issued (on ``stream``): staging
        it again waits for them."""
        if stream is not None:
            buf.done = torch.cuda.Event()
            buf.done.record(stream)
        if self.current is buf:
            self.current = None

    def gather_args(self) -> dict:
        buf = self.current
        return {} if buf is None or buf.rows is None else dict(previous=buf.rows, prev_slot=buf.slot)

    def served(self, node: torch.Tensor, dynamic_slot: torch.Tensor | None = None) -> torch.Tensor:
        """Rows of a batch read from the staging buffer (a device count)."""
        buf = self.current
        return _served(None if buf is None else buf.rows, None if buf is None else buf.slot, self.num_static,
                       node, dynamic_slot)

    def remember(self, node: torch.Tensor, x: torch.Tensor) -> None:
        """Nothing to keep per batch: the group's rows stay staged until the
        buffer is staged again (``stage``) or released."""

    def release(self, stream: torch.cuda.Stream | None = None) -> None:
        """Forget every group (the end of a pass): map entries back to -1,
        rows freed, on ``stream`` (the staging one) after their gathers."""
        if stream is not None:
            for buf in self._buffers:
                if buf.done is not None:
                    stream.wait_event(buf.done)
        with torch.cuda.stream(stream):  # None: a no-op
            for buf in self._buffers:
                buf.release(self.num_static)
        self.current = None
