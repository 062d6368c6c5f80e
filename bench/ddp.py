"""Data-parallel benchmark: seconds per epoch and host memory with 1 and N GPUs.

The graph of the dual-cache benchmark (Chung-Lu power law, 5x10^7 nodes,
10^9 edges, 128 float32 features; seeds from 4 of 16 classes) is generated
once on the GPU and saved as ``.npy`` files under ``--data-dir``; every rank
of every run maps them (``np.load(mmap_mode="r+")``: the page cache is
shared, not copied per rank). For each world size N of ``--world-sizes``
the driver runs ``torchrun --nproc-per-node N`` on this script's worker:
``tritongnn.NeighborLoader(placement="host", cache_budget=--budget-gb)``
(one host copy of the relabelled graph per host, ``share_host_memory``),
``tritongnn.nn.GraphSAGE`` in ``DistributedDataParallel`` over NCCL,
batch ``--batch-size`` per GPU, ``--epochs`` epochs (the last reported; an
epoch's seconds are the slowest rank's). Host memory after training: every
rank's private resident memory (``rss - rss_shmem - rss_file``) plus the
host's shared memory (``Shmem``: the one copy under ``/dev/shm``), and the
host's used memory (``MemTotal - MemAvailable``).

Usage (nvidia-h200-x2)::

    NCCL_NVLS_ENABLE=0 python bench/ddp.py --world-sizes 1 2 --out bench/results/ddp.json

``--device cpu`` runs a small graph with gloo: a smoke test of the script.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import GB, ROOT, append_record, new_record, print_settings  # noqa: E402


def data_files(args) -> Path:
    return Path(args.data_dir) / f"chung_lu_{args.nodes}_{args.edges}_{args.features}_{args.train_classes}"


def generate(args) -> None:
    """The graph, once, as .npy files (skipped when they exist)."""
    from tritongnn.datasets import chung_lu
    path = data_files(args)
    if (path / "done").exists():
        print(f"graph: {path} (cached)", flush=True)
        return
    path.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    device = torch.device(args.device)
    data = chung_lu(args.nodes, args.edges, num_classes=16, num_features=args.features, train_fraction=0.5,
                    val_fraction=0.001, test_fraction=0.001, device=device, seed=0)
    draw = torch.rand(args.nodes, generator=torch.Generator(device).manual_seed(1), device=device)
    train = data.train_mask & (data.y < args.train_classes) & (draw < 2 * 0.01 * 16 / args.train_classes)
    for name, tensor in dict(x=data.x, edge_index=data.edge_index, y=data.y, train_mask=train).items():
        np.save(path / f"{name}.npy", tensor.cpu().numpy())
    (path / "done").touch()
    print(f"graph: generated and saved to {path} in {time.perf_counter() - start:.1f} s", flush=True)


def worker(args) -> None:
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch_geometric.data import Data

    from tritongnn import NeighborLoader
    from tritongnn.host_memory import memory_usage
    from tritongnn.nn import GraphSAGE

    cuda = args.device == "cuda"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    before = memory_usage()
    path = data_files(args)
    arrays = {name: torch.from_numpy(np.load(path / f"{name}.npy", mmap_mode="r+"))
              for name in ("x", "edge_index", "y", "train_mask")}
    data = Data(x=arrays["x"], edge_index=arrays["edge_index"], y=arrays["y"], train_mask=arrays["train_mask"])
    data.num_nodes = args.nodes
    start = time.perf_counter()
    loader = NeighborLoader(data, args.num_neighbors, input_nodes=data.train_mask, batch_size=args.batch_size,
                            shuffle=True, seed=0, device=device, placement="host",
                            cache_budget=int(args.budget_gb * GB), dynamic_cache=True)
    build = time.perf_counter() - start
    torch.manual_seed(0)
    model = GraphSAGE(args.features, args.hidden, num_layers=len(args.num_neighbors), out_channels=16).to(device)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    epochs = []
    for _ in range(args.epochs):
        dist.barrier()
        start = time.perf_counter()
        total = torch.zeros(2, dtype=torch.float64, device=device)
        for batch in loader:
            optimizer.zero_grad(set_to_none=True)
            out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach().double() * batch.batch_size,
                                  torch.tensor(float(batch.batch_size), dtype=torch.float64, device=device)])
        seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the epoch ends when the slowest rank does
        dist.all_reduce(total)
        epochs.append(dict(seconds=float(seconds), loss=float(total[0] / total[1]), stats=loader.stats))
    usage = memory_usage()
    usage["before"] = before
    usage["peak_gpu_gb"] = torch.cuda.max_memory_allocated(device) / GB if cuda else 0.0
    ranks = [None] * world_size
    dist.all_gather_object(ranks, usage)
    if rank == 0:
        private = sum(u["rss"] - u["rss_shmem"] - u.get("rss_file", 0) for u in ranks)
        row = dict(world_size=world_size, batches_per_rank=len(loader), build_seconds=build,
                   epoch_seconds=epochs[-1]["seconds"], loss=epochs[-1]["loss"],
                   epochs=[{k: v for k, v in e.items() if k != "stats"} for e in epochs],
                   stats=epochs[-1]["stats"], host_memory_gb=(private + usage["host_shmem"]) / GB,
                   host_private_gb=private / GB, host_shmem_gb=usage["host_shmem"] / GB,
                   host_used_gb=usage["host_used"] / GB,
                   host_used_growth_gb=(usage["host_used"] - before["host_used"]) / GB,
                   shared_by_ranks=loader.host_memory["shared_by_ranks"], ranks=ranks)
        with open(args.row_out, "w") as f:
            json.dump(row, f)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--nodes", type=int, default=50_000_000)
    parser.add_argument("--edges", type=int, default=1_000_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--train-classes", type=int, default=4)
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=8000, help="seeds per batch per GPU")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--budget-gb", type=float, default=24.0, help="cache budget per GPU")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data-dir", default="/tmp/tritongnn-bench")
    parser.add_argument("--out", default=None)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--device", default="cuda", help="cpu: a small smoke test with gloo")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--row-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.device == "cpu" and args.nodes == parser.get_default("nodes"):
        args.nodes, args.edges, args.features, args.batch_size, args.budget_gb = 20_000, 200_000, 16, 256, 0.0005
    settings = dict(graph=f"Chung-Lu {args.nodes} nodes, {args.edges} edges, {args.features} float32 features",
                    seeds_from=f"classes < {args.train_classes}", num_neighbors=args.num_neighbors,
                    batch_size_per_gpu=args.batch_size, budget_gb_per_gpu=args.budget_gb, epochs=args.epochs,
                    model=f"tritongnn.nn.GraphSAGE hidden {args.hidden}, trimmed, DDP")
    device = torch.device("cuda") if args.device == "cuda" else None
    print_settings(device or torch.device("cpu"), dict(settings, world_sizes=args.world_sizes))
    generate(args)
    rows = []
    for n in args.world_sizes:
        row_out = Path(args.data_dir) / f"ddp_row_{n}.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
               __file__, "--worker", f"--row-out={row_out}", f"--device={args.device}",
               f"--data-dir={args.data_dir}", f"--nodes={args.nodes}", f"--edges={args.edges}",
               f"--features={args.features}", f"--train-classes={args.train_classes}",
               f"--batch-size={args.batch_size}", f"--hidden={args.hidden}", f"--budget-gb={args.budget_gb}",
               f"--epochs={args.epochs}", "--num-neighbors", *map(str, args.num_neighbors)]
        env = dict(os.environ, NCCL_NVLS_ENABLE="0", PYTHONPATH=ROOT)
        subprocess.run(cmd, check=True, env=env)
        rows.append(json.loads(row_out.read_text()))
        r = rows[-1]
        print(f"{n} GPU(s): {r['epoch_seconds']:.2f} s per epoch ({r['batches_per_rank']} batches per rank), "
              f"loss {r['loss']:.4f}, host memory {r['host_memory_gb']:.2f} GB (private {r['host_private_gb']:.2f}"
              f" + Shmem {r['host_shmem_gb']:.2f}; used {r['host_used_gb']:.2f}), shared by "
              f"{r['shared_by_ranks']} rank(s)", flush=True)
    base = rows[0]
    ratios = {f"{r['world_size']} vs {base['world_size']}": dict(
        speedup=base["epoch_seconds"] / r["epoch_seconds"],
        host_memory_ratio=r["host_memory_gb"] / base["host_memory_gb"]) for r in rows[1:]}
    for name, ratio in ratios.items():
        print(f"{name} GPU(s): {ratio['speedup']:.2f}x faster per epoch, host memory "
              f"{ratio['host_memory_ratio']:.2f}x", flush=True)
    append_record(args.out, new_record("ddp", device, args.commit, settings=settings, rows=rows, ratios=ratios))


if __name__ == "__main__":
    main()
