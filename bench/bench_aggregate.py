"""Aggregation benchmark: ``tritongnn.nn.SAGEConv`` / ``GCNConv`` against
PyG's, forward plus backward, on sampled blocks.

Batches are sampled by ``tritongnn.NeighborLoader`` from a synthetic
power-law graph (``--nodes``, ``--edges``); every layer runs on the same
batches' ``edge_index`` with random input features of each width, after a
check that both layers give the same outputs and input gradients. Time is
GPU time (CUDA events) over all batches, after one warm-up pass.

Usage (GPU machine)::

    python bench/bench_aggregate.py --out bench/results/aggregate.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from torch_geometric.nn import GCNConv as PyGGCNConv  # noqa: E402
from torch_geometric.nn import SAGEConv as PyGSAGEConv  # noqa: E402

from tritongnn import NeighborLoader  # noqa: E402
from tritongnn.datasets import chung_lu  # noqa: E402
from tritongnn.nn import GCNConv, SAGEConv  # noqa: E402
from _record import append_record, new_record  # noqa: E402


def time_layer(layer, blocks, width, device):
    """Seconds of GPU time for forward + backward over ``blocks``."""
    def run():
        for edge_index, num_nodes in blocks:
            x = torch.randn(num_nodes, width, device=device, requires_grad=True)
            layer(x, edge_index).sum().backward()
    run()  # warm-up: compilation, allocator
    if device.type != "cuda":  # a smoke test of the script
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000_000)
    parser.add_argument("--edges", type=int, default=1_000_000_000)
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--layers", nargs="+", default=["SAGEConv-mean", "SAGEConv-sum", "GCNConv"])
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
    rows = []
    layers = {"SAGEConv-mean": (SAGEConv, PyGSAGEConv, dict(aggr="mean")),
              "SAGEConv-sum": (SAGEConv, PyGSAGEConv, dict(aggr="sum")),
              "GCNConv": (GCNConv, PyGGCNConv, {})}
    for name in args.layers:
        ours_cls, pyg_cls, kwargs = layers[name]
        for width in args.widths:
            torch.manual_seed(0)
            ours = ours_cls(width, width, **kwargs).to(device)
            theirs = pyg_cls(width, width, **kwargs).to(device)
            theirs.load_state_dict(ours.state_dict())
            edge_index, num_nodes = blocks[0]
            x = torch.randn(num_nodes, width, device=device)
            outs = []
            for layer in (ours, theirs):
                xi = x.clone().requires_grad_()
                out = layer(xi, edge_index)
                out.square().sum().backward()
                outs.append((out.detach(), xi.grad))
            correct = all(torch.allclose(a, b, rtol=1e-3, atol=1e-3) for a, b in zip(*outs))
            t_ours, t_pyg = time_layer(ours, blocks, width, device), time_layer(theirs, blocks, width, device)
            row = dict(layer=name, width=width, edges=edges, batches=len(blocks), seconds_tritongnn=t_ours,
                       seconds_pyg=t_pyg, speedup=t_pyg / t_ours, correct=correct)
            rows.append(row)
            print(f"{name:14s} width {width:4d}: tritongnn {t_ours * 1e3:8.1f} ms, PyG "
                  f"{t_pyg * 1e3:8.1f} ms, {t_pyg / t_ours:5.2f}x  ({edges:,} edges in {len(blocks)} "
                  f"batches; correct={correct})", flush=True)
    settings = dict(graph=f"Chung-Lu {args.nodes} nodes, {args.edges} edges", num_neighbors=args.num_neighbors,
                    batch_size=args.batch_size, layer="conv(width, width), forward + backward")
    append_record(args.out, new_record("aggregate", device, args.commit, settings=settings, rows=rows))


if __name__ == "__main__":
    main()
