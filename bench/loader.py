"""Loader benchmark: tritongnn.NeighborLoader against PyG's NeighborLoader
on one R-MAT graph, at PyG's best worker count.

* (a) loader throughput: batches per second delivered on the GPU, no model;
* (b) training throughput: GraphSAGE steps per second, loader included;
* (c) the model alone on batches prepared in advance.

Ours with the graph and features in GPU memory (``placement="device"``)
and in pinned host memory (``placement="host"``). PyG's loader samples on
the CPU (torch-sparse or pyg-lib) for each of ``--workers`` with
pin_memory off and on; its batches move to the GPU as a training loop's
would. Rates are steady-state: the first ``2 * num_workers + 3`` batches
(PyG's prefetch queue) are not timed. The ratios are against PyG's best.

    python bench/loader.py --out bench/results/loader.json

With ``--options weight disjoint time`` loader throughput (a) is also
measured with each of PyG's sampling options, ours and PyG's (pyg-lib; its
rows are skipped, saying so, without it), beside ours sampling uniformly
from the same data: ``weight`` samples by random edge weights
(``weight_attr``, uniform in [0.01, 1)), ``disjoint`` gives every seed its
own subgraph, ``time`` samples by random node times (``time_attr``: no
neighbour later than its seed). The ratio (o) is each option's time per
sampled edge over uniform sampling's (weighted sampling's goal: <= 1.5).

With ``--link`` link batches are measured too (``bench/link.py``):
``tritongnn.LinkNeighborLoader`` per placement against PyG's
``LinkNeighborLoader`` for each of ``--workers`` (pin_memory on), both over
a random subset of the graph's edges (``--link-edges``, 2^20) in batches of
``--batch-size``, with ``"binary"`` negatives (ratio 1) and ``"triplet"``
ones (amount 1: ``--link-modes``); batches/s and sampled edges per batch,
the ratio (l) ours over PyG's best per mode:

    python bench/loader.py --link --out bench/results/loader.json

``--scale 16 --edges 2**20`` is a quick run; ``--device cpu --scale 10
--edges 2**13`` a smoke test of the script.
"""
from __future__ import annotations

import argparse
import copy
import gc
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (append_record, cycle, edges_per_batch, new_record, now, print_ratios,  # noqa: E402
                    print_settings, pyg_sampling_available, steady_rate, train_step, with_hop_counts)
import link  # noqa: E402

from tritongnn import CSCGraph, NeighborLoader  # noqa: E402
from tritongnn.datasets import rmat  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--scale", type=int, default=24, help="R-MAT: 2^scale nodes")
    p.add_argument("--edges", type=lambda s: int(eval(s)), default=2**28, help="directed edges")
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=300, help="timed batches, loader only")
    p.add_argument("--train-batches", type=int, default=150, help="timed training steps")
    p.add_argument("--pyg-batches", type=int, default=100)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 8, 16], help="PyG's num_workers tried")
    p.add_argument("--placements", nargs="+", default=["device", "host"], choices=["device", "host"])
    p.add_argument("--skip-pyg", action="store_true")
    p.add_argument("--options", nargs="*", default=[], choices=sorted(OPTIONS),
                   help="also measure loader throughput with these sampling options (see the docstring)")
    link.add_arguments(p)
    p.add_argument("--out", default=None, help="append the record to this JSON file")
    p.add_argument("--commit", default=None, help="commit measured (default: git rev-parse of this checkout)")
    return p.parse_args(argv)


def make_model(args, device):
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(0)
    model = GraphSAGE(args.features, 256, num_layers=len(args.num_neighbors), out_channels=args.classes)
    model = model.to(device)
    return model, torch.optim.Adam(model.parameters(), lr=0.003)


def bench_ours(data, args, device, emit):
    for placement in args.placements:
        if placement == "host" and device.type != "cuda":
            continue
        loader = NeighborLoader(data, args.num_neighbors, batch_size=args.batch_size, shuffle=True,
                                placement=placement, device=device, seed=0)
        warm = min(10, args.batches)
        emit(dict(kind="a", name=f"tritongnn [{placement}]", unit="batches/s",
                  value=steady_rate(cycle(loader), warm, args.batches, device)))
        model, optimizer = make_model(args, device)
        emit(dict(kind="b", name=f"tritongnn [{placement}]", unit="steps/s",
                  value=steady_rate(cycle(loader), warm, args.train_batches, device,
                                    step=lambda b: train_step(model, optimizer, b))))
        if placement == args.placements[0]:
            prepared = [b for _, b in zip(range(30), loader)]
            model, optimizer = make_model(args, device)
            emit(dict(kind="c", name="model alone (batches prepared)", unit="steps/s",
                      value=steady_rate(cycle(prepared), warm, args.train_batches, device,
                                        step=lambda b: train_step(model, optimizer, b)),
                      note=f"{sum(b.num_nodes for b in prepared) / len(prepared):.0f} nodes, "
                           f"{sum(b.num_edges for b in prepared) / len(prepared):.0f} edges per batch"))
        del loader
        gc.collect()


# each option's loader arguments (``with_option_attributes`` adds the attributes they name)
OPTIONS = {"weight": dict(weight_attr="edge_weight"), "disjoint": dict(disjoint=True), "time": dict(time_attr="time")}


def with_option_attributes(data, options):
    """``data`` (a shallow copy: the same tensors) with random edge weights
    (``edge_weight``) and node times (``time``) where ``options`` need them."""
    data = copy.copy(data)
    g = torch.Generator(device=data.edge_index.device).manual_seed(1)
    if "weight" in options:
        data.edge_weight = torch.rand(data.edge_index.size(1), generator=g, device=data.edge_index.device) \
            * 0.99 + 0.01
    if "time" in options:
        data.time = torch.randint(0, 1000, (data.num_nodes,), generator=g, device=data.edge_index.device)
    return data


def bench_ours_options(data, args, device, emit):
    """(a) with each of ``args.options`` against uniform sampling of the
    same data, in batches/s and sampled edges/s."""
    for placement in args.placements:
        if placement == "host" and device.type != "cuda":
            continue
        for mode in ("uniform", *args.options):
            extra = {} if mode == "uniform" else OPTIONS[mode]
            loader = NeighborLoader(data, args.num_neighbors, batch_size=args.batch_size, shuffle=True,
                                    placement=placement, device=device, seed=0, **extra)
            warm = min(10, args.batches)
            rate = steady_rate(cycle(loader), warm, args.batches, device)
            edges = edges_per_batch(b for _, b in zip(range(20), loader))
            emit(dict(kind="a", name=f"tritongnn [{placement}, {mode} option]", unit="batches/s", value=rate,
                      edges_per_batch=edges, note=f"{rate * edges / 1e6:.1f} M sampled edges/s"))
            del loader
            gc.collect()


def sorted_cpu_data(data, device):
    """PyG's copy of ``data`` on the CPU, its edges sorted by target (for
    ``is_sorted``: the one-time CSC conversion is preprocessing, not loader
    throughput), and the permutation that sorted them."""
    from torch_geometric.data import Data
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, keep_edge_perm=True, device=device)
    col = torch.repeat_interleave(torch.arange(data.num_nodes, device=device), graph.degree())
    cpu = Data(x=data.x.cpu(), y=data.y.cpu(), num_nodes=data.num_nodes,
               edge_index=torch.stack([graph.indices.long(), col]).cpu())
    return cpu, graph.edge_perm.long()


def bench_pyg(data, cpu, edge_perm, args, device, emit):
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler
    if args.options:  # the options' attributes, edge ones in the sorted edges' order
        optioned = copy.copy(cpu)
        if "edge_weight" in data:
            optioned.edge_weight = data.edge_weight[edge_perm].cpu()
        if "time" in data:
            optioned.time = data.time.cpu()
        bench_pyg_options(optioned, args, device, emit)
        del optioned
    sampler = PyGNeighborSampler(cpu, args.num_neighbors, is_sorted=True)
    for workers in args.workers:
        for pin in (False, True):
            name = f"PyG workers={workers} pin_memory={pin}"
            loader = PyGNeighborLoader(cpu, args.num_neighbors, batch_size=args.batch_size, shuffle=True,
                                       num_workers=workers, pin_memory=pin, neighbor_sampler=sampler,
                                       persistent_workers=workers > 0,
                                       transform_sampler_output=with_hop_counts(len(args.num_neighbors)))

            def to_gpu(batch):
                return batch.to(device, non_blocking=pin)

            count, warm = max(20, min(args.pyg_batches, 6 * max(workers, 1))), 2 * workers + 3
            note = f"{count} batches after {warm}"
            emit(dict(kind="a", name=name, unit="batches/s", note=note, workers=workers, pin_memory=pin,
                      value=steady_rate(map(to_gpu, cycle(loader)), warm, count, device)))
            model, optimizer = make_model(args, device)
            emit(dict(kind="b", name=name, unit="steps/s", note=note, workers=workers, pin_memory=pin,
                      value=steady_rate(map(to_gpu, cycle(loader)), warm, count, device,
                                        step=lambda b: train_step(model, optimizer, b))))
            # the worker iterator collected now: left to a later gc pass, it
            # may run inside the next loader's forked workers
            del loader
            gc.collect()


def bench_pyg_options(cpu, args, device, emit):
    """(a) of PyG's loader with each of ``args.options`` (pyg-lib samples them)."""
    import torch_geometric.typing
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler
    if not torch_geometric.typing.WITH_PYG_LIB:
        print(f"PyG's loader with {args.options} skipped: weights, disjoint and times need pyg-lib", flush=True)
        return
    for mode in args.options:
        sampler = PyGNeighborSampler(cpu, args.num_neighbors, is_sorted=True, **OPTIONS[mode])
        for workers in args.workers:
            loader = PyGNeighborLoader(cpu, args.num_neighbors, batch_size=args.batch_size, shuffle=True,
                                       num_workers=workers, pin_memory=True, neighbor_sampler=sampler,
                                       persistent_workers=workers > 0,
                                       transform_sampler_output=with_hop_counts(len(args.num_neighbors)))
            count, warm = max(20, min(args.pyg_batches, 6 * max(workers, 1))), 2 * workers + 3
            rate = steady_rate((b.to(device, non_blocking=True) for b in cycle(loader)), warm, count, device)
            edges = edges_per_batch(b for _, b in zip(range(10), loader))
            emit(dict(kind="a", name=f"PyG {mode} option workers={workers}", unit="batches/s",
                      value=rate, workers=workers, pin_memory=True, edges_per_batch=edges,
                      note=f"{count} batches after {warm}; {rate * edges / 1e6:.1f} M sampled edges/s"))
            del loader
            gc.collect()


def option_ratios(rows, options) -> dict:
    """(o): each option's time per sampled edge over uniform's, ours; (a)
    ours with the option over PyG's best with it, per sampled edge."""
    out = {}
    by_name = {r["name"]: r for r in rows if r["kind"] == "a" and "edges_per_batch" in r}

    def edge_rate(r):
        return r["value"] * r["edges_per_batch"]

    for mode in options:
        pyg = [r for name, r in by_name.items() if name.startswith(f"PyG {mode} option")]
        best = max(pyg, key=edge_rate) if pyg else None
        for name, r in by_name.items():
            if not (name.startswith("tritongnn") and name.endswith(f", {mode} option]")):
                continue
            uniform = by_name.get(name.replace(f", {mode} option]", ", uniform option]"))
            if uniform is not None:
                out[f"(o) {name}: time per sampled edge over uniform's"] = edge_rate(uniform) / edge_rate(r)
            if best is not None:
                out[f"(a) {name} / PyG best ({best['name'][4:]}), per sampled edge"] = edge_rate(r) / edge_rate(best)
    return out


def ratios(rows) -> dict:
    def value(kind, name):
        return next((r["value"] for r in rows if r["kind"] == kind and r["name"] == name), float("nan"))

    out = {}
    for kind in ("a", "b"):
        pyg = [r for r in rows if r["kind"] == kind and r["name"].startswith("PyG") and "option" not in r["name"]]
        if not pyg:
            continue
        best = max(pyg, key=lambda r: r["value"])
        for r in rows:
            if r["kind"] == kind and r["name"].startswith("tritongnn") and "edges_per_batch" not in r:
                out[f"({kind}) {r['name']} / PyG best ({best['name'][4:]})"] = r["value"] / best["value"]
    alone = value("c", "model alone (batches prepared)")
    for r in rows:
        if r["kind"] == "b" and r["name"].startswith("tritongnn"):
            out[f"(c)/(b) {r['name']}: step time over the model alone's"] = alone / r["value"]
    return out


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    start = now(device)
    data = rmat(args.scale, args.edges, num_classes=args.classes, num_features=args.features,
                device=device, seed=0)
    settings = dict(graph=f"R-MAT 2^{args.scale} nodes, {args.edges} edges, a,b,c,d=0.57,0.19,0.19,0.05",
                    features=f"{args.features} float32", classes=args.classes, num_neighbors=args.num_neighbors,
                    batch_size=args.batch_size, model=f"PyG GraphSAGE hidden 256, {len(args.num_neighbors)} layers",
                    pyg_workers=args.workers, options=args.options, **link.settings(args),
                    generation_seconds=round(now(device) - start, 2))
    print_settings(device, settings)
    rows = []

    def emit(row):
        rows.append(row)
        print(f"{row['kind']:3s} {row['name']:40s} {row['value']:10.1f} {row['unit']}  {row.get('note', '')}",
              flush=True)

    bench_ours(data, args, device, emit)
    plain = data  # the link rows' data: no option attributes
    if args.options:
        data = with_option_attributes(data, args.options)
        bench_ours_options(data, args, device, emit)
    cpu = edge_perm = None
    if not args.skip_pyg and pyg_sampling_available():
        cpu, edge_perm = sorted_cpu_data(data, device)
        bench_pyg(data, cpu, edge_perm, args, device, emit)
    if args.link:
        link.bench_link(plain, cpu, args, device, emit)
    del cpu, edge_perm
    found = dict(ratios(rows), **option_ratios(rows, args.options), **link.link_ratios(rows))
    print_ratios(found)
    append_record(args.out, new_record("loader", device, args.commit, settings=settings, rows=rows, ratios=found))


if __name__ == "__main__":
    main()
