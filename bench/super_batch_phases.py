"""Where the host's time goes in a pass of ``sample`` (K = 1) or
``sample_many`` (K > 1): per batch, *prep* (the call's start to its one
sync: seeds, Philox seeds, the replay's launch), *wait* (the sync: the
replay's GPU time, and whatever of the previous call's copy-out was still
queued) and *split* (the sync to the call's return: the K outputs built).
The GPU idles for about prep + split where the host does not overlap it,
so a super-batch can only gain that share over K = 1::

    python bench/super_batch_phases.py [--graphs chung_lu cnr2000] [--cnr2000 PATH] [--ks 1 8]

Prints one ``PHASE`` line per graph and K (the median pass of 3, 160
batches of 8000 seeds, [15, 10, 5], adjacency in GPU memory, the fused
kernel). ``TAG`` in the environment labels the lines (an A/B of two trees).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from tritongnn import CSCGraph, NeighborSampler  # noqa: E402
from tritongnn.datasets import chung_lu, load_npz  # noqa: E402
from tritongnn.sampling import sampler as sampler_module  # noqa: E402
from bench_super_batch import CNR2000, epoch_batches  # noqa: E402

_syncs = []  # (enter, leave) of each host_list call of the current sample call
_host_list = sampler_module.host_list


def _timed_host_list(t):
    enter = time.perf_counter()
    out = _host_list(t)
    _syncs.append((enter, time.perf_counter()))
    return out


def run_pass(sampler, batches, k, generator) -> list[float]:
    """Seconds of prep, wait and split, summed over the pass."""
    phases = [0.0, 0.0, 0.0]
    for first in range(0, len(batches), k):
        group = batches[first:first + k]
        _syncs.clear()
        start = time.perf_counter()
        if len(group) == 1:
            sampler.sample(group[0], generator, validate=False)
        else:
            sampler.sample_many(group, generator, validate=False)
        end = time.perf_counter()
        enter, leave = _syncs[-1]
        phases[0] += enter - start
        phases[1] += leave - enter
        phases[2] += end - leave
    return phases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["chung_lu", "cnr2000"])
    parser.add_argument("--cnr2000", default=str(CNR2000))
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--batches", type=int, default=160)
    args = parser.parse_args()
    sampler_module.host_list = _timed_host_list
    device = torch.device("cuda")
    tag = os.environ.get("TAG", "")
    for name in args.graphs:
        if name == "chung_lu":
            data = chung_lu(50_000_000, 1_000_000_000, num_classes=2, num_features=1, train_fraction=0.6,
                            val_fraction=0.0, test_fraction=0.0, device=device)
            seeds = torch.nonzero(data.train_mask).flatten()
        else:
            data = load_npz(args.cnr2000)
            seeds = torch.arange(data.num_nodes, device=device)
        graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes, device=device)
        del data
        batches, _ = epoch_batches(seeds, 8000, args.batches)
        for k in args.ks:
            sampler = NeighborSampler(graph, [15, 10, 5], device=device, method="fused")
            # compile and capture, the last shorter super-batch's graph too
            warm = batches[:2 * k] + batches[(len(batches) - 1) // k * k:]
            run_pass(sampler, warm, k, torch.Generator().manual_seed(1))
            passes = []
            for rep in range(3):
                torch.cuda.synchronize()
                start = time.perf_counter()
                phases = run_pass(sampler, batches, k, torch.Generator().manual_seed(2 + rep))
                torch.cuda.synchronize()
                passes.append([time.perf_counter() - start] + phases)
            wall, prep, wait, split = (1e3 * s / len(batches) for s in sorted(passes)[1])
            print(f"PHASE {tag} {name} fused K={k}: wall {wall:.3f} prep {prep:.3f} wait {wait:.3f} "
                  f"split {split:.3f} ms/batch", flush=True)
            del sampler
        del graph


if __name__ == "__main__":
    main()
