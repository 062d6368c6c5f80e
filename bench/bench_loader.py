"""Loader and kernel benchmark: tritongnn.NeighborLoader against PyG's.

One run, one graph, every number side by side:

* kernels: sampled edges per second; feature gather GB/s from GPU memory and
  from pinned host memory (UVA), against ``index_select`` and the ceilings of
  DESIGN.md, after a correctness check of each;
* (a) loader throughput: batches per second delivered on the GPU, no model;
* (b) training throughput: GraphSAGE steps per second, loader included;
* (c) the model alone on batches prepared in advance.

PyG's loader samples on the CPU with torch-sparse (``../shared/wheels``), for
num_workers 0, 8, 16 with pin_memory off and on; its batches are moved to the
GPU as a training loop would. Rates are steady-state: the first
``2 * num_workers + warmup`` batches (PyG's prefetch queue) are not timed.

Usage (GPU machine)::

    python bench/bench_loader.py --out bench/results/loader.json

``--scale 16 --edges 2**20`` gives a quick run; results are appended as JSON
(GPU name, date, commit, settings, every row).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tritongnn import CSCGraph, NeighborLoader  # noqa: E402
from tritongnn.datasets import rmat  # noqa: E402
from tritongnn.kernels import gather_rows  # noqa: E402
from _record import append_record, new_record  # noqa: E402

CEILINGS = "DESIGN.md ceilings (H200): HBM copy 4.2 TB/s, pinned host->device 55 GB/s, " \
           "naive Triton UVA gather 17 GB/s random / 54 sorted"


def sync(device):
    """Wait for ``device``'s queued work (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def now(device):
    sync(device)
    return time.perf_counter()


def steady_rate(iterator, warmup, count, device, step=None):
    """Items per second over ``count`` items after ``warmup`` untimed ones."""
    for _ in range(warmup):
        item = next(iterator)
        if step:
            step(item)
    start = now(device)
    for _ in range(count):
        item = next(iterator)
        if step:
            step(item)
    return count / (now(device) - start)


def make_model(num_features, num_classes, device):
    from torch_geometric.nn import GraphSAGE
    torch.manual_seed(0)
    model = GraphSAGE(num_features, 256, num_layers=3, out_channels=num_classes).to(device)
    return model, torch.optim.Adam(model.parameters(), lr=0.003)


def train_step(model, optimizer, batch, trim=False):
    """One step; with ``trim``, PyG's layer-wise trimming (layer l computes
    only the nodes the later layers read: ``num_sampled_nodes_per_hop``)."""
    optimizer.zero_grad(set_to_none=True)
    kwargs = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                  num_sampled_edges_per_hop=batch.num_sampled_edges) if trim else {}
    out = model(batch.x, batch.edge_index, **kwargs)[:batch.batch_size]
    loss = F.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    optimizer.step()
    return loss.item()  # a real loop reads the loss: the GPU drains every step


def hop_counts(row, col, batch_size: int, num_hops: int) -> tuple[list[int], list[int]]:
    """``(num_sampled_nodes, num_sampled_edges)`` of a batch in hop order,
    derived from its edges (``row``: local source, ``col``: local target):
    the per-hop counts PyG's layer-wise trimming needs and torch-sparse's
    sampler does not return (pyg-lib's does).

    Hop order as torch-sparse's ``neighbor_sample`` writes it: hop h's edges
    come after hop h-1's and point at hop h-1's new nodes (local ids
    ``[begin, end)``; the seeds for hop 1); hop h's new nodes take the next
    ids, each the source of at least one of hop h's edges. So hop h's edges
    end at the first edge whose target is ``>= end``, and its nodes end one
    past the largest source among them. Raises ValueError for a batch not
    in that order (some edges left over)."""
    nodes, edges = [int(batch_size)], []
    first, end = 0, int(batch_size)
    for _ in range(num_hops):
        later = col[first:] >= end
        stop = first + (int(later.to(torch.uint8).argmax()) if bool(later.any()) else later.numel())
        new_end = max(end, int(row[first:stop].max()) + 1) if stop > first else end
        nodes.append(new_end - end)
        edges.append(stop - first)
        first, end = stop, new_end
    if first != col.numel():
        raise ValueError(f"the batch is not in hop order: {col.numel() - first} of its {col.numel()} edges "
                         f"come after {num_hops} hops")
    return nodes, edges


def with_hop_counts(num_hops: int):
    """A ``transform_sampler_output`` for PyG's loaders that fills in the
    per-hop counts (``hop_counts``) where the sampler gave none; it runs in
    the loader's workers, before the features are gathered."""
    def transform(out):
        if out.num_sampled_nodes is None:
            batch_size = out.metadata[0].numel()
            out.num_sampled_nodes, out.num_sampled_edges = hop_counts(out.row, out.col, batch_size, num_hops)
        return out
    return transform


def cycle(loader):
    while True:
        yield from loader


def bench_kernels(data, graph_gpu, x_gpu, x_host, args, device, rows):
    from tritongnn import NeighborSampler
    seeds = torch.randperm(data.num_nodes, device=device)[:args.batch_size * 64]
    for placement, graph in (("device", graph_gpu), ("host", graph_gpu.pin_memory())):
        sampler = NeighborSampler(graph, args.num_neighbors, device=device)
        gen = torch.Generator().manual_seed(0)
        batches = seeds.split(args.batch_size)
        for b in batches[:4]:
            sampler.sample(b, gen, validate=False)
        edges, start = 0, now(device)
        for b in batches[4:]:
            edges += sum(sampler.sample(b, gen, validate=False).num_sampled_edges)  # ids of the graph: no check's sync
        seconds = now(device) - start
        rows.append(dict(kind="kernel", name=f"sample+map [{placement}]",
                         value=edges / seconds / 1e6, unit="M sampled edges/s",
                         note=f"{len(batches) - 4} batches, full multi-hop sampler"))
    bench_gather(data, graph_gpu, x_gpu, x_host, args, device, rows, seeds)


def bench_gather(data, graph_gpu, x_gpu, x_host, args, device, rows, seeds):
    """Gather GB/s of useful bytes (rows read once, written once): at uniform
    random ids of several counts (a batch has ~10^5 nodes), and at a real
    batch's n_id; from GPU memory against ``index_select``, from pinned host
    memory against the naive Triton gather (unsorted ids, one program per row
    block) and a bulk host-to-device copy. Each is checked against
    ``x[ids]`` first."""
    from triton.testing import do_bench, do_bench_cudagraph
    import triton
    from tritongnn import NeighborSampler
    from tritongnn.kernels.gather import _gather_one_tier

    width, elem = x_gpu.size(1), x_gpu.element_size()

    def naive(table, ids, out):  # the "naive Triton gather": unsorted, full grid
        _gather_one_tier(table, ids, out, None, triton.cdiv(ids.numel(), 32), 32)

    def measure(name, fn, ids, out, note, graph=False):
        out.zero_()
        fn()
        correct = torch.equal(out, x_gpu[ids])
        ms = do_bench_cudagraph(fn, rep=200) if graph else \
            do_bench(fn, warmup=50, rep=300, return_mode="median")
        rows.append(dict(kind="kernel", name=name, value=ids.numel() * width * elem / ms / 1e6 if correct
                         else float("nan"), unit="GB/s useful",
                         note=f"{ids.numel()} rows of {width} {x_gpu.dtype}; {note}; correct={correct}"))

    n_id = NeighborSampler(graph_gpu, args.num_neighbors, device=device).sample(
        seeds[:args.batch_size], torch.Generator().manual_seed(1)).node
    gen = torch.Generator(device=device).manual_seed(2)
    id_sets = [(f"{n} random ids", torch.randint(0, data.num_nodes, (n,), device=device, generator=gen))
               for n in (1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20)]
    id_sets.insert(1, ("n_id of a batch", n_id))
    for label, ids in id_sets:
        out = torch.empty(ids.numel(), width, dtype=x_gpu.dtype, device=device)
        measure(f"gather HBM, {label}", lambda: gather_rows(x_gpu, ids, out, validate=False), ids, out,
                "CUDA graph replay (kernel time)", graph=True)
        measure(f"index_select HBM, {label}", lambda: torch.index_select(x_gpu, 0, ids, out=out), ids, out,
                "baseline, CUDA graph replay", graph=True)
        measure(f"gather UVA, {label}", lambda: gather_rows(x_host, ids, out, validate=False), ids, out,
                "includes the argsort of ids")
        measure(f"naive gather UVA, {label}", lambda: naive(x_host, ids, out), ids, out, "baseline")
    rows_bulk = 1 << 20
    ms = do_bench(lambda: x_gpu[:rows_bulk].copy_(x_host[:rows_bulk], non_blocking=True),
                  warmup=10, rep=200, return_mode="median")
    rows.append(dict(kind="kernel", name="bulk copy host->GPU", value=rows_bulk * width * elem / ms / 1e6,
                     unit="GB/s", note=f"{rows_bulk} contiguous rows: the PCIe ceiling"))


def bench_ours(data, args, device, rows, model_fn):
    for placement in ("device", "host"):
        loader = NeighborLoader(data, args.num_neighbors, batch_size=args.batch_size, shuffle=True,
                                placement=placement, device=device, seed=0)
        rate = steady_rate(cycle(loader), 10, args.batches, device)
        rows.append(dict(kind="a", name=f"tritongnn [{placement}]", value=rate, unit="batches/s"))
        model, optimizer = model_fn()
        rate = steady_rate(cycle(loader), 10, args.train_batches, device,
                           step=lambda b: train_step(model, optimizer, b))
        rows.append(dict(kind="b", name=f"tritongnn [{placement}]", value=rate, unit="steps/s"))
        if placement == "device":
            prepared = [b for _, b in zip(range(30), loader)]
            model, optimizer = model_fn()
            rate = steady_rate(cycle(prepared), 10, args.train_batches, device,
                               step=lambda b: train_step(model, optimizer, b))
            rows.append(dict(kind="c", name="model alone (batches prepared)", value=rate, unit="steps/s",
                             note=f"{sum(b.num_nodes for b in prepared) / len(prepared):.0f} nodes, "
                                  f"{sum(b.num_edges for b in prepared) / len(prepared):.0f} edges per batch"))


def bench_pyg(data, args, device, rows, model_fn):
    import torch_geometric.typing
    if not torch_geometric.typing.WITH_TORCH_SPARSE and not torch_geometric.typing.WITH_PYG_LIB:
        print("PyG baseline skipped: neither torch-sparse nor pyg-lib is importable", flush=True)
        return
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler
    # Hand PyG the edges already sorted by target (is_sorted): the one-time
    # CSC conversion is preprocessing, not loader throughput.
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, device=device)
    col = torch.repeat_interleave(torch.arange(data.num_nodes, device=device), graph.degree())
    cpu = Data(x=data.x.cpu(), y=data.y.cpu(), num_nodes=data.num_nodes,
               edge_index=torch.stack([graph.indices.long(), col]).cpu())
    del graph, col
    sampler = PyGNeighborSampler(cpu, args.num_neighbors, is_sorted=True)
    for workers in args.workers:
        for pin in (False, True):
            name = f"PyG workers={workers} pin_memory={pin}"
            loader = PyGNeighborLoader(cpu, args.num_neighbors, batch_size=args.batch_size, shuffle=True,
                                       num_workers=workers, pin_memory=pin, neighbor_sampler=sampler,
                                       persistent_workers=workers > 0)

            def to_gpu(batch):
                return batch.to(device, non_blocking=pin)

            count = max(20, min(args.pyg_batches, 6 * max(workers, 1)))
            warmup = 2 * workers + 3
            rate = steady_rate(map(to_gpu, cycle(loader)), warmup, count, device)
            rows.append(dict(kind="a", name=name, value=rate, unit="batches/s",
                             note=f"{count} batches after {warmup}"))
            model, optimizer = model_fn()
            rate = steady_rate(map(to_gpu, cycle(loader)), warmup, count, device,
                               step=lambda b: train_step(model, optimizer, b))
            rows.append(dict(kind="b", name=name, value=rate, unit="steps/s",
                             note=f"{count} batches after {warmup}"))
            print(f"  {name}: done", flush=True)
            # Collect the loader's worker iterator now: left to a later gc
            # pass, it may run inside the next loader's forked workers.
            del loader
            gc.collect()


class Rows(list):
    """The run's result rows, each printed as it comes: a run cut short
    still shows what it measured."""

    def append(self, row):
        super().append(row)
        print(format_row(row), flush=True)


def format_row(r):
    return f"{r['kind']:5s} {r['name']:50s} {r['value']:10.1f}  {r['unit']}  {r.get('note', '')}"


def summary(rows):
    def best(kind, prefix):
        vals = [r["value"] for r in rows if r["kind"] == kind and r["name"].startswith(prefix)]
        return max(vals) if vals else float("nan")

    def get(kind, name):
        return next((r["value"] for r in rows if r["kind"] == kind and r["name"] == name), float("nan"))

    pyg_a, pyg_b = best("a", "PyG"), best("b", "PyG")
    model_alone = get("c", "model alone (batches prepared)")
    return {
        "(a) device / PyG best": get("a", "tritongnn [device]") / pyg_a,
        "(a) host UVA / PyG best": get("a", "tritongnn [host]") / pyg_a,
        "(b) device / PyG best": get("b", "tritongnn [device]") / pyg_b,
        "(b) host UVA / PyG best": get("b", "tritongnn [host]") / pyg_b,
        "(c)/(b) device: step time vs model alone": model_alone / get("b", "tritongnn [device]"),
        "(c)/(b) host: step time vs model alone": model_alone / get("b", "tritongnn [host]"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=int, default=24, help="R-MAT: 2^scale nodes")
    parser.add_argument("--edges", type=lambda s: int(eval(s)), default=2**28, help="directed edges")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=300, help="timed batches, loader only")
    parser.add_argument("--train-batches", type=int, default=150, help="timed training steps")
    parser.add_argument("--pyg-batches", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 8, 16])
    parser.add_argument("--skip-pyg", action="store_true")
    parser.add_argument("--out", default=None, help="append results to this JSON file")
    parser.add_argument("--commit", default=None,
                        help="commit measured (default: git rev-parse of this checkout)")
    args = parser.parse_args()
    device = torch.device("cuda")

    start = now(device)
    data = rmat(args.scale, args.edges, num_classes=args.classes, num_features=args.features,
                device=device, seed=0)
    gen_seconds = now(device) - start
    settings = dict(graph=f"R-MAT 2^{args.scale} nodes, {args.edges} edges, a,b,c,d=0.57,0.19,0.19,0.05",
                    features=f"{args.features} float32", classes=args.classes,
                    num_neighbors=args.num_neighbors, batch_size=args.batch_size,
                    model="GraphSAGE hidden 256, 3 layers", generation_seconds=round(gen_seconds, 2))
    print(json.dumps(settings), flush=True)
    rows = Rows()
    graph_gpu = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, device=device)
    x_host = data.x.cpu().pin_memory()
    bench_kernels(data, graph_gpu, data.x, x_host, args, device, rows)
    del graph_gpu, x_host
    print("kernels: done", flush=True)

    def model_fn():
        return make_model(args.features, args.classes, device)

    bench_ours(data, args, device, rows, model_fn)
    print("tritongnn: done", flush=True)
    if not args.skip_pyg:
        bench_pyg(data, args, device, rows, model_fn)

    ratios = summary(rows)
    record = new_record("loader", device, args.commit, settings=settings, rows=rows, ratios=ratios,
                        ceilings=CEILINGS)
    append_record(args.out, record)
    print(f"\n{record['gpu']}  commit {record['commit']}  {record['date']}")
    print(f"{'kind':5s} {'name':50s} {'value':>10s}  unit")
    for r in rows:
        print(format_row(r))
    for k, v in ratios.items():
        print(f"ratio {k:52s} {v:6.2f}x")


if __name__ == "__main__":
    main()
