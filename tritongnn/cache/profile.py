"""Full-link offline access profiling (GARDEN section IV-B, eq. 4).

Before training, a few pre-sampling epochs run the real sampler over the
training seeds and count, per node, how often a batch touches its feature row
and its neighbour list. The counts rank nodes for the dual cache.

In a batch sampled over L hops, let ``V_0`` be the seeds and ``V_l`` the nodes
after hop ``l`` (``V_l = V_{l-1}`` plus the new nodes of hop ``l``; a batch's
``n_id`` is ``V_L`` in hop order). Hop ``l`` aggregates from its source set
``V_l`` into its destination set ``V_{l-1}``. GARDEN's feature weight of node
``v`` in one batch is

    W_feat(v) = 1(v in V_in) + sum_{l=1..L} ( w_l * 1(v in V_l) + 1(v in V_{l-1}) )

with ``V_in = V_L``, the nodes whose input features are fetched: every node
of the batch counts once as an input, plus a layer-weighted count for each
layer it is a source of and one for each layer it is a destination of, so the
nodes reused across layers (seeds and early hops) weigh more than the outer
hop. It depends only on the hop at which ``v`` first appears (its depth
``d``): ``1 + sum_{l=max(d,1)..L} w_l + (L - d)``.

Input accesses count, unweighted, the batches whose feature gather reads a
node's row (``v in V_in``): the allocator ranks by eq. (4) and reports the
gather's expected hit rate from these.

Adjacency accesses count neighbour-list reads: a node's list is read once
per batch when it is in a hop's frontier, i.e. for every node of depth
``< L`` (not only the seeds, which is what destination-only profiling counts).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import torch


def lists_read(num_sampled_nodes: list[int]) -> int:
    """Neighbour lists a batch reads: those of its nodes in hop order, all
    but the last hop's new nodes (``num_sampled_nodes`` as in ``SamplerOutput``)."""
    return sum(num_sampled_nodes[:-1])


def depth_weights(num_layers: int, layer_weights=None) -> torch.Tensor:
    """``[L + 1]`` float64: eq. (4)'s feature weight of a node first sampled
    at depth ``d`` (0 = seed), for ``d = 0 .. L``.

    Args:
        num_layers: L, the number of hops.
        layer_weights: ``w_1 .. w_L`` (default all 1).
    """
    if layer_weights is None:
        layer_weights = [1.0] * num_layers
    layer_weights = [float(w) for w in layer_weights]
    if len(layer_weights) != num_layers:
        raise ValueError(f"layer_weights has {len(layer_weights)} entries, expected one per hop "
                         f"({num_layers})")
    if any(w < 0 for w in layer_weights):
        raise ValueError(f"layer_weights must be >= 0, got {layer_weights}")
    weights = []
    for d in range(num_layers + 1):
        weights.append(1.0 + sum(layer_weights[max(d, 1) - 1:]) + (num_layers - d))
    return torch.tensor(weights, dtype=torch.float64)


@dataclass
class AccessProfile:
    """Per-node access counts from pre-sampling epochs.

    Attributes:
        feature: ``[N]`` float64 summed eq. (4) feature weights.
        inputs: ``[N]`` int64 batches whose gather read the node's row.
        adjacency: ``[N]`` int64 neighbour-list reads.
        epochs: pre-sampling epochs run.
        num_batches: batches sampled in them.
        seconds: wall time of the profiling.
        num_neighbors: the fanouts profiled.
        layer_weights: ``w_1 .. w_L`` of eq. (4).
    """
    feature: torch.Tensor
    inputs: torch.Tensor
    adjacency: torch.Tensor
    epochs: int
    num_batches: int
    seconds: float
    num_neighbors: list = field(default_factory=list)
    layer_weights: list = field(default_factory=list)

    @property
    def num_nodes(self) -> int:
        return self.feature.numel()

    def to(self, device) -> "AccessProfile":
        """The profile with its counts on ``device``."""
        return dataclasses.replace(self, feature=self.feature.to(device), inputs=self.inputs.to(device),
                                   adjacency=self.adjacency.to(device))

    def save(self, path: str | os.PathLike) -> None:
        """Write the profile (tensors on the CPU) so a later run can skip profiling."""
        torch.save({"feature": self.feature.cpu(), "inputs": self.inputs.cpu(),
                    "adjacency": self.adjacency.cpu(),
                    "epochs": self.epochs, "num_batches": self.num_batches, "seconds": self.seconds,
                    "num_neighbors": list(self.num_neighbors),
                    "layer_weights": list(self.layer_weights)}, path)

    @classmethod
    def load(cls, path: str | os.PathLike, num_nodes: int | None = None,
             num_neighbors=None) -> "AccessProfile":
        """Read a saved profile; with ``num_nodes`` / ``num_neighbors``, check
        that it was made for this graph and these fanouts."""
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except OSError:
            raise
        except Exception as error:  # not a torch.save file, or one holding more than tensors and numbers
            raise ValueError(f"{os.fspath(path)!r} is not a saved AccessProfile ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''})") from error
        keys = {"feature", "inputs", "adjacency", "epochs", "num_batches", "seconds", "num_neighbors",
                "layer_weights"}
        if not isinstance(state, dict) or set(state) != keys:
            raise ValueError(f"{os.fspath(path)!r} is not a saved AccessProfile")
        return cls(**state).check(num_nodes, num_neighbors, f"the profile in {os.fspath(path)!r}")

    def check(self, num_nodes: int | None = None, num_neighbors=None,
              name: str = "the profile") -> "AccessProfile":
        """Raise ValueError unless its counts are ``[N]`` tensors (float
        ``feature``, integer ``inputs`` and ``adjacency``), N is
        ``num_nodes`` and it was made with ``num_neighbors`` (each checked
        when given); returns self."""
        size = self.feature.numel() if isinstance(self.feature, torch.Tensor) else None
        for field_name, floating in (("feature", True), ("inputs", False), ("adjacency", False)):
            counts = getattr(self, field_name)
            if not isinstance(counts, torch.Tensor) or counts.dim() != 1 or counts.numel() != size \
                    or counts.dtype.is_floating_point != floating or counts.dtype == torch.bool:
                kind = "floating-point" if floating else "integer"
                what = f"{counts.dtype} of shape {tuple(counts.shape)}" if isinstance(counts, torch.Tensor) \
                    else type(counts).__name__
                raise ValueError(f"{name}: {field_name} must be a 1-D {kind} tensor of one count per "
                                 f"node, as many as feature has, got {what}")
        if num_nodes is not None and self.num_nodes != num_nodes:
            raise ValueError(f"{name} counts {self.num_nodes} nodes, the graph has {num_nodes}")
        if num_neighbors is not None and list(num_neighbors) != list(self.num_neighbors):
            raise ValueError(f"{name} was made with num_neighbors={list(self.num_neighbors)}, "
                             f"not {list(num_neighbors)}")
        return self
