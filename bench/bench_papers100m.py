"""GraphSAGE on an ogbn-papers100M-sized graph with the loader's defaults,
under a GPU memory cap: one row per process.

The graph (``tritongnn.datasets.chung_lu``): 111,059,956 nodes,
1,615,685,872 directed edges, 172 classes, 1,207,179 training seeds, made
on the GPU and handed over as PyG's datasets hand it: ``edge_index`` int64
in the order drawn (not sorted) on the CPU, ``x`` a plain (unpinned) CPU
float32 tensor of 128 columns (57 GB). Then the process is capped with
``torch.cuda.set_per_process_memory_fraction`` (``--cap-gb``; 0: the whole
card), and ``tritongnn.NeighborLoader(data, fanouts, batch_size=...,
input_nodes=data.train_mask, shuffle=True)`` is built with nothing else
(the defaults choose placement and cache), and PyG's ``GraphSAGE``
(hidden 128, dropout 0.5, Adam; each layer trimmed to the nodes the next
needs, PyG's ``num_sampled_nodes_per_hop``: untrimmed, its activations at
batch 8000 ran out of memory beside the loader at every cap, the
whole H100 included) trains through it: one warm-up epoch,
then ``--epochs`` timed. Printed and appended to ``--out``: build seconds,
seconds to the first batch (and each build stage's), s/epoch, the model
alone (``--alone-steps`` steps on 4 of the loader's batches held on the GPU,
scaled to an epoch: the floor the loader is measured against), the GPU peak
(``torch.cuda.max_memory_reserved`` and ``max_memory_allocated``, from the
build on), the host peak (``VmHWM``), and what the loader chose.
``--model tritongnn`` trains ``tritongnn.nn.GraphSAGE`` (the same layers
with the fused aggregation) instead of PyG's.

``--loader pyg`` runs PyG's own ``NeighborLoader`` (``--workers``
processes) over the same data instead; ``--batches`` times that many
batches of each epoch and scales to the whole epoch (the row says so).

    python bench/bench_papers100m.py --cap-gb 24 --out bench/results/papers100m.json
    python bench/bench_papers100m.py --loader pyg --batches 20 --epochs 1 --out bench/results/papers100m.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import append_record, new_record, print_settings, time_alone, train_step  # noqa: E402

from tritongnn import NeighborLoader  # noqa: E402
from tritongnn.datasets import chung_lu, class_features  # noqa: E402


def host_peak_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def make_data(args, device):
    """The graph as PyG gives it: int64 ``edge_index`` in drawn order and a
    plain float32 ``x``, both on the CPU."""
    start = time.perf_counter()
    data = chung_lu(args.nodes, args.edges, num_classes=args.classes, num_features=1,
                    train_fraction=args.train / args.nodes, val_fraction=0.0, test_fraction=0.0,
                    seed=args.seed, device=device)
    edge_index = data.edge_index.cpu()
    y, train_mask = data.y, data.train_mask.cpu()
    del data
    x = torch.empty((args.nodes, args.features), dtype=torch.float32)  # unpinned, as a dataset's
    class_features(y, args.classes, args.features, seed=args.seed + 1, out=x)
    data_y = y.cpu()
    del y
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    from torch_geometric.data import Data
    data = Data(x=x, edge_index=edge_index, y=data_y, train_mask=train_mask, num_nodes=args.nodes)
    return data, time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cap-gb", type=float, default=0.0, help="GPU memory the process may use (0: the card)")
    p.add_argument("--nodes", type=int, default=111_059_956)
    p.add_argument("--edges", type=int, default=1_615_685_872)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=172)
    p.add_argument("--train", type=int, default=1_207_179)
    p.add_argument("--batch-size", type=int, default=8000)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loader", choices=("tritongnn", "pyg"), default="tritongnn",
                   help="pyg: torch_geometric.loader.NeighborLoader on the same data (the baseline)")
    p.add_argument("--workers", type=int, default=8, help="PyG loader worker processes")
    p.add_argument("--batches", type=int, default=0,
                   help="time this many batches per epoch and scale to the epoch (0: whole epochs)")
    p.add_argument("--model", choices=("pyg", "tritongnn"), default="pyg",
                   help="whose GraphSAGE layers: torch_geometric.nn or tritongnn.nn")
    p.add_argument("--alone-steps", type=int, default=30, help="steps of the model alone (0: not timed)")
    p.add_argument("--build-dir", default=None,
                   help="NeighborLoader's build_dir: a second run of the same graph reads the build back")
    p.add_argument("--out", default=None, help="JSON lines file to append the row to")
    p.add_argument("--commit", default=None)
    args = p.parse_args()
    device = torch.device("cuda", torch.cuda.current_device())
    print_settings(device, {k: v for k, v in vars(args).items() if k not in ("out", "commit")})
    data, made = make_data(args, device)
    total = torch.cuda.get_device_properties(device).total_memory
    if args.cap_gb:
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gb * 2**30 / total), device)
    torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    if args.loader == "pyg":
        from torch_geometric.loader import NeighborLoader as PyGLoader
        loader = PyGLoader(data, args.fanouts, batch_size=args.batch_size, input_nodes=data.train_mask,
                           shuffle=True, num_workers=args.workers, persistent_workers=args.workers > 0)
    else:
        loader = NeighborLoader(data, args.fanouts, batch_size=args.batch_size, input_nodes=data.train_mask,
                                shuffle=True, seed=args.seed, build_dir=args.build_dir)
    build = time.perf_counter() - start
    print(f"built in {build:.1f} s {getattr(loader, 'build_seconds', '')}: "
          f"{getattr(loader, 'placement_reason', 'PyG')}; GPU allocated "
          f"{torch.cuda.memory_allocated(device) / 2**30:.2f} GiB, peak reserved "
          f"{torch.cuda.max_memory_reserved(device) / 2**30:.2f} GiB; cache "
          f"{getattr(getattr(loader, 'cache', None), 'plan', None)}", flush=True)
    per_epoch = -(-int(data.train_mask.sum()) // args.batch_size)
    timed = min(args.batches or per_epoch, per_epoch)
    if args.model == "pyg":
        from torch_geometric.nn import GraphSAGE
    else:
        from tritongnn.nn import GraphSAGE
    model = GraphSAGE(args.features, 128, len(args.fanouts), args.classes, dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    first, epochs = None, []
    for epoch in range(args.epochs + 1):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for step, batch in enumerate(loader):
            if step == timed:
                break
            if first is None:
                first = time.perf_counter() - start
            loss = train_step(model, optimizer, batch.to(device, non_blocking=True), trim=True)
        torch.cuda.synchronize(device)
        epochs.append((time.perf_counter() - t0) * per_epoch / timed)
    # (a loader whose cache may grow resets the peak counters at the end of its build, noting its own)
    built_peak = (loader.stats.get("build_gpu_peak") or {}) if args.loader == "tritongnn" else {}
    peaks = (max(torch.cuda.max_memory_reserved(device), built_peak.get("reserved", 0)),
             max(torch.cuda.max_memory_allocated(device), built_peak.get("allocated", 0)))
    allocator = torch.cuda.memory_stats(device)
    last_epoch = loader.stats if args.loader == "tritongnn" else {}
    alone = None
    if args.alone_steps:
        prepared = []
        for batch in loader:  # the last batch may be short: four full ones
            if batch.batch_size == args.batch_size:
                prepared.append(batch.to(device))
            if len(prepared) == 4:
                break
        alone = time_alone(model, optimizer, prepared, args.alone_steps, 3, per_epoch, device)["epoch_seconds"]
        del prepared
    row = dict(loader=args.loader, workers=args.workers if args.loader == "pyg" else None, model=args.model,
               timed_batches=timed, batches_per_epoch=per_epoch, cap_gb=args.cap_gb or round(total / 2**30, 1),
               batch_size=args.batch_size, fanouts=args.fanouts,
               make_s=round(made, 1), build_s=round(build, 1), first_batch_s=round(first, 1),
               build_stages_s=getattr(loader, "build_seconds", None),
               epoch_s=round(sum(epochs[1:]) / args.epochs, 3), epochs_s=[round(e, 3) for e in epochs],
               model_alone_s=None if alone is None else round(alone, 3),
               gpu_peak_gb=round(peaks[0] / 2**30, 2), gpu_allocated_peak_gb=round(peaks[1] / 2**30, 2),
               host_peak_gb=round(host_peak_bytes() / 2**30, 2), chose=getattr(loader, "placement_reason", None),
               cache=str(loader.cache.plan) if getattr(loader, "cache", None) is not None else None,
               build_loaded=getattr(loader, "build_loaded", None),
               cache_grown=loader.stats.get("cache_grown") if args.loader == "tritongnn" else None,
               allocator_retries=allocator.get("num_alloc_retries"), allocator_ooms=allocator.get("num_ooms"),
               last_epoch_stats={k: v for k, v in last_epoch.items() if isinstance(v, (int, float))},
               loss=round(loss, 3))
    print(json.dumps(row), flush=True)
    append_record(args.out, new_record("papers100m", device, commit=args.commit, nodes=args.nodes,
                                       edges=args.edges, features=args.features, row=row))


if __name__ == "__main__":
    main()
