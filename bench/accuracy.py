"""Test accuracy on a real graph (Cora by default, or any npz of
../shared/data with labels and a split, e.g. twitch_de.npz):
tritongnn.NeighborLoader against PyG's NeighborLoader.

Same model, optimiser, epochs, fanouts and batch size; several seeds each;
mean and standard deviation of the test accuracy at the last epoch. PyG's
loader needs torch-sparse or pyg-lib (on the GPU machine: ../shared/wheels).

Usage::

    python bench/accuracy.py --seeds 5 --out bench/results/cora_accuracy.json
    python bench/accuracy.py --data ../shared/data/twitch_de.npz --batch-size 256 --seeds 3 \
        --out bench/results/cora_accuracy.json
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_record, new_record, print_settings  # noqa: E402

from tritongnn import NeighborLoader  # noqa: E402
from tritongnn.datasets import cora, load_npz  # noqa: E402


def run(loader_cls, data, seed, args, device, **kwargs):
    torch.manual_seed(seed)
    if loader_cls is NeighborLoader:
        kwargs["seed"] = seed
    train = loader_cls(data, args.num_neighbors, input_nodes=data.train_mask, batch_size=args.batch_size,
                       shuffle=True, **kwargs)
    test = loader_cls(data, args.num_neighbors, input_nodes=data.test_mask, batch_size=1000, **kwargs)
    model = GraphSAGE(data.num_features, 64, 2, int(data.y.max()) + 1, dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(args.epochs):
        model.train()
        for batch in train:
            batch = batch.to(device)
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in test:
            batch = batch.to(device)
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
    return correct / int(data.test_mask.sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="an npz of ../shared/data (default: Cora, shipped)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[10, 10])
    parser.add_argument("--feature-dtype", choices=["float16", "bfloat16"], default=None,
                        help="also our loader with the features stored in this dtype (lossy; batches "
                             "stay float32), the same seeds")
    parser.add_argument("--out", default=None)
    parser.add_argument("--commit", default=None,
                        help="commit measured (default: git rev-parse of this checkout)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = cora() if args.data is None else load_npz(args.data)
    name = "cora" if args.data is None else os.path.basename(args.data).removesuffix(".npz")
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
    settings = vars(args) | dict(dataset=name, model=f"GraphSAGE {data.num_features}-64-{int(data.y.max()) + 1}, "
                                                    "dropout 0.5, Adam lr 0.01 wd 5e-4")
    print_settings(device, settings)
    results = {}
    runs = [("tritongnn", NeighborLoader, {}), ("PyG", PyGNeighborLoader, {})]
    if args.feature_dtype:
        runs.insert(1, (f"tritongnn, {args.feature_dtype} features", NeighborLoader,
                        dict(feature_dtype=getattr(torch, args.feature_dtype))))
    for library, cls, kwargs in runs:
        try:
            results[library] = [run(cls, data, seed, args, device, **kwargs) for seed in range(args.seeds)]
        except ImportError as error:  # PyG without torch-sparse / pyg-lib
            print(f"{library}: skipped ({error})")
    record = new_record("cora_accuracy", device, args.commit, device_kind=str(device),
                        settings=settings, accuracy=results)
    append_record(args.out, record)
    for library, accs in results.items():
        print(f"{library:10s} {args.data or 'cora'} test accuracy {statistics.mean(accs):.4f} +- "
              f"{statistics.stdev(accs) if len(accs) > 1 else float('nan'):.4f} "
              f"over {len(accs)} seeds: {[round(a, 3) for a in accs]}")
    if "tritongnn" in results and "PyG" in results:
        gap = statistics.mean(results["tritongnn"]) - statistics.mean(results["PyG"])
        print(f"difference (tritongnn - PyG): {gap:+.4f}")


if __name__ == "__main__":
    main()
