"""Dual and dynamic cache benchmark on a graph larger than a cache budget.

One run, one graph, every configuration side by side (GARDEN's cache study):

* (i)   no cache: topology and features in pinned host memory, all read
        through UVA;
* (ii)  degree cache: features of the nodes in the most neighbour lists,
        the whole budget, no adjacency cache (PaGraph's policy);
* (iii) dual cache: full-link profile, hot-first relabelling, the budget split
        between adjacency and features by accesses per byte;
* (iv)  (iii) plus the dynamic (EWMA) feature cache, taking a share of the
        same budget; with ``--reuse``, (iii) and (iv) with match-reuse too, and
        (iv) with reuse and match-reorder (groups of 8), and (iv) with each
        group of 8 batches' host rows read once (``reuse="group"``);

at each budget of ``--budgets-gb``, plus (iii) with a budget that holds
everything and the all-in-GPU-memory loader (``placement="device"``), and the
budget sweep of ``--sweep-gb`` for (ii) and (iii). Every configuration trains
GraphSAGE for ``--epochs`` epochs (the first warms up: compilation, the
dynamic cache's first refreshes) and then runs one epoch of the loader alone;
the numbers are those of the last training epoch and of the loader epoch.
The sweep's extra budgets run the loader alone (two epochs, the second
measured): their hit rates do not depend on the model.

    python bench/cache.py --out bench/results/cache.json --csv bench/results/cache_sweep.csv
    python bench/plots.py cache bench/results/cache_sweep.csv bench/results/cache_sweep.png

``--nodes 2000000 --edges 40000000`` is a quick run; ``--device cpu
--nodes 3000 --edges 30000 --budgets-gb 0.0002 --sweep-gb 0.0001 --epochs
1 --profile-epochs 1`` a smoke test of the script.
"""
from __future__ import annotations

import argparse
import csv
import gc
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (GB, append_record, host_memory_gb, new_record, print_ratios, print_settings,  # noqa: E402
                    train_step)

from tritongnn import NeighborLoader  # noqa: E402
from tritongnn.cache import DynamicCacheConfig  # noqa: E402
from tritongnn.datasets import chung_lu  # noqa: E402


def train_epoch(loader, model, optimizer, trim=False):
    for batch in loader:
        train_step(model, optimizer, batch, trim)
    return loader.stats


def load_epoch(loader):
    for batch in loader:
        pass
    return loader.stats


def run_config(name, data, args, device, loader_kwargs, make_model, train_epochs):
    gc.collect()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    loader = NeighborLoader(data, args.num_neighbors, input_nodes=data.train_mask, batch_size=args.batch_size,
                            shuffle=True, seed=0, device=device, **loader_kwargs)
    build = time.perf_counter() - start
    if train_epochs:
        model, optimizer = make_model()
        train = [train_epoch(loader, model, optimizer, args.trim) for _ in range(train_epochs)]
        load = load_epoch(loader)
    else:  # the sweep: the loader alone, one epoch to warm up, one measured
        model = optimizer = None
        train = [load_epoch(loader), load_epoch(loader)]
        load = train[-1]
    stats = train[-1]
    row = dict(name=name, build_seconds=build, epoch_seconds=stats["epoch_seconds"],
               load_epoch_seconds=load["epoch_seconds"], epochs=[s["epoch_seconds"] for s in train],
               train=stats, load=load, peak_gpu_gb=torch.cuda.max_memory_allocated(device) / GB if cuda else 0.0,
               host=host_memory_gb())
    cache = loader.cache
    if cache is not None:
        plan = cache.plan
        row["plan"] = dict(num_adjacency=plan.num_adjacency, num_feature=plan.num_feature,
                           adjacency_bytes=plan.adjacency_bytes, feature_bytes=plan.feature_bytes,
                           dynamic_bytes=cache.dynamic.nbytes if cache.dynamic is not None else 0,
                           expected_adjacency_hit_rate=plan.adjacency_hit_rate,
                           expected_feature_hit_rate=plan.feature_hit_rate, text=str(plan))
    profile = loader.cache_profile if cache is not None else None
    del loader, model, optimizer, cache
    return row, profile


def summary_line(row) -> str:
    s = row["train"]
    hit = lambda k: f"{s[k]:.3f}" if k in s else "  -  "  # noqa: E731
    return (f"{row['name']:34s} epoch {row['epoch_seconds']:7.2f} s  load-only {row['load_epoch_seconds']:7.2f} s  "
            f"feat hit {hit('feature_hit_rate')} (static {hit('static_feature_hit_rate')}, dyn "
            f"{hit('dynamic_feature_hit_rate')}, reused {s.get('reused_rows', 0) / max(1, s.get('feature_rows', 1)):.3f})"
            f"  adj hit {hit('adjacency_hit_rate')}  "
            f"host {s.get('host_bytes', float('nan')) / GB:6.2f} GB  sample {s['sampling_seconds']:.2f} s "
            f"gather {s['gather_seconds']:.2f} s model {s['model_seconds']:.2f} s wait {s['wait_seconds']:.2f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000_000)
    parser.add_argument("--edges", type=int, default=1_000_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--train-fraction", type=float, default=0.01)
    parser.add_argument("--train-classes", type=int, default=4,
                        help="seeds from the first K classes only (0: from every node), as the labelled "
                             "nodes of ogbn-papers100M are one community's papers")
    parser.add_argument("--uniform-check", action="store_true",
                        help="also run (ii)-(iv) at the first budget with seeds drawn from every node")
    parser.add_argument("--num-neighbors", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2, help="training epochs per configuration")
    parser.add_argument("--budgets-gb", type=float, nargs="*", default=[8, 24],
                        help="budgets of the full comparison (none: the sweep alone)")
    parser.add_argument("--sweep-gb", type=float, nargs="*", default=[2, 4, 16])
    parser.add_argument("--dynamic-fraction", type=float, default=0.1)
    parser.add_argument("--decay", type=float, default=0.99)
    parser.add_argument("--update-every", type=int, default=8)
    parser.add_argument("--profile-epochs", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=540, help="seconds: skip the sweep past this")
    parser.add_argument("--out", default=None, help="append the record to this JSON file")
    parser.add_argument("--csv", default=None, help="write the budget sweep here")
    parser.add_argument("--only", nargs="+", default=None, metavar="POLICY",
                        help="run only these policies (none, degree, dual, dual+dynamic, dual+reuse, "
                             "dual+dynamic+reuse, dual+dynamic+reuse+reorder, dual+dynamic+group, device)")
    parser.add_argument("--model", choices=["pyg", "tritongnn"], default="pyg",
                        help="GraphSAGE from torch_geometric.nn or tritongnn.nn (Triton aggregation)")
    parser.add_argument("--trim", action="store_true",
                        help="PyG's layer-wise trimming (num_sampled_nodes_per_hop): layer l computes only "
                             "the nodes later layers need")
    parser.add_argument("--reuse", action="store_true",
                        help="also run (iii) and (iv) with match-reuse (reuse=True) at each budget")
    parser.add_argument("--skip-full", action="store_true",
                        help="skip the everything-cached and all-in-GPU-memory configurations")
    parser.add_argument("--commit", default=None)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script only")
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda d: None)
    t0 = time.perf_counter()

    start = time.perf_counter()
    data = chung_lu(args.nodes, args.edges, num_classes=args.classes, num_features=args.features,
                    train_fraction=0.5, val_fraction=0.001, test_fraction=0.001, device=device, seed=0)
    pool = data.train_mask
    draw = torch.rand(args.nodes, generator=torch.Generator(device).manual_seed(1), device=device)
    uniform_mask = pool & (draw < 2 * args.train_fraction)
    if args.train_classes:  # same number of seeds, from K communities
        data.train_mask = pool & (data.y < args.train_classes) & \
            (draw < 2 * args.train_fraction * args.classes / args.train_classes)
    else:
        data.train_mask = uniform_mask
    sync(device)
    generation = time.perf_counter() - start
    data.x = data.x.cpu()  # the features live in host memory, as for a graph larger than the GPU
    if device.type == "cuda":
        torch.cuda.empty_cache()
    row_bytes = args.features * 4
    feature_gb = args.nodes * row_bytes / GB
    settings = dict(graph=f"Chung-Lu power law (exponent 2.5, homophily 0.8), {args.nodes} nodes, "
                          f"{args.edges} directed edges", features=f"{args.features} float32 "
                          f"({feature_gb:.1f} GB)", classes=args.classes,
                    train_seeds=int(data.train_mask.sum()),
                    seeds_from=f"classes < {args.train_classes}" if args.train_classes else "every node",
                    num_neighbors=args.num_neighbors,
                    batch_size=args.batch_size, model=f"GraphSAGE ({args.model}) hidden {args.hidden}, 3 layers"
                          + (", trimmed per layer" if args.trim else ""),
                    epochs=args.epochs, profile_epochs=args.profile_epochs,
                    dynamic=dict(fraction=args.dynamic_fraction, decay=args.decay,
                                 update_every=args.update_every), generation_seconds=round(generation, 2),
                    host_after_generation=host_memory_gb())
    print_settings(device, settings)

    def make_model():
        if args.model == "pyg":
            from torch_geometric.nn import GraphSAGE
        else:
            from tritongnn.nn import GraphSAGE
        torch.manual_seed(0)
        model = GraphSAGE(args.features, args.hidden, num_layers=3, out_channels=args.classes).to(device)
        return model, torch.optim.Adam(model.parameters(), lr=0.003)

    rows, profile = [], None
    dynamic = DynamicCacheConfig(fraction=args.dynamic_fraction, decay=args.decay,
                                 update_every=args.update_every)

    def run(name, policy, train_epochs=args.epochs, baseline_of=False, **kwargs):
        """One configuration, unless ``--only`` leaves its policy out (a
        baseline runs whenever the row it is compared with ran:
        ``baseline_of`` is that row)."""
        nonlocal profile
        if args.only is not None and policy.split(" ")[0] not in args.only and not baseline_of:
            return None
        if profile is not None and "cache_budget" in kwargs:
            kwargs.setdefault("cache_profile", profile)
        row, prof = run_config(name, data, args, device, kwargs, make_model, train_epochs)
        row["train_epochs"] = train_epochs
        if prof is not None and profile is None:
            profile = prof
            row["profile_seconds"] = prof.seconds
            row["_profile"] = prof
        row["budget_gb"] = kwargs["cache_budget"] / GB if "cache_budget" in kwargs else None
        row["policy"] = policy
        rows.append(row)
        print(summary_line(row), flush=True)
        return row

    for budget in args.budgets_gb:
        b = int(budget * GB)
        run(f"(iii) dual {budget:g} GB", "dual", placement="host", cache_budget=b,
            profile_epochs=args.profile_epochs)
        run(f"(iv) dual+dynamic {budget:g} GB", "dual+dynamic", placement="host", cache_budget=b,
            dynamic_cache=dynamic)
        run(f"(ii) degree {budget:g} GB", "degree", placement="host", cache_budget=b, cache_policy="degree")
        if args.reuse:
            run(f"(iii) dual + reuse {budget:g} GB", "dual+reuse", placement="host", cache_budget=b, reuse=True)
            run(f"(iv) dual+dynamic + reuse {budget:g} GB", "dual+dynamic+reuse", placement="host",
                cache_budget=b, dynamic_cache=dynamic, reuse=True)
            run(f"(iv) dual+dynamic + reuse + reorder {budget:g} GB", "dual+dynamic+reuse+reorder",
                placement="host", cache_budget=b, dynamic_cache=dynamic, reuse=True, reorder_group=8)
            run(f"(iv) dual+dynamic + group reuse {budget:g} GB", "dual+dynamic+group",
                placement="host", cache_budget=b, dynamic_cache=dynamic, reuse="group", reorder_group=8)
    run("(i) no cache (UVA)", "none", placement="host")
    if not args.skip_full:
        full = run("(iii) dual, budget holds all", "dual", placement="host", cache_budget=int(2 * feature_gb * GB))
        run("all in GPU memory", "device", baseline_of=full, placement="device")
    if args.uniform_check and args.train_classes and time.perf_counter() - t0 < args.time_limit:
        data.train_mask = uniform_mask
        profile = None
        b = int(args.budgets_gb[0] * GB)
        tag = f"{args.budgets_gb[0]:g} GB, seeds from every node"
        run(f"(iii) dual {tag}", "dual uniform", placement="host", cache_budget=b,
            profile_epochs=args.profile_epochs)
        run(f"(iv) dual+dynamic {tag}", "dual+dynamic uniform", placement="host", cache_budget=b,
            dynamic_cache=dynamic)
        run(f"(ii) degree {tag}", "degree uniform", placement="host", cache_budget=b, cache_policy="degree")
        data.train_mask = pool & (data.y < args.train_classes) & \
            (draw < 2 * args.train_fraction * args.classes / args.train_classes)
        profile = next(r for r in rows if r.get("profile_seconds") is not None)["_profile"]
    for budget in args.sweep_gb:
        if time.perf_counter() - t0 > args.time_limit:
            print(f"sweep at {budget} GB skipped: past --time-limit", flush=True)
            continue
        b = int(budget * GB)
        run(f"(iii) dual {budget:g} GB", "dual", 0, placement="host", cache_budget=b)
        run(f"(ii) degree {budget:g} GB", "degree", 0, placement="host", cache_budget=b, cache_policy="degree")

    get = {r["name"]: r for r in rows}

    def ratio(a, b, key="epoch_seconds"):
        return get[a][key] / get[b][key] if a in get and b in get else float("nan")

    ratios = {}
    for budget in args.budgets_gb:
        tag = f"{budget:g} GB"
        ratios[f"(iv)/(i) epoch {tag}"] = ratio(f"(iv) dual+dynamic {tag}", "(i) no cache (UVA)")
        ratios[f"(iv)/(i) load-only epoch {tag}"] = ratio(f"(iv) dual+dynamic {tag}", "(i) no cache (UVA)",
                                                         "load_epoch_seconds")
        deg, dual, dyn = (get.get(f"{k} {tag}") for k in ("(ii) degree", "(iii) dual", "(iv) dual+dynamic"))
        if deg and dual:
            ratios[f"feature hit (iii)-(ii) points {tag}"] = 100 * (dual["train"]["feature_hit_rate"]
                                                                    - deg["train"]["feature_hit_rate"])
        if dual and dyn:
            ratios[f"feature hit (iv)-(iii) points {tag}"] = 100 * (dyn["train"]["feature_hit_rate"]
                                                                    - dual["train"]["feature_hit_rate"])
    ratios["full budget / all in GPU, epoch"] = ratio("(iii) dual, budget holds all", "all in GPU memory")
    ratios["full budget / all in GPU, load-only"] = ratio("(iii) dual, budget holds all", "all in GPU memory",
                                                          "load_epoch_seconds")

    for r in rows:
        r.pop("_profile", None)
    record = new_record("cache", device, args.commit, settings=settings, rows=rows, ratios=ratios,
                        seconds=time.perf_counter() - t0)
    append_record(args.out, record)
    if args.csv:  # appended: each run's rows under its commit
        new_file = not os.path.exists(args.csv)
        with open(args.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new_file:
                w.writerow(["commit", "policy", "train_epochs", "budget_gb", "feature_hit_rate",
                            "static_feature_hit_rate", "dynamic_feature_hit_rate", "reused_share",
                            "adjacency_hit_rate", "host_gb_per_epoch", "epoch_seconds", "load_epoch_seconds"])
            for r in rows:
                if r["policy"] == "device":
                    continue
                s = r["train"]
                w.writerow([record["commit"], r["policy"], r["train_epochs"], 0 if r["budget_gb"] is None else r["budget_gb"],
                            s.get("feature_hit_rate", 0.0), s.get("static_feature_hit_rate", 0.0),
                            s.get("dynamic_feature_hit_rate", 0.0),
                            s.get("reused_rows", 0) / max(1, s.get("feature_rows", 1)), s.get("adjacency_hit_rate", 0.0),
                            s.get("host_bytes", float("nan")) / GB, r["epoch_seconds"], r["load_epoch_seconds"]])
    print(f"\n{record['gpu']}  commit {record['commit']}  {record['date']}  {record['seconds']:.0f} s")
    for r in rows:
        print(summary_line(r))
    print_ratios(ratios)


if __name__ == "__main__":
    main()
