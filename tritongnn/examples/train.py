"""Train PyG's GraphSAGE with ``tritongnn.NeighborLoader``: the README's first
command (``tritongnn-train``).

On Cora (packaged with tritongnn) and on a synthetic power-law graph with
planted classes (``tritongnn.datasets.chung_lu``, generated on the GPU when
there is one), it trains for a few epochs and prints, per epoch, the mean
training loss, train/validation/test accuracy and seconds, with a progress
bar over the batches. The training loop is PyG's usual one: only the loader's
import differs. Without a GPU the loader runs its pure-torch CPU path.

Usage::

    tritongnn-train                                  # Cora, then the synthetic graph
    tritongnn-train --dataset synthetic --nodes 1000000 --edges 20000000
    tritongnn-train --placement host                 # graph and features in pinned host memory (UVA)
    tritongnn-train --placement host --cache-budget 200000000   # ... with a 200 MB GPU cache
    torchrun --nproc-per-node 2 -m tritongnn.examples.train     # data parallel, one process per GPU

Under ``torchrun`` the script initialises ``torch.distributed`` (NCCL on
GPUs, one per process; gloo without), wraps the model in
``DistributedDataParallel``, and every loader shards its seeds by rank; the
accuracies are summed over the ranks, and rank 0 prints. With ``--placement
host`` the ranks of a host share one copy of each loader's host arrays
(``share_host_memory``; ``--no-share-host-memory`` turns it off). After
training it prints every rank's host memory, to compare runs with 1 and 2
ranks: resident (``rss``), its private part (``rss - rss_shmem``) and its
shared part, and the host's shared memory (``Shmem``) and used memory.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE

from tritongnn import NeighborLoader
from tritongnn.datasets import chung_lu, cora
from tritongnn.host_memory import memory_usage
from tritongnn.memory import size


def progress(iterable, total: int, prefix: str, stream=None):
    """Yield from ``iterable``, drawing a one-line progress bar on ``stream``
    (default: standard error; redrawn per batch on a terminal, once at the
    end otherwise)."""
    stream = stream or sys.stderr
    width, start = 30, time.perf_counter()
    for i, item in enumerate(iterable, 1):
        yield item
        if stream.isatty() or i == total:
            done = width * i // max(total, 1)
            rate = i / max(time.perf_counter() - start, 1e-9)
            stream.write(f"\r{prefix} [{'#' * done}{'.' * (width - done)}] {i}/{total} {rate:7.1f} batches/s")
            if i == total:
                stream.write("\n")
            stream.flush()


def is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def say(*args, **kwargs) -> None:
    """print on rank 0 only."""
    if is_main():
        print(*args, **kwargs)


def summed(*values: float) -> list[float]:
    """``values`` summed over the ranks (themselves with one process)."""
    if not dist.is_initialized():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64,
                     device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t)
    return t.tolist()


def train_epoch(model, loader, optimizer, device, prefix):
    model.train()
    total_loss = total = 0
    batches = progress(loader, len(loader), prefix) if is_main() else loader
    for batch in batches:
        batch = batch.to(device)
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index,
                    num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                    num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        optimizer.step()
        total_loss += loss.item() * batch.batch_size
        total += batch.batch_size
    total_loss, total = summed(total_loss, total)
    return total_loss / max(total, 1)


@torch.no_grad()
def accuracy(model, loader, device):
    model.eval()
    correct = total = 0
    for batch in loader:
        batch = batch.to(device)
        pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
        correct += int((pred == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    correct, total = summed(correct, total)
    return correct / max(total, 1)


def _distinct_host_bytes(loaders) -> int:
    seen = {}
    for loader in loaders:
        for t in loader.host_arrays:
            seen[(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())] = t.untyped_storage().nbytes()
    return sum(seen.values())


def report_host_memory(loaders) -> list[dict]:
    """Print (rank 0) and return every rank's host memory: its resident
    memory, split into private and shared pages, the host's shared memory
    and used memory (``tritongnn.host_memory.memory_usage``), and the bytes
    of the loaders' host arrays and how many ranks share them."""
    usage = memory_usage()
    # loaders of one graph may hold the same arrays (on a CPU, the caller's
    # own): each counted once
    usage["host_array_bytes"] = _distinct_host_bytes(loaders)
    usage["shared_by_ranks"] = loaders[0].host_memory["shared_by_ranks"]
    ranks = [usage]
    if dist.is_initialized():
        ranks = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, usage)
    if "rss" not in usage:
        say("      host memory: not reported (no /proc)")
        return ranks
    sharing = (f"one copy per host, shared by {usage['shared_by_ranks']} ranks" if usage["shared_by_ranks"] > 1
               else "a copy per rank")
    say(f"      host memory: the loaders' host arrays {size(usage['host_array_bytes'])} ({sharing})")
    for rank, u in enumerate(ranks):
        say(f"      rank {rank}: rss {size(u['rss'])} = private {size(u['rss'] - u['rss_shmem'])}"
            f" + shared {size(u['rss_shmem'])}")
    private = sum(u["rss"] - u["rss_shmem"] for u in ranks)
    say(f"      host: shared memory (Shmem) {size(usage['host_shmem'])}, used (MemTotal - MemAvailable) "
        f"{size(usage['host_used'])}; ranks' private memory + Shmem: "
        f"{size(private + usage['host_shmem'])}")
    return ranks


def run(name, data, args, device):
    """Train and evaluate on ``data``; returns the last epoch's test accuracy."""
    say(f"\n== {name}: {data.num_nodes:,} nodes, {data.num_edges:,} edges, "
          f"{data.num_features} features, {int(data.y.max()) + 1} classes; "
          f"device={device}, placement={args.placement}, num_neighbors={args.num_neighbors}")
    feature_dtype = None if args.feature_dtype is None else getattr(torch, args.feature_dtype)
    if feature_dtype is not None:
        say(f"features stored as {args.feature_dtype} (batches' x in {data.x.dtype})")
    common = dict(num_neighbors=args.num_neighbors, device=device, placement=args.placement,
                  share_host_memory=args.share_host_memory, feature_dtype=feature_dtype)
    train_loader = NeighborLoader(data, input_nodes=data.train_mask, batch_size=args.batch_size,
                                  shuffle=True, seed=args.seed, cache_budget=args.cache_budget,
                                  dynamic_cache=args.dynamic_cache, **common)
    if train_loader.cache is not None:
        say(f"{train_loader.cache.plan}; profiled in {train_loader.cache_profile.seconds:.2f} s")
    eval_loaders = {split: NeighborLoader(data, input_nodes=data[f"{split}_mask"], batch_size=1024,
                                          seed=args.seed, **common)
                    for split in ("train", "val", "test")}
    torch.manual_seed(args.seed)
    model = GraphSAGE(data.num_features, args.hidden, num_layers=len(args.num_neighbors),
                      out_channels=int(data.y.max()) + 1, dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
        say(f"data parallel: {dist.get_world_size()} ranks ({dist.get_backend()}), "
            f"{len(train_loader)} batches per rank per epoch")
    say(f"{'epoch':>5s} {'loss':>8s} {'train':>7s} {'val':>7s} {'test':>7s} {'seconds':>8s}")
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        loss = train_epoch(model, train_loader, optimizer, device, f"epoch {epoch:3d}")
        seconds = time.perf_counter() - start
        acc = {split: accuracy(model, loader, device) for split, loader in eval_loaders.items()}
        say(f"{epoch:5d} {loss:8.4f} {acc['train']:7.4f} {acc['val']:7.4f} {acc['test']:7.4f} "
              f"{seconds:8.2f}", flush=True)
        stats = train_loader.stats
        say(f"      time: sampling {stats['sampling_seconds']:.2f} s, gather {stats['gather_seconds']:.2f} s "
              f"(loader stream), model {stats['model_seconds']:.2f} s, waiting for batches "
              f"{stats['wait_seconds']:.2f} s")
        if train_loader.cache is not None:
            say(f"      cache: feature hit rate {stats['feature_hit_rate']:.3f} (static "
                  f"{stats['static_feature_hit_rate']:.3f}, dynamic {stats['dynamic_feature_hit_rate']:.3f}), "
                  f"adjacency hit rate {stats['adjacency_hit_rate']:.3f}, {stats['host_bytes'] / 1e6:.1f} MB "
                  f"read from host memory")
    report_host_memory([train_loader, *eval_loaders.values()])
    return acc["test"]


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1 (its error names the option)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {value}")
    return value


def _seed(text: str) -> int:
    value = int(text)
    if not 0 <= value < 2**62:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**62), got {value}")
    return value


def main(argv=None):
    """Run the example; returns ``{dataset: final test accuracy}``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--dataset", choices=["cora", "synthetic", "both"], default="both")
    parser.add_argument("--epochs", type=_positive_int, default=None,
                        help="epochs per dataset (default: 20 on Cora, 3 on the synthetic graph)")
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[10, 10])
    parser.add_argument("--batch-size", type=_positive_int, default=None,
                        help="seeds per batch (default: 32 on Cora, 1024 on the synthetic graph)")
    parser.add_argument("--hidden", type=_positive_int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--nodes", type=_positive_int, default=None,
                        help="synthetic graph nodes (default: 10^6 with a GPU, 2*10^4 without)")
    parser.add_argument("--edges", type=_positive_int, default=None,
                        help="synthetic graph directed edges (default: 20 per node)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--placement", choices=["device", "host"], default="device",
                        help="graph and features in GPU memory, or in pinned host memory (UVA)")
    parser.add_argument("--cache-budget", default=None,
                        type=lambda v: v if v == "auto" else int(v),
                        help="with --placement host: GPU bytes (or 'auto') for the dual cache")
    parser.add_argument("--dynamic-cache", action="store_true",
                        help="with --cache-budget: give a share of it to the dynamic (EWMA) feature cache")
    parser.add_argument("--feature-dtype", choices=["float16", "bfloat16"], default=None,
                        help="store the features in this dtype in the caches and host memory (lossy; "
                             "half the bytes read); batches stay float32")
    parser.add_argument("--no-share-host-memory", dest="share_host_memory", action="store_false",
                        help="with --placement host under torchrun: every rank builds its own host copy "
                             "(default: one copy per host, shared by its ranks)")
    parser.add_argument("--seed", type=_seed, default=0)
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ  # by torchrun
    if launched and not dist.is_initialized():
        if device.type == "cuda":  # one GPU per process
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if args.cache_budget is not None and args.placement != "host":
        parser.error("--cache-budget caches a graph kept in host memory: add --placement host")
    if args.dynamic_cache and args.cache_budget is None:
        parser.error("--dynamic-cache takes a share of --cache-budget: add --cache-budget")

    results = {}
    if args.dataset in ("cora", "both"):
        run_args = argparse.Namespace(**{**vars(args), "epochs": _given(args.epochs, 20),
                                         "batch_size": _given(args.batch_size, 32)})
        results["Cora"] = run("Cora", cora(), run_args, device)
    if args.dataset in ("synthetic", "both"):
        nodes = _given(args.nodes, 1_000_000 if device.type == "cuda" else 20_000)
        edges = _given(args.edges, 20 * nodes)
        start = time.perf_counter()
        data = chung_lu(nodes, edges, num_classes=16, num_features=128, seed=args.seed, device=device)
        say(f"\ngenerated the synthetic graph on {device} in {time.perf_counter() - start:.2f} s")
        run_args = argparse.Namespace(**{**vars(args), "epochs": _given(args.epochs, 3),
                                         "batch_size": _given(args.batch_size, 1024)})
        results["synthetic"] = run("synthetic (Chung-Lu, planted classes)", data, run_args, device)
    say("\nfinal test accuracy: " + ", ".join(f"{k} {v:.4f}" for k, v in results.items()))
    if launched and dist.is_initialized():
        dist.destroy_process_group()
    return results


def _given(value, default):
    return default if value is None else value


def cli() -> None:
    """The ``tritongnn-train`` command: ``main`` with exit status 0 (a
    console script exits with what its function returns)."""
    main()


if __name__ == "__main__":
    cli()
