"""What every benchmark here shares: the record each run appends to
``bench/results/``, the settings line, timing with medians, one training
step, and the per-hop counts PyG's torch-sparse sampler leaves out.

A record is one JSON line: GPU name, UTC date, commit, torch version, then
the benchmark's own settings and rows, so runs can be compared over time.
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # the checkout's tritongnn, not an installed one
    sys.path.insert(0, ROOT)

GB = 1e9


# ------------------------------------------------------------------ records

def new_record(benchmark: str, device: torch.device | None, commit: str | None = None, **fields) -> dict:
    """A record for ``benchmark`` run on ``device``; ``commit`` defaults to
    this checkout's HEAD, with ``+dirty`` when tracked files differ from it
    (pass it where the run has no .git, or a stale one, as on the GPU machine)."""
    if commit is None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=HERE).stdout.strip()
        if commit and subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=HERE).returncode == 1:
            commit += "+dirty"
    gpu = torch.cuda.get_device_name(device) if device is not None and device.type == "cuda" else None
    return dict(benchmark=benchmark, gpu=gpu,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                commit=commit, torch=torch.__version__, **fields)


def append_record(path: str | None, record: dict) -> None:
    """Append ``record`` as one JSON line to ``path`` (nothing when None)."""
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record, default=str) + "\n")


def print_settings(device: torch.device, settings: dict) -> None:
    """The run's settings and card, one JSON line, before any number."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"none ({device.type})"
    print(json.dumps(dict(gpu=gpu, torch=torch.__version__, **settings), default=str), flush=True)


def print_ratios(ratios: dict) -> None:
    for name, value in ratios.items():
        print(f"ratio {name:60s} {value:8.3f}", flush=True)


# ------------------------------------------------------------------ timing

def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def now(device: torch.device) -> float:
    sync(device)
    return time.perf_counter()


def median_seconds(fn, device: torch.device, repeats: int = 5, warmup: int = 1) -> tuple[float, list[float]]:
    """The median wall seconds of ``fn()`` over ``repeats`` calls after
    ``warmup`` untimed ones, and every call's seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = now(device)
        fn()
        times.append(now(device) - start)
    return statistics.median(times), times


def kernel_ms(fn, device: torch.device, cuda_graph: bool = True) -> float:
    """Median milliseconds of ``fn`` on the GPU (``triton.testing.do_bench``;
    replayed from a CUDA graph, so that host launch cost is out, unless
    ``cuda_graph=False``); on a CPU one timed call (a smoke test only)."""
    if device.type != "cuda":
        fn()
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    from triton.testing import do_bench
    fn()  # compile outside the capture
    sync(device)
    if not cuda_graph:
        return do_bench(fn, warmup=25, rep=200, return_mode="median")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench(graph.replay, warmup=25, rep=200, return_mode="median")


def steady_rate(iterator, warmup: int, count: int, device: torch.device, step=None) -> float:
    """Items per second over ``count`` items after ``warmup`` untimed ones."""
    for _ in range(warmup):
        item = next(iterator)
        if step:
            step(item)
    start = now(device)
    for _ in range(count):
        item = next(iterator)
        if step:
            step(item)
    return count / (now(device) - start)


def cycle(loader):
    while True:
        yield from loader


def host_memory_gb() -> dict:
    """This process's resident and peak resident host memory (VmRSS, VmHWM), GB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024 / GB
    return out


# ---------------------------------------------------------------- training

def train_step(model, optimizer, batch, trim: bool = False) -> float:
    """One step; with ``trim``, PyG's layer-wise trimming (layer l computes
    only the nodes the later layers read: ``num_sampled_nodes_per_hop``)."""
    optimizer.zero_grad(set_to_none=True)
    kwargs = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                  num_sampled_edges_per_hop=batch.num_sampled_edges) if trim else {}
    out = model(batch.x, batch.edge_index, **kwargs)[:batch.batch_size]
    loss = F.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    optimizer.step()
    return loss.item()  # a real loop reads the loss: the GPU drains every step


def hop_counts(row, col, batch_size: int, num_hops: int) -> tuple[list[int], list[int]]:
    """``(num_sampled_nodes, num_sampled_edges)`` of a batch in hop order,
    derived from its edges (``row``: local source, ``col``: local target):
    the per-hop counts PyG's layer-wise trimming needs and torch-sparse's
    sampler does not return (pyg-lib's does).

    Hop order as torch-sparse's ``neighbor_sample`` writes it: hop h's edges
    come after hop h-1's and point at hop h-1's new nodes (local ids
    ``[begin, end)``; the seeds for hop 1); hop h's new nodes take the next
    ids, each the source of at least one of hop h's edges. So hop h's edges
    end at the first edge whose target is ``>= end``, and its nodes end one
    past the largest source among them. Raises ValueError for a batch not
    in that order (some edges left over)."""
    nodes, edges = [int(batch_size)], []
    first, end = 0, int(batch_size)
    for _ in range(num_hops):
        later = col[first:] >= end
        stop = first + (int(later.to(torch.uint8).argmax()) if bool(later.any()) else later.numel())
        new_end = max(end, int(row[first:stop].max()) + 1) if stop > first else end
        nodes.append(new_end - end)
        edges.append(stop - first)
        first, end = stop, new_end
    if first != col.numel():
        raise ValueError(f"the batch is not in hop order: {col.numel() - first} of its {col.numel()} edges "
                         f"come after {num_hops} hops")
    return nodes, edges


def with_hop_counts(num_hops: int):
    """A ``transform_sampler_output`` for PyG's loaders that fills in the
    per-hop counts (``hop_counts``) where the sampler gave none; it runs in
    the loader's workers, before the features are gathered."""
    def transform(out):
        if out.num_sampled_nodes is None:
            batch_size = out.metadata[0].numel()
            out.num_sampled_nodes, out.num_sampled_edges = hop_counts(out.row, out.col, batch_size, num_hops)
        return out
    return transform


def pyg_sampling_available() -> bool:
    """Whether PyG's loader can sample here (torch-sparse or pyg-lib); says so when not."""
    import torch_geometric.typing
    if torch_geometric.typing.WITH_TORCH_SPARSE or torch_geometric.typing.WITH_PYG_LIB:
        return True
    print("PyG's loader skipped: neither torch-sparse nor pyg-lib is importable", flush=True)
    return False


# ------------------------------------------------------- a loader's epoch

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


def time_epoch(loader, warmup: int, batches: int, device, step=None) -> dict:
    """Seconds per epoch of ``loader`` (with ``step`` on each batch):
    ``warmup`` batches, then ``batches`` timed (0: the rest of the epoch;
    more than an epoch runs on into the next), scaled to the epoch. The
    split counts the timed batches (and those the producer ran ahead)."""
    per_epoch = len(loader)
    warm = max(1, min(warmup, per_epoch - 1))  # at least one: compilation, first captures
    timed = batches or max(1, per_epoch - warm)
    done, start, end, before, banked = 0, None, None, None, {}
    while done < warm + timed:
        for batch in loader:
            if step is not None:
                step(batch)
            done += 1
            if done == warm:
                sync(device)
                before = loader.stats
                start = time.perf_counter()
            if done == warm + timed:
                # the window ends with its last step's work (the training
                # stream's, not the producer's, which runs ahead), before the
                # loop is left: leaving stops the producer, which an epoch's
                # own end never waits for
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
    stats = loader.stats
    window = {k: banked.get(k, 0) + stats.get(k, 0) - before.get(k, 0) for k in COUNTED}
    return dict(epoch_seconds=(end - start) * per_epoch / timed, batches_timed=timed, batches_per_epoch=per_epoch,
                **loader_counts(window, stats))


def time_passes(loader, warmup: int, epochs: int, device, step=None) -> dict:
    """Seconds per epoch of ``loader`` over ``epochs`` whole passes, each
    from ``iter()`` to its last step, after a pass left after ``warmup``
    batches: what a training loop sees, a pass's start (its first batches
    sampled, a first group staged) included. The split sums the passes."""
    for done, batch in enumerate(loader, 1):
        if step is not None:
            step(batch)
        if done >= warmup:
            break
    sync(device)
    start = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            if step is not None:
                step(batch)
    sync(device)
    seconds = time.perf_counter() - start
    # each pass's stats go to stats_history when the next one starts
    passes = loader.stats_history[len(loader.stats_history) - epochs + 1:] + [loader.stats]
    window = {k: sum(p.get(k, 0) for p in passes) for k in COUNTED}
    return dict(epoch_seconds=seconds / epochs, epochs_timed=epochs, batches_timed=window["batches"],
                batches_per_epoch=len(loader), **loader_counts(window, passes[-1]))


def time_alone(model, optimizer, prepared, steps: int, repeats: int, per_epoch: int, device) -> dict:
    """The model alone on ``prepared`` batches: a pass over them (compiling),
    then ``repeats`` windows of ``steps`` steps cycling them; the median
    window scaled to the epoch (one window alone spreads too widely to
    compare against)."""
    for batch in prepared:
        train_step(model, optimizer, batch, trim=True)
    sync(device)
    steps = max(len(prepared), steps)
    windows = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(steps):
            train_step(model, optimizer, prepared[i % len(prepared)], trim=True)
        sync(device)
        windows.append((time.perf_counter() - start) * per_epoch / steps)
    return dict(epoch_seconds=statistics.median(windows), windows_seconds=windows, batches_timed=steps,
                batches_per_epoch=per_epoch)


def cache_plan(loader) -> dict:
    """The loader's cache plan as a row's ``plan`` (nothing without a cache)."""
    if loader.cache is None:
        return {}
    plan = loader.cache.plan
    return dict(plan=dict(num_feature=plan.num_feature, num_adjacency=plan.num_adjacency,
                          feature_bytes=plan.feature_bytes, adjacency_bytes=plan.adjacency_bytes,
                          expected_feature_hit_rate=plan.feature_hit_rate,
                          expected_adjacency_hit_rate=plan.adjacency_hit_rate))


def edges_per_batch(batches) -> float:
    """Sampled edges per batch, the mean over ``batches``."""
    batches = list(batches)
    return sum(b.edge_index.size(1) for b in batches) / max(1, len(batches))
