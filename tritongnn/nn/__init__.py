"""Drop-in PyG layers whose neighbour aggregation runs in a Triton kernel.

``tritongnn.nn.SAGEConv`` is PyG's ``SAGEConv`` (same arguments, parameters
and outputs) with the sum/mean aggregation of ``kernels.aggregate`` in place
of message materialisation plus scatter; ``tritongnn.nn.GraphSAGE`` is PyG's
``GraphSAGE`` built from it. Anything the kernel does not cover (other
aggregations, sparse adjacency, explain mode, hooks) falls back to PyG.
"""
from .conv import GraphSAGE, SAGEConv

__all__ = ["SAGEConv", "GraphSAGE"]
