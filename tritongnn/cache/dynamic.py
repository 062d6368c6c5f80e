"""The dynamic feature cache (GARDEN's ADFC, eqs. 5-6): a bounded second
feature cache for the rows the static cache misses.

Every batch, each node the static cache missed (internal id ``>= F``) scores
one access (the batch's ``n_id`` is unique, so once per batch):

    Score(v, t) = gamma * Score(v, t - 1) + 1(v missed by the static cache in batch t)

Every ``update_every`` batches the ``capacity`` best-scored nodes become the
cache's contents (eq. 6). With an access profile, scores start from its
gather counts, at the EWMA's steady state (``rate / (1 - gamma)`` for a node
drawn in ``rate`` of the batches), so the first refresh already ranks the
static cache's misses by how often batches gathered them; the static cache
is ranked by eq. (4), which weighs seeds and early hops above outer-hop
nodes, while a gather's hit rate counts every row once. Nodes still among them keep their rows; only the
newcomers' rows are read from host memory, at most ``max_replace`` of the
capacity per refresh, into the slots of the nodes that left.

Costs and where they run:

* the score update is one ``index_add_`` over the batch's nodes, on the
  loader's stream. The decay is lazy: scores are stored multiplied by
  ``gamma ** -t`` and rescaled when that factor grows large, so a batch
  touches its own nodes only, never all N scores;
* the refresh (top-K over the scores, picking newcomers and free slots, the
  UVA read of the newcomers' rows) runs on a side CUDA stream. It starts
  from the scores as of the batch before last, so it waits for no work in
  flight; the host waits once for the small top-K bookkeeping (the number of
  newcomers sizes the read), the read itself overlaps later batches;
* the commit (copy the staged rows into their slots, update the slot map)
  runs on the loader's stream before the first batch after the read is done,
  so a gather sees the cache either wholly before or wholly after it.
  Batches come out the same whatever the cache holds: it changes where a row
  is read from, not its value.

Updates stop for good after ``max_epochs`` epochs, or once the cache has
settled: the dynamic hit rate measured after a refresh has moved less than
``min_gain`` from the previous refresh's (up or down: a falling rate means
the accesses moved and the refreshes are following them) for ``patience``
refreshes in a row. The rows cached then stay.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .._checks import check_positive_int
from ..kernels import gather_rows
from ..kernels._launch import new_stream


@dataclass
class DynamicCacheConfig:
    """Settings of the dynamic feature cache (``NeighborLoader(dynamic_cache=...)``).

    Attributes:
        fraction: share of ``cache_budget`` given to the dynamic cache,
            taken from the static feature cache's share (its least-used
            rows; ``cache.allocator``): the adjacency cache is planned as
            for the whole budget.
        decay: gamma of eq. 5, in (0, 1): how fast old accesses fade.
        update_every: T_update, batches between refreshes.
        max_epochs: epochs after which updates stop.
        min_gain: updates stop once a refresh moves the measured dynamic
            hit rate by less than this (absolute, up or down) ...
        patience: ... for this many refreshes in a row.
        max_replace: at most this share of the rows is replaced per refresh
            (bounds the host bytes read and the staging memory).
    """
    fraction: float = 0.1
    decay: float = 0.99
    update_every: int = 8
    max_epochs: int = 10
    min_gain: float = 0.001
    patience: int = 2
    max_replace: float = 0.25

    def __post_init__(self):
        for name, top in (("fraction", 1.0), ("decay", 1.0), ("max_replace", None)):
            value = getattr(self, name)
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0 and \
                (value < top if top else value <= 1)
            if not ok:
                raise ValueError(f"dynamic cache {name} must be in (0, 1{')' if top else ']'}, got {value!r}")
        if self.decay < 1 / _RESCALE_AT:  # scores are kept scaled by decay^-t, in float32
            raise ValueError(f"dynamic cache decay must be at least {1 / _RESCALE_AT:g}, got {self.decay!r}")
        for name in ("update_every", "max_epochs", "patience"):
            check_positive_int(f"dynamic cache {name}", getattr(self, name))
        if isinstance(self.min_gain, bool) or not isinstance(self.min_gain, (int, float)):
            raise ValueError(f"dynamic cache min_gain must be a number, got {self.min_gain!r}")

    @classmethod
    def resolve(cls, value) -> "DynamicCacheConfig | None":
        """``NeighborLoader``'s ``dynamic_cache`` argument: None/False (off),
        True (defaults), a dict of settings, or a ``DynamicCacheConfig``."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"dynamic_cache got unknown settings {sorted(unknown)}; "
                                 f"known: {sorted(cls.__dataclass_fields__)}")
            return cls(**value)
        if isinstance(value, cls):
            return value
        raise TypeError(f"dynamic_cache must be None, a bool, a dict or a DynamicCacheConfig, "
                        f"got {type(value).__name__}")


_RESCALE_AT = 1e30  # stored scores are rescaled before float32 overflows


class DynamicCache:
    """A bounded GPU cache of feature rows the static cache misses.

    Args:
        x: ``[N, D]`` the feature table (pinned host memory under a GPU):
            rows are read from it on a refresh; in internal (hot-first) ids,
            or in the user's with ``row_map``.
        num_static: F, rows ``< F`` are in the static cache (never here).
        capacity: K_dyn, rows of the dynamic cache (at most ``N - F``).
        config: ``DynamicCacheConfig``.
        device: where the cache lives.
        prior: optional ``[N - F]`` share of the batches that gathered each
            node outside the static cache (profiled); starts the scores.
        row_map: ``[N]`` int64 on ``device``, internal id -> row of ``x``,
            or None when ``x`` is in internal ids (``gather_rows``).

    Attributes:
        rows: ``[K, D]`` cached rows; ``slot``: ``[N - F]`` int32, the row of
            ``rows`` holding node ``F + j``, or -1 (the gather's ``slot``).
        active: False once updates have stopped.
    """

    def __init__(self, x: torch.Tensor, num_static: int, capacity: int, config: DynamicCacheConfig,
                 device, prior: torch.Tensor | None = None, row_map: torch.Tensor | None = None):
        self.device = torch.device(device)
        self.x, self.num_static, self.config = x, num_static, config
        self.row_map = row_map
        num_cold = x.size(0) - num_static
        if not isinstance(capacity, int) or capacity < 1 or capacity > num_cold:
            raise ValueError(f"capacity must be an int in [1, {num_cold}] (rows outside the static "
                             f"cache), got {capacity!r}")
        self.capacity = capacity
        self.score = torch.zeros(num_cold, dtype=torch.float32, device=self.device)
        if prior is not None:
            if prior.shape != (num_cold,):
                raise ValueError(f"prior must have shape [{num_cold}], got {tuple(prior.shape)}")
            self.score.copy_(prior.to(self.device, torch.float32) / (1 - config.decay))
        self.slot = torch.full((num_cold,), -1, dtype=torch.int32, device=self.device)
        self.rows = torch.zeros((capacity, x.size(1)), dtype=x.dtype, device=self.device)
        self.occupant = torch.full((capacity,), -1, dtype=torch.int64, device=self.device)
        self._scale = 1.0  # scores are stored times gamma ** -t
        self._window = torch.zeros(2, dtype=torch.int64, device=self.device)  # dynamic hits, rows
        self._cuda = self.device.type == "cuda"
        self._side = new_stream(self.device, owner=self) if self._cuda else None  # never a capture's
        self._scored = [None, None]  # events after the last two score updates
        self._committed = None  # event after the last commit
        self._pending = None  # a refresh whose rows are being read
        self._rates: list[float] = []  # measured dynamic hit rate after each refresh
        self._snapshot = None  # (host counts, event) of the window before the last commit
        # with a prior, the first refresh comes with the first batch
        self._since_refresh = config.update_every - 1 if prior is not None else 0
        self._low_gains = 0
        self.active = True
        self.epochs = 0
        self.stopped_because = None
        self.refreshes = 0
        self.rows_replaced = 0
        self._replaced_before_epoch = 0  # rows_replaced when the current epoch began
        self.stall_seconds = 0.0  # host time the loader's thread spent refreshing
        self._gpu_events: list = []  # (start, end) of each refresh's side-stream work

    # -- per batch -------------------------------------------------------
    def before_batch(self) -> None:
        """Called by the loader before a batch's gather: commit a refresh
        whose rows have arrived, start one every ``update_every`` batches."""
        if self._pending is not None and self._pending_ready():
            self._commit()
        if not self.active:
            return
        self._since_refresh += 1
        if self._since_refresh >= self.config.update_every and self._pending is None:
            self._since_refresh = 0
            self._refresh()

    def observe(self, node: torch.Tensor) -> torch.Tensor:
        """Score one batch's nodes (internal ids); returns the number of its
        rows the dynamic cache served (a device scalar)."""
        cold = node - self.num_static
        missed = cold >= 0
        index = cold.clamp(min=0)
        served = (missed & (self.slot[index] >= 0)).sum()
        self._window[0] += served
        self._window[1] += node.numel()
        if self.active:
            if self._scale / self.config.decay > _RESCALE_AT:  # before the scale leaves float32's range
                self.score.div_(self._scale)
                self._scale = 1.0
            self._scale /= self.config.decay
            self.score.index_add_(0, index, missed.to(torch.float32) * self._scale)
            if self._cuda:
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(self.device))  # this GPU's, whichever is current
                self._scored = [self._scored[1], event]
        return served

    def new_epoch(self) -> None:
        """Called by the loader when an epoch starts."""
        self._replaced_before_epoch = self.rows_replaced
        if self.active and self.epochs >= self.config.max_epochs:
            self._stop(f"max_epochs={self.config.max_epochs} reached")
        self.epochs += 1

    # -- refresh ---------------------------------------------------------
    def _refresh(self) -> None:
        start = time.perf_counter()
        if self._gain_stalled():
            self._stop(f"hit rate settled: moved less than min_gain={self.config.min_gain} for "
                       f"{self.config.patience} refreshes")
            self.stall_seconds += time.perf_counter() - start
            return
        if self._cuda:
            # scores as of the batch before last: no wait for the work in flight
            if self._scored[0] is None:
                self._side.wait_stream(torch.cuda.current_stream(self.device))
            else:
                self._side.wait_event(self._scored[0])
            if self._committed is not None:  # and the slots as the last commit left them
                self._side.wait_event(self._committed)
            began, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began.record(self._side)
            with torch.cuda.stream(self._side):
                plan = self._choose()
            done.record(self._side)
            self._gpu_events.append((began, done))
            self._pending = (plan, done)
        else:
            self._pending = (self._choose(), None)
        self.stall_seconds += time.perf_counter() - start

    def _choose(self):
        """Top-K by score; newcomers, the slots they take, their staged rows."""
        # On a GPU this runs on the side stream while the loader's stream may
        # still be adding the last batch's accesses into ``score`` (the refresh
        # waits only for the batch before last). ``torch.topk`` must not read
        # a moving input: CUDA's multi-block topk counts each block's hits in
        # radix passes, then reads the input again and writes them at the
        # counted offsets, so scores that grow in between leave slots of its
        # output unwritten (garbage node ids, out of range in ``member[node]``).
        # A copy made here (one read per score) is a snapshot it can trust.
        score = self.score.clone() if self._cuda else self.score
        value, node = torch.topk(score, self.capacity, sorted=True)
        wanted = value > 0
        member = torch.zeros_like(score, dtype=torch.bool)
        member[node] = wanted
        stays = (self.occupant >= 0) & member[self.occupant.clamp(min=0)]
        newcomer = wanted & (self.slot[node] < 0)
        limit = max(1, int(self.capacity * self.config.max_replace))
        # one host wait, for the sizes: newcomers in score order, free slots
        newcomers = node[newcomer][:limit]
        free = torch.nonzero(~stays).flatten()[:newcomers.numel()]
        newcomers = newcomers[:free.numel()]
        staged = gather_rows(self.x, newcomers + self.num_static, row_map=self.row_map, validate=False)
        return newcomers, free, staged

    def _pending_ready(self) -> bool:
        event = self._pending[1]
        return event is None or event.query()

    def _commit(self) -> None:
        (newcomers, free, staged), event = self._pending
        self._pending = None
        if event is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(event)
            for t in (newcomers, free, staged):
                t.record_stream(stream)  # made on the side stream, used on this one
        leaving = self.occupant[free]
        # evict the leaving nodes (empty slots have none: those writes go to
        # the newcomer's entry, set right after); no host sync
        real = leaving >= 0
        self.slot[torch.where(real, leaving, newcomers)] = torch.where(real, -1, free).to(torch.int32)
        self.rows[free] = staged
        self.occupant[free] = newcomers
        self.slot[newcomers] = free.to(torch.int32)
        self.refreshes += 1
        self.rows_replaced += newcomers.numel()
        # the hit counts since the previous commit, read on the host later
        counts = self._window.clone()
        self._window.zero_()
        if self._cuda:
            host = torch.empty(2, dtype=torch.int64, pin_memory=True)
            host.copy_(counts, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device))
            self._snapshot, self._committed = (host, ready), ready
        else:
            self._snapshot = (counts, None)

    def _gain_stalled(self) -> bool:
        """Fold in the last window's measured rate; True when the gain per
        refresh has stayed below ``min_gain`` for ``patience`` refreshes."""
        if self._snapshot is None:
            return False
        host, ready = self._snapshot
        if ready is not None and not ready.query():
            return False
        self._snapshot = None
        served, rows = host.tolist()
        if rows == 0 or served == 0 and not self._rates:
            return False  # nothing cached yet: no rate to settle
        rate = served / rows
        previous = self._rates[-1] if self._rates else None
        self._rates.append(rate)
        if previous is None:
            return False
        self._low_gains = self._low_gains + 1 if abs(rate - previous) < self.config.min_gain else 0
        return self._low_gains >= self.config.patience

    def _stop(self, why: str) -> None:
        self.active, self.stopped_because = False, why

    # -- report ----------------------------------------------------------
    @property
    def nbytes(self) -> int:
        return self.rows.numel() * self.rows.element_size()

    def as_dict(self) -> dict:
        row_bytes = self.x.size(1) * self.x.element_size()
        gpu = sum(a.elapsed_time(b) for a, b in self._gpu_events if b.query()) / 1e3 \
            if self._cuda else float("nan")
        return dict(dynamic_capacity=self.capacity, dynamic_refreshes=self.refreshes,
                    dynamic_rows_replaced=self.rows_replaced,
                    dynamic_refresh_bytes=self.rows_replaced * row_bytes,
                    dynamic_refresh_bytes_this_epoch=(self.rows_replaced - self._replaced_before_epoch) * row_bytes,
                    dynamic_refresh_stall_seconds=self.stall_seconds,
                    dynamic_refresh_gpu_seconds=gpu,
                    dynamic_hit_rates=list(self._rates),
                    dynamic_active=self.active, dynamic_stopped_because=self.stopped_because)
