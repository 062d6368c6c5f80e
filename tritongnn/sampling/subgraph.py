"""PyG's ``subgraph_type``: which edges a sampled batch carries.

- ``"directional"`` (default): the sampled edges, grouped by hop.
- ``"bidirectional"``: the sampled edges and their reverses, each pair once
  (PyG's ``SamplerOutput.to_bidirectional``, ``kernels.subgraph``).
- ``"induced"``: every edge of the graph between two of the batch's nodes
  (PyG samples it with torch-sparse's ``neighbor_sample(directed=False)``;
  ``kernels.subgraph.induced_edges``). The deprecated ``directed=False``
  means it, with PyG's warning.

The nodes are sampled as for ``"directional"``. As in PyG (2.8), the other
two types' outputs carry no ``num_sampled_nodes`` / ``num_sampled_edges``
(None: their edges are not grouped by hop, so a batch cannot be trimmed),
and ``edge`` holds the ids of the edges delivered. The hop layout of the
nodes stays in ``metadata`` (``hop_layout``), for the loader's statistics,
which count the lists the hops read and, as picks, the delivered edges (the
induced pass reads every node's whole row: more than they say).
"""
from __future__ import annotations

import enum
import warnings

from torch_geometric.sampler import SamplerOutput

from ..kernels.subgraph import bidirectional_edges, induced_edges
from .outputs import to_edge_ids

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")


def check_subgraph_type(subgraph_type) -> str:
    """``subgraph_type`` as one of ``SUBGRAPH_TYPES`` (a str, or PyG's
    ``SubgraphType``); TypeError or ValueError naming it otherwise."""
    if isinstance(subgraph_type, enum.Enum):  # torch_geometric.sampler.SubgraphType
        subgraph_type = subgraph_type.value
    if not isinstance(subgraph_type, str):
        raise TypeError(f"subgraph_type must be one of {SUBGRAPH_TYPES} (a str or a "
                        f"torch_geometric.sampler.SubgraphType), got {type(subgraph_type).__name__} "
                        f"{subgraph_type!r}")
    if subgraph_type not in SUBGRAPH_TYPES:
        raise ValueError(f"subgraph_type must be one of {SUBGRAPH_TYPES}, got {subgraph_type!r}")
    return subgraph_type


def resolve_subgraph_type(subgraph_type="directional", directed=True, stacklevel: int = 3) -> str:
    """The loader's ``subgraph_type`` with PyG's deprecated ``directed``:
    ``directed=False`` means ``"induced"`` whatever ``subgraph_type`` says,
    with PyG's warning (a ``UserWarning``), as PyG's ``NeighborSampler``."""
    subgraph_type = check_subgraph_type(subgraph_type)
    if not isinstance(directed, bool):
        raise TypeError(f"directed must be a bool (deprecated: pass subgraph_type='induced' instead of "
                        f"directed=False), got {type(directed).__name__} {directed!r}")
    if not directed:
        warnings.warn("The usage of the 'directed' argument in 'NeighborSampler' is deprecated. Use "
                      "`subgraph_type='induced'` instead.", stacklevel=stacklevel)
        return "induced"
    return subgraph_type


def hop_layout(out: SamplerOutput) -> list[int]:
    """``num_sampled_nodes`` of ``out``'s nodes (seeds, then each hop's new
    ones), also where the output carries None (``to_subgraph``)."""
    if out.num_sampled_nodes is not None:
        return out.num_sampled_nodes
    return out.metadata["num_sampled_nodes"]


def to_subgraph(out: SamplerOutput, subgraph_type: str, graph, tiers: dict, id_map, edge_perm,
                hot_edge_perm=None) -> SamplerOutput:
    """``out`` (a directional batch, internal ids) with the edges of
    ``subgraph_type``: its nodes (and a disjoint batch's ``batch``) as they
    are, ``row``/``col``/``edge`` replaced, the hop counts moved to
    ``metadata``.

    Args:
        graph: the sampler's ``CSCGraph``; ``tiers``: its adjacency cache
            (``hot_indptr``/``hot_indices``, or empty).
        id_map: the ``IdMap`` the induced pass restarts (the sampler's, used
            on its stream between its batches), or None.
        edge_perm: the CSC positions' edge ids, or None (the positions are);
            ``hot_edge_perm``: its GPU copy for the cached rows, or None.
    """
    if subgraph_type == "directional":
        return out
    if subgraph_type == "bidirectional":
        row, col, edge = bidirectional_edges(out.row, out.col, out.edge, out.node.numel())
    else:
        row, col, edge = induced_edges(graph.indptr, graph.indices, out.node, id_map, out.edge is not None,
                                       **tiers)
        if edge is not None:
            edge = to_edge_ids(edge, edge_perm, hot_edge_perm)
    layout = dict(num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges)
    return SamplerOutput(node=out.node, row=row, col=col, edge=edge, batch=out.batch, metadata=layout)
