"""One fresh process of ``test_training.py``: train a PyG model through
``tritongnn.NeighborLoader`` the way users write the loop, while another
thread keeps drawing from torch's default CUDA generator.

The loop has what users' loops have: dropout (GraphSAGE's, GAT's attention
dropout), optionally autocast and ``torch.compile``, ``synchronize`` and
``empty_cache`` now and then, a CUDA graph of its own, an evaluation loader
iterated a few batches at a time beside the training one, and a ``break``
out of the first epoch. Every few steps a batch's ``x`` and ``y`` are checked
against the data's rows of ``n_id``. Prints one ``ok`` line with what ran
(steps, the drawing thread's draws, the graphs the loader replayed) and
exits 0; any error is raised (a non-zero exit).
"""
from __future__ import annotations

import argparse
import json
import math
import threading

import torch
import torch.nn.functional as F
from torch_geometric.nn import GAT, GraphSAGE

from tritongnn import NeighborLoader
from tritongnn.datasets import chung_lu


class Drawer(threading.Thread):
    """Keeps calling ``torch.rand`` (and ``randn``, ``bernoulli_``) on the
    GPU until stopped; ``paused`` holds it while the loop captures a graph
    of its own (torch's capture entry point forbids other threads' draws:
    that is torch's rule, not the loader's)."""

    def __init__(self, device):
        super().__init__(daemon=True)
        self.device, self.draws, self.error = device, 0, None
        self.stop, self.paused = threading.Event(), threading.Lock()

    def run(self):
        torch.cuda.set_device(self.device)
        try:
            while not self.stop.is_set():
                with self.paused:
                    a = torch.rand(1 << 14, device=self.device) + torch.randn(1 << 14, device=self.device)
                    a.bernoulli_(0.5)
                    self.draws += 1
        except BaseException as error:  # reported by the loop, at the end
            self.error = error


def user_graph(drawer: Drawer, device) -> None:
    """The loop's own CUDA graph (torch's default, global capture mode)."""
    buffer = torch.zeros(1024, device=device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with drawer.paused:
        with torch.cuda.stream(side):  # warm-up, as torch asks
            buffer.add_(torch.rand(1024, device=device))
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            buffer.add_(torch.rand(1024, device=device))
    graph.replay()
    torch.cuda.current_stream(device).synchronize()
    assert bool((buffer > 0).all())


def check_batch(batch, x, y, dtype) -> None:
    n_id = batch.n_id.cpu()
    assert torch.equal(batch.x.cpu(), x[n_id].to(dtype).to(batch.x.dtype)), "x is not data.x[n_id]"
    assert torch.equal(batch.y.cpu(), y[n_id]), "y is not data.y[n_id]"
    assert int(batch.edge_index.max()) < batch.num_nodes


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--placement", default="device")
    parser.add_argument("--cache-budget", type=lambda v: int(float(v)), default=None)
    parser.add_argument("--super-batch", type=int, default=1)
    parser.add_argument("--feature-dtype", choices=["float16", "bfloat16"], default=None)
    parser.add_argument("--model", choices=["sage", "gat", "compiled"], default="sage")
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    device = torch.device("cuda", torch.cuda.current_device())

    data = chung_lu(100_000, 1_000_000, num_classes=8, num_features=32, seed=args.seed, device="cpu")
    x, y = data.x.clone(), data.y.clone()
    feature_dtype = getattr(torch, args.feature_dtype) if args.feature_dtype else None
    stored = feature_dtype or x.dtype
    common = dict(device=device, placement=args.placement, feature_dtype=feature_dtype,
                  cache_budget=args.cache_budget)
    train = NeighborLoader(data, [10, 5], input_nodes=data.train_mask, batch_size=256, shuffle=True,
                           seed=args.seed, super_batch=args.super_batch, **common)
    evaluate = NeighborLoader(data, [10, 5], input_nodes=data.val_mask, batch_size=512, **common)

    torch.manual_seed(args.seed)
    classes = int(y.max()) + 1
    if args.model == "gat":
        model = GAT(data.num_features, 32, 2, classes, heads=2, dropout=0.5)
    else:
        model = GraphSAGE(data.num_features, 64, 2, classes, dropout=0.5)
    model = model.to(device)
    forward = torch.compile(model, dynamic=True) if args.model == "compiled" else model
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    drawer = Drawer(device)
    drawer.start()
    steps, losses, evaluated = 0, [], 0
    try:
        epoch = 0
        while steps < args.steps:
            model.train()
            for i, batch in enumerate(train):
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp):
                    out = forward(batch.x, batch.edge_index)[:batch.batch_size]
                    loss = F.cross_entropy(out.float(), batch.y[:batch.batch_size])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                steps += 1
                if steps % 25 == 0:
                    check_batch(batch, x, y, stored)
                if steps % 40 == 0:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                if steps % 60 == 0:
                    model.eval()
                    with torch.no_grad():
                        for j, other in enumerate(evaluate):  # a second loader, left after 3 batches
                            forward(other.x, other.edge_index)
                            if j == 0:
                                check_batch(other, x, y, stored)
                            if j == 2:
                                break
                    evaluated += 1
                    model.train()
                if steps % 100 == 0:
                    user_graph(drawer, device)
                if steps >= args.steps or (epoch == 0 and i == len(train) // 2):
                    break  # out of the first epoch early, then on to the next
            epoch += 1
    finally:
        drawer.stop.set()
        drawer.join()
    if drawer.error is not None:
        raise drawer.error
    assert all(math.isfinite(v) for v in losses), "a loss is not finite"
    assert sum(losses[-20:]) < sum(losses[:20]), "the loss did not fall"
    replayed = sum(len(slots) for slots in train.replay.slots.values())
    captured = sum(c is not None for c in train.sampler._captured.values())
    result = dict(vars(args), steps=steps, epochs=epoch, evaluated=evaluated, draws=drawer.draws,
                  replay_slots=replayed, captured_hops=captured, loss=sum(losses[-20:]) / 20)
    print("ok", json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
