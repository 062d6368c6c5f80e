"""Aggregation benchmark: ``tritongnn.nn`` layers against PyG's, forward plus
backward, on sampled blocks.

Batches are sampled by ``tritongnn.NeighborLoader`` from a synthetic
power-law graph (``--nodes``, ``--edges``); every layer runs on the same
batches' ``edge_index`` with random input features of each width, after a
check that both give the same outputs and input gradients. Time is GPU time
(CUDA events) over all batches, after one warm-up pass.

Two tables:

- **aggregation**: the message passing alone, PyG's ``SimpleConv`` (its
  default path: messages ``x[src]`` materialised, then scattered) against
  ``tritongnn.nn.SimpleConv``, for the mean (SAGE's), the sum, and the
  GCN-normalised sum (``edge_weight``);
- **layer**: whole ``SAGEConv`` / ``GCNConv`` layers, whose linear maps are
  the same code in both, for context.

``--sweep`` also times the two kernels alone for a grid of launch settings
(``kernels.aggregate.LAUNCH``), to choose them.

Usage (GPU machine)::

    python bench/bench_aggregate.py --out bench/results/aggregate.json
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from torch_geometric.nn import GCNConv as PyGGCNConv  # noqa: E402
from torch_geometric.nn import SAGEConv as PyGSAGEConv  # noqa: E402
from torch_geometric.nn import SimpleConv as PyGSimpleConv  # noqa: E402
from torch_geometric.nn.conv.gcn_conv import gcn_norm  # noqa: E402

from tritongnn import NeighborLoader  # noqa: E402
from tritongnn.datasets import chung_lu  # noqa: E402
from tritongnn.nn import GCNConv, SAGEConv, SimpleConv  # noqa: E402
from _record import append_record, new_record  # noqa: E402

agg = importlib.import_module("tritongnn.kernels.aggregate")


def gpu_seconds(fn, device, repeat: int = 1) -> float:
    """Seconds per call of ``fn`` (GPU time on a GPU), after one warm-up call."""
    fn()
    if device.type != "cuda":  # a smoke test of the script
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeat


def forward_backward(layer, inputs):
    """One pass of ``layer`` over every block: forward, then backward."""
    def run():
        for args in inputs:
            x = args[0].detach().requires_grad_()
            layer(x, *args[1:]).sum().backward()
    return run


def same_result(ours, theirs, args) -> bool:
    outs = []
    for layer in (ours, theirs):
        x = args[0].detach().clone().requires_grad_()
        out = layer(x, *args[1:])
        out.square().sum().backward()
        outs.append((out.detach(), x.grad))
    return all(torch.allclose(a, b, rtol=1e-3, atol=1e-3) for a, b in zip(*outs))


def compare(name, ours, theirs, inputs, width, edges, device):
    correct = same_result(ours, theirs, inputs[0])
    t_ours = gpu_seconds(forward_backward(ours, inputs), device)
    t_pyg = gpu_seconds(forward_backward(theirs, inputs), device)
    print(f"{name:16s} width {width:4d}: tritongnn {t_ours * 1e3:8.2f} ms, PyG {t_pyg * 1e3:8.2f} ms, "
          f"{t_pyg / t_ours:5.2f}x  (correct={correct})", flush=True)
    return dict(name=name, width=width, edges=edges, seconds_tritongnn=t_ours, seconds_pyg=t_pyg,
                speedup=t_pyg / t_ours, correct=correct)


def sweep(blocks, width, device):
    """Kernel time of the forward and the backward per launch setting."""
    rows = []
    prepared = []
    for edge_index, num_nodes in blocks:
        grouping = agg.Grouping(edge_index[1], num_nodes, num_nodes)
        prepared.append((torch.randn(num_nodes, width, device=device), grouping,
                         grouping.by_dst(edge_index[0])))
    default = dict(agg.LAUNCH)
    grid = itertools.product([4, 16, 64], [8, 16, 32], [128], [1, 2, 4])
    for segs, block_e, block_d, warps in grid:
        agg.LAUNCH.update(SEGS=segs, BLOCK_E=block_e, BLOCK_D=block_d, num_warps=warps)

        def forward():
            for x, grouping, src in prepared:
                agg.segment_sum(x, grouping.dst_indptr, src)

        def backward():
            for x, grouping, src in prepared:
                agg.scatter_add(x, grouping.dst_indptr, src, None, x.size(0))
        row = dict(width=width, SEGS=segs, BLOCK_E=block_e, BLOCK_D=block_d, num_warps=warps,
                   forward_ms=gpu_seconds(forward, device, 3) * 1e3,
                   backward_atomic_ms=gpu_seconds(backward, device, 3) * 1e3)
        rows.append(row)
    agg.LAUNCH.update(default)
    best_f = min(rows, key=lambda r: r["forward_ms"])
    best_b = min(rows, key=lambda r: r["backward_atomic_ms"])
    print(f"sweep width {width}: best forward {best_f['forward_ms']:.2f} ms at {best_f}; best atomic "
          f"backward {best_b['backward_atomic_ms']:.2f} ms at {best_b}", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000_000)
    parser.add_argument("--edges", type=int, default=1_000_000_000)
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--sweep", action="store_true", help="also time the kernels per launch setting")
    parser.add_argument("--out", default=None)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script only")
    args = parser.parse_args()
    device = torch.device(args.device)
    data = chung_lu(args.nodes, args.edges, num_features=1, train_fraction=0.01, val_fraction=0.001,
                    test_fraction=0.001, device=device, seed=0)
    loader = NeighborLoader(data, args.num_neighbors, input_nodes=data.train_mask, batch_size=args.batch_size,
                            shuffle=True, seed=0, device=device)
    blocks = []
    for batch in loader:
        blocks.append((batch.edge_index, batch.num_nodes))
        if len(blocks) == args.batches:
            break
    del loader, data
    if device.type == "cuda":
        torch.cuda.empty_cache()
    edges = sum(e.size(1) for e, _ in blocks)
    nodes = sum(n for _, n in blocks)
    print(f"{len(blocks)} sampled blocks: {edges:,} edges, {nodes:,} nodes; settings {agg.LAUNCH}", flush=True)
    rows, sweeps = [], []
    for width in args.widths:
        torch.manual_seed(0)
        inputs = [(torch.randn(n, width, device=device), e) for e, n in blocks]
        weighted = [(x, e, gcn_norm(e, None, x.size(0), add_self_loops=False)[1]) for x, e in inputs]
        for aggr in ("mean", "sum"):
            rows.append(compare(f"aggregate-{aggr}", SimpleConv(aggr), PyGSimpleConv(aggr), inputs, width,
                                edges, device))
        rows.append(compare("aggregate-gcn", SimpleConv("sum"), PyGSimpleConv("sum"), weighted, width, edges,
                            device))
        for name, ours_cls, pyg_cls, kwargs in [("SAGEConv-mean", SAGEConv, PyGSAGEConv, dict(aggr="mean")),
                                                ("GCNConv", GCNConv, PyGGCNConv, {})]:
            torch.manual_seed(0)
            ours = ours_cls(width, width, **kwargs).to(device)
            theirs = pyg_cls(width, width, **kwargs).to(device)
            theirs.load_state_dict(ours.state_dict())
            rows.append(compare(name, ours, theirs, inputs, width, edges, device))
        if args.sweep and width == args.widths[0]:
            sweeps.append(dict(width=width, rows=sweep(blocks, width, device)))
        del inputs, weighted
    settings = dict(graph=f"Chung-Lu {args.nodes} nodes, {args.edges} edges", num_neighbors=args.num_neighbors,
                    batch_size=args.batch_size, batches=len(blocks), edges=edges, nodes=nodes,
                    launch=dict(agg.LAUNCH),
                    timed="forward + backward over every block; layers conv(width, width)")
    append_record(args.out, new_record("aggregate", device, args.commit, settings=settings, rows=rows,
                                       sweeps=sweeps))


if __name__ == "__main__":
    main()
