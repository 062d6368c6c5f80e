"""The drop-in ``NeighborLoader`` and the stages it is built from (one
module each, in the order data flows): ``arguments``, ``placement``,
``tiers``, ``schedule``, ``assemble``, ``pipeline``, ``replay``, with
``shard`` and ``timing`` beside them."""
from .neighbor_loader import NeighborLoader

__all__ = ["NeighborLoader"]
