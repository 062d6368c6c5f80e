"""Link-level sampling as PyG 2.8's ``edge_sample`` (homogeneous, not disjoint):
a batch of supervision edges, their negatives drawn on the device, both ends
of every edge (and every negative's nodes) as one list of endpoints the
sampler's id map deduplicates (``NeighborSampler.sample_endpoints``), and
the labels laid out as PyG's ``LinkLoader`` gives them.

PyG's layout, kept here: with ``"binary"`` negatives, ``ceil(P * amount)``
random pairs (a source drawn by ``src_weight``, a destination by
``dst_weight``, each uniform without one; existing edges are not rejected:
PyG's negatives may be false negatives) follow the ``P`` positives, the
endpoints being ``[src, src_neg, dst, dst_neg]`` and ``edge_label_index``
their local ids viewed ``[2, -1]``; ``edge_label`` is the positives' labels
(ones, float, where none are given) then zeros. With ``"triplet"``, ``P *
amount`` destinations drawn by ``dst_weight``, the endpoints ``[src, dst,
dst_neg]``: ``src_index``, ``dst_pos_index`` and ``dst_neg_index``
(``[P, amount]``, ``[P]`` for one) are their local ids. PyG sorts the
distinct endpoints (``unique``); here they come in order of first
appearance, so local ids differ from PyG's while every index maps, through
``n_id``, to the same nodes.

Temporal batches (``edge_label_time`` with ``time_attr``, always disjoint)
take PyG's seed times: the positives' times ``t`` (``[P]``), each negative
its positive's (negative ``k`` of ``t[k % P]``); the seeds' times are
``[src_time, dst_time]``, for ``"binary"`` both ``t`` repeated over the
negatives, for ``"triplet"`` ``t`` then ``t`` repeated over the
destinations and their negatives. Batches carry ``edge_label_time`` (the
pairs' times, negatives included) or, for ``"triplet"``, ``seed_time``
(``t``). With node-level time a negative is drawn again while its node is
later than its positive's time (``draw_not_later``, PyG's ``neg_sample``).

Negatives are drawn with torch on the device (``torch.randint``, or a search
in the weights' prefix sums: the same distribution as PyG's
``torch.multinomial(weight, n, replacement=True)``, without its host sync),
from a device generator reseeded every batch from the loader's CPU
generator, so a seed gives the same batches on every run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch_geometric.sampler import NegativeSampling

# PyG's keys of a link batch, and the mode each belongs to (``LinkLoader.filter_fn``)
_BINARY_KEYS = ("edge_label_index", "edge_label", "edge_label_time")
_TRIPLET_KEYS = ("src_index", "dst_pos_index", "dst_neg_index", "seed_time")


def check_weight(weight, num_nodes: int, name: str, device) -> torch.Tensor | None:
    """A ``NegativeSampling`` node weight as ``[N]`` float64 prefix sums on
    ``device`` (None for uniform); ValueError for the wrong shape, negative
    or non-finite values, or weights that sum to 0."""
    if weight is None:
        return None
    if not isinstance(weight, torch.Tensor) or not (weight.dtype.is_floating_point or weight.dtype in (
            torch.int32, torch.int64)):
        raise TypeError(f"neg_sampling.{name} must be a float tensor of node weights, got "
                        f"{getattr(weight, 'dtype', type(weight).__name__)}")
    if weight.dim() != 1 or weight.numel() != num_nodes:
        raise ValueError(f"neg_sampling.{name} must have shape [{num_nodes}] (one weight per node), "
                         f"got {tuple(weight.shape)}")
    weight = weight.detach().to(device=device, dtype=torch.float64)
    if not bool(torch.isfinite(weight).all()) or bool((weight < 0).any()):
        raise ValueError(f"neg_sampling.{name} must hold finite, non-negative weights")
    cdf = torch.cumsum(weight, 0)
    if num_nodes == 0 or float(cdf[-1]) <= 0:
        raise ValueError(f"neg_sampling.{name} sums to 0: no node can be drawn")
    return cdf


def draw_nodes(count: int, num_nodes: int, cdf: torch.Tensor | None, generator: torch.Generator,
               device) -> torch.Tensor:
    """``[count]`` int64 node ids drawn with replacement on ``device`` from
    ``generator`` (of that device): uniform, or in proportion to the
    weights whose prefix sums are ``cdf`` (a node of weight 0 is never
    drawn: the search finds the first sum past the draw)."""
    if cdf is None:
        return torch.randint(num_nodes, (count,), generator=generator, device=device)
    draw = torch.rand(count, dtype=torch.float64, generator=generator, device=device) * cdf[-1]
    return torch.searchsorted(cdf, draw, right=True).clamp_(max=num_nodes - 1)


def draw_not_later(seed_time: torch.Tensor, amount, node_time: torch.Tensor, cdf: torch.Tensor | None,
                   generator: torch.Generator, device) -> torch.Tensor:
    """PyG 2.8's ``neg_sample`` with node time: ``ceil(P * amount)`` negatives
    for ``P`` positives of times ``seed_time``, none later than its
    positive's time where five redraws find one. PyG draws ``ceil(amount)``
    rows of ``P`` (negative ``k`` belongs to positive ``k % P``), marks
    those whose ``node_time`` passes their positive's time (``>``), redraws
    the marked at most five times, keeping marked after a redraw those whose
    time is not before it (``>=``, PyG's test there), and sets the still
    marked to ``node_time.argmin()``. Here every round draws a whole block
    and takes the marked places from it (the same distribution: the draws
    are independent), without a host sync."""
    num_pos = seed_time.numel()
    num_neg, rows = math.ceil(num_pos * amount), math.ceil(amount)
    num_nodes = node_time.numel()
    bound = seed_time.view(1, -1).expand(rows, -1)
    out = draw_nodes(rows * num_pos, num_nodes, cdf, generator, device).view(rows, num_pos)
    invalid = node_time[out] > bound
    for _ in range(5):
        fresh = draw_nodes(rows * num_pos, num_nodes, cdf, generator, device).view(rows, num_pos)
        out = torch.where(invalid, fresh, out)
        invalid = invalid & (node_time[fresh] >= bound)
    out = torch.where(invalid, node_time.argmin(), out)
    return out.reshape(-1)[:num_neg]


def cast_neg_sampling(neg_sampling, neg_sampling_ratio) -> NegativeSampling | None:
    """PyG's resolution of the two arguments (``LinkLoader``): a non-zero
    ``neg_sampling_ratio`` means ``NegativeSampling("binary", ratio)``;
    ``neg_sampling`` as a ``NegativeSampling``, a dict, a mode string or
    None. Bad values raise ValueError/TypeError naming them."""
    if neg_sampling_ratio is not None and neg_sampling_ratio != 0.0:
        if isinstance(neg_sampling_ratio, bool) or not isinstance(neg_sampling_ratio, (int, float)):
            raise TypeError(f"neg_sampling_ratio must be an int or float, got {neg_sampling_ratio!r}")
        neg_sampling = NegativeSampling("binary", neg_sampling_ratio)
    if neg_sampling is None:
        return None
    if isinstance(neg_sampling, (str, dict, NegativeSampling)):
        try:
            return NegativeSampling.cast(neg_sampling)
        except ValueError as error:
            raise ValueError(f"neg_sampling={neg_sampling!r}: {error}") from None
    raise TypeError(f"neg_sampling must be a NegativeSampling, a dict, 'binary', 'triplet' or None, "
                    f"got {type(neg_sampling).__name__}")


@dataclass
class LinkLabels:
    """What a link batch carries besides its subgraph (PyG's
    ``SamplerOutput.metadata`` for links), in the batch's local ids:
    ``edge_label_index`` / ``edge_label`` (no negatives, or ``"binary"``),
    or ``src_index`` / ``dst_pos_index`` / ``dst_neg_index``
    (``"triplet"``); ``input_id``, the supervision edges' positions;
    temporal: ``edge_label_time`` (binary keys) or ``seed_time``
    (``"triplet"``), PyG's ``src_time``."""
    input_id: torch.Tensor
    triplet: bool = False
    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    src_index: torch.Tensor | None = None
    dst_pos_index: torch.Tensor | None = None
    dst_neg_index: torch.Tensor | None = None
    edge_label_time: torch.Tensor | None = None
    seed_time: torch.Tensor | None = None

    def fill(self, batch) -> None:
        """Set the keys on ``batch`` as PyG's ``LinkLoader.filter_fn`` does:
        a value set, a None deleting what ``data`` had under that key (the
        other mode's keys deleted too, as PyG's sanity removals)."""
        batch.input_id = self.input_id
        keys = _TRIPLET_KEYS if self.triplet else _BINARY_KEYS
        for key in keys:
            value = getattr(self, key, None)
            if value is not None:
                batch[key] = value
            elif key in batch:
                del batch[key]
        if self.triplet:
            for key in ("edge_label_index", "edge_label_time"):
                if key in batch:
                    del batch[key]
        if "batch" in batch:  # PyG sets out.batch: None where not disjoint
            del batch["batch"]

    def as_metadata(self) -> tuple:
        """PyG's ``metadata`` tuple of a link ``SamplerOutput``."""
        if self.triplet:
            return (self.input_id, self.src_index, self.dst_pos_index, self.dst_neg_index, self.seed_time)
        return (self.input_id, self.edge_label_index, self.edge_label, self.edge_label_time)


class LinkBatches:
    """Draws a batch's negatives and lays out its endpoints and labels.

    Args:
        neg_sampling: a ``NegativeSampling`` (``cast_neg_sampling``) or None.
        num_nodes: the graph's nodes (negatives are drawn among them).
        device: where negatives are drawn and labels live.
        new_id: ``[N]`` the sampler's id of each node (a cache's hot-first
            order), or None: the node ids themselves.
        node_time: ``[N]`` node times by node id on ``device`` (node-level
            ``time_attr``: temporal negatives, ``draw_not_later``), or None.
    """

    def __init__(self, neg_sampling: NegativeSampling | None, num_nodes: int, device, new_id=None,
                 node_time: torch.Tensor | None = None):
        self.neg_sampling, self.num_nodes = neg_sampling, int(num_nodes)
        self.device, self.new_id, self.node_time = torch.device(device), new_id, node_time
        self.src_cdf = self.dst_cdf = None
        if neg_sampling is not None:
            self.src_cdf = check_weight(neg_sampling.src_weight, self.num_nodes, "src_weight", self.device)
            self.dst_cdf = check_weight(neg_sampling.dst_weight, self.num_nodes, "dst_weight", self.device)
            if self.num_nodes == 0:
                raise ValueError("negative sampling on a graph with no nodes: there is nothing to draw")
        # the device's own stream of draws, reseeded a batch from the loader's generator
        self.generator = torch.Generator(device=self.device) if neg_sampling is not None else None

    @property
    def triplet(self) -> bool:
        return self.neg_sampling is not None and self.neg_sampling.is_triplet()

    def endpoints(self, src: torch.Tensor, dst: torch.Tensor, generator: torch.Generator,
                  time: torch.Tensor | None = None) -> torch.Tensor:
        """``[C]`` int64 endpoints of the positives ``src -> dst`` (``[P]``
        node ids on ``device``) and their negatives, in PyG's order (module
        docstring), in the sampler's ids; one seed is drawn from
        ``generator`` (the loader's CPU one) where there are negatives.
        ``time``: the positives' ``edge_label_time`` (``[P]``; with
        ``node_time`` no negative is later than its positive where PyG's
        draws find one)."""
        parts = [src, dst]
        ns = self.neg_sampling
        if ns is not None:
            self.generator.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
            num_neg = math.ceil(src.numel() * ns.amount)
            if ns.is_binary():
                src_neg = self._draw(num_neg, self.src_cdf, time)
                parts = [src, src_neg, dst, self._draw(num_neg, self.dst_cdf, time)]
            else:
                parts = [src, dst, self._draw(num_neg, self.dst_cdf, time)]
        endpoints = torch.cat(parts)
        return endpoints if self.new_id is None else self.new_id.index_select(0, endpoints)

    def _draw(self, count: int, cdf, time: torch.Tensor | None) -> torch.Tensor:
        if time is not None and self.node_time is not None:
            return draw_not_later(time, self.neg_sampling.amount, self.node_time, cdf, self.generator, self.device)
        return draw_nodes(count, self.num_nodes, cdf, self.generator, self.device)

    def times(self, time: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(seed_time, src_time)`` of a temporal batch from its positives'
        ``time`` (``[P]``), PyG's (module docstring): one time per endpoint
        of ``endpoints``, and what the batch carries (``edge_label_time``,
        or ``seed_time`` for ``"triplet"``)."""
        ns, num_pos = self.neg_sampling, time.numel()
        if ns is None:
            return torch.cat([time, time]), time
        if ns.is_triplet():
            return time.repeat(2 + int(ns.amount)), time
        src_time = time.repeat(1 + math.ceil(ns.amount))[:num_pos + math.ceil(num_pos * ns.amount)]
        return torch.cat([src_time, src_time]), src_time

    def sample(self, sampler, src: torch.Tensor, dst: torch.Tensor, input_id: torch.Tensor,
               edge_label: torch.Tensor | None, generator: torch.Generator, time: torch.Tensor | None = None,
               validate: bool = True):
        """One link batch on ``sampler`` (a ``NeighborSampler``): the
        positives ``src -> dst`` (``[P]`` node ids on ``device``, at
        positions ``input_id``, labelled ``edge_label`` or None, of times
        ``time`` or None) and their negatives (``endpoints``), sampled around
        their distinct endpoints (``sample_endpoints``), or, where sampling
        is disjoint, each endpoint its own subgraph in order, ``batch`` its
        positive's slot (PyG's ``edge_sample``). Returns the
        ``SamplerOutput`` with its ``LinkLabels`` as ``metadata``."""
        endpoints = self.endpoints(src, dst, generator, time)
        seed_time, src_time = (None, None) if time is None else self.times(time)
        if sampler.disjoint:
            out, local = sampler.sample(endpoints, generator, validate=validate, seed_time=seed_time), None
            out.batch = out.batch % src.numel()  # (a positive's and its negatives' slots)
        else:
            out, local = sampler.sample_endpoints(endpoints, generator, validate=validate)
        out.metadata = self.labels(input_id, local, edge_label, endpoints.numel(), src_time)
        return out

    def labels(self, input_id: torch.Tensor, local: torch.Tensor | None, edge_label: torch.Tensor | None,
               num_endpoints: int, src_time: torch.Tensor | None = None) -> LinkLabels:
        """The ``LinkLabels`` of a batch from its endpoints' ``local`` ids
        (``NeighborSampler.sample_endpoints``; None where sampling is
        disjoint: each of the ``num_endpoints`` is its own seed, in order),
        its positives' labels (``edge_label[input_id]``, or None) and, in a
        temporal batch, ``times``' ``src_time``."""
        labels = self._labels(input_id, local, edge_label, num_endpoints)
        if self.triplet:
            labels.seed_time = src_time
        else:
            labels.edge_label_time = src_time
        return labels

    def _labels(self, input_id, local, edge_label, num_endpoints: int) -> LinkLabels:
        num_pos = input_id.numel()
        if local is None:
            local = torch.arange(num_endpoints, device=self.device)
            if self.triplet:  # PyG's: negative k is triplet k % P's (its subgraph slot)
                negatives = local[2 * num_pos:].view(-1, num_pos).t()
                return LinkLabels(input_id=input_id, triplet=True, src_index=local[:num_pos],
                                  dst_pos_index=local[num_pos:2 * num_pos],
                                  dst_neg_index=negatives.reshape(num_pos, -1).squeeze(-1))
        if self.triplet:
            return LinkLabels(input_id=input_id, triplet=True, src_index=local[:num_pos],
                              dst_pos_index=local[num_pos:2 * num_pos],
                              dst_neg_index=local[2 * num_pos:].view(num_pos, -1).squeeze(-1))
        if self.neg_sampling is not None:
            num_neg = local.numel() // 2 - num_pos
            if edge_label is None:
                edge_label = torch.ones(num_pos, device=self.device)
            edge_label = torch.cat([edge_label, edge_label.new_zeros((num_neg,) + edge_label.shape[1:])])
        return LinkLabels(input_id=input_id, edge_label_index=local.view(2, -1), edge_label=edge_label)
