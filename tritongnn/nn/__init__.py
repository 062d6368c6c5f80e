"""Drop-in PyG layers whose neighbour aggregation runs in a Triton kernel.

``tritongnn.nn.SAGEConv``, ``GCNConv`` and ``SimpleConv`` are PyG's layers
(same arguments, parameters and outputs) with the sum/mean aggregation of
``kernels.aggregate`` in place of message materialisation plus scatter;
``GATConv`` with the attention of ``kernels.attention`` (softmax and
weighted sum per destination, no per-edge tensors);
``tritongnn.nn.GraphSAGE``, ``GCN`` and ``GAT`` are PyG's models built from them;
trimmed (``num_sampled_nodes_per_hop``), their layers compute only the rows
later layers read (``conv.TrimToDestinations``). ``SAGEConv`` adds its root
term by ``addmm_`` and the root rows' gradient in place, and a normalised
``GCNConv`` adds its self loops' messages without appending loops to
``edge_index`` and aggregates before its linear map where that is cheaper
(their docstrings).
Anything the kernels do not cover (other aggregations, sparse adjacency,
explain mode, hooks) falls back to PyG.
"""
from .conv import GAT, GATConv, GCN, GCNConv, GraphSAGE, SAGEConv, SimpleConv

__all__ = ["SAGEConv", "GCNConv", "GATConv", "SimpleConv", "GraphSAGE", "GCN", "GAT"]
