"""A loader's build kept on disk (``build_dir``), so a later run of the same
graph maps it back instead of building it again.

Three things cost a build at scale, and each is kept: the CSC graph (an
E-sized sort of ``edge_index``; its ``edge_perm``, the CSC positions' edge
ids, with it), the access profile (``profile_epochs`` of sampling) and,
with a cache, the graph renamed hot-first by the plan (an E-sized relabel;
its ``edge_perm`` always, as batches' ``e_id`` go through it). Each array is one ``.npy`` file, read back through a
memory map into where the loader reads it (pinned host memory, the GPU, or
the map itself on a CPU loader). A saved piece is used only for the graph
and arguments it was made from: the graph is known by its size, dtype and
a hash of 65,536 of its edges, the profile also by the seeds, fanouts and
batch size, the relabelled graph by its plan's inputs (a saved plan is
kept while the budget holds what it spends and is at most 2 % above the
one it was made for, so that ``cache_budget="auto"`` on the same card
finds it). Files are written
under a temporary name and renamed, so a run cut short leaves none half
written.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from ..cache.allocator import CachePlan
from ..graph import CSCGraph
from ..host_memory import pinned_empty

_SAMPLED_EDGES = 1 << 16
# a saved plan is kept while the budget is within this share above its own
_PLAN_SLACK = 0.02


def _digest(*parts) -> str:
    h = hashlib.blake2b(digest_size=12)
    for part in parts:
        if isinstance(part, torch.Tensor):
            h.update(np.ascontiguousarray(part.detach().cpu().numpy()).tobytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()


def graph_key(edge_index: torch.Tensor, num_nodes: int, keep_edge_perm: bool) -> str:
    """What names a graph's build: its size, dtype and 65,536 of its edges
    (evenly spaced, the first and last included), hashed."""
    num_edges = edge_index.size(1)
    step = max(1, num_edges // _SAMPLED_EDGES)
    sample = edge_index[:, ::step] if num_edges else edge_index
    last = edge_index[:, -1:] if num_edges else edge_index
    return _digest("graph", num_nodes, num_edges, str(edge_index.dtype), keep_edge_perm, sample, last)


class SavedBuild:
    """The saved pieces of one graph's build in directory ``path``.

    Args:
        path: the directory (made if missing).
        edge_index: the graph's ``edge_index`` (read, not kept).
        num_nodes: its nodes.
        keep_edge_perm: whether the CSC keeps ``edge_perm`` (edge attributes).
    """

    def __init__(self, path, edge_index: torch.Tensor, num_nodes: int, keep_edge_perm: bool):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"build_dir must be a directory path, got {type(path).__name__}")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"build_dir={os.fspath(path)!r} exists and is not a directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self.key = graph_key(edge_index, num_nodes, keep_edge_perm)
        self.num_nodes, self.num_edges = num_nodes, edge_index.size(1)
        self.loaded: list[str] = []  # which pieces came from disk, for loader.stats

    # -- the CSC graph ----------------------------------------------------

    def graph(self, build, device: torch.device, pin: bool) -> CSCGraph:
        """The graph in the user's ids: read back where saved, else
        ``build()`` and saved. ``pin``: into pinned host memory for
        ``device``; else onto ``device``."""
        name = f"graph-{self.key}"
        arrays = self._read(name)
        if arrays is not None:
            self.loaded.append("graph")
            return self._graph_of(arrays, device, pin)
        graph = build()
        self._write(name, {}, indptr=graph.indptr, indices=graph.indices, edge_perm=graph.edge_perm)
        return graph

    def _graph_of(self, arrays: dict, device: torch.device, pin: bool) -> CSCGraph:
        placed = {name: _placed(t, device, pin) for name, t in arrays.items()}
        return CSCGraph(placed["indptr"], placed["indices"], placed.get("edge_perm"), validate=False)

    # -- the access profile -----------------------------------------------

    def profile_path(self, seeds: torch.Tensor, num_neighbors, replace: bool, batch_size: int,
                     epochs: int) -> Path:
        """Where the profile of these sampling settings is kept
        (``AccessProfile.save`` / ``load``); any random seed's profile
        serves, as a ``cache_profile`` file does."""
        key = _digest(self.key, seeds, list(num_neighbors), replace, batch_size, epochs)
        return self.path / f"profile-{key}.pt"

    # -- the relabelled graph and its plan ---------------------------------

    def relabelled(self, budget: int, settings: tuple, device: torch.device):
        """``(plan, dynamic_rows, graph)`` saved for these plan ``settings``
        and a budget that holds what the saved plan spends and is at most
        2 % above the budget it was made for, the graph placed as
        ``cache.dual.relabel_tiers`` places it; None when there is none."""
        name = self._plan_name(settings)
        meta = self._meta(name)
        if meta is None or not meta["spent"] <= budget <= meta["budget"] * (1 + _PLAN_SLACK):
            return None
        arrays = self._read(name)
        if arrays is None or "edge_perm" not in arrays:  # (batches' e_id reads the relabelled graph's map)
            return None
        plan = CachePlan(order=arrays.pop("order").clone(), **meta["plan"])
        self.loaded.append("relabelled graph")
        # where relabel_tiers puts it: on the device when every list is cached, else host memory
        whole = plan.num_adjacency == self.num_nodes
        return plan, meta["dynamic_rows"], self._graph_of(arrays, device, pin=not whole and device.type == "cuda")

    def save_relabelled(self, budget: int, settings: tuple, plan: CachePlan, dynamic_rows: int,
                        dynamic_bytes: int, graph: CSCGraph) -> None:
        """Keep ``plan`` (made for ``budget`` and ``settings``, with
        ``dynamic_rows`` taking ``dynamic_bytes`` of it) and the graph it
        renamed."""
        fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "order"}
        spent = plan.adjacency_bytes + plan.feature_bytes + dynamic_bytes
        self._write(self._plan_name(settings), dict(budget=int(budget), spent=int(spent), plan=fields,
                                                    dynamic_rows=int(dynamic_rows)),
                    order=plan.order, indptr=graph.indptr, indices=graph.indices, edge_perm=graph.edge_perm)

    def _plan_name(self, settings: tuple) -> str:
        return f"relabelled-{_digest(self.key, settings)}"

    # -- files ------------------------------------------------------------

    def _meta(self, name: str) -> dict | None:
        try:
            with open(self.path / f"{name}.json") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        return meta if meta.get("num_nodes") == self.num_nodes and meta.get("num_edges") == self.num_edges \
            else None

    def _read(self, name: str) -> dict | None:
        """The arrays saved as ``name`` as tensors over read-only maps of
        their files (copy-on-write: nothing writes to the files), or None."""
        meta = self._meta(name)
        if meta is None:
            return None
        arrays = {}
        for array in meta["arrays"]:
            try:
                values = np.load(self.path / f"{name}.{array}.npy", mmap_mode="c")
            except (OSError, ValueError):
                return None
            arrays[array] = torch.from_numpy(values)
        return arrays

    def _write(self, name: str, meta: dict, **arrays) -> None:
        """Save ``arrays`` (None ones skipped) and then ``meta``, each
        through a temporary file renamed into place; where the disk refuses
        (full, read-only), warn and keep nothing: the loader runs on."""
        try:
            self._write_files(name, meta, arrays)
        except OSError as error:
            for leftover in self.path.glob(f"{name}*.tmp{os.getpid()}*"):
                leftover.unlink(missing_ok=True)
            warnings.warn(f"build_dir={os.fspath(self.path)!r}: could not save {name} ({error}); "
                          f"this build is not kept", RuntimeWarning, stacklevel=2)

    def _write_files(self, name: str, meta: dict, arrays: dict) -> None:
        written = []
        for array, t in arrays.items():
            if t is None:
                continue
            final = self.path / f"{name}.{array}.npy"
            tmp = final.with_suffix(f".tmp{os.getpid()}.npy")
            np.save(tmp, t.detach().cpu().numpy())
            os.replace(tmp, final)
            written.append(array)
        meta = dict(meta, num_nodes=self.num_nodes, num_edges=self.num_edges, arrays=written)
        final = self.path / f"{name}.json"
        tmp = final.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, final)


def _placed(t: torch.Tensor, device: torch.device, pin: bool) -> torch.Tensor:
    """A mapped array where the loader reads it: one pinned copy read from
    the map, on ``device``, or (a CPU loader) the map itself."""
    if pin:
        return pinned_empty(t.shape, t.dtype, device).copy_(t)
    if device.type == "cpu":
        return t
    return t.to(device)
