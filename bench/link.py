"""Link-batch throughput for ``bench/loader.py --link``: tritongnn's
``LinkNeighborLoader`` against PyG's, with the same supervision edges
(a random subset of the graph's edges), negatives and batch size.

Rows (kind ``"l"``): batches/s delivered on the GPU and sampled edges per
batch, ours per placement and negative-sampling mode, PyG's per mode and
``--workers`` (pin_memory on, sampling over the same CPU data with sorted
edges as the node rows). The ratio (l) is ours over PyG's best per mode.
A module of ``loader.py``, not a script of its own.
"""
from __future__ import annotations

import gc

import torch
from torch_geometric.sampler import NegativeSampling

from common import cycle, edges_per_batch, steady_rate

from tritongnn import LinkNeighborLoader

# each mode's negatives: one per positive ("binary"), one destination per source ("triplet")
MODES = {"binary": dict(mode="binary", amount=1), "triplet": dict(mode="triplet", amount=1)}


def add_arguments(p) -> None:
    p.add_argument("--link", action="store_true", help="also measure link batches (LinkNeighborLoader)")
    p.add_argument("--link-modes", nargs="+", default=["binary", "triplet"], choices=sorted(MODES),
                   help="negative sampling of the link rows (amount 1)")
    p.add_argument("--link-edges", type=lambda s: int(eval(s)), default=2**20,
                   help="supervision edges: a random subset of the graph's (all if fewer)")


def settings(args) -> dict:
    return dict(link_modes=args.link_modes, link_edges=args.link_edges) if args.link else {}


def supervision_edges(data, count: int) -> torch.Tensor:
    """``[2, min(count, E)]``: a random subset of ``data``'s edges (seeded)."""
    num_edges = data.edge_index.size(1)
    g = torch.Generator(device=data.edge_index.device).manual_seed(2)
    pick = torch.randperm(num_edges, generator=g, device=data.edge_index.device)[:min(count, num_edges)]
    return data.edge_index[:, pick]


def emit_rate(emit, name, rate, edges, **fields):
    note = fields.pop("note", "")
    emit(dict(kind="l", name=name, unit="batches/s", value=rate, edges_per_batch=edges,
              note=f"{note}{'; ' if note else ''}{edges:.0f} sampled edges per batch, "
                   f"{rate * edges / 1e6:.1f} M sampled edges/s", **fields))


def bench_ours_link(data, label_index, args, device, emit):
    for placement in args.placements:
        if placement == "host" and device.type != "cuda":
            continue
        for mode in args.link_modes:
            loader = LinkNeighborLoader(data, args.num_neighbors, edge_label_index=label_index,
                                        neg_sampling=NegativeSampling(**MODES[mode]), batch_size=args.batch_size,
                                        shuffle=True, placement=placement, device=device, seed=0)
            warm = min(10, args.batches)
            rate = steady_rate(cycle(loader), warm, args.batches, device)
            edges = edges_per_batch(b for _, b in zip(range(20), loader))
            emit_rate(emit, f"tritongnn link [{placement}, {mode}]", rate, edges, placement=placement, mode=mode)
            del loader
            gc.collect()


def bench_pyg_link(cpu, label_index, args, device, emit):
    """PyG's ``LinkNeighborLoader`` over ``cpu`` (edges sorted by target:
    ``is_sorted``) for each mode and ``args.workers``, pin_memory on."""
    from torch_geometric.loader import LinkNeighborLoader as PyGLinkNeighborLoader
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler
    sampler = PyGNeighborSampler(cpu, args.num_neighbors, is_sorted=True)
    label_index = label_index.cpu()
    for mode in args.link_modes:
        for workers in args.workers:
            loader = PyGLinkNeighborLoader(cpu, args.num_neighbors, edge_label_index=label_index,
                                           neg_sampling=NegativeSampling(**MODES[mode]),
                                           batch_size=args.batch_size, shuffle=True, num_workers=workers,
                                           pin_memory=True, persistent_workers=workers > 0,
                                           neighbor_sampler=sampler)
            count, warm = max(20, min(args.pyg_batches, 6 * max(workers, 1))), 2 * workers + 3
            rate = steady_rate((b.to(device, non_blocking=True) for b in cycle(loader)), warm, count, device)
            edges = edges_per_batch(b for _, b in zip(range(10), loader))
            emit_rate(emit, f"PyG link {mode} workers={workers}", rate, edges, mode=mode, workers=workers,
                      pin_memory=True, note=f"{count} batches after {warm}")
            del loader  # its workers gone before the next loader forks (as bench_pyg)
            gc.collect()


def bench_link(data, cpu, args, device, emit):
    """Ours, then PyG's over ``cpu`` (None: PyG's rows skipped, saying why)."""
    label_index = supervision_edges(data, args.link_edges)
    bench_ours_link(data, label_index, args, device, emit)
    if cpu is None:
        if not args.skip_pyg:
            print("PyG's link rows skipped: PyG's loader cannot sample here (no torch-sparse or pyg-lib)",
                  flush=True)
        return
    bench_pyg_link(cpu, label_index, args, device, emit)


def link_ratios(rows) -> dict:
    """(l): each of our link rows over PyG's best (batches/s) in its mode."""
    out = {}
    link = [r for r in rows if r["kind"] == "l"]
    for mode in dict.fromkeys(r["mode"] for r in link):
        pyg = [r for r in link if r["mode"] == mode and r["name"].startswith("PyG")]
        if not pyg:
            continue
        best = max(pyg, key=lambda r: r["value"])
        for r in link:
            if r["mode"] == mode and r["name"].startswith("tritongnn"):
                out[f"(l) {r['name']} / PyG best ({best['name'][4:]})"] = r["value"] / best["value"]
    return out
