"""PyG layers with the Triton aggregation (package docstring)."""
from __future__ import annotations

import torch
from torch.nn.modules import module as nn_module
from torch.nn.parameter import UninitializedParameter
from torch_geometric.nn import GAT as PyGGAT
from torch_geometric.nn import GATConv as PyGGATConv
from torch_geometric.nn import GCN as PyGGCN
from torch_geometric.nn import GCNConv as PyGGCNConv
from torch_geometric.nn import GraphSAGE as PyGGraphSAGE
from torch_geometric.nn import SAGEConv as PyGSAGEConv
from torch_geometric.nn import SimpleConv as PyGSimpleConv
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.dense.linear import Linear as PyGLinear
from torch_geometric.utils._trim_to_layer import TrimToLayer

from ..kernels.aggregate import DTYPES as _KERNEL_DTYPES, aggregate
from ..kernels.attention import MAX_CHANNELS as _ATTENTION_MAX_CHANNELS, attend
from .functional import add_bias, linear

_KERNEL_AGGRS = {"mean": "mean", "sum": "sum", "add": "sum"}


class _KernelPropagate:
    """``propagate`` through ``kernels.aggregate`` for layers whose message
    is ``x_j``, optionally times ``edge_weight``; PyG's own otherwise."""

    def _kernel_covers(self, edge_index, kwargs) -> bool:
        if not (isinstance(self.aggr, str) and self.aggr in _KERNEL_AGGRS and _plain_edges(self, edge_index)
                and set(kwargs) <= {"x", "edge_weight"} and "x" in kwargs):
            return False
        x, weight = kwargs["x"], kwargs.get("edge_weight")
        x_src = x[0] if isinstance(x, tuple) else x
        # what the kernel takes; anything else (float64, [E, 1] weights, node
        # features of more dims, ...) is PyG's to compute or to refuse
        return (isinstance(x_src, torch.Tensor) and x_src.dim() == 2 and x_src.dtype in _KERNEL_DTYPES
                and self.node_dim in (0, -2)
                and (weight is None or (isinstance(weight, torch.Tensor) and weight.dim() == 1)))

    def propagate(self, edge_index, size=None, **kwargs):
        if not self._kernel_covers(edge_index, kwargs):
            return MessagePassing.propagate(self, edge_index, size=size, **kwargs)
        x = kwargs["x"]
        x_src, x_dst = x if isinstance(x, tuple) else (x, x)
        num_dst = _checked_num_dst(self, edge_index, size, x_src, x_dst)
        return aggregate(x_src, edge_index, num_dst, _KERNEL_AGGRS[self.aggr], kwargs.get("edge_weight"))


_PASSING_HOOKS = ("_propagate_forward_pre_hooks", "_propagate_forward_hooks", "_message_forward_pre_hooks",
                  "_message_forward_hooks", "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
                  "_message_and_aggregate_forward_pre_hooks", "_message_and_aggregate_forward_hooks",
                  "_edge_update_forward_pre_hooks", "_edge_update_forward_hooks")


def _plain_edges(layer: MessagePassing, edge_index) -> bool:
    """A dense ``[2, E]`` int64 ``edge_index``, and nothing that expects
    PyG's own message passing: explain mode, hooks on its steps (the kernels
    run none of them), another flow, decomposed layers."""
    return (isinstance(edge_index, torch.Tensor) and edge_index.layout == torch.strided
            and edge_index.dim() == 2 and edge_index.dtype == torch.int64
            and not layer._explain and not any(getattr(layer, name, None) for name in _PASSING_HOOKS)
            and layer.flow == "source_to_target" and layer.decomposed_layers == 1)


def _checked_num_dst(layer: MessagePassing, edge_index, size, x_src, x_dst) -> int:
    """PyG's own checks of ``edge_index`` and ``size`` against the inputs,
    as ``layer``'s propagate makes them; the number of destinations."""
    size = layer._check_input(edge_index, size)
    layer._set_size(size, 0, x_src)
    if x_dst is not None:
        layer._set_size(size, 1, x_dst)
    return size[1] if size[1] is not None else size[0]


def _plain_linear(lin, with_bias: bool = False) -> bool:
    """``lin`` is PyG's ``Linear`` without bias (or with one, where
    ``with_bias``), initialised, with no hooks: its ``weight`` (and
    ``bias``) alone are its forward, so a caller may fold it into a matmul
    of its own."""
    return (type(lin) is PyGLinear and (with_bias or lin.bias is None)
            and not isinstance(lin.weight, UninitializedParameter)
            and not (lin._forward_hooks or lin._forward_pre_hooks or lin._backward_hooks
                     or lin._backward_pre_hooks)
            and not (nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks
                     or nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks))


def _leading_rows(x_src: torch.Tensor, x_dst: torch.Tensor) -> bool:
    """``x_dst`` is ``x_src`` or a view of its leading rows, in memory and in
    autograd (sliced from it; an in-place change of either moves both): its
    gradient is then the leading rows of one more gradient to ``x_src``."""
    if x_dst is x_src:
        return True
    base = x_src if x_src._base is None else x_src._base
    parent = x_dst.grad_fn.next_functions if x_dst.grad_fn is not None else ()
    # sliced from x_src's autograd node: its grad_fn, or a leaf's accumulator
    sliced = len(parent) == 1 and (parent[0][0] is x_src.grad_fn if x_src.grad_fn is not None
                                   else getattr(parent[0][0], "variable", None) is x_src)
    return (x_dst._base is base and x_src.requires_grad and sliced and _leading_in_memory(x_src, x_dst))


def _leading_in_memory(x_src: torch.Tensor, x_dst: torch.Tensor) -> bool:
    """``x_dst``'s elements are ``x_src``'s leading rows (same storage and
    layout), whatever autograd knows of the two."""
    return (x_dst.dtype == x_src.dtype and x_dst.device == x_src.device and x_dst.dim() == 2
            and x_src.dim() == 2 and x_dst.data_ptr() == x_src.data_ptr() and x_dst.stride() == x_src.stride()
            and x_dst.size(1) == x_src.size(1) and x_dst.size(0) <= x_src.size(0))


def _leads(x_src: torch.Tensor, x_dst: torch.Tensor) -> bool:
    """``x_dst`` holds ``x_src``'s leading rows: in memory, and in autograd
    too where either needs a gradient (its gradient then reaches
    ``x_src``'s rows)."""
    if x_src.requires_grad or x_dst.requires_grad:
        return _leading_rows(x_src, x_dst)
    return _leading_in_memory(x_src, x_dst)


class SAGEConv(_KernelPropagate, PyGSAGEConv):
    """PyG's ``SAGEConv``; ``propagate`` aggregates in one Triton kernel.

    Where the layer is plain (root weight, no projection or normalisation, a
    bias-free ``lin_r`` without hooks, no autocast) and the kernel covers
    it, the forward is PyG's with passes over ``[N, D]`` saved: the root term
    is added by its own matmul (``addmm_`` onto ``lin_l``'s output: no
    temporary and sum), and destinations that lead the sources (a sampled
    block's, or ``x`` itself) are read through ``aggregate(with_root=True)``,
    whose backward adds their gradient into the sources' in place (no
    zero-padded gradient to allocate and sum).
    """

    # in the class itself: PyG then keeps it instead of compiling its own
    propagate = _KernelPropagate.propagate

    def forward(self, x, edge_index, size=None):
        pair = (x, x) if isinstance(x, torch.Tensor) else x
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], torch.Tensor)
                and size is None and self.root_weight and not self.project and not self.normalize
                and _plain_linear(self.lin_r) and self._kernel_covers(edge_index, {"x": pair})
                and pair[1].dtype == self.lin_r.weight.dtype
                and not torch.is_autocast_enabled(pair[1].device.type)):
            return PyGSAGEConv.forward(self, x, edge_index, size)
        x_src, x_dst = pair
        num_dst = _checked_num_dst(self, edge_index, None, x_src, x_dst)
        reduce = _KERNEL_AGGRS[self.aggr]
        if x_src.requires_grad and _leading_rows(x_src, x_dst):
            out, x_dst = aggregate(x_src, edge_index, num_dst, reduce, with_root=True)
        else:
            out = aggregate(x_src, edge_index, num_dst, reduce)
        # lin_l's bias gradient by one column sum (nn.functional)
        out = linear(out, self.lin_l.weight, self.lin_l.bias) if _plain_linear(self.lin_l, with_bias=True) \
            else self.lin_l(out)
        # in place: an out-of-place addmm copies its input to the result first
        return out.addmm_(x_dst, self.lin_r.weight.t())


def _check_edge_weight(edge_weight, edge_index) -> None:
    """``edge_weight`` one weight per edge of a dense ``edge_index``:
    ``[E]``, or ``[E, 1]`` (PyG's normalisation takes that too and gives
    the same output). PyG indexes anything else with an edge mask first (an
    IndexError, or a shape error deep in the aggregation); a sparse
    ``edge_index`` carries its own weights."""
    if edge_weight is None or not (isinstance(edge_index, torch.Tensor) and edge_index.layout == torch.strided
                                   and edge_index.dim() == 2):
        return
    if not isinstance(edge_weight, torch.Tensor):
        raise TypeError(f"edge_weight must be a tensor of shape [{edge_index.size(1)}], got "
                        f"{type(edge_weight).__name__}")
    num_edges = edge_index.size(1)
    if tuple(edge_weight.shape) not in ((num_edges,), (num_edges, 1)):
        raise ValueError(f"edge_weight must have shape [{num_edges}] (one weight per edge of edge_index "
                         f"{tuple(edge_index.shape)}), got {tuple(edge_weight.shape)}")


class GCNConv(_KernelPropagate, PyGGCNConv):
    """PyG's ``GCNConv``; ``propagate`` aggregates the normalised messages in
    one Triton kernel.

    Normalised with self loops (the defaults, not ``cached``) where the
    kernel covers it, the forward keeps ``edge_index`` as it is: PyG's
    ``gcn_norm`` drops the existing self loops (a boolean-mask index, a host
    sync) and appends one loop per node, which leaves the edges out of
    destination order, for the aggregation to sort again at every layer.
    Here the loops' messages are added by one row-wise pass instead
    (``deg^-1 * loop_weight * x``), an existing self loop's weight moves to
    its node's loop as in ``gcn_norm``, and the edges keep the sampler's
    order (no sort, no sync). It also picks the cheaper order of the two
    linear maps, ``A (x W)`` as PyG or ``(A x) W`` (``_aggregate_first``):
    aggregating first needs no gradient through the aggregation when ``x``
    needs none (a model's input features) and runs ``lin`` on the
    destinations only.

    It also takes ``x`` as a pair ``(x_src, x_dst)`` whose ``x_dst`` is
    ``x_src``'s leading rows (``TrimToDestinations``, as ``GCN`` trims):
    destination ``i`` is source ``i``, so the output holds the destinations'
    rows only, equal to PyG's leading rows on ``x_src``. Any other pair is
    PyG's to refuse (its layer is not bipartite).
    """

    propagate = _KernelPropagate.propagate

    def forward(self, x, edge_index, edge_weight=None):
        _check_edge_weight(edge_weight, edge_index)
        if isinstance(x, (tuple, list)):
            if not (len(x) == 2 and all(isinstance(t, torch.Tensor) for t in x) and _leads(*x)):
                return PyGGCNConv.forward(self, x, edge_index, edge_weight)  # its ValueError
            x_src, x_dst = x
        else:
            x_src = x_dst = x
        given = {"x": x_src} if edge_weight is None else {"x": x_src, "edge_weight": edge_weight}
        if not (self.normalize and self.add_self_loops and not self.cached
                and self._kernel_covers(edge_index, given)
                and (edge_weight is None or edge_weight.is_floating_point())):
            out = PyGGCNConv.forward(self, x_src, edge_index, edge_weight)
            return out if x_dst is x_src else out.narrow(0, 0, x_dst.size(0))
        # PyG's checks of edge_index against x, ahead of the normalisation's indexing
        num_dst = _checked_num_dst(self, edge_index, None, x_src, x_dst)
        num_src = x_src.size(0)
        row, col = edge_index[0], edge_index[1]
        loop = row == col
        if edge_weight is None:  # gcn_norm's ones, its new loops' too (improved or not, as PyG 2.8 does)
            weight = torch.ones(row.numel(), dtype=x_src.dtype, device=x_src.device)
            loop_weight = torch.ones(num_src, dtype=x_src.dtype, device=x_src.device)
        else:  # a node's loop: its existing self loop's weight, else the fill value
            weight = edge_weight
            fill = torch.full((num_src + 1,), 2.0 if self.improved else 1.0, dtype=weight.dtype,
                              device=weight.device)
            loop_weight = fill.scatter(0, torch.where(loop, row, num_src), weight)[:num_src]  # slot N: none
        weight = weight.masked_fill(loop, 0)  # an existing loop's message comes with its node's loop
        # every source's degree: a source's own is read by the norm of its edges (dis[row])
        deg = loop_weight.index_add(0, col, weight)
        deg_inv_sqrt = deg.pow(-0.5).masked_fill(deg == 0, 0)
        norm = deg_inv_sqrt[row] * weight * deg_inv_sqrt[col]
        loop_norm = (deg_inv_sqrt.square() * loop_weight)[:num_dst].unsqueeze(1)
        if self._aggregate_first(x_src):  # lin is plain: the bias joins its matmul
            out = self._propagate_with_loops(x_src, x_dst, edge_index, num_dst, norm, loop_norm)
            return linear(out, self.lin.weight, self.bias)
        xw = self.lin(x_src)
        out = self._propagate_with_loops(xw, None, edge_index, num_dst, norm, loop_norm)
        return add_bias(out, self.bias)

    def _aggregate_first(self, x_src: torch.Tensor) -> bool:
        """Whether ``(A x) W`` moves fewer columns through the aggregation
        than ``A (x W)``: the forward reads ``E`` rows of ``x``'s width or
        of ``lin``'s, and the backward scatters them again (about twice the
        forward's cost) where a gradient flows there: into ``x`` when it
        needs one; into ``x W`` whenever ``x`` or ``W`` does. Only with a
        plain ``lin`` (no hooks: they would see the aggregated rows)."""
        if not _plain_linear(self.lin):
            return False
        grad = torch.is_grad_enabled()
        first = x_src.size(1) * (1 + 2 * (grad and x_src.requires_grad))
        then = self.out_channels * (1 + 2 * (grad and (x_src.requires_grad or self.lin.weight.requires_grad)))
        return first <= then

    @staticmethod
    def _propagate_with_loops(h, h_dst, edge_index, num_dst, norm, loop_norm):
        """``sum_e norm_e h[src_e]`` per destination plus its loop's
        ``loop_norm * h_dst``; ``h_dst`` None: ``h``'s leading rows."""
        if h.requires_grad and (h_dst is None or _leading_rows(h, h_dst)):
            # the destinations' rows as a view whose gradient the backward adds in place
            out, h_dst = aggregate(h, edge_index, num_dst, "sum", norm, with_root=True)
        else:
            out = aggregate(h, edge_index, num_dst, "sum", norm)
            h_dst = h.narrow(0, 0, num_dst) if h_dst is None else h_dst
        return out.addcmul_(loop_norm.to(out.dtype), h_dst)


class GATConv(PyGGATConv):
    """PyG's ``GATConv``; the attention, its softmax and the weighted sum run
    in one Triton kernel per direction (``kernels.attention``), with no
    ``[E, heads]`` or ``[E, heads, C]`` tensors and no appended self loops.

    The linear maps and the node-level logits (``att_src``, ``att_dst``)
    are PyG's; so are the outputs and gradients. Where the kernel does not
    apply, PyG's forward runs: edge features, attention dropout while
    training, ``return_attention_weights``, an explicit ``size``, a sparse
    ``edge_index``, another aggregation, hooks or explain mode, heads wider
    than ``kernels.attention.MAX_CHANNELS``.
    A pair ``(x, x[:k])`` (``TrimToDestinations``) maps the destinations'
    rows once, with the sources'.
    """

    # PyG's generic message passing for its own forward: PyG compiles these
    # per class from the ``# ..._type`` comments of ``forward``'s source,
    # which this forward does not hold; defined here, PyG keeps them
    def propagate(self, edge_index, size=None, **kwargs):
        return MessagePassing.propagate(self, edge_index, size=size, **kwargs)

    def edge_updater(self, edge_index, size=None, **kwargs):
        return MessagePassing.edge_updater(self, edge_index, size=size, **kwargs)

    def forward(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        pair = (x, x) if isinstance(x, torch.Tensor) else x
        if not (isinstance(pair, tuple) and len(pair) == 2
                and all(isinstance(t, torch.Tensor) and t.dim() == 2 and t.dtype in _KERNEL_DTYPES for t in pair)
                and edge_attr is None and size is None and not return_attention_weights
                and (self.dropout == 0 or not self.training) and self.aggr in ("add", "sum")
                and self.out_channels <= _ATTENTION_MAX_CHANNELS and _plain_edges(self, edge_index)):
            return PyGGATConv.forward(self, x, edge_index, edge_attr, size, return_attention_weights)
        x_src, x_dst = pair
        _checked_num_dst(self, edge_index, None, x_src, x_dst)  # PyG's checks of edge_index against x
        heads, channels = self.heads, self.out_channels
        res = self.res(x_dst) if self.res is not None else None
        lin_src, lin_dst = (self.lin, self.lin) if self.lin is not None else (self.lin_src, self.lin_dst)
        xs = lin_src(x_src).view(-1, heads, channels)
        if lin_dst is lin_src and _leads(x_src, x_dst):
            xd = xs.narrow(0, 0, x_dst.size(0))  # the same rows' map: computed once
        else:
            xd = lin_dst(x_dst).view(-1, heads, channels)
        a_src = (xs * self.att_src).sum(dim=-1)
        a_dst = (xd * self.att_dst).sum(dim=-1)
        out = attend(xs, a_src, a_dst, edge_index, self.negative_slope, self.add_self_loops)
        out = out.view(-1, heads * channels) if self.concat else out.mean(dim=1)
        if res is not None:
            out = out + res
        return add_bias(out, self.bias)


class SimpleConv(_KernelPropagate, PyGSimpleConv):
    """PyG's parameter-free ``SimpleConv`` (sum or mean of the optionally
    weighted neighbour features); aggregates in one Triton kernel."""

    propagate = _KernelPropagate.propagate


class TrimToDestinations(torch.nn.Module):
    """Layer-wise trimming that also drops each layer's unused outputs.

    PyG's ``TrimToLayer`` hands layer ``i`` every node of hops ``0 .. L-i``
    and computes an output row for each, though the next layer reads only
    those of hops ``0 .. L-i-1`` (the destinations of its edges): at layer 0
    of a [15, 10, 5] batch that is the whole last hop, most of the batch's
    nodes, through both linear maps. Here layer ``i`` gets the bipartite pair
    ``(x, x[:num_dst])``, so it computes only the rows a later layer (or the
    seeds' output) reads: the rows of the seeds are the same as with PyG's
    trimming, and the model's output holds the seeds and, with more hops than
    layers, the nodes of the first hops (``[:batch_size]`` as before).
    ``x`` then arrives already trimmed, so only ``edge_index`` is narrowed.
    A ``SparseTensor`` or ``EdgeIndex`` (sizes of its own to trim), or counts
    that are not two lists, take PyG's trimming (and its errors).
    """

    def __init__(self):
        super().__init__()
        self.pyg = TrimToLayer()

    def forward(self, layer, num_sampled_nodes_per_hop, num_sampled_edges_per_hop, x, edge_index,
                edge_attr=None):
        if not (isinstance(num_sampled_nodes_per_hop, list) and isinstance(num_sampled_edges_per_hop, list)) \
                or type(edge_index) is not torch.Tensor or edge_index.layout != torch.strided:
            # PyG's: its checks (one count list without the other) and its trimming
            return self.pyg(layer, num_sampled_nodes_per_hop, num_sampled_edges_per_hop, x, edge_index, edge_attr)
        hops = len(num_sampled_nodes_per_hop) - 1
        if layer >= hops:  # PyG's trimming would narrow by counts of other hops: a wrong output
            raise ValueError(f"num_sampled_nodes_per_hop holds {hops} hop(s), but the model's layer {layer + 1} "
                             f"needs one more: sample as many hops (num_neighbors) as the model has layers, "
                             f"or call it without num_sampled_nodes_per_hop")
        if layer > 0:
            keep = edge_index.size(1) - num_sampled_edges_per_hop[-layer]
            edge_index = edge_index.narrow(1, 0, keep)
            edge_attr = edge_attr.narrow(0, 0, keep) if edge_attr is not None else None
        num_dst = x.size(0) - num_sampled_nodes_per_hop[-(layer + 1)]
        return (x, x[:num_dst]), edge_index, edge_attr


class _TrimmedToDestinations:
    """A PyG model whose layers, trimmed (``num_sampled_nodes_per_hop``),
    compute only the rows later layers read (``TrimToDestinations``), where
    no normalisation or jumping knowledge needs the rows PyG's trimming
    keeps (then PyG's own)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        plain = self.jk_mode is None and all(isinstance(norm, torch.nn.Identity) for norm in self.norms)
        if plain:
            self._trim = TrimToDestinations()


class GraphSAGE(_TrimmedToDestinations, PyGGraphSAGE):
    """PyG's ``GraphSAGE`` with ``tritongnn.nn.SAGEConv`` layers, trimmed to
    the rows later layers read (``_TrimmedToDestinations``)."""

    def init_conv(self, in_channels, out_channels, **kwargs) -> MessagePassing:
        return SAGEConv(in_channels, out_channels, **kwargs)


class GCN(_TrimmedToDestinations, PyGGCN):
    """PyG's ``GCN`` with ``tritongnn.nn.GCNConv`` layers, trimmed to the
    rows later layers read (``_TrimmedToDestinations``: each layer gets the
    pair ``(x, x[:num_dst])``, which ``GCNConv`` takes)."""

    def init_conv(self, in_channels, out_channels, **kwargs) -> MessagePassing:
        return GCNConv(in_channels, out_channels, **kwargs)


class GAT(_TrimmedToDestinations, PyGGAT):
    """PyG's ``GAT`` with ``tritongnn.nn.GATConv`` layers (``v2=True``:
    PyG's ``GATv2Conv``), trimmed to the rows later layers read
    (``_TrimmedToDestinations``). PyG's ``GAT`` gives its ``dropout`` to
    every layer's attention too: with ``dropout > 0`` the layers train on
    PyG's path (the kernel has no attention dropout) and evaluate on ours."""

    def init_conv(self, in_channels, out_channels, **kwargs) -> MessagePassing:
        conv = super().init_conv(in_channels, out_channels, **kwargs)
        if type(conv) is PyGGATConv:
            # PyG's layer as PyG's GAT configures it (heads, concat, dropout,
            # ...), with our forward: GATConv adds no state of its own
            conv.__class__ = GATConv
        return conv
