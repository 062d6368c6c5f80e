"""Link prediction on Cora with ``tritongnn.LinkNeighborLoader``, beside PyG's.

A PyG GraphSAGE encoder and a dot-product decoder are trained on the
training edges of a ``RandomLinkSplit`` (binary negatives, one per positive,
drawn by the loader), with our loader and with PyG's, from the same seeds
for the same epochs; each prints the test AUC (the full graph encoded once,
the test split's positive and negative pairs scored). Only the loader's
import differs between the two runs.

PyG's ``LinkNeighborLoader`` samples with pyg-lib or torch-sparse; where
neither is installed, the PyG run is PyG's ``LinkLoader`` (its batches and
layout) over ``tritongnn.PyGSampler``, and the script says so.

Usage::

    python -m tritongnn.examples.link_prediction                  # GPU if present
    TRITON_INTERPRET=1 python -m tritongnn.examples.link_prediction --device cpu --epochs 3
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.nn import GraphSAGE

_SHARED_CORA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "cora.npz")


def load_cora(path: str | None):
    """Cora from ``path`` (an ``.npz``, ``tritongnn.datasets.npz``'s layout),
    else ``../shared/data/cora.npz`` where it exists, else the packaged copy."""
    from tritongnn.datasets.npz import cora, load_npz
    path = path or (_SHARED_CORA if os.path.exists(_SHARED_CORA) else None)
    return load_npz(path) if path else cora()


def auc(score: torch.Tensor, label: torch.Tensor) -> float:
    """ROC AUC of ``score`` for binary ``label`` (Mann-Whitney U, ties counted half)."""
    score, label = score.double().cpu(), label.bool().cpu()
    order = torch.argsort(score)
    ranks = torch.empty_like(score)
    ranks[order] = torch.arange(1, score.numel() + 1, dtype=torch.float64)
    for value in score.unique():  # mean rank within ties
        tied = score == value
        ranks[tied] = ranks[tied].mean()
    num_pos, num_neg = int(label.sum()), int((~label).sum())
    return float((ranks[label].sum() - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg))


def pyg_loader(data, device, seed: int, num_neighbors, **kwargs):
    """PyG's ``LinkNeighborLoader`` where it can sample here, else PyG's
    ``LinkLoader`` over ``tritongnn.PyGSampler`` (on the CPU: PyG's batches
    are CPU tensors); and its name."""
    from torch_geometric.loader import LinkLoader, LinkNeighborLoader
    loader = LinkNeighborLoader(data, num_neighbors, generator=torch.Generator().manual_seed(seed), **kwargs)
    try:
        next(iter(loader))
        return loader, "torch_geometric.loader.LinkNeighborLoader"
    except ImportError:  # neither pyg-lib nor torch-sparse
        from tritongnn import PyGSampler
        sampler = PyGSampler(data, num_neighbors, device="cpu", seed=seed)
        return (LinkLoader(data, sampler, generator=torch.Generator().manual_seed(seed), **kwargs),
                "torch_geometric.loader.LinkLoader over tritongnn.PyGSampler")


def run(kind: str, train_data, test_data, args, device) -> tuple[float, float, str]:
    """Train with loader ``kind`` (``"tritongnn"`` or ``"pyg"``); returns
    (test AUC, seconds, the loader's name)."""
    torch.manual_seed(args.seed)
    settings = dict(num_neighbors=args.fanout, edge_label_index=train_data.edge_label_index,
                    edge_label=train_data.edge_label, neg_sampling_ratio=1.0, batch_size=args.batch_size,
                    shuffle=True)
    if kind == "tritongnn":
        from tritongnn import LinkNeighborLoader
        loader, name = LinkNeighborLoader(train_data, device=device, seed=args.seed, **settings), \
            "tritongnn.LinkNeighborLoader"
    else:
        loader, name = pyg_loader(train_data, device=device, seed=args.seed, **settings)
    torch.manual_seed(args.seed)  # the same initial weights either way
    model = GraphSAGE(train_data.num_features, args.hidden, num_layers=len(args.fanout)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        total = count = 0
        for batch in loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            loss = F.binary_cross_entropy_with_logits((h[src] * h[dst]).sum(-1), batch.edge_label.float())
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * src.numel()
            count += src.numel()
        print(f"  {kind:9s} epoch {epoch + 1}: loss {total / count:.4f}")
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        h = model(test_data.x.to(device), test_data.edge_index.to(device))
        src, dst = test_data.edge_label_index.to(device)
        score = (h[src] * h[dst]).sum(-1)
    return auc(score, test_data.edge_label), seconds, name


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="a Cora .npz (default: ../shared/data/cora.npz)")
    parser.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--fanout", type=int, nargs="+", default=[10, 5])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    data = load_cora(args.data)
    data = T.NormalizeFeatures()(data)
    torch.manual_seed(args.seed)
    split = T.RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True, add_negative_train_samples=False)
    train_data, _, test_data = split(data)
    print(f"Cora: {data.num_nodes} nodes, {train_data.edge_index.size(1)} training message edges, "
          f"{train_data.edge_label_index.size(1)} supervision edges, {test_data.edge_label.numel()} test pairs; "
          f"device {device}, {args.epochs} epochs, fanout {args.fanout}, batch {args.batch_size}")
    for kind in ("tritongnn", "pyg"):
        score, seconds, name = run(kind, train_data, test_data, args, device)
        print(f"{name}: test AUC {score:.4f} ({seconds:.1f} s training)")


if __name__ == "__main__":
    main()
