"""A sampled heterogeneous batch (PyG's ``HeteroSamplerOutput``) turned into
PyG's ``HeteroData``, as ``filter_hetero_data`` would: every node type's
``x`` gathered by its ``n_id`` from its table (``kernels.gather_rows``: GPU
memory, or pinned host memory through UVA), its other attributes sliced,
every edge type's attributes sliced by its ``e_id``, and PyG's bookkeeping
set."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch_geometric.data import HeteroData

from ..kernels import gather_rows
from .arguments import Attributes, as_tensor
from .timing import StageTimes


@dataclass
class EdgeAttributes:
    """An edge type's attributes besides ``edge_index``: ``sliced`` ones
    ``{key: (tensor on the device, dim)}`` taken by ``e_id`` along ``dim``,
    ``copied`` ones whole."""
    sliced: dict = field(default_factory=dict)
    copied: dict = field(default_factory=dict)

    @classmethod
    def of(cls, data: HeteroData, edge_type: tuple, device) -> "EdgeAttributes":
        store, out = data[edge_type], cls()
        for key, value in store.items():
            if key == "edge_index":
                continue
            if isinstance(value, (torch.Tensor, np.ndarray)) and store.is_edge_attr(key):
                dim = data.__cat_dim__(key, value, store)
                out.sliced[key] = (as_tensor(value, f"data[{edge_type!r}].{key}").to(device), dim)
            else:
                out.copied[key] = value
        return out


def _tensors(out) -> list[torch.Tensor]:
    """The tensors of a ``HeteroSamplerOutput`` another stream reads."""
    parts = [out.node, out.row, out.col, out.edge or {}]
    return [t for part in parts for t in part.values() if isinstance(t, torch.Tensor)]


class HeteroAssembler:
    """Builds the ``HeteroData`` of sampled batches.

    Args:
        data: the loader's ``HeteroData`` (its graph-level attributes are
            copied into every batch).
        x: ``{node type: stored features}`` (``[N_t, D_t]``, where the
            sampler reads).
        x_dtype: ``{node type: dtype}`` batches' ``x`` come out in.
        attrs: ``{node type: arguments.Attributes}``.
        edge_attrs: ``{edge type: EdgeAttributes}``.
        input_type, input_ids: the seeds' type, and what ``input_id``
            reports for each seed position (a mask's node ids) or None.
    """

    # (the pass machinery reads these of an assembler)
    reuse = cache = host_stats = None

    def __init__(self, *, data: HeteroData, x: dict, x_dtype: dict, attrs: dict[str, Attributes],
                 edge_attrs: dict[tuple, EdgeAttributes], input_type: str, input_ids, transform,
                 times: StageTimes, device: torch.device):
        self.x, self.x_dtype, self.attrs, self.edge_attrs = x, x_dtype, attrs, edge_attrs
        self.graph_attrs = dict(data._global_store.items())
        self.input_type, self.input_ids = input_type, input_ids
        self.transform, self.times, self.device = transform, times, device

    def finish(self, item, gather_stream=None) -> HeteroData:
        """Gather and assemble one sampled batch (``item``: ``(input_id, out,
        start, sampled, share)``), on ``gather_stream`` when given (the
        producer's), counted in ``times``."""
        input_id, out, start, sampled, share = item
        if gather_stream is None:
            gather_start = self.times.mark()
            batch = self._assemble(input_id, out)
        else:
            gather_stream.wait_stream(torch.cuda.current_stream(self.device))
            for t in _tensors(out):
                t.record_stream(gather_stream)  # made on this stream, read on that one
            with torch.cuda.stream(gather_stream):
                gather_start = self.times.mark()
                batch = self._assemble(input_id, out)
        self.times.add_batch(start, sampled, gather_start, self.times.mark(gather_stream), share)
        return batch

    def _node_x(self, node_type: str, n_id: torch.Tensor) -> torch.Tensor:
        table = self.x[node_type]
        x = torch.empty((n_id.numel(), table.size(1)), dtype=self.x_dtype[node_type], device=self.device)
        x = gather_rows(table, n_id, x, validate=False)
        return x.squeeze(1) if self.attrs[node_type].flat_x else x

    def _assemble(self, input_id: torch.Tensor, out) -> HeteroData:
        batch = HeteroData()
        for key, value in self.graph_attrs.items():
            batch[key] = value
        for node_type, attrs in self.attrs.items():
            n_id = out.node[node_type]
            store = batch[node_type]
            store.n_id = n_id
            if node_type in self.x:
                store.x = self._node_x(node_type, n_id)
            for key, (value, dim) in attrs.node.items():
                store[key] = value.index_select(dim, n_id)
            for key, value in attrs.graph.items():
                store[key] = value
            if attrs.set_num_nodes:  # (PyG's filter_node_store_ sets it where data's store has it)
                store.num_nodes = n_id.numel()
            if out.num_sampled_nodes is not None:
                store.num_sampled_nodes = out.num_sampled_nodes[node_type]
        for edge_type, attrs in self.edge_attrs.items():
            store = batch[edge_type]
            store.edge_index = torch.stack([out.row[edge_type], out.col[edge_type]])
            edge = out.edge[edge_type] if out.edge is not None else None
            if edge is not None:  # (none once made bidirectional, as PyG)
                store.e_id = edge
                for key, (value, dim) in attrs.sliced.items():
                    store[key] = value.index_select(dim, edge)
            for key, value in attrs.copied.items():
                store[key] = value
            if out.num_sampled_edges is not None:
                store.num_sampled_edges = out.num_sampled_edges[edge_type]
        seeds = batch[self.input_type]
        seeds.input_id = input_id if self.input_ids is None else self.input_ids.index_select(0, input_id)
        seeds.batch_size = input_id.numel()
        return self.transform(batch) if self.transform is not None else batch
