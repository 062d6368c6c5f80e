"""PyG layers with the Triton aggregation (package docstring)."""
from __future__ import annotations

import torch
from torch_geometric.nn import GCN as PyGGCN
from torch_geometric.nn import GCNConv as PyGGCNConv
from torch_geometric.nn import GraphSAGE as PyGGraphSAGE
from torch_geometric.nn import SAGEConv as PyGSAGEConv
from torch_geometric.nn import SimpleConv as PyGSimpleConv
from torch_geometric.nn.conv import MessagePassing

from ..kernels.aggregate import aggregate

_KERNEL_AGGRS = {"mean": "mean", "sum": "sum", "add": "sum"}


class _KernelPropagate:
    """``propagate`` through ``kernels.aggregate`` for layers whose message
    is ``x_j``, optionally times ``edge_weight``; PyG's own otherwise."""

    def _kernel_covers(self, edge_index, kwargs) -> bool:
        return (isinstance(self.aggr, str) and self.aggr in _KERNEL_AGGRS
                and isinstance(edge_index, torch.Tensor) and edge_index.layout == torch.strided
                and edge_index.dim() == 2 and set(kwargs) <= {"x", "edge_weight"} and "x" in kwargs
                and not self._explain and not self._propagate_forward_pre_hooks
                and not self._propagate_forward_hooks and self.flow == "source_to_target"
                and self.decomposed_layers == 1)

    def propagate(self, edge_index, size=None, **kwargs):
        if not self._kernel_covers(edge_index, kwargs):
            return MessagePassing.propagate(self, edge_index, size=size, **kwargs)
        x = kwargs["x"]
        x_src, x_dst = x if isinstance(x, tuple) else (x, x)
        if size is not None and size[1] is not None:
            num_dst = size[1]
        else:
            num_dst = (x_dst if x_dst is not None else x_src).size(0)
        return aggregate(x_src, edge_index, num_dst, _KERNEL_AGGRS[self.aggr], kwargs.get("edge_weight"))


class SAGEConv(_KernelPropagate, PyGSAGEConv):
    """PyG's ``SAGEConv``; ``propagate`` aggregates in one Triton kernel."""

    # in the class itself: PyG then keeps it instead of compiling its own
    propagate = _KernelPropagate.propagate


class GCNConv(_KernelPropagate, PyGGCNConv):
    """PyG's ``GCNConv``; ``propagate`` aggregates the normalised messages in
    one Triton kernel."""

    propagate = _KernelPropagate.propagate


class SimpleConv(_KernelPropagate, PyGSimpleConv):
    """PyG's parameter-free ``SimpleConv`` (sum or mean of the optionally
    weighted neighbour features); aggregates in one Triton kernel."""

    propagate = _KernelPropagate.propagate


class GraphSAGE(PyGGraphSAGE):
    """PyG's ``GraphSAGE`` with ``tritongnn.nn.SAGEConv`` layers."""

    def init_conv(self, in_channels, out_channels, **kwargs) -> MessagePassing:
        return SAGEConv(in_channels, out_channels, **kwargs)


class GCN(PyGGCN):
    """PyG's ``GCN`` with ``tritongnn.nn.GCNConv`` layers."""

    def init_conv(self, in_channels, out_channels, **kwargs) -> MessagePassing:
        return GCNConv(in_channels, out_channels, **kwargs)
