"""End-to-end benchmark at the scale of ogbn-papers100M: tritongnn against
PyG's NeighborLoader, what each technique adds, the model alone, accuracy
and scaling.

The graph: Chung-Lu power law with planted classes (``tritongnn.datasets``),
by default 1.11x10^8 nodes, 1.6x10^9 directed edges, 172 classes, 1.2x10^6
training seeds (1.25x10^5 validation, 2.1x10^5 test), as ogbn-papers100M.
Its topology is generated on the GPU once and stored as ``.npy`` under
``--data-dir`` (the GPU machine's local disk; a second run maps the files);
the 128-float32 feature table (57 GB) is regenerated each run on the GPU
straight into pinned host memory (``datasets.class_features``: storing it
would nearly fill the 64 GB disk), where PyG's loader and ours both read it,
without copies. Generation times and host memory are printed.

Parts (``--parts``; each fits one 10-minute call on an H200 alone):

* ``pyg``: PyG's NeighborLoader (CPU sampling with torch-sparse or pyg-lib,
  ``--pyg-workers`` x pin_memory), the model on the GPU, ``--pyg-batches``
  training steps timed (at least two rounds of the workers' batches) after
  a warm-up of two rounds, and scaled to the epoch; the default
  (num_workers=0) and the best configuration are kept for the ratios.
* ``ablation``: GraphSAGE with tritongnn (GARDEN's Fig. 19,
  ``ablation_configs``), a line of techniques each added to the one before:
  UVA with no cache; + dual cache; + super-batches of 16; + group staging;
  + ``tritongnn.nn``'s GraphSAGE (the Triton aggregation, and layers that
  compute only the rows later layers read), which is ``FULL``; + features
  stored in float16 (``feature_dtype``: lossy, so last). Then branches, one
  technique each: ``FULL`` + dynamic cache, ``FULL`` + match-reorder 16,
  the dual cache + grouped sampler. At each ``--budgets-gb`` (0 = no
  budget: a budget that holds the whole graph); and everything in GPU
  memory (``placement="device"``).
* ``models``: GCN and GAT (8 heads x 8; ``tritongnn.nn``'s with our loader,
  PyG's with PyG's loader): tritongnn's recommended
  configuration (``RECOMMENDED``: the fastest ablation step measured at this
  scale, the dual cache; the Triton aggregation where it applies) at each
  budget and all in GPU memory, and PyG's loader with its best
  ``--pyg-workers``.
* ``alone``: the model alone on batches prepared in advance (8 of them,
  cycled), scaled to the epoch: the floor the loader is hidden behind;
  each model with PyG's layers and with ``tritongnn.nn``'s, and
  tritongnn's GraphSAGE once more with full float32 matmuls, to show
  what ``--matmul-precision`` gives.
* ``accuracy``: GraphSAGE trained for ``--acc-steps`` steps from three seeds
  with each loader, validation accuracy on ``--acc-val`` validation nodes.
* ``gather_order``: the recommended configuration at each non-zero budget
  with the gather's one host-ordered pass, with ``HOST_ROWS_FIRST`` (the
  default), and with ``HOST_ROWS_FIRST`` and ``RESOLVED_ROWS``
  (``kernels/gather.py``), side by side; or, given ``--warm-gb``, the
  defaults with a warm copy of each size (``warm_budget``: the rows next in
  hotness after the GPU cache, packed in pinned host memory; 0: none).
* ``profile``: torch.profiler over ``--profile-steps`` steps of the
  recommended configuration at each of ``--budgets-gb``, with each
  ``--profile-loaders`` keyword set added in turn: the top kernels by GPU
  time (``--profile-trace``).
* ``threads``: where the host's time goes in an epoch of the recommended
  configuration at each of ``--budgets-gb`` (after a warm-up pass, each of
  ``max(2, --epochs) - 1`` passes, then one more with ``cProfile`` in the
  producer): the training thread's and the loader's producer thread's CPU
  seconds per batch (``time.thread_time``, spin-waits in CUDA syncs
  included), the epoch without and then with ``cProfile`` in the producer
  (Python 3.12's profiles every thread at once: the list mixes the two),
  its top functions by own time (``--threads-top``), and the CPU and wall
  time of the loader's phases in each thread (sampling, its sizes sync,
  assembly, the gather's launch, the stats). A step
  bound by the host pays for the producer's Python too: the two threads
  share one interpreter lock. With ``--threads-loaders``, each keyword set
  in turn; where it replays batches (``pipeline.REPLAY_BATCHES``), the
  pipeline's two calls are timed on the thread that makes them (``replay
  (launch)``, ``hand out``: the producer's, or the loop's without
  ``pipeline.FROM_PRODUCER``) and profiled in the last pass instead.
* ``host``: the host's share of a step, switched off and on in one run: the
  recommended configuration at each budget, and the model alone, with the
  aggregation checking every layer's edge order (a host sync each,
  ``aggregate.KNOWN_ORDER = False``), the hops of a batch of 8000 run
  eagerly (``sampler._GRAPH_KEYS_MAX`` below its 7.3M keys) and the
  sampler's sizes read with ``.tolist()`` (a pageable copy), then each
  change added, then the first setting again (the spread of the run).
  With ``--host-adam`` instead: the defaults with Adam foreach (PyTorch's
  default on a GPU), ``fused=True``, then foreach again; with
  ``--host-id-map``: the defaults with hash id maps only, with a direct
  id map where it fits (``kernels.id_map``), then hash again; with
  ``--host-feature-dtype float16``: the defaults with float32 features, with
  features stored in float16 (``NeighborLoader``'s ``feature_dtype``: half
  the bytes through UVA, twice the rows a budget caches), float32 again;
  with ``--host-pick-costs C1 C2 ...``: the defaults with the cache planned
  at each ``allocator.PICK_COST`` (bytes a list sector is charged), then
  at C1 again; every row with a cache records its plan. With
  ``--host-loaders K1 K2 ...`` (JSON keyword sets): the defaults with each
  set added to the recommended loader's keywords, then K1 again. With
  ``--host-producer-ops N1 N2 ...``: the defaults with N more calls into
  torch a batch in the loader's producer thread (each a no-op on a
  one-element CPU tensor, which releases and takes back the interpreter
  lock, as every torch op does), then N1 again: what one more lock
  round trip a batch costs the training loop. With ``--alone-beside
  H:G ...``, after the settings: the model alone beside a stand-in for
  the loader's two costs, per step ``H`` ms of Python holding the
  interpreter lock in another thread and ``G`` ms of HBM-bound GPU work
  (a copy) on another stream, each pair in turn (``time_alone``): which of
  the two a step pays for.
  ``--feature-dtype`` stores them so in every tritongnn loader of a run
  (the accuracy part's rows say so); ``--host-feature-dtype`` with the
  accuracy part adds seeds of our loader with that dtype beside them.
* ``scaling``: the recommended configuration at budget ``--budgets-gb[0]``
  against batch size, fanouts and budget, and a feature-width point for this
  run's ``--features``. Other widths are runs of their own, with nodes and
  edges scaled so that the table stays the 57 GB the host holds (e.g.
  ``--parts scaling --features 512 --nodes 27750000 --edges 400000000
  --scaling-batch-sizes --scaling-fanouts --scaling-budgets-gb``); rows
  append to the CSV and ``--png`` draws every row of it.

Every model's float32 matmuls run at ``--matmul-precision`` (default
``high``: TF32 on the tensor cores, PyTorch's recommended training setting
on Ampere and later), PyG's loader's rows and ours alike.
Every model trains with PyG's layer-wise trimming
(``num_sampled_nodes_per_hop``): our loader gives the per-hop counts, and
so does PyG's with pyg-lib; with torch-sparse, whose sampler returns none,
PyG's loader derives them from the batch's hop-ordered edges in its
workers (``bench_loader.hop_counts``; untrimmed, PyG's GAT asked for more
than the H200's 141 GB at batch 8000). Every tritongnn
configuration runs ``--warmup`` batches, then times
``--batches`` batches (0: the rest of that epoch) and scales to the epoch
(``--epochs N``: N whole passes timed instead, each pass's start included); its row
gives seconds per epoch, the split (sampling, gather, model, waiting for
batches), hit rates and host bytes (``loader.stats``).

Parts run in this order whatever ``--parts`` says: ours (alone, ablation,
models, scaling, gather_order, profile), then PyG's loader (pyg, PyG's
GCN/GAT rows, accuracy), so that PyG's 26 GB of CPU edges and its workers'
batches never share the host with our loaders' builds.

Usage (GPU machine; PyG's baseline needs ../shared/wheels). Each call
regenerates the topology unless the machine kept ``--data-dir`` (10 s on an
H200) and the features (20-26 s), then runs its parts; rows append to the
same JSON and CSV, and a call cut short keeps the rows it measured
(``--out``'s ``.rows`` file; ``--from-rows`` makes their record). The
first call is the headline (~280 s: the default loader, group staging and
PyG's loader in one run)::

    E2E="python bench/bench_end_to_end.py --out bench/results/end_to_end.json --csv bench/results/end_to_end.csv"
    PYG="--pyg-workers 0 12 --pyg-pin-memory 0 --pyg-batches 6"
    $E2E --parts host pyg --budgets-gb 24 --epochs 1 --warmup 16 $PYG --host-loaders '{}' '{"super_batch": 16, "reuse": "group"}'
    $E2E --parts host --budgets-gb 0 --epochs 1 --warmup 16 --host-loaders '{}'  # no budget, ~130 s
    $E2E --parts ablation --budgets-gb 24 --epochs 1 --warmup 16            # ~190 s
    $E2E --parts alone ablation --models sage --budgets-gb 0 --epochs 1 --warmup 16  # the no-budget column, ~175 s
    $E2E --parts alone --budgets-gb 24 --batches 30 --warmup 16             # every model alone, ~110 s
    $E2E --parts models --budgets-gb 24 --batches 30 --warmup 16 $PYG       # GCN and GAT, ~375 s
    $E2E --parts scaling --budgets-gb 24 --batches 20 --warmup 16 --png bench/results/end_to_end_scaling.png  # ~300 s
    $E2E --parts accuracy --pyg-workers 12 --acc-steps 40
    $E2E --parts host profile --budgets-gb 0 24 --batches 30 --profile-trace /tmp/trace.json  # 270 s
    $E2E --parts profile --budgets-gb 0 --warmup 40 --profile-steps 40 --profile-loaders '{}' '{"super_batch": 16, "reuse": "group"}'
    $E2E --parts threads --budgets-gb 0 --epochs 1 --warmup 16   # ~110 s with the graph's set-up
    $E2E --plot-only --ablation-png bench/results/end_to_end_ablation.png   # the README's figure, from the CSV

The ratios to PyG's loader are computed within a run: give ``--parts pyg``
with the part compared, or read them off the CSV of consecutive runs.

``--device cpu --nodes 20000 --edges 200000`` is a smoke test of the script.
"""
from __future__ import annotations

import argparse
import csv
import gc
import importlib
import itertools
import json
import os
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tritongnn import CSCGraph, NeighborLoader  # noqa: E402
from tritongnn.datasets import chung_lu, class_features  # noqa: E402
from tritongnn.host_memory import memory_usage, pinned_empty  # noqa: E402
from _record import append_record, new_record  # noqa: E402
from bench_loader import cycle, sync, train_step, with_hop_counts  # noqa: E402  (one training step, as the loader benchmark takes it)

GB = 1e9
PARTS = ("pyg", "ablation", "models", "alone", "accuracy", "scaling", "gather_order", "profile", "host", "threads")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    p.add_argument("--device", default="cuda")
    p.add_argument("--nodes", type=int, default=111_000_000)
    p.add_argument("--edges", type=int, default=1_600_000_000)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=172)
    p.add_argument("--train", type=int, default=1_200_000, help="training seeds")
    p.add_argument("--val", type=int, default=125_000)
    p.add_argument("--test", type=int, default=214_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/tmp/tritongnn-data", help="where the topology is stored")
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=8000)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--adam", choices=["foreach", "fused"], default="foreach",
                   help="every model's Adam: PyTorch's default on a GPU (foreach) or fused=True")
    p.add_argument("--budgets-gb", type=float, nargs="+", default=[24, 0], help="0: no budget")
    p.add_argument("--warm-gb", type=float, nargs="*", default=[],
                   help="gather_order: time these warm copies (warm_budget; 0: none) instead of the orders")
    p.add_argument("--matmul-precision", default="high", choices=["highest", "high", "medium"],
                   help="torch.set_float32_matmul_precision for every row (high: TF32 matmuls)")
    p.add_argument("--warmup", type=int, default=8, help="batches before timing")
    p.add_argument("--batches", type=int, default=0, help="batches timed (0: the rest of the warm-up's epoch)")
    p.add_argument("--epochs", type=int, default=0,
                   help="time this many whole passes instead of --batches, each from iter() to its last "
                        "step: a pass's start (sampling and staging the first batches) counted too")
    p.add_argument("--alone-repeats", type=int, default=5,
                   help="the model alone: windows of --batches steps timed, the median taken")
    # a batch's features are ~2 GB here: 16 workers x 2 prefetched batches would
    # hold 64 GB next to the 57 GB table and PyG's 26 GB of edges
    p.add_argument("--pyg-workers", type=int, nargs="+", default=[0, 4, 8])
    p.add_argument("--pyg-pin-memory", type=int, nargs="+", default=[0, 1], choices=[0, 1],
                   help="pin_memory values tried with workers (GCN and GAT take GraphSAGE's best)")
    p.add_argument("--pyg-prefetch", type=int, default=1, help="DataLoader prefetch_factor per worker")
    p.add_argument("--pyg-batches", type=int, default=20,
                   help="PyG's training steps timed (at least two per worker), after two per worker and two more")
    p.add_argument("--models", nargs="+", default=["gcn", "gat"], help="the models part's models")
    p.add_argument("--acc-steps", type=int, default=60)
    p.add_argument("--acc-val", type=int, default=20_000)
    p.add_argument("--acc-seeds", type=int, default=3)
    p.add_argument("--acc-first-seed", type=int, default=0,
                   help="seeds --acc-first-seed .. + --acc-seeds - 1 (a call too short for all runs some)")
    p.add_argument("--acc-loaders", nargs="+", choices=["tritongnn", "pyg"], default=["tritongnn", "pyg"],
                   help="the accuracy part's loaders (a call too short for both runs one)")
    p.add_argument("--scaling-batch-sizes", type=int, nargs="*", default=[4000, 8000, 12000])
    p.add_argument("--scaling-fanouts", nargs="*", default=["10,5", "15,10,5", "10,10,5,5"])
    p.add_argument("--scaling-budgets-gb", type=float, nargs="*", default=[8, 16, 24, 32, 48])
    p.add_argument("--out", default=None, help="append the record to this JSON file")
    p.add_argument("--csv", default=None, help="append one row per configuration")
    p.add_argument("--png", default=None, help="the scaling figure")
    p.add_argument("--ablation-png", default=None, help="the ablation figure, with PyG's loader")
    p.add_argument("--profile-trace", default=None, help="with --parts profile: a Chrome trace here")
    p.add_argument("--profile-steps", type=int, default=5, help="with --parts profile: training steps profiled")
    p.add_argument("--profile-alone", action="store_true",
                   help="with --parts profile: also profile the model alone on 8 prepared batches")
    p.add_argument("--threads-top", type=int, default=25, help="with --parts threads: functions listed per thread")
    p.add_argument("--threads-loaders", nargs="+", default=["{}"],
                   help="with --parts threads: loader keyword sets (JSON) added to the recommended one, each "
                        "timed in turn; a key \"module.NAME\" sets a tritongnn constant, as --host-loaders")
    p.add_argument("--profile-loaders", nargs="+", default=["{}"],
                   help="with --parts profile: loader keyword sets (JSON) added to the recommended one, "
                        "each profiled in turn; a key \"module.NAME\" sets a tritongnn constant, as --host-loaders")
    p.add_argument("--switch-intervals", type=float, nargs="*", default=[],
                   help="with --parts host: time the defaults at each of these sys.setswitchinterval "
                        "values (seconds), between two at Python's (0.005), instead of the settings")
    p.add_argument("--feature-dtype", choices=["float16", "bfloat16"], default=None,
                   help="every tritongnn loader of the run stores the features in this dtype "
                        "(NeighborLoader's feature_dtype; batches stay float32)")
    p.add_argument("--host-feature-dtype", choices=["float16", "bfloat16"], default=None,
                   help="with --parts host: the defaults with float32 features, with this feature_dtype, "
                        "float32 again; with --parts accuracy: our loader with this feature_dtype as well")
    p.add_argument("--host-id-map", action="store_true",
                   help="with --parts host: the defaults with hash id maps, direct ones, hash again")
    p.add_argument("--host-adam", action="store_true",
                   help="with --parts host: time the defaults with Adam foreach, fused, foreach again, "
                        "instead of the settings")
    p.add_argument("--host-pick-costs", type=float, nargs="*", default=[],
                   help="with --parts host: the defaults with the cache planned at each of these "
                        "allocator.PICK_COST (bytes a list sector is charged; default: one row), then the first again")
    p.add_argument("--host-producer-ops", type=int, nargs="*", default=[],
                   help="with --parts host: the defaults with this many more torch calls a batch in the producer")
    p.add_argument("--alone-beside", nargs="*", default=[],
                   help="with --parts host: after the settings, the model alone beside H ms of another "
                        "thread's Python and G ms of GPU copies a step, for each H:G given (e.g. 0:0 1:0 0:2)")
    p.add_argument("--host-loaders", nargs="*", default=[],
                   help="with --parts host: the defaults with each of these loader keyword sets (JSON, "
                        "e.g. '{\"super_batch\": 8, \"reuse\": \"group\"}'; '{}': the defaults; a key \"module.NAME\" "
                        "sets that constant of tritongnn.module, e.g. \"kernels.gather.UVA_SMS_PER_PROGRAM\"), "
                        "then the first again")
    p.add_argument("--commit", default=None)
    p.add_argument("--from-rows", nargs="+", default=None,
                   help="run nothing: make the record of runs cut short from their .rows files")
    p.add_argument("--plot-only", action="store_true", help="run nothing: draw --png / --ablation-png from --csv")
    p.add_argument("--gpu", default=None, help="with --from-rows: the runs' GPU")
    p.add_argument("--date", default=None, help="with --from-rows: the runs' date")
    p.add_argument("--torch", default=None, help="with --from-rows: the runs' torch version")
    p.add_argument("--note", default=None, help="with --from-rows: how the runs ended")
    args = p.parse_args()
    if args.alone_repeats < 1:
        p.error(f"--alone-repeats must be at least 1, got {args.alone_repeats}")
    for pair in args.alone_beside:
        try:
            host_ms, gpu_ms = (float(v) for v in pair.split(":"))
        except ValueError:
            host_ms = gpu_ms = -1.0
        if not (host_ms >= 0 and gpu_ms >= 0):
            p.error(f"--alone-beside takes H:G pairs of milliseconds >= 0, got {pair!r}")
    return args


def host_gb() -> dict:
    usage = memory_usage()
    return {k: round(v / GB, 2) for k, v in usage.items() if isinstance(v, (int, float))}


# ---------------------------------------------------------------- the graph

def load_graph(args, device, nodes=None, edges=None) -> dict:
    """Topology, labels and splits, from ``--data-dir`` or generated there."""
    nodes, edges = nodes or args.nodes, edges or args.edges
    path = Path(args.data_dir) / f"chung_lu_{nodes}_{edges}_{args.classes}_{args.train}_s{args.seed}"
    names = ("indptr", "indices", "y", "train", "val", "test")
    start = time.perf_counter()
    if not (path / "done").exists():
        path.mkdir(parents=True, exist_ok=True)
        data = chung_lu(nodes, edges, num_classes=args.classes, num_features=1, train_fraction=args.train / nodes,
                        val_fraction=args.val / nodes, test_fraction=args.test / nodes, device=device,
                        seed=args.seed)
        graph = CSCGraph.from_edge_index(data.edge_index, nodes)  # sorted where the edges are
        arrays = dict(indptr=graph.indptr, indices=graph.indices, y=data.y,
                      train=torch.nonzero(data.train_mask).flatten(), val=torch.nonzero(data.val_mask).flatten(),
                      test=torch.nonzero(data.test_mask).flatten())
        del data, graph
        for name in names:
            np.save(path / f"{name}.npy", arrays.pop(name).cpu().numpy())
        (path / "done").write_text(json.dumps(dict(seconds=time.perf_counter() - start)))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        how = "generated on the GPU" if device.type == "cuda" else "generated"
    else:
        how = "mapped from disk"
    out = {name: torch.from_numpy(np.load(path / f"{name}.npy", mmap_mode="r+")) for name in names}
    out["seconds"], out["how"], out["path"] = time.perf_counter() - start, how, str(path)
    out["generation_seconds"] = json.loads((path / "done").read_text())["seconds"]
    return out


def features(y, args, device, width=None):
    """The feature table, made on the GPU into pinned host memory (seconds)."""
    width = width or args.features
    start = time.perf_counter()
    x = pinned_empty((y.numel(), width), torch.float32, device)  # exact bytes: torch's would take 68.7 GB
    class_features(y.to(device), args.classes, width, seed=args.seed + 1, out=x)
    sync(device)
    return x, time.perf_counter() - start


def pyg_data(graph, x, device):
    """The PyG ``Data`` both loaders read: ``edge_index`` in CSC order (our
    loader's graph build then takes no sort; PyG's sampler takes it as
    ``is_sorted``) in pinned host memory, shared with forked workers, not a
    25.6 GB copy on the GPU for the whole run nor a second one on the host
    for PyG; labels and features as made. (Shared memory takes 4 KB pages,
    where a private tensor may get transparent huge pages: PyG's CPU sampler
    reads these edges, and its gather the features, through more TLB
    misses than from a plain tensor: not measured apart; next to its
    seconds of sampling per batch, likely small.)"""
    from torch_geometric.data import Data
    num_edges = graph["indices"].numel()
    edge_index = pinned_empty((2, num_edges), torch.int64, device)
    indptr = graph["indptr"].to(device)
    edge_index[1].copy_(torch.repeat_interleave(torch.arange(indptr.numel() - 1, device=device), indptr.diff()))
    edge_index[0].copy_(graph["indices"].to(device).long())
    del indptr
    return Data(x=x, y=graph["y"].long(), edge_index=edge_index, num_nodes=graph["y"].numel())


# --------------------------------------------------------------- models

def make_model(kind, library, args, device, width=None, layers=None, seed=0):
    """``kind`` in sage/gcn/gat; ``library`` "pyg" or "tritongnn" (its
    aggregation and attention kernels); one layer per hop sampled
    (``layers``, default ``--num-neighbors``'s); weights from ``seed`` (it
    also seeds torch's global generator, which PyG's loader shuffles with)."""
    import torch_geometric.nn as pyg_nn
    import tritongnn.nn as our_nn
    width = width or args.features
    torch.manual_seed(seed)
    layers = layers or len(args.num_neighbors)
    lib = our_nn if library == "tritongnn" else pyg_nn
    if kind == "gat":
        model = lib.GAT(width, 64, num_layers=layers, out_channels=args.classes, heads=8)
    else:
        cls = lib.GraphSAGE if kind == "sage" else lib.GCN
        model = cls(width, args.hidden, num_layers=layers, out_channels=args.classes)
    model = model.to(device)
    return model, torch.optim.Adam(model.parameters(), lr=0.003, fused=True if args.adam == "fused" else None)


# ----------------------------------------------------------- our loader

def feature_dtype(name):
    return None if name is None else getattr(torch, name)


def our_loader(data, graph, args, device, batch_size=None, num_neighbors=None, **kwargs):
    kwargs.setdefault("feature_dtype", feature_dtype(args.feature_dtype))
    return NeighborLoader(data, num_neighbors or args.num_neighbors, input_nodes=graph["train"],
                          batch_size=batch_size or args.batch_size, shuffle=True, seed=args.seed,
                          device=device, **kwargs)


# the loader's stats a row splits and sums over its timed batches
SPLIT_KEYS = ("sampling_seconds", "gather_seconds", "model_seconds", "wait_seconds", "batches")
COUNTED = SPLIT_KEYS + ("host_bytes",)


def loader_counts(window: dict, stats: dict) -> dict:
    """A row's ``split``, ``hits`` and ``host_gb_per_batch``: ``window``
    the ``COUNTED`` stats summed over the timed batches, ``stats`` the
    loader's last (for its hit rates)."""
    return dict(split={k: window[k] for k in SPLIT_KEYS},
                hits={k: stats[k] for k in ("feature_hit_rate", "adjacency_hit_rate", "static_feature_hit_rate",
                                            "dynamic_feature_hit_rate") if k in stats},
                host_gb_per_batch=window["host_bytes"] / GB / max(1, window["batches"])
                if "host_bytes" in stats else None)


def time_epoch(loader, args, device, step=None) -> dict:
    """Seconds per epoch of ``loader`` (with ``step`` on each batch): the
    warm-up, then ``--batches`` timed (0: the rest of an epoch), scaled; with
    ``--epochs``, whole passes (``time_passes``)."""
    if getattr(args, "epochs", 0):
        return time_passes(loader, args, device, step)
    per_epoch = len(loader)
    warm = max(1, min(args.warmup, per_epoch - 1))  # at least one: compilation, first captures
    timed = max(1, per_epoch - warm) if not args.batches else args.batches  # (1 batch an epoch: the next's)
    done, start, end, before, banked = 0, None, None, None, {}
    while done < warm + timed:  # into the next epoch if --batches asks for more
        for batch in loader:
            if step is not None:
                step(batch)
            done += 1
            if done == warm:
                sync(device)
                before = loader.stats  # the split counts the timed window, not compilation and captures
                start = time.perf_counter()
            if done == warm + timed:
                # the window ends with its last step's work, before the loop is
                # left: leaving stops the producer, which an epoch's own end
                # never waits for (up to 0.1 s a window before 2026-12-01's
                # prompt stop, x 7.5 in a 150-batch epoch scaled from 20)
                if device.type == "cuda":
                    torch.cuda.current_stream(device).synchronize()
                end = time.perf_counter()
                break
        else:
            if before is not None:  # an epoch ended in the window: bank its part, the next counts from zero
                ended = loader.stats
                for k in COUNTED:
                    banked[k] = banked.get(k, 0) + ended.get(k, 0) - before.get(k, 0)
                before = {}
    sync(device)
    seconds = end - start
    stats = loader.stats
    window = {k: banked.get(k, 0) + stats.get(k, 0) - before.get(k, 0) for k in COUNTED}
    # the loader's counts over the timed batches (its producer runs up to
    # ``prefetch`` batches ahead of them); hit rates the epoch's so far,
    # warm-up batches included
    return dict(epoch_seconds=seconds * per_epoch / timed, batches_timed=timed, batches_per_epoch=per_epoch,
                **loader_counts(window, stats))


def time_passes(loader, args, device, step=None) -> dict:
    """Seconds per epoch of ``loader`` over ``--epochs`` whole passes, timed
    from each ``iter()`` to its last step (after a warm-up pass left after
    ``--warmup`` batches): what a training loop sees, a pass's start
    included (its first batches sampled, and with group reuse its first
    group staged, before any step can run), which a window of batches
    inside an epoch leaves out. The split sums the passes' ``stats``."""
    per_epoch = len(loader)
    for done, batch in enumerate(loader, 1):
        if step is not None:
            step(batch)
        if done >= args.warmup:
            break
    sync(device)
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch in loader:
            if step is not None:
                step(batch)
    sync(device)
    seconds = time.perf_counter() - start
    # each pass's stats go to stats_history when the next one starts
    passes = loader.stats_history[len(loader.stats_history) - args.epochs + 1:] + [loader.stats]
    window = {k: sum(p.get(k, 0) for p in passes) for k in COUNTED}
    return dict(epoch_seconds=seconds / args.epochs, epochs_timed=args.epochs, batches_timed=window["batches"],
                batches_per_epoch=per_epoch, **loader_counts(window, passes[-1]))


def cache_split(loader) -> dict:
    """The loader's cache plan as a row's ``plan`` (nothing without a cache)."""
    if loader.cache is None:
        return {}
    plan = loader.cache.plan
    return dict(plan=dict(num_feature=plan.num_feature, num_adjacency=plan.num_adjacency,
                          feature_bytes=plan.feature_bytes, adjacency_bytes=plan.adjacency_bytes,
                          expected_feature_hit_rate=plan.feature_hit_rate,
                          expected_adjacency_hit_rate=plan.adjacency_hit_rate))


def time_alone(model, optimizer, prepared, args, per_epoch, device, beside=None) -> dict:
    """The model alone on ``prepared`` batches: a pass over them (compiling),
    then ``--alone-repeats`` windows of ``--batches`` steps (0: an epoch's)
    cycling them; the median window, scaled to the epoch. One window of 20
    steps (0.1 s) measured 0.66-0.85 s an epoch on the same batches within
    one run (2c56563), a spread that moved every ratio to it. ``beside``: a
    ``Beside`` whose work is started before each step."""
    for batch in prepared:
        train_step(model, optimizer, batch, trim=True)
    sync(device)
    steps = max(len(prepared), args.batches or per_epoch)
    windows = []
    for _ in range(args.alone_repeats):
        start = time.perf_counter()
        for i in range(steps):
            if beside is not None:
                beside.step()
            train_step(model, optimizer, prepared[i % len(prepared)], trim=True)
        sync(device)
        windows.append((time.perf_counter() - start) * per_epoch / steps)
    return dict(epoch_seconds=statistics.median(windows), windows_seconds=windows, batches_timed=steps,
                batches_per_epoch=per_epoch)


class Beside:
    """A stand-in for the loader beside the model (``--alone-beside``): each
    ``step()`` has another thread run ``host_ms`` of Python holding the
    interpreter lock, and queues ``gpu_ms`` of copies (HBM-bound, as the
    loader's gather and id map are) on a stream of its own, which nothing
    waits for until the window's end. The copy's size is calibrated alone
    once; its time beside the model is what the window measures."""

    def __init__(self, host_ms: float, gpu_ms: float, device):
        self.host_s, self.gpu_ms, self.device = host_ms / 1e3, gpu_ms, device
        self.requests = queue.Queue()
        self.thread = None
        if self.host_s > 0:
            self.thread = threading.Thread(target=self._spin, daemon=True)
            self.thread.start()
        self.src = self.dst = None
        if gpu_ms > 0 and device.type == "cuda":
            self.stream = torch.cuda.Stream(device)
            rows = 1 << 20  # 512 MB of 128 float32 a copy, calibrated below
            self.src = torch.empty((rows, 128), dtype=torch.float32, device=device).uniform_()
            self.dst = torch.empty_like(self.src)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.dst.copy_(self.src)
            start.record()
            for _ in range(10):
                self.dst.copy_(self.src)
            end.record()
            end.synchronize()
            per_row = start.elapsed_time(end) / 10 / rows
            self.rows = min(rows, max(1, int(gpu_ms / per_row)))
            self.copies = max(1, round(gpu_ms / (per_row * self.rows)))

    def _spin(self) -> None:
        while True:
            if self.requests.get() is None:
                return
            end = time.perf_counter() + self.host_s
            while time.perf_counter() < end:  # Python bytecode: the lock held, as the producer's
                pass

    def step(self) -> None:
        if self.thread is not None:
            self.requests.put(True)
        if self.src is not None:  # beside the model's kernels, as the loader's streams run
            with torch.cuda.stream(self.stream):
                for _ in range(self.copies):
                    self.dst[:self.rows].copy_(self.src[:self.rows])

    def close(self) -> None:
        if self.thread is not None:
            self.requests.put(None)
            self.thread.join()


def budget_bytes(budget_gb, all_bytes):
    """``--budgets-gb`` in bytes; 0 (no budget): room for the whole graph,
    with the dynamic cache's share (10 %) on top (2x would be 129 GB here,
    near the H200's total)."""
    return int(budget_gb * GB) if budget_gb else int(1.25 * all_bytes)


def ablation_configs(budget_gb, all_bytes):
    """GARDEN's Fig. 19 as a line and its branches. The line adds, each to
    the one before, the techniques that together make the fastest exact
    configuration measured at this scale (``FULL``, with ``tritongnn.nn``'s
    layers), then float16 features (lossy, so last). Each branch adds one
    other technique alone: the dynamic cache and match-reorder to ``FULL``;
    the grouped sampler to the dual cache alone (super-batches take the
    foundation kernel with it, so on ``FULL`` it would change nothing).
    The line's loaders sample with the default ``"auto"``: with a cache
    some rows cross PCIe, so the foundation kernel."""
    budget = budget_bytes(budget_gb, all_bytes)
    tag = f"{budget_gb:g} GB" if budget_gb else "no budget"
    line = [("UVA, no cache", dict(placement="host"), "pyg"),
            ("+ dual cache", dict(cache_budget=budget), "pyg"),
            ("+ super-batch 16", dict(super_batch=16), "pyg"),
            ("+ group staging", dict(reuse="group"), "pyg"),
            ("+ Triton aggregation (full)", {}, "tritongnn"),
            # lossy (values rounded to float16), so a step of its own after
            # every technique that keeps the batches exact
            ("+ float16 features", dict(feature_dtype=torch.float16), "tritongnn")]
    configs, kwargs = [], {}
    for name, add, library in line:
        kwargs = dict(kwargs, **add)
        configs.append((f"{name} [{tag}]", dict(kwargs), library))
    full = dict(FULL, cache_budget=budget)
    assert configs[4][1] == full, "the line's last exact step is FULL"
    configs += [(f"full + dynamic cache [{tag}]", dict(full, dynamic_cache=True), "tritongnn"),
                (f"full + match-reorder 16 [{tag}]", dict(full, reorder_group=16), "tritongnn"),
                (f"dual cache + grouped sampler [{tag}]",
                 dict(placement="host", cache_budget=budget, sample_kernel="grouped"), "pyg")]
    return configs


# The fastest step of the first ablation at this scale (476357e, 24 GB: the
# dual cache 6.88 s per epoch; adding the dynamic cache 8.92 s, then the
# grouped sampler 9.17, super-batches 9.10): the dual cache alone. The seeds
# here are uniform each epoch, so the profile leaves the dynamic cache no
# drift to follow, and its 10 % of the budget serves fewer rows than it held.
# The baseline every other part adds to: the loader's defaults, with the
# graph in pinned host memory.
RECOMMENDED = dict(placement="host")

# The fastest exact configuration measured since (13bd853, 24 GB, whole
# passes: 1.83 s against RECOMMENDED's 3.34-3.35 s in the same call; 1.87
# against 3.30-3.31 at eab7cfd; 1.84 against 3.35 at 868b3ff), for 75-76 GB
# of peak GPU memory against 39-50 GB: group staging of 16 batches. Only
# below the graph's size: with no budget, nothing to stage, it took 1.30 s
# against 1.03-1.05 (eab7cfd), 0.97 against 0.92-0.96 (868b3ff).
FULL = dict(RECOMMENDED, super_batch=16, reuse="group")


def keyword_sets(texts):
    """``--host-loaders`` / ``--profile-loaders``: each JSON keyword set as
    (loader keywords, module constants); a key "module.NAME" sets a
    constant of ``tritongnn.<module>`` for that set's runs
    (``set_constants``), except "sys.switchinterval": Python's thread
    switch interval in seconds (``sys.setswitchinterval``, ``--parts host``)."""
    return [({k: v for k, v in given.items() if "." not in k}, {k: v for k, v in given.items() if "." in k})
            for given in map(json.loads, texts)]


def set_constants(constants: dict):
    """Set each ``"module.NAME"`` of ``constants`` in ``tritongnn``; returns
    what puts the values before back."""
    kept = []
    for key, value in constants.items():
        module, attr = key.rsplit(".", 1)
        module = importlib.import_module(f"tritongnn.{module}")
        kept.append((module, attr, getattr(module, attr)))
        setattr(module, attr, value)

    def restore():
        for module, attr, before in reversed(kept):
            setattr(module, attr, before)
    return restore


def producer_calls(count: int):
    """Add ``count`` no-op torch calls to each batch the loader assembles
    (in its producer thread); returns what takes them out again."""
    if not count:
        return lambda: None
    assemble = NeighborLoader._assemble
    one = torch.zeros(1)

    def with_calls(self, *args, **kwargs):
        for _ in range(count):
            one.add_(0)  # enters torch's dispatcher: the interpreter lock is let go and taken back
        return assemble(self, *args, **kwargs)
    NeighborLoader._assemble = with_calls

    def unpatch():
        NeighborLoader._assemble = assemble
    return unpatch


# ----------------------------------------------------------------- PyG

def pyg_sampler(data, args):
    """PyG's sampler over ``data`` (``pyg_data``: the edges sorted by target,
    ``is_sorted``, so its one-time CSC build is a pass over them; ``x`` the
    same pinned table ours reads), or None without torch-sparse/pyg-lib."""
    import torch_geometric.typing
    if not (torch_geometric.typing.WITH_TORCH_SPARSE or torch_geometric.typing.WITH_PYG_LIB):
        print("PyG's loader skipped: neither torch-sparse nor pyg-lib is importable", flush=True)
        return None
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler
    return PyGNeighborSampler(data, args.num_neighbors, is_sorted=True)


def pyg_loader(data, sampler, args, input_nodes, shuffle, **kwargs):
    """PyG's NeighborLoader over ``sampler``, its batches with per-hop
    counts (derived in its workers where torch-sparse gives none)."""
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
    return PyGNeighborLoader(data, args.num_neighbors, input_nodes=input_nodes, batch_size=args.batch_size,
                             shuffle=shuffle, neighbor_sampler=sampler,
                             transform_sampler_output=with_hop_counts(len(args.num_neighbors)), **kwargs)


def pyg_trims(batch) -> bool:
    """Whether a batch of PyG's carries the per-hop counts trimming needs
    (``pyg_loader``'s always do; said in the rows)."""
    return getattr(batch, "num_sampled_nodes", None) is not None


def pyg_runs(data, sampler, graph, args, device, kinds, emit):
    """PyG's loader for each model in ``kinds``; returns {kind: (default, best) rows}."""
    out = {}
    for kind in kinds:
        found = []
        tried = [(w, bool(p)) for w in args.pyg_workers for p in ((0,) if w == 0 else args.pyg_pin_memory)]
        if "sage" in out:  # the other models: the default and the configuration best for GraphSAGE
            best = out["sage"][1]
            tried = [(0, False)] + [(best["workers"], best["pin_memory"])] * (best["workers"] > 0)
        for workers, pin in tried:
            loader = pyg_loader(data, sampler, args, graph["train"], True, num_workers=workers, pin_memory=pin,
                                persistent_workers=workers > 0,
                                **(dict(prefetch_factor=args.pyg_prefetch) if workers else {}))
            model, optimizer = make_model(kind, "pyg", args, device)
            # two rounds of every worker's batches before the clock, and a
            # window of at least two rounds: a shorter one times batches the
            # workers made while the warm-up ran
            warm, timed = 2 * workers + 2, max(args.pyg_batches, 2 * workers)
            it = cycle(loader)
            name = f"PyG workers={workers} pin_memory={pin}"
            try:
                first = next(it)
                trim = pyg_trims(first)
                train_step(model, optimizer, first.to(device, non_blocking=pin), trim=trim)
                for _ in range(warm - 1):
                    train_step(model, optimizer, next(it).to(device, non_blocking=pin), trim=trim)
                sync(device)
                start = time.perf_counter()
                for _ in range(timed):
                    train_step(model, optimizer, next(it).to(device, non_blocking=pin), trim=trim)
                sync(device)
            except torch.OutOfMemoryError as error:  # (GAT's 8 heads on an untrimmed batch did)
                emit(dict(part="pyg", model=kind, name=name, workers=workers, pin_memory=pin,
                          epoch_seconds=float("nan"), error=f"CUDA out of memory: {str(error).splitlines()[0]}"))
                it = loader = model = optimizer = None
                gc.collect()
                torch.cuda.empty_cache()
                break  # every configuration runs the same model on the same batches
            seconds = (time.perf_counter() - start) * len(loader) / timed
            row = emit(dict(part="pyg", model=kind, name=name, workers=workers, pin_memory=pin,
                            epoch_seconds=seconds, batches_timed=timed, batches_per_epoch=len(loader),
                            trimmed=trim, note=f"{timed} batches timed after {warm}, scaled to the epoch"
                            + ("; trimmed" if trim else "; untrimmed")))
            found.append(row)
            del it, first, loader, model, optimizer  # a batch holds ~2.5 GB of host memory here
            gc.collect()
        if found:
            out[kind] = (found[0], min(found, key=lambda r: r["epoch_seconds"]))
    return out


# ----------------------------------------------------------------- main

def main():
    args = parse_args()
    if args.from_rows:
        return from_rows(args)
    if args.plot_only:
        if args.png:
            plot(args.csv, [], args.png)
        if args.ablation_png:
            plot_ablation(args.csv, [], args.ablation_png)
        return
    device = torch.device(args.device)
    torch.set_float32_matmul_precision(args.matmul_precision)  # both loaders' models alike
    t0 = time.perf_counter()
    rows = []
    commit = args.commit

    def emit(row):
        row = dict(row, commit=commit)
        rows.append(row)
        line = f"{row['part']:9s} {row.get('model', ''):5s} {row['name']:45s} {row['epoch_seconds']:9.2f} s/epoch"
        if row.get("split"):
            s = row["split"]
            line += (f"  sample {s['sampling_seconds']:.2f} gather {s['gather_seconds']:.2f} "
                     f"model {s['model_seconds']:.2f} wait {s['wait_seconds']:.2f} ({s['batches']} batches)")
        if row.get("epoch_peak_gpu_gb"):
            line += f"  peak {row['epoch_peak_gpu_gb']:.1f} GB"
        if row.get("hits"):
            line += "  hits " + " ".join(f"{k.replace('_hit_rate', '')} {v:.3f}" for k, v in row["hits"].items())
        print(line, flush=True)
        if args.out:  # as measured: a run cut short keeps its rows
            with open(args.out + ".rows", "a") as f:
                f.write(json.dumps(row) + "\n")
        return row

    graph = load_graph(args, device)
    x, x_seconds = features(graph["y"], args, device)
    num_nodes = graph["y"].numel()
    all_bytes = x.nbytes + graph["indptr"].nbytes + graph["indices"].nbytes  # what "no budget" must hold
    settings = dict(nodes=num_nodes, edges=graph["indices"].numel(), features=args.features, classes=args.classes,
                    train=graph["train"].numel(), val=graph["val"].numel(), test=graph["test"].numel(),
                    num_neighbors=args.num_neighbors, batch_size=args.batch_size, hidden=args.hidden, adam=args.adam,
                    budgets_gb=args.budgets_gb, warmup=args.warmup, batches=args.batches, epochs=args.epochs,
                    matmul_precision=args.matmul_precision, feature_dtype=args.feature_dtype or "float32",
                    graph=f"{graph['how']} in {graph['seconds']:.1f} s (generated in "
                          f"{graph['generation_seconds']:.1f} s; {graph['path']})",
                    features_seconds=round(x_seconds, 1), feature_gb=round(x.numel() * 4 / GB, 1),
                    host_after_graph=host_gb(), parts=args.parts)
    print(json.dumps(settings), flush=True)

    data = pyg_data(graph, x, device)
    profile = None

    def ours(part, name, kwargs, library, kind="sage", batch_size=None, num_neighbors=None, d=None, g=None,
             extra=None):
        nonlocal profile
        d, g = d or data, g or graph
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        # one profile for every configuration of the graph, batch size and fanouts it was taken with
        same = d is data and not num_neighbors and not batch_size
        if "cache_budget" in kwargs and profile is not None and same:
            kwargs = dict(kwargs, cache_profile=profile)
        start = time.perf_counter()
        loader = our_loader(d, g, args, device, batch_size, num_neighbors, **kwargs)
        build = time.perf_counter() - start
        if loader.cache is not None and profile is None and same:
            profile = loader.cache_profile
        model, optimizer = make_model(kind, library, args, device, d.x.size(1),
                                      len(num_neighbors or args.num_neighbors))
        build_peak = 0.0
        if device.type == "cuda":  # the build's transients apart from what the epoch holds
            build_peak = torch.cuda.max_memory_allocated(device) / GB
            torch.cuda.reset_peak_memory_stats(device)
        row = time_epoch(loader, args, device, lambda b: train_step(model, optimizer, b, trim=True))
        epoch_peak = torch.cuda.max_memory_allocated(device) / GB if device.type == "cuda" else 0.0
        row = emit(dict(part=part, model=kind, name=name, library=library, build_seconds=build,
                        loader={k: str(v) if isinstance(v, torch.dtype) else v
                                for k, v in kwargs.items() if k != "cache_profile"},
                        peak_gpu_gb=max(build_peak, epoch_peak), epoch_peak_gpu_gb=epoch_peak,
                        **row, **(extra or {}), **cache_split(loader)))
        return row, loader, model, optimizer

    if "alone" in args.parts:
        # 8 batches prepared once, then each model (and each aggregation the
        # other parts give it) steps through them, cycled: the floor its
        # epoch can reach, compared with rows of the same model and library
        b = int(args.budgets_gb[0] * GB) if args.budgets_gb[0] else None
        kwargs = dict(RECOMMENDED, cache_budget=b) if b else dict(placement="device")
        loader = our_loader(data, graph, args, device, **kwargs)
        if loader.cache is not None:
            profile = loader.cache_profile  # the ablation's loaders take it too
        prepared = []
        for batch in loader:
            prepared.append(batch)
            if len(prepared) == 8:
                break
        per_epoch = len(loader)
        del loader
        # each model with PyG's layers and with tritongnn's
        runs = [(k, library, args.matmul_precision) for k in ["sage"] + [k for k in args.models if k != "sage"]
                for library in ("pyg", "tritongnn")]
        if args.matmul_precision != "highest":  # what the TF32 matmuls give
            runs.append(("sage", "tritongnn", "highest"))
        for kind, library, precision in runs:
            torch.set_float32_matmul_precision(precision)
            model, optimizer = make_model(kind, library, args, device)
            emit(dict(part="alone", model=kind, name=f"model alone ({library} layers, matmul {precision}; "
                      f"8 batches prepared, cycled)", library=library, matmul_precision=precision,
                      **time_alone(model, optimizer, prepared, args, per_epoch, device)))
            del model, optimizer
        torch.set_float32_matmul_precision(args.matmul_precision)
        del prepared

    if "ablation" in args.parts:
        for budget in args.budgets_gb:
            for name, kwargs, library in ablation_configs(budget, all_bytes):
                ours("ablation", name, kwargs, library)
        ours("ablation", "all in GPU memory", dict(placement="device"), "tritongnn")

    if "models" in args.parts:
        for kind in args.models:
            for budget in args.budgets_gb:
                b = budget_bytes(budget, all_bytes)
                ours("models", f"recommended [{budget:g} GB]" if budget else "recommended [no budget]",
                     dict(RECOMMENDED, cache_budget=b), "tritongnn", kind)
            ours("models", "all in GPU memory", dict(placement="device"), "tritongnn", kind)

    if "scaling" in args.parts:
        scaling(args, graph, all_bytes, ours)

    if "gather_order" in args.parts:
        from tritongnn.kernels import gather as gather_kernels
        default = gather_kernels.HOST_ROWS_FIRST, gather_kernels.RESOLVED_ROWS
        orders = {(False, False): "one-pass", (True, False): "host rows first",
                  (True, True): "host rows first, resolved"}
        for budget in [b for b in args.budgets_gb if b] if not args.warm_gb else []:  # no budget: no host rows
            for (first, resolved), name in orders.items():
                gather_kernels.HOST_ROWS_FIRST, gather_kernels.RESOLVED_ROWS = first, resolved
                ours("gather_order", f"recommended, {name} gather [{budget:g} GB]",
                     dict(RECOMMENDED, cache_budget=budget_bytes(budget, all_bytes)), "tritongnn",
                     extra=dict(host_rows_first=first, resolved_rows=resolved))
        gather_kernels.HOST_ROWS_FIRST, gather_kernels.RESOLVED_ROWS = default
        for budget in [b for b in args.budgets_gb if b]:
            for warm in args.warm_gb:
                ours("gather_order", f"recommended, warm copy {warm:g} GB [{budget:g} GB]",
                     dict(RECOMMENDED, cache_budget=budget_bytes(budget, all_bytes),
                          warm_budget=int(warm * GB) or None),
                     "tritongnn", extra=dict(host_rows_first=default[0], resolved_rows=default[1], warm_gb=warm))

    if "profile" in args.parts:
        profile_steps(args, data, graph, all_bytes, device)

    if "host" in args.parts:
        host_overhead(args, data, graph, all_bytes, device, ours, emit)

    if "threads" in args.parts:
        thread_times(args, data, graph, all_bytes, device)

    # PyG's loader last: its 26 GB of CPU edges and its workers' batches
    # (2.5 GB each) held host memory our loaders then lacked (a run was
    # killed for it); ours are freed by now
    pyg, sampler = {}, None
    if {"pyg", "models", "accuracy"} & set(args.parts):
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()  # what our loaders' batches left reserved (PyG's GAT found 38 GB so)
        sampler = pyg_sampler(data, args)
    if sampler is not None and {"pyg", "models"} & set(args.parts):
        kinds = (["sage"] if "pyg" in args.parts else []) + \
            ([k for k in args.models if k != "sage"] if "models" in args.parts else [])
        pyg = {(None, kind): rows for kind, rows in pyg_runs(data, sampler, graph, args, device, kinds, emit).items()}
        print(f"host after PyG: {host_gb()}", flush=True)

    if "accuracy" in args.parts:
        accuracy(args, data, sampler, graph, device, emit)

    record = new_record("end_to_end", device, commit, settings=settings, rows=rows,
                        seconds=time.perf_counter() - t0, host_at_end=host_gb())
    finish(args, record, pyg)


def finish(args, record, pyg):
    """Ratios against PyG's loader (``{model: (default, best) rows}``) and
    the model alone, then the record to ``--out``, ``--csv``, ``--png`` and
    the table."""
    rows = record["rows"]
    for row in rows:
        # within one run only (rows assembled from several runs name theirs)
        base = pyg.get((row.get("rows_file"), row.get("model")))
        # (the host part's loader rows too: their own model-alone rows have no loader)
        if base and (row["part"] in ("ablation", "models") or (row["part"] == "host" and "loader" in row)):
            row["vs_pyg_default"] = base[0]["epoch_seconds"] / row["epoch_seconds"]
            row["vs_pyg_best"] = base[1]["epoch_seconds"] / row["epoch_seconds"]
    # the model alone with the same layers (PyG's, or tritongnn.nn's) and matmul precision
    precision = record["settings"].get("matmul_precision") if record.get("settings") else None
    alone = {(r.get("rows_file"), r["model"], r.get("library")): r for r in rows
             if r["part"] == "alone" and r.get("matmul_precision", precision) == precision}
    for row in rows:
        key = (row.get("rows_file"), row.get("model"), row.get("library"))
        if row["part"] in ("ablation", "models") and key in alone:
            row["vs_model_alone"] = row["epoch_seconds"] / alone[key]["epoch_seconds"]
    append_record(args.out, record)
    write_csv(args.csv, record)
    if args.png:
        plot(args.csv, rows, args.png)
    if args.ablation_png:
        plot_ablation(args.csv, rows, args.ablation_png)
    print(f"\n{record['gpu']}  commit {record['commit']}  {record['date']}  {record.get('seconds', 0):.0f} s")
    print(f"{'part':9s} {'model':5s} {'configuration':45s} {'s/epoch':>8s} {'vs PyG best':>11s} "
          f"{'vs PyG 0 w.':>11s} {'/ alone':>8s}")
    for r in rows:
        def ratio(key):
            return f"{r[key]:10.2f}x" if r.get(key) else f"{'-':>11s}"
        print(f"{r['part']:9s} {r.get('model', ''):5s} {r['name'][:45]:45s} {r['epoch_seconds']:8.2f} "
              f"{ratio('vs_pyg_best')} {ratio('vs_pyg_default')} "
              f"{(format(r['vs_model_alone'], '7.2f') + 'x') if r.get('vs_model_alone') else '       -'}")


def from_rows(args):
    """The record of runs cut short (killed, or past a call's time limit),
    from the rows they wrote as measured (``--out``'s ``.rows`` file): PyG's
    default and best taken from its rows of any of them; the record says
    which files, and the GPU, date and torch of the runs (``--gpu``,
    ``--date``, ``--torch``), since this assembles them elsewhere."""
    rows = []
    for path in args.from_rows:
        with open(path) as f:
            rows += [dict(json.loads(line), rows_file=os.path.basename(os.path.dirname(path)) + "/"
                          + os.path.basename(path)) for line in f if line.strip()]
    pyg = {}  # (rows file, model): each run's own PyG rows, for its own ratios
    for run, kind in {(r["rows_file"], r["model"]) for r in rows if r["part"] == "pyg"}:
        mine = [r for r in rows if r["part"] == "pyg" and r["model"] == kind and r["rows_file"] == run
                and not r.get("error")]
        if not mine:  # e.g. out of GPU memory in every configuration
            continue
        default = [r for r in mine if r.get("workers", 0) == 0] or mine
        pyg[(run, kind)] = (default[0], min(mine, key=lambda r: r["epoch_seconds"]))
    commits = sorted({r.get("commit") for r in rows if r.get("commit")})
    # not this checkout's HEAD: the runs' commits, or say that none was written
    record = new_record("end_to_end", None, ",".join(commits) or "unknown (rows without a commit)", rows=rows,
                        settings=dict(assembled_from=args.from_rows, note=args.note,
                                      matmul_precision=args.matmul_precision))
    # the note also where the other records keep theirs
    record.update({k: v for k, v in dict(gpu=args.gpu, date=args.date, torch=args.torch, note=args.note).items()
                   if v})
    finish(args, record, pyg)


def evaluate(model, loader, device, limit):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in loader:
            batch = batch.to(device)
            pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(-1)
            correct += int((pred == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
            if total >= limit:
                break
    model.train()
    return correct / max(1, total)


def accuracy(args, data, sampler, graph, device, emit):
    """GraphSAGE (PyG's model for both), ``--acc-steps`` steps from each
    seed, then accuracy on the first ``--acc-val`` validation nodes."""
    val = graph["val"][:args.acc_val]
    # the batches do not depend on the cache: ours reads everything through UVA here
    loaders = {}
    dtypes = [args.feature_dtype] + ([args.host_feature_dtype] if args.host_feature_dtype else [])
    for dtype in dict.fromkeys(dtypes) if "tritongnn" in args.acc_loaders else []:
        name = "tritongnn" + (f", {dtype} features" if dtype else "")
        loaders[name] = lambda seed, nodes, shuffle, dtype=dtype: NeighborLoader(
            data, args.num_neighbors, input_nodes=nodes, batch_size=args.batch_size, shuffle=shuffle, seed=seed,
            device=device, placement="host", feature_dtype=feature_dtype(dtype))
    if sampler is not None and "pyg" in args.acc_loaders:
        workers = max(args.pyg_workers)
        loaders["pyg"] = lambda seed, nodes, shuffle: pyg_loader(
            data, sampler, args, nodes, shuffle, num_workers=workers,
            **(dict(prefetch_factor=args.pyg_prefetch) if workers else {}))
    seeds = range(args.acc_first_seed, args.acc_first_seed + args.acc_seeds)
    for name, make in loaders.items():
        scores = []
        start = time.perf_counter()
        for seed in seeds:
            # the seed sets the weights and both loaders' order and draws (it
            # was reset to 0 by the model for every seed: PyG's three runs
            # were one run three times)
            model, optimizer = make_model("sage", "pyg", args, device, seed=seed)
            done = 0
            while done < args.acc_steps:
                for batch in make(seed, graph["train"], True):
                    train_step(model, optimizer, batch.to(device), trim=pyg_trims(batch))
                    done += 1
                    if done == args.acc_steps:
                        break
            scores.append(evaluate(model, make(seed, val, False), device, val.numel()))
            # each seed as it ends: a call cut short keeps the seeds it finished
            print(f"accuracy  {name}, seed {seed}: {scores[-1]:.4f} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
        mean, std = float(np.mean(scores)), float(np.std(scores))
        emit(dict(part="accuracy", model="sage", name=f"{name}: val accuracy {mean:.4f} +- {std:.4f}",
                  epoch_seconds=float("nan"), accuracy=scores, mean=mean, std=std, steps=args.acc_steps,
                  seeds=list(seeds),
                  seconds=time.perf_counter() - start))


def scaling(args, graph, all_bytes, ours):
    """Epoch time against batch size, fanouts and budget, and one width
    point: this run's ``--features`` (other widths: one run each, with nodes
    and edges scaled so the table stays what the host holds; rows append to
    the CSV and the figure reads them all)."""
    base = dict(RECOMMENDED, cache_budget=budget_bytes(args.budgets_gb[0], all_bytes))
    for size in args.scaling_batch_sizes:
        ours("scaling", f"batch size {size}", base, "tritongnn", batch_size=size,
             extra=dict(axis="batch_size", value=size))
    for fanouts in args.scaling_fanouts:
        f = [int(v) for v in fanouts.split(",")]
        ours("scaling", f"fanouts {f}", base, "tritongnn", num_neighbors=f, extra=dict(axis="fanouts", value=fanouts))
    for gb in args.scaling_budgets_gb:
        ours("scaling", f"budget {gb:g} GB", dict(base, cache_budget=int(gb * GB)), "tritongnn",
             extra=dict(axis="budget_gb", value=gb))
    ours("scaling", f"width {args.features} ({graph['y'].numel()} nodes)", base, "tritongnn",
         extra=dict(axis="width", value=args.features))


def profile_steps(args, data, graph, all_bytes, device):
    """torch.profiler over ``--profile-steps`` training steps of the
    recommended configuration, with each ``--profile-loaders`` keyword set
    added, at each of ``--budgets-gb`` after the warm-up: the kernels of the
    loader's thread and the model's, by GPU time (``--profile-trace``: a
    Chrome trace of each as well, the budget and the set's number in its
    name)."""
    from torch.profiler import ProfilerActivity, profile
    steps = args.profile_steps
    for (index, (added, constants)), budget_gb in itertools.product(enumerate(keyword_sets(args.profile_loaders)),
                                                                    args.budgets_gb):
        restore = set_constants(constants)
        loader = our_loader(data, graph, args, device,
                            **{**RECOMMENDED, "cache_budget": budget_bytes(budget_gb, all_bytes), **added})
        model, optimizer = make_model("sage", "tritongnn", args, device)
        batches = cycle(loader)
        for _ in range(max(1, args.warmup)):
            train_step(model, optimizer, next(batches), trim=True)
        sync(device)
        cuda = device.type == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(steps):
                train_step(model, optimizer, next(batches), trim=True)
            sync(device)
        print(f"profile, {steps} steps, budget {budget_gb:g} GB (0: none), loader keywords {added}"
              + (f", constants {constants}" if constants else ""), flush=True)
        print(prof.key_averages().table(sort_by="cuda_time_total" if cuda else "cpu_time_total", row_limit=40),
              flush=True)
        if args.profile_trace:
            root, ext = os.path.splitext(args.profile_trace)
            path = f"{root}_{budget_gb:g}gb{f'_{index}' if index else ''}{ext or '.json'}"
            prof.export_chrome_trace(path)
            print(f"wrote {path}", flush=True)
        if args.profile_alone:  # the same model on 8 of the loader's batches, prepared
            prepared = [next(batches) for _ in range(8)]
            sync(device)
            with profile(activities=activities) as prof:
                for i in range(steps):
                    train_step(model, optimizer, prepared[i % len(prepared)], trim=True)
                sync(device)
            print(f"profile, {steps} steps of the model alone on 8 prepared batches", flush=True)
            if args.profile_trace:
                path = f"{root}_{budget_gb:g}gb{f'_{index}' if index else ''}_alone{ext or '.json'}"
                prof.export_chrome_trace(path)
                print(f"wrote {path}", flush=True)
            del prepared
        del loader, batches, model, optimizer
        restore()
        gc.collect()


def thread_times(args, data, graph, all_bytes, device):
    """The ``threads`` part (module docstring)."""
    import cProfile
    import io
    import pstats
    import collections
    import threading
    loader_module = importlib.import_module("tritongnn.sampling.loader")
    sampler_module = importlib.import_module("tritongnn.sampling.sampler")
    dual_module = importlib.import_module("tritongnn.cache.dual")
    pipeline_module = importlib.import_module("tritongnn.sampling.pipeline")
    produce = loader_module._Prefetcher._produce
    # each phase's CPU and wall seconds per thread: wall minus CPU is time
    # blocked (the interpreter lock, or a sync that does not spin)
    phases = collections.defaultdict(lambda: [0.0, 0.0])
    timed = [(sampler_module.NeighborSampler, "sample", "sample (all)"), (sampler_module, "host_list", "sizes sync"),
             (loader_module.NeighborLoader, "_assemble", "assemble (all)"), (loader_module, "gather_rows", "gather_rows"),
             (dual_module.CacheStats, "record", "stats.record"),
             # the replayed path (REPLAY_BATCHES), on the producer thread (or the loop's: FROM_PRODUCER)
             (pipeline_module.BatchPipeline, "_launch", "replay (launch)"),
             (pipeline_module.BatchPipeline, "_hand_out", "hand out")]
    kept = [(owner, name, getattr(owner, name)) for owner, name, _ in timed]
    in_pipeline = None  # the last pass's cProfile of the pipeline's calls (replayed path)

    def phase_timer(fn, key):
        def call(*a, **k):
            cpu, wall = time.thread_time(), time.perf_counter()
            profiled = in_pipeline is not None and key in ("replay (launch)", "hand out")
            if profiled:
                in_pipeline.enable()
            try:
                return fn(*a, **k)
            finally:
                if profiled:
                    in_pipeline.disable()
                who = "training" if threading.current_thread() is threading.main_thread() else "producer"
                entry = phases[(who, key)]
                entry[0] += time.thread_time() - cpu
                entry[1] += time.perf_counter() - wall
        return call
    for (added, constants), budget_gb in itertools.product(keyword_sets(args.threads_loaders), args.budgets_gb):
        restore = set_constants(constants)
        loader = our_loader(data, graph, args, device,
                            **{**RECOMMENDED, "cache_budget": budget_bytes(budget_gb, all_bytes), **added})
        model, optimizer = make_model("sage", "tritongnn", args, device)
        producer = {}
        replayed = loader._replays_batches()

        def timed_produce(self, profiler=None):
            start, enabled = time.thread_time(), False
            if profiler is not None:
                try:
                    profiler.enable()
                    enabled = True
                except ValueError as error:  # never raise before produce: the consumer would wait forever
                    print(f"producer not profiled: {error}", flush=True)
            try:
                produce(self)
            finally:
                if enabled:
                    profiler.disable()
                producer["cpu"], producer["profiled"] = time.thread_time() - start, enabled

        passes = max(2, args.epochs) + 1  # a warm-up pass, timed passes, one more under cProfile
        for epoch in range(passes):
            producer.clear()  # no producer thread on a CPU, or with prefetch=0
            # cProfile in the producer only (Python 3.12 allows one profiler a
            # process), or, replayed, in the pipeline's two calls
            profiler = cProfile.Profile() if epoch == passes - 1 else None
            if replayed:
                profiler, in_pipeline = None, profiler
            loader_module._Prefetcher._produce = (lambda self, p=profiler: timed_produce(self, p))
            phases.clear()
            for (owner, name, fn), (_, _, key) in zip(kept, timed):
                setattr(owner, name, phase_timer(fn, key))
            try:
                sync(device)
                wall, cpu, steps = time.perf_counter(), time.thread_time(), 0
                for batch in loader:
                    train_step(model, optimizer, batch, trim=True)
                    steps += 1
                sync(device)
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            finally:
                loader_module._Prefetcher._produce = produce
                for owner, name, fn in kept:
                    setattr(owner, name, fn)
            pipeline_profile, in_pipeline = in_pipeline, None
            if epoch == 0:
                continue  # the warm-up pass
            tag = (f"{budget_gb:g} GB" if budget_gb else "no budget") + (f", {added}" if added else "") + \
                (f", {constants}" if constants else "") + (", replayed" if replayed else "")
            under = " (producer under cProfile)" if profiler else " (pipeline under cProfile)" \
                if pipeline_profile else ""
            print(f"threads [{tag}]{under}: {steps} batches, "
                  f"{1e3 * wall / steps:.2f} ms a batch, training thread {1e3 * cpu / steps:.2f} ms CPU, "
                  f"producer thread {1e3 * producer.get('cpu', 0.0) / steps:.2f} ms CPU", flush=True)
            for (who, key), (cpu_s, wall_s) in sorted(phases.items()):
                print(f"  {who:9s} {key:15s} {1e3 * cpu_s / steps:6.3f} ms CPU {1e3 * wall_s / steps:6.3f} ms wall "
                      f"a batch", flush=True)
            if producer.get("profiled"):
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.threads_top)
                print(f"--- producer thread, a pass of {steps} batches ---\n" + text.getvalue(), flush=True)
            if pipeline_profile is not None:
                text = io.StringIO()
                pstats.Stats(pipeline_profile, stream=text).sort_stats("tottime").print_stats(args.threads_top)
                print(f"--- the pipeline's calls, a pass of {steps} batches ---\n" + text.getvalue(), flush=True)
        # the model alone on 8 of the loader's batches, prepared: the same
        # wall and training-thread CPU per step (CPU near wall: bound by the
        # host; wall well past CPU: waiting, for the GPU or the lock)
        prepared = list(itertools.islice(loader, 8))
        sync(device)
        wall, cpu = time.perf_counter(), time.thread_time()
        for i in range(steps):
            train_step(model, optimizer, prepared[i % len(prepared)], trim=True)
        sync(device)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        print(f"threads [{tag}] the model alone on 8 prepared batches: {1e3 * wall / steps:.2f} ms a step, "
              f"training thread {1e3 * cpu / steps:.2f} ms CPU", flush=True)
        del loader, model, optimizer, prepared
        restore()
        gc.collect()


def host_overhead(args, data, graph, all_bytes, device, ours, emit):
    """The ``host`` part (module docstring): each setting's epoch of the
    recommended configuration at every budget, and the model alone on 8
    prepared batches."""
    aggregate_kernels = importlib.import_module("tritongnn.kernels.aggregate")  # the module, not the function
    sampler_module = importlib.import_module("tritongnn.sampling.sampler")
    id_map_module = importlib.import_module("tritongnn.kernels.id_map")
    allocator = importlib.import_module("tritongnn.cache.allocator")
    pick_cost = allocator.PICK_COST
    default = aggregate_kernels.KNOWN_ORDER, sampler_module._GRAPH_KEYS_MAX, sampler_module.host_list
    direct_max = id_map_module.DIRECT_MAX_BYTES
    adam, switch = args.adam, sys.getswitchinterval()
    eager = 1 << 22  # below a batch's keys: its hops run eagerly, as before 1 << 23

    def pageable(t):  # the sizes copy as before host_list
        return t.tolist()
    # (name, known order, id-map keys a captured graph may own, sizes copy, switch interval, Adam,
    #  the largest direct id-map table: 0 = hash tables only)
    settings = [("checked order, eager hops, pageable sizes", False, eager, pageable, switch, adam, direct_max),
                ("known order, eager hops, pageable sizes", True, eager, pageable, switch, adam, direct_max),
                ("known order, replayed hops, pageable sizes", True, default[1], pageable, switch, adam,
                 direct_max),
                ("known order, replayed hops, pinned sizes", True, default[1], default[2], switch, adam,
                 direct_max),
                ("checked order, eager hops, pageable sizes (again)", False, eager, pageable, switch, adam,
                 direct_max)]
    if args.switch_intervals:  # the defaults, at Python's interval, each given one, then Python's again
        settings = [(f"defaults, switch interval {s * 1e3:g} ms", *default, s, adam, direct_max)
                    for s in [switch] + args.switch_intervals + [switch]]
    if args.host_adam:  # the defaults, Adam foreach (PyTorch's default), fused, foreach again
        settings = [(f"defaults, Adam {a}{' (again)' * (i == 2)}", *default, switch, a, direct_max)
                    for i, a in enumerate(("foreach", "fused", "foreach"))]
    if args.host_id_map:  # the defaults with hash id maps, direct where they fit, hash again
        settings = [(f"defaults, {name} id map", *default, switch, adam, most)
                    for name, most in (("hash", 0), ("direct", direct_max), ("hash (again)", 0))]
    stored = [None] * len(settings)  # feature_dtype of each setting's loaders (None: --feature-dtype)
    constants = [{}] * len(settings)  # module constants of each setting (--host-loaders)
    if args.host_feature_dtype:  # the defaults with float32 features, narrower ones, float32 again
        wide = args.feature_dtype or "float32"
        names = [wide, args.host_feature_dtype, wide + " (again)"]
        settings = [(f"defaults, {name} features", *default, switch, adam, direct_max) for name in names]
        stored = [args.feature_dtype, args.host_feature_dtype, args.feature_dtype]
    costs = [pick_cost] * len(settings)  # allocator.PICK_COST of each setting's plans
    if args.host_pick_costs:  # the defaults planned at each cost, then at the first again
        costs = list(args.host_pick_costs) + args.host_pick_costs[:1]
        settings = [(f"defaults, pick cost {c:g}{' (again)' * (i == len(costs) - 1)}", *default, switch, adam,
                     direct_max) for i, c in enumerate(costs)]
        stored = [args.feature_dtype] * len(settings)
    added = [{}] * len(settings)  # loader keywords of each setting on top of RECOMMENDED
    if args.host_loaders:  # the defaults with each keyword set, then the first again
        given = args.host_loaders + args.host_loaders[:1]
        added, constants = map(list, zip(*keyword_sets(given)))
        settings = [(f"defaults, {json.dumps(json.loads(k), sort_keys=True)}{' (again)' * (i == len(given) - 1)}",
                     *default, switch, adam, direct_max) for i, k in enumerate(given)]
        stored, costs = [args.feature_dtype] * len(settings), [pick_cost] * len(settings)
    extra_ops = [0] * len(settings)  # no-op torch calls a batch added to the producer
    if args.host_producer_ops:
        extra_ops = list(args.host_producer_ops) + args.host_producer_ops[:1]
        settings = [(f"defaults, {n} more producer calls{' (again)' * (i == len(extra_ops) - 1)}", *default,
                     switch, adam, direct_max) for i, n in enumerate(extra_ops)]
        stored, costs = [args.feature_dtype] * len(settings), [pick_cost] * len(settings)
        added, constants = [{}] * len(settings), [{}] * len(settings)
    prepared = None
    for (name, known, keys, sizes, interval, optimizer_kind, most), dtype, cost, more, consts, calls in zip(
            settings, stored, costs, added, constants, extra_ops):
        consts = dict(consts)
        interval = consts.pop("sys.switchinterval", interval)  # (--host-loaders: Python's, not tritongnn's)
        restore = set_constants(consts)
        unpatch = producer_calls(calls)
        aggregate_kernels.KNOWN_ORDER, sampler_module._GRAPH_KEYS_MAX, sampler_module.host_list = known, keys, sizes
        id_map_module.DIRECT_MAX_BYTES = most
        allocator.PICK_COST = cost
        sys.setswitchinterval(interval)
        args.adam = optimizer_kind  # what make_model reads
        dtype = dtype or args.feature_dtype
        extra = dict(known_order=known, graph_keys_max=keys, pinned_sizes=sizes is default[2],
                     switch_interval=interval, adam=args.adam, direct_id_map_max_bytes=most,
                     feature_dtype=dtype or "float32", pick_cost=cost, **({"added": more} if more else {}),
                     **({"constants": consts} if consts else {}),
                     **({"producer_calls_added": calls} if args.host_producer_ops else {}))
        for budget in args.budgets_gb:
            tag = f"{budget:g} GB" if budget else "no budget"
            _, loader, model, optimizer = ours(
                "host", f"recommended, {name} [{tag}]",
                dict(RECOMMENDED, cache_budget=budget_bytes(budget, all_bytes), feature_dtype=feature_dtype(dtype),
                     **more),
                "tritongnn", extra=extra)
            if prepared is None:
                prepared = [batch for _, batch in zip(range(8), loader)]
            del loader, model, optimizer
        model, optimizer = make_model("sage", "tritongnn", args, device)
        per_epoch = -(-graph["train"].numel() // args.batch_size)
        emit(dict(part="host", model="sage", name=f"model alone, {name}", library="tritongnn",
                  **time_alone(model, optimizer, prepared, args, per_epoch, device), **extra))
        del model, optimizer
        unpatch()
        restore()
    for pair in args.alone_beside:
        host_ms, gpu_ms = (float(v) for v in pair.split(":"))
        model, optimizer = make_model("sage", "tritongnn", args, device)
        per_epoch = -(-graph["train"].numel() // args.batch_size)
        beside = Beside(host_ms, gpu_ms, device)
        try:
            row = time_alone(model, optimizer, prepared, args, per_epoch, device, beside)
        finally:
            beside.close()
        emit(dict(part="host", model="sage", name=f"model alone beside {host_ms:g} ms of Python, "
                  f"{gpu_ms:g} ms of GPU copies a step", library="tritongnn", beside_host_ms=host_ms,
                  beside_gpu_ms=gpu_ms, **row))
        del model, optimizer, beside
    aggregate_kernels.KNOWN_ORDER, sampler_module._GRAPH_KEYS_MAX, sampler_module.host_list = default
    id_map_module.DIRECT_MAX_BYTES = direct_max
    allocator.PICK_COST = pick_cost
    sys.setswitchinterval(switch)
    args.adam = adam


def write_csv(path, record):
    if not path:
        return
    columns = ["commit", "date", "gpu", "part", "model", "name", "library", "axis", "value", "epoch_seconds",
               "vs_pyg_best", "vs_pyg_default", "vs_model_alone", "sampling_seconds", "gather_seconds",
               "model_seconds", "wait_seconds", "feature_hit_rate", "adjacency_hit_rate", "batches_timed",
               "batches_per_epoch", "peak_gpu_gb"]
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(columns)
        for r in record["rows"]:
            flat = dict(r, commit=r.get("commit") or record["commit"], date=record["date"], gpu=record["gpu"], **(r.get("split") or {}),
                        **(r.get("hits") or {}))
            w.writerow([flat.get(c, "") for c in columns])


def _plotting(csv_path, rows):
    """matplotlib (headless) and the rows to draw: every row of the CSV when
    there is one (earlier runs' too), else this run's."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if csv_path and os.path.exists(csv_path):
        with open(csv_path) as f:
            rows = [dict(r, epoch_seconds=float(r["epoch_seconds"])) for r in csv.DictReader(f)]
    return plt, rows


def plot(csv_path, rows, path):
    """Epoch time against each scaling axis: every scaling row of the CSV
    (all runs: the widths come from runs of their own), else this run's."""
    plt, rows = _plotting(csv_path, rows)
    latest = {}
    for r in rows:
        if r.get("part") == "scaling" and r.get("axis"):
            # a later run's point replaces an earlier one's; "8" and "8.0" are one point
            value = r["value"] if r["axis"] == "fanouts" else float(r["value"])
            latest[r["axis"], value] = dict(r, value=value)
    fig, panels = plt.subplots(1, 4, figsize=(16, 3.8))
    for axis, ax in zip(["batch_size", "width", "fanouts", "budget_gb"], panels):
        points = [r for (a, _), r in latest.items() if a == axis]
        if axis != "fanouts":
            points.sort(key=lambda r: float(r["value"]))
        ax.plot(range(len(points)), [r["epoch_seconds"] for r in points], marker="o")
        ax.set_xticks(range(len(points)), [f"{r['value']:g}" if axis != "fanouts" else r["value"]
                                           for r in points], rotation=20)
        ax.set(title=f"epoch time vs {axis}", ylabel="seconds per epoch", ylim=(0, None))
        ax.grid(alpha=0.3)
    commits = sorted({str(r.get("commit")) for r in latest.values()})
    fig.suptitle("GraphSAGE with tritongnn's default loader (the run's --budgets-gb unless the axis is the "
                 f"budget); commit {', '.join(commits)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def plot_ablation(csv_path, rows, path):
    """Seconds per epoch of GraphSAGE: PyG's loader (default and best) and
    each ablation step at each budget, from the runs of the commit of the
    CSV's newest ablation row (an ablation too long for one call runs as
    several: each row's ratios were measured in its own run), else this
    run's, on a log scale."""
    plt, rows = _plotting(csv_path, rows)
    rows = [r for r in rows if r.get("model") == "sage" and r.get("part") in ("pyg", "ablation")]
    ablation = [r for r in rows if r["part"] == "ablation"]
    commit = max(ablation, key=lambda r: str(r.get("date")))["commit"] if ablation else None
    latest = {}
    for r in sorted((r for r in rows if r.get("commit") == commit), key=lambda r: str(r.get("date"))):
        latest[r["part"], r["name"]] = r  # a later run of the commit replaces a row it ran again
    newest = ", ".join(sorted({str(r.get("date"))[:16] for r in latest.values()}))
    pyg = [r for (part, _), r in latest.items() if part == "pyg"]
    shown = []
    if pyg:
        shown.append(("PyG, num_workers=0", next((r for r in pyg if "workers=0 " in r["name"]), pyg[0])))
        best = min(pyg, key=lambda r: r["epoch_seconds"])
        shown.append((f"PyG, best ({best['name'].removeprefix('PyG ')})", best))
    shown += [(name, r) for (part, name), r in latest.items() if part == "ablation"]
    fig, ax = plt.subplots(figsize=(9, 0.36 * len(shown) + 1.2))
    labels = [name for name, _ in shown][::-1]
    seconds = [r["epoch_seconds"] for _, r in shown][::-1]
    colors = ["tab:gray" if name.startswith("PyG") else "tab:blue" if "no budget" in name or "GPU memory" in name
              else "tab:orange" for name in labels]
    ax.barh(range(len(shown)), seconds, color=colors)
    for i, value in enumerate(seconds):
        ax.text(value, i, f" {value:.1f}", va="center", fontsize=8)
    ax.set_yticks(range(len(shown)), labels, fontsize=8)
    ax.set_xscale("log")
    commits = sorted({c for _, r in shown for c in str(r.get("commit")).split(",")})
    ax.set_xlabel("seconds per epoch (log scale)")
    ax.set_title(f"GraphSAGE epoch, papers100M-scale graph, one GPU\n{newest}, commit {', '.join(commits)}",
                 fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
