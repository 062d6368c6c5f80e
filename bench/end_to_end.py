"""End-to-end benchmark at the scale of ogbn-papers100M: GraphSAGE, GCN and
GAT trained through tritongnn.NeighborLoader against PyG's NeighborLoader,
every configuration through the loader's public arguments.

The graph: Chung-Lu power law with planted classes (``tritongnn.datasets``),
by default 1.11x10^8 nodes, 1.6x10^9 directed edges, 172 classes, 1.2x10^6
training seeds, as ogbn-papers100M. Its topology is generated on the GPU
once and stored as ``.npy`` under ``--data-dir`` (a second run maps the
files); the 128-float32 feature table (57 GB) is made each run on the GPU
straight into pinned host memory, where both loaders read it.

Scenarios (``--scenario``; ours run first, PyG's loader last, so that its
26 GB of CPU edges and its workers' batches never share the host with our
loaders' builds):

* ``headline``: at each ``--budgets-gb``, the recommended loader
  (``placement="host"``, ``cache_budget``) with each ``--loaders`` keyword
  set added (default: none, and group staging of 16 batches), against PyG's
  loader at ``num_workers=0`` and at its best ``--pyg-workers``.
* ``memory_caps``: ``bench_papers100m.py`` once per ``--caps-gb`` (a GPU
  memory cap is a process's): the loader's defaults under each cap, one
  record each appended to ``--caps-out``.
* ``ablation``: GARDEN's Fig. 19 (``ablation_configs``): techniques added
  one at a time, then branches of one technique each, at each budget, and
  everything in GPU memory; with PyG's loader for the ratios.
* ``models``: GCN and GAT (``--models``; ``tritongnn.nn``'s layers with our
  loader, PyG's with PyG's loader) at each budget and in GPU memory.
* ``alone``: each model alone on 8 batches prepared in advance, cycled:
  the floor a loader is hidden behind (rows of the other scenarios get
  ``vs_model_alone``).
* ``scaling``: the recommended loader at ``--budgets-gb[0]`` against batch
  size, fanouts and budget, and a width point for this run's ``--features``
  (other widths: runs of their own with nodes and edges scaled so the table
  stays what the host holds).

Every tritongnn row runs ``--warmup`` batches, then times ``--batches``
(0: the rest of that epoch) scaled to the epoch, or ``--epochs`` whole
passes; it gives seconds per epoch, the split (sampling, gather, model,
waiting), hit rates and the cache plan. Models train with PyG's layer-wise
trimming at ``--matmul-precision`` (``high``: TF32). Ratios to PyG's loader
and to the model alone are taken within one run.

    E2E="python bench/end_to_end.py --out bench/results/end_to_end.json --csv bench/results/end_to_end.csv"
    PYG="--pyg-workers 0 12 --pyg-pin-memory 0 --pyg-batches 6"
    $E2E --scenario headline --budgets-gb 24 --epochs 1 --warmup 16 $PYG
    $E2E --scenario headline --budgets-gb 0 --epochs 1 --warmup 16 --loaders '{}' --pyg-workers
    $E2E --scenario memory_caps --caps-gb 24 40 0 --caps-out bench/results/papers100m.json
    $E2E --scenario alone ablation --budgets-gb 24 --epochs 1 --warmup 16 $PYG
    $E2E --scenario alone ablation --budgets-gb 0 --epochs 1 --warmup 16 --pyg-workers
    $E2E --scenario alone models --budgets-gb 24 --batches 30 --warmup 16 $PYG
    $E2E --scenario scaling --budgets-gb 24 --batches 20 --warmup 16
    python bench/plots.py end_to_end bench/results/end_to_end.csv --ablation-png bench/results/end_to_end_ablation.png --scaling-png bench/results/end_to_end_scaling.png

Each line is sized for one call of at most ten minutes on one H100 or
H200, the graph's set-up included (the topology generated, or mapped where
``--data-dir`` was kept, and the features made); ``--pyg-workers`` with no
value leaves PyG's loader out.

``--device cpu --nodes 3000 --edges 20000 --train 400`` is a smoke test.
"""
from __future__ import annotations

import argparse
import csv
import gc
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (GB, HERE, append_record, cache_plan, cycle, host_memory_gb, new_record,  # noqa: E402
                    print_settings, pyg_sampling_available, sync, time_alone, time_epoch, time_passes,
                    train_step, with_hop_counts)

from tritongnn import CSCGraph, NeighborLoader  # noqa: E402
from tritongnn.datasets import chung_lu, class_features  # noqa: E402

SCENARIOS = ("headline", "memory_caps", "ablation", "models", "alone", "scaling")
# the loader every scenario adds to: the graph and features in pinned host memory, a GPU cache
RECOMMENDED = dict(placement="host")
# the fastest exact configuration of the ablation below the graph's size: group staging of 16 batches
FULL = dict(RECOMMENDED, super_batch=16, reuse="group")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", nargs="+", default=["headline"], choices=SCENARIOS)
    p.add_argument("--device", default="cuda")
    p.add_argument("--nodes", type=int, default=111_000_000)
    p.add_argument("--edges", type=int, default=1_600_000_000)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=172)
    p.add_argument("--train", type=int, default=1_200_000, help="training seeds")
    p.add_argument("--val", type=int, default=125_000, help="validation nodes (not read; they shape the split)")
    p.add_argument("--test", type=int, default=214_000, help="test nodes (not read; they shape the split)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/tmp/tritongnn-data", help="where the topology is stored")
    p.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batch-size", type=int, default=8000)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--budgets-gb", type=float, nargs="+", default=[24, 0], help="0: a budget that holds all")
    p.add_argument("--loaders", nargs="+", default=["{}", json.dumps(dict(super_batch=16, reuse="group"))],
                   help="headline: NeighborLoader keyword sets (JSON) added to the recommended one")
    p.add_argument("--feature-dtype", choices=["float16", "bfloat16"], default=None,
                   help="every tritongnn loader stores the features in this dtype (feature_dtype)")
    p.add_argument("--matmul-precision", default="high", choices=["highest", "high", "medium"])
    p.add_argument("--warmup", type=int, default=8, help="batches before timing")
    p.add_argument("--batches", type=int, default=0, help="batches timed (0: the rest of the warm-up's epoch)")
    p.add_argument("--epochs", type=int, default=0, help="time this many whole passes instead of --batches")
    p.add_argument("--alone-repeats", type=int, default=5, help="alone: windows timed, the median taken")
    p.add_argument("--pyg-workers", type=int, nargs="*", default=[0, 4, 8], help="none: no PyG baseline")
    p.add_argument("--pyg-pin-memory", type=int, nargs="+", default=[0, 1], choices=[0, 1])
    p.add_argument("--pyg-prefetch", type=int, default=1, help="DataLoader prefetch_factor a worker")
    p.add_argument("--pyg-batches", type=int, default=20, help="PyG's steps timed (at least two a worker)")
    p.add_argument("--models", nargs="+", default=["gcn", "gat"], choices=["gcn", "gat"])
    p.add_argument("--scaling-batch-sizes", type=int, nargs="*", default=[4000, 8000, 12000])
    p.add_argument("--scaling-fanouts", nargs="*", default=["10,5", "15,10,5", "10,10,5,5"])
    p.add_argument("--scaling-budgets-gb", type=float, nargs="*", default=[8, 16, 24, 32, 48])
    p.add_argument("--caps-gb", type=float, nargs="+", default=[24], help="memory_caps: GPU caps (0: the card)")
    p.add_argument("--caps-out", default=None, help="memory_caps: bench_papers100m.py's --out")
    p.add_argument("--out", default=None, help="append the record to this JSON file")
    p.add_argument("--csv", default=None, help="append one row per configuration")
    p.add_argument("--commit", default=None)
    args = p.parse_args(argv)
    try:
        args.loader_sets = loader_sets(args.loaders)
    except ValueError as error:
        p.error(str(error))
    if args.alone_repeats < 1:
        p.error(f"--alone-repeats must be at least 1, got {args.alone_repeats}")
    return args


def loader_sets(texts) -> list[dict]:
    """``--loaders``: each JSON object a set of ``NeighborLoader`` keywords;
    a key that is not one of its parameters is refused."""
    known = set(inspect.signature(NeighborLoader.__init__).parameters) - {"self", "data", "num_neighbors"}
    sets = []
    for text in texts:
        given = json.loads(text)
        if not isinstance(given, dict):
            raise ValueError(f"--loaders takes JSON objects, got {text!r}")
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"--loaders: {unknown} are not NeighborLoader arguments")
        sets.append(given)
    return sets


def memory_cap_commands(args) -> list[list[str]]:
    """``memory_caps``: one ``bench_papers100m.py`` process per cap."""
    script = os.path.join(HERE, "bench_papers100m.py")
    return [[sys.executable, script, "--cap-gb", f"{cap:g}", "--batch-size", str(args.batch_size),
             "--fanouts", *map(str, args.num_neighbors)] + (["--out", args.caps_out] if args.caps_out else [])
            + (["--commit", args.commit] if args.commit else []) for cap in args.caps_gb]


def ablation_configs(budget_gb, all_bytes):
    """GARDEN's Fig. 19 as a line and its branches: ``(name, loader
    keywords, model library)``. The line adds, each to the one before, the
    techniques of ``FULL`` (with ``tritongnn.nn``'s layers), then float16
    features (lossy, so last). Each branch adds one technique alone: the
    dynamic cache and match-reorder to ``FULL``; the grouped sampler to the
    dual cache (super-batches take the foundation kernel with them)."""
    budget = budget_bytes(budget_gb, all_bytes)
    tag = f"{budget_gb:g} GB" if budget_gb else "no budget"
    line = [("UVA, no cache", dict(placement="host"), "pyg"),
            ("+ dual cache", dict(cache_budget=budget), "pyg"),
            ("+ super-batch 16", dict(super_batch=16), "pyg"),
            ("+ group staging", dict(reuse="group"), "pyg"),
            ("+ Triton aggregation (full)", {}, "tritongnn"),
            ("+ float16 features", dict(feature_dtype=torch.float16), "tritongnn")]
    configs, kwargs = [], {}
    for name, add, library in line:
        kwargs = dict(kwargs, **add)
        configs.append((f"{name} [{tag}]", dict(kwargs), library))
    full = dict(FULL, cache_budget=budget)
    return configs + [(f"full + dynamic cache [{tag}]", dict(full, dynamic_cache=True), "tritongnn"),
                      (f"full + match-reorder 16 [{tag}]", dict(full, reorder_group=16), "tritongnn"),
                      (f"dual cache + grouped sampler [{tag}]",
                       dict(placement="host", cache_budget=budget, sample_kernel="grouped"), "pyg")]


def budget_bytes(budget_gb, all_bytes):
    """A budget in bytes; 0 (no budget): room for the whole graph, with the
    dynamic cache's share on top."""
    return int(budget_gb * GB) if budget_gb else int(1.25 * all_bytes)


def budget_tag(budget_gb):
    return f"{budget_gb:g} GB" if budget_gb else "no budget"


# ------------------------------------------------------------------ the graph

def load_graph(args, device) -> dict:
    """Topology, labels and the training split, from ``--data-dir`` or generated there."""
    path = Path(args.data_dir) / f"chung_lu_{args.nodes}_{args.edges}_{args.classes}_{args.train}_s{args.seed}"
    names = ("indptr", "indices", "y", "train")
    start = time.perf_counter()
    if not (path / "done").exists():
        path.mkdir(parents=True, exist_ok=True)
        data = chung_lu(args.nodes, args.edges, num_classes=args.classes, num_features=1,
                        train_fraction=args.train / args.nodes, val_fraction=args.val / args.nodes,
                        test_fraction=args.test / args.nodes, device=device, seed=args.seed)
        graph = CSCGraph.from_edge_index(data.edge_index, args.nodes)
        arrays = dict(indptr=graph.indptr, indices=graph.indices, y=data.y,
                      train=torch.nonzero(data.train_mask).flatten())
        del data, graph
        for name in names:
            np.save(path / f"{name}.npy", arrays.pop(name).cpu().numpy())
        (path / "done").write_text(json.dumps(dict(seconds=time.perf_counter() - start)))
        how = "generated"
    else:
        how = "mapped from disk"
    out = {name: torch.from_numpy(np.load(path / f"{name}.npy", mmap_mode="r+")) for name in names}
    out["how"] = f"{how} in {time.perf_counter() - start:.1f} s ({path})"
    return out


def pyg_data(graph, args, device):
    """The PyG ``Data`` both loaders read: ``edge_index`` in CSC order (our
    build then sorts nothing; PyG's sampler takes it as ``is_sorted``) and
    the features, both made on the GPU into pinned host memory."""
    from torch_geometric.data import Data

    from tritongnn.host_memory import pinned_empty
    num_nodes = graph["y"].numel()
    x = pinned_empty((num_nodes, args.features), torch.float32, device)
    class_features(graph["y"].to(device), args.classes, args.features, seed=args.seed + 1, out=x)
    edge_index = pinned_empty((2, graph["indices"].numel()), torch.int64, device)
    indptr = graph["indptr"].to(device)
    edge_index[1].copy_(torch.repeat_interleave(torch.arange(num_nodes, device=device), indptr.diff()))
    edge_index[0].copy_(graph["indices"].to(device).long())
    sync(device)
    return Data(x=x, y=graph["y"].long(), edge_index=edge_index, num_nodes=num_nodes)


def make_model(kind, library, args, device, width=None, layers=None):
    """``kind`` in sage/gcn/gat with PyG's layers or ``tritongnn.nn``'s."""
    import torch_geometric.nn as pyg_nn

    import tritongnn.nn as our_nn
    torch.manual_seed(0)  # the weights, and the order PyG's loader shuffles in
    width, layers = width or args.features, layers or len(args.num_neighbors)
    lib = our_nn if library == "tritongnn" else pyg_nn
    if kind == "gat":
        model = lib.GAT(width, 64, num_layers=layers, out_channels=args.classes, heads=8)
    else:
        model = (lib.GraphSAGE if kind == "sage" else lib.GCN)(width, args.hidden, num_layers=layers,
                                                               out_channels=args.classes)
    model = model.to(device)
    return model, torch.optim.Adam(model.parameters(), lr=0.003)


# ------------------------------------------------------------------ PyG

def pyg_runs(data, graph, args, device, kinds, emit) -> dict:
    """PyG's loader for each model of ``kinds``: ``{kind: (default, best) rows}``;
    models after GraphSAGE try only the default and GraphSAGE's best."""
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader
    from torch_geometric.sampler import NeighborSampler as PyGNeighborSampler
    sampler = PyGNeighborSampler(data, args.num_neighbors, is_sorted=True)
    out = {}
    for kind in kinds:
        tried = [(w, bool(p)) for w in args.pyg_workers for p in ((0,) if w == 0 else args.pyg_pin_memory)]
        if "sage" in out:
            best = out["sage"][1]
            tried = [(0, False)] + [(best["workers"], best["pin_memory"])] * (best["workers"] > 0)
        found = []
        for workers, pin in tried:
            loader = PyGNeighborLoader(data, args.num_neighbors, input_nodes=graph["train"],
                                       batch_size=args.batch_size, shuffle=True, neighbor_sampler=sampler,
                                       transform_sampler_output=with_hop_counts(len(args.num_neighbors)),
                                       num_workers=workers, pin_memory=pin, persistent_workers=workers > 0,
                                       **(dict(prefetch_factor=args.pyg_prefetch) if workers else {}))
            model, optimizer = make_model(kind, "pyg", args, device)
            # two rounds of every worker's batches before the clock, and a
            # window of at least two rounds: a shorter one times batches
            # the workers made during the warm-up
            warm, timed = 2 * workers + 2, max(args.pyg_batches, 2 * workers)
            it, name = cycle(loader), f"PyG workers={workers} pin_memory={pin}"
            try:
                for _ in range(warm):
                    train_step(model, optimizer, next(it).to(device, non_blocking=pin), trim=True)
                sync(device)
                start = time.perf_counter()
                for _ in range(timed):
                    train_step(model, optimizer, next(it).to(device, non_blocking=pin), trim=True)
                sync(device)
            except torch.OutOfMemoryError as error:
                emit(dict(scenario="pyg", model=kind, name=name, workers=workers, pin_memory=pin,
                          epoch_seconds=float("nan"), error=f"CUDA out of memory: {str(error).splitlines()[0]}"))
                break
            finally:
                del it
                gc.collect()
            found.append(emit(dict(scenario="pyg", model=kind, name=name, workers=workers, pin_memory=pin,
                                   epoch_seconds=(time.perf_counter() - start) * len(loader) / timed,
                                   batches_timed=timed, batches_per_epoch=len(loader))))
            del loader, model, optimizer
            gc.collect()
        if found:
            out[kind] = (found[0], min(found, key=lambda r: r["epoch_seconds"]))
    return out


# ------------------------------------------------------------------ main

def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    rows, t0 = [], time.perf_counter()
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "csv", "commit", "loader_sets")}

    def emit(row):
        rows.append(row)
        line = f"{row['scenario']:9s} {row.get('model', ''):5s} {row['name']:45s} {row['epoch_seconds']:9.2f} s/epoch"
        if row.get("split"):
            s = row["split"]
            line += (f"  sample {s['sampling_seconds']:.2f} gather {s['gather_seconds']:.2f} "
                     f"model {s['model_seconds']:.2f} wait {s['wait_seconds']:.2f} ({s['batches']} batches)")
        if row.get("hits"):
            line += "  hits " + " ".join(f"{k.replace('_hit_rate', '')} {v:.3f}" for k, v in row["hits"].items())
        print(line, flush=True)
        return row

    if "memory_caps" in args.scenario:
        print_settings(device, dict(settings, memory_caps=memory_cap_commands(args)))
        for command in memory_cap_commands(args):
            subprocess.run(command, check=True)
        if set(args.scenario) == {"memory_caps"}:
            return
    torch.set_float32_matmul_precision(args.matmul_precision)
    graph = load_graph(args, device)
    data = pyg_data(graph, args, device)
    all_bytes = data.x.nbytes + graph["indptr"].nbytes + graph["indices"].nbytes
    settings.update(graph=graph["how"], feature_gb=round(data.x.nbytes / GB, 1), host_after_graph=host_memory_gb())
    print_settings(device, settings)
    dtype = getattr(torch, args.feature_dtype) if args.feature_dtype else None
    profile = None  # one cache profile for every loader of the graph, batch size and fanouts it was taken with

    def ours(scenario, name, kwargs, library="tritongnn", kind="sage", batch_size=None, num_neighbors=None,
             extra=None):
        nonlocal profile
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        same = not num_neighbors and not batch_size
        kwargs = dict(dict(feature_dtype=dtype), **kwargs)
        if "cache_budget" in kwargs and profile is not None and same:
            kwargs["cache_profile"] = profile
        start = time.perf_counter()
        loader = NeighborLoader(data, num_neighbors or args.num_neighbors, input_nodes=graph["train"],
                                batch_size=batch_size or args.batch_size, shuffle=True, seed=args.seed,
                                device=device, **kwargs)
        build = time.perf_counter() - start
        if loader.cache is not None and profile is None and same:
            profile = loader.cache_profile
        model, optimizer = make_model(kind, library, args, device, layers=len(num_neighbors or args.num_neighbors))
        step = lambda b: train_step(model, optimizer, b, trim=True)  # noqa: E731
        timed = time_passes(loader, args.warmup, args.epochs, device, step) if args.epochs else \
            time_epoch(loader, args.warmup, args.batches, device, step)
        peak = torch.cuda.max_memory_allocated(device) / GB if device.type == "cuda" else 0.0
        emit(dict(scenario=scenario, model=kind, name=name, library=library, build_seconds=build,
                  loader={k: str(v) if isinstance(v, torch.dtype) else v for k, v in kwargs.items()
                          if k != "cache_profile" and v is not None},
                  peak_gpu_gb=peak, **timed, **(extra or {}), **cache_plan(loader)))
        return loader

    if "alone" in args.scenario:
        b = args.budgets_gb[0]
        loader = ours("alone", f"recommended [{budget_tag(b)}] (batches for the model alone)",
                      dict(RECOMMENDED, cache_budget=budget_bytes(b, all_bytes)))
        prepared = [batch for _, batch in zip(range(8), loader)]
        per_epoch = len(loader)
        del loader
        for kind in ["sage"] + args.models:
            for library in ("pyg", "tritongnn"):
                model, optimizer = make_model(kind, library, args, device)
                emit(dict(scenario="alone", model=kind, library=library,
                          name=f"model alone ({library} layers; 8 batches prepared, cycled)",
                          **time_alone(model, optimizer, prepared, args.batches or per_epoch, args.alone_repeats,
                                       per_epoch, device)))
        del prepared, model, optimizer
    if "headline" in args.scenario:
        for budget in args.budgets_gb:
            for added in args.loader_sets:
                ours("headline", f"recommended {json.dumps(added, sort_keys=True)} [{budget_tag(budget)}]",
                     dict(RECOMMENDED, cache_budget=budget_bytes(budget, all_bytes), **added))
    if "ablation" in args.scenario:
        for budget in args.budgets_gb:
            for name, kwargs, library in ablation_configs(budget, all_bytes):
                ours("ablation", name, kwargs, library)
        ours("ablation", "all in GPU memory", dict(placement="device"))
    if "models" in args.scenario:
        for kind in args.models:
            for budget in args.budgets_gb:
                ours("models", f"recommended [{budget_tag(budget)}]",
                     dict(RECOMMENDED, cache_budget=budget_bytes(budget, all_bytes)), kind=kind)
            ours("models", "all in GPU memory", dict(placement="device"), kind=kind)
    if "scaling" in args.scenario:
        base = dict(RECOMMENDED, cache_budget=budget_bytes(args.budgets_gb[0], all_bytes))
        for size in args.scaling_batch_sizes:
            ours("scaling", f"batch size {size}", base, batch_size=size, extra=dict(axis="batch_size", value=size))
        for fanouts in args.scaling_fanouts:
            f = [int(v) for v in fanouts.split(",")]
            ours("scaling", f"fanouts {f}", base, num_neighbors=f, extra=dict(axis="fanouts", value=fanouts))
        for gb in args.scaling_budgets_gb:
            ours("scaling", f"budget {gb:g} GB", dict(base, cache_budget=int(gb * GB)),
                 extra=dict(axis="budget_gb", value=gb))
        ours("scaling", f"width {args.features}", base, extra=dict(axis="width", value=args.features))

    pyg = {}
    kinds = (["sage"] if {"headline", "ablation"} & set(args.scenario) else []) + \
        (args.models if "models" in args.scenario else [])
    if kinds and args.pyg_workers and pyg_sampling_available():
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        pyg = pyg_runs(data, graph, args, device, kinds, emit)
    record = new_record("end_to_end", device, args.commit, settings=settings, rows=rows,
                        seconds=time.perf_counter() - t0, host_at_end=host_memory_gb())
    finish(args, record, pyg)


def finish(args, record, pyg):
    """Ratios against PyG's loader and the model alone, then the record to
    ``--out``, the rows to ``--csv`` and the table."""
    rows = record["rows"]
    alone = {(r["model"], r["library"]): r for r in rows if r["scenario"] == "alone" and "library" in r
             and r["name"].startswith("model alone")}
    for row in rows:
        if row["scenario"] in ("headline", "ablation", "models") and row.get("model") in pyg:
            default, best = pyg[row["model"]]
            row["vs_pyg_default"] = default["epoch_seconds"] / row["epoch_seconds"]
            row["vs_pyg_best"] = best["epoch_seconds"] / row["epoch_seconds"]
        key = (row.get("model"), row.get("library"))
        if row["scenario"] in ("headline", "ablation", "models") and key in alone:
            row["vs_model_alone"] = row["epoch_seconds"] / alone[key]["epoch_seconds"]
    append_record(args.out, record)
    if args.csv:
        columns = ["commit", "date", "gpu", "part", "model", "name", "library", "axis", "value", "epoch_seconds",
                   "vs_pyg_best", "vs_pyg_default", "vs_model_alone", "sampling_seconds", "gather_seconds",
                   "model_seconds", "wait_seconds", "feature_hit_rate", "adjacency_hit_rate", "batches_timed",
                   "batches_per_epoch", "peak_gpu_gb"]
        new = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(columns)
            for r in rows:
                flat = dict(r, part=r["scenario"], commit=record["commit"], date=record["date"], gpu=record["gpu"],
                            **(r.get("split") or {}), **(r.get("hits") or {}))
                w.writerow([flat.get(c, "") for c in columns])
    print(f"\n{record['gpu']}  commit {record['commit']}  {record['date']}  {record['seconds']:.0f} s")
    print(f"{'scenario':9s} {'model':5s} {'configuration':45s} {'s/epoch':>8s} {'vs PyG best':>11s} "
          f"{'vs PyG 0 w.':>11s} {'/ alone':>8s}")
    for r in rows:
        def ratio(key):
            return f"{r[key]:10.2f}x" if r.get(key) else f"{'-':>11s}"
        print(f"{r['scenario']:9s} {r.get('model', ''):5s} {r['name'][:45]:45s} {r['epoch_seconds']:8.2f} "
              f"{ratio('vs_pyg_best')} {ratio('vs_pyg_default')} {ratio('vs_model_alone')}")


if __name__ == "__main__":
    main()
