"""Random graphs for the tests: hypothesis strategies and small builders."""
import torch
from hypothesis import strategies as st

from tritongnn import CSCGraph


def csc_from_degrees(degrees, num_nodes, generator):
    """A CSC graph whose node ``v`` has ``degrees[v]`` in-edges from random
    sources (self-loops and duplicate edges included, as random draws give)."""
    degrees = torch.as_tensor(degrees, dtype=torch.int64)
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(degrees, 0)
    indices = torch.randint(0, num_nodes, (int(indptr[-1]),), generator=generator)
    return CSCGraph(indptr, indices)


@st.composite
def graphs(draw, max_nodes=40, max_degree=60):
    """Graphs mixing isolated nodes, degree == fanout and degrees far above it,
    self-loops and duplicate edges; sometimes a single node."""
    num_nodes = draw(st.integers(1, max_nodes))
    degree = st.one_of(st.just(0), st.integers(1, 12), st.integers(13, max_degree))
    degrees = draw(st.lists(degree, min_size=num_nodes, max_size=num_nodes))
    seed = draw(st.integers(0, 2**31 - 1))
    graph = csc_from_degrees(degrees, num_nodes, torch.Generator().manual_seed(seed))
    if draw(st.booleans()) and graph.num_edges:
        # plant self-loops and repeated edges explicitly
        indices = graph.indices.clone()
        owner = torch.repeat_interleave(torch.arange(num_nodes), graph.degree())
        indices[::3] = owner[::3].to(indices.dtype)
        indices[1::4] = indices[0]
        graph = CSCGraph(graph.indptr, indices)
    return graph
