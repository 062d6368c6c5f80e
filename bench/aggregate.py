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

A layer whose outputs or gradients differ from PyG's gets no speedup.

    python bench/aggregate.py --out bench/results/aggregate.json

``--device cpu --nodes 3000 --edges 30000 --batch-size 64 --batches 2
--widths 16`` is a smoke test of the script.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_record, new_record, print_ratios, print_settings  # noqa: E402
from torch_geometric.nn import GCNConv as PyGGCNConv  # noqa: E402
from torch_geometric.nn import SAGEConv as PyGSAGEConv  # noqa: E402
from torch_geometric.nn import SimpleConv as PyGSimpleConv  # noqa: E402
from torch_geometric.nn.conv.gcn_conv import gcn_norm  # noqa: E402

from tritongnn import NeighborLoader  # noqa: E402
from tritongnn.datasets import chung_lu  # noqa: E402
from tritongnn.nn import GCNConv, SAGEConv, SimpleConv  # noqa: E402


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
    speedup = t_pyg / t_ours if correct else float("nan")  # no speedup for a wrong result
    print(f"{name:16s} width {width:4d}: tritongnn {t_ours * 1e3:8.2f} ms, PyG {t_pyg * 1e3:8.2f} ms, "
          f"{speedup:5.2f}x  (correct={correct})", flush=True)
    return dict(name=name, width=width, edges=edges, seconds_tritongnn=t_ours, seconds_pyg=t_pyg,
                speedup=speedup, correct=correct)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000_000)
    parser.add_argument("--edges", type=int, default=1_000_000_000)
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256])
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
    settings = dict(graph=f"Chung-Lu {args.nodes} nodes, {args.edges} edges", num_neighbors=args.num_neighbors,
                    batch_size=args.batch_size, batches=len(blocks), edges=edges, nodes=nodes, widths=args.widths,
                    timed="forward + backward over every block; layers conv(width, width)")
    print_settings(device, settings)
    rows = []
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
        del inputs, weighted
    ratios = {f"{r['name']} width {r['width']}: PyG / tritongnn seconds": r["speedup"] for r in rows}
    print_ratios(ratios)
    append_record(args.out, new_record("aggregate", device, args.commit, settings=settings, rows=rows,
                                       ratios=ratios))


if __name__ == "__main__":
    main()
