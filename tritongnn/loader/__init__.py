"""The drop-in ``NeighborLoader`` and ``LinkNeighborLoader`` and the stages
they are built from (one module each, in the order data flows):
``arguments``, ``placement``, ``tiers``, ``schedule``, ``assemble``,
``pipeline``, ``replay``, with ``shard`` and ``timing`` beside them."""
from .link_neighbor_loader import LinkNeighborLoader
from .neighbor_loader import NeighborLoader

__all__ = ["LinkNeighborLoader", "NeighborLoader"]
