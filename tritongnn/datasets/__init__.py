"""Graphs for tests and benchmarks: stored ``.npz`` CSR files and GPU generators.

``load_npz`` and ``cora`` read real graphs (``shared/data/README.md`` gives the
layout); ``chung_lu`` and ``rmat`` generate power-law graphs with planted labels
that depend on the neighbours, on the GPU, at up to hundreds of millions of
edges. ``chung_lu``'s labels are homophilous: a GNN beats an MLP on them.
"""

from tritongnn.datasets.npz import cora, load_npz
from tritongnn.datasets.synthetic import chung_lu, class_features, rmat

__all__ = ["load_npz", "cora", "chung_lu", "rmat", "class_features"]
