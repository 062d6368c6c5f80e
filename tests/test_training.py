"""Users' training loops on the GPU while the loader samples and captures.

Each configuration (placement, cache, ``super_batch``, ``feature_dtype``)
trains PyG models with dropout in fresh processes (``train_under_load.py``)
while a thread keeps drawing from torch's default CUDA generator: a capture
through torch's entry point would put that generator into capture state for
every thread and fail the draws. The default run starts one process per
configuration; the ``slow`` one 20 per configuration, models and autocast
taken in turn. And the loader draws nothing from torch's CUDA generator:
the same dropout masks, step for step, as a loader that never captures."""
import concurrent.futures
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_under_load.py")
ROOT = os.path.dirname(os.path.dirname(HELPER))
# name: (arguments, whether its batches replay from graphs (the pipeline's slots), or else the sampler
# replays its hops): where the loader captures while the thread draws, the race is there to lose
CONFIGS = {
    "device": ([], True),
    "device-bf16": (["--feature-dtype", "bfloat16"], True),
    "device-super-batch": (["--super-batch", "4"], False),
    "host": (["--placement", "host"], False),
    "host-cache": (["--placement", "host", "--cache-budget", "4e6"], False),
    "host-cache-all-fp16": (["--placement", "host", "--cache-budget", "1e9", "--feature-dtype", "float16"], True),
}
MODELS = ("sage", "gat", "compiled")


def run_process(config: str, index: int) -> dict:
    """One fresh process of ``config``; its model and autocast by ``index``."""
    args, _ = CONFIGS[config]
    args = args + ["--model", MODELS[index % len(MODELS)], "--seed", str(index)] + (["--amp"] if index % 2 else [])
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, HELPER] + args, capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=600)
    assert run.returncode == 0, f"{config} #{index} {args}: exit {run.returncode}\n{run.stderr[-4000:]}"
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("ok ")][-1]
    return json.loads(line[3:])


def check(config: str, result: dict) -> None:
    _, replays = CONFIGS[config]
    assert result["steps"] >= 300 and result["evaluated"] >= 5 and result["draws"] > 100, result
    if replays:
        assert result["replay_slots"] > 0 and result["captured_hops"] == 0, result
    else:
        assert result["replay_slots"] == 0 and result["captured_hops"] > 0, result


def run_all(jobs) -> None:
    """``(config, index)`` jobs, fresh processes side by side (one per two cores, 6 to 10)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(10, max(6, (os.cpu_count() or 1) // 2))) as pool:
        results = list(pool.map(lambda job: (job[0], run_process(*job)), jobs))
    for config, result in results:
        check(config, result)


def test_training_with_dropout_while_a_thread_draws():
    run_all([(config, index) for index, config in enumerate(sorted(CONFIGS))])  # one process each


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_training_while_a_thread_draws_in_twenty_processes_per_configuration(config):
    run_all([(config, index) for index in range(20)])


class Recorder(torch.nn.Dropout):
    """Dropout that keeps each mask it draws."""

    def __init__(self, p):
        super().__init__(p)
        self.masks = []

    def forward(self, x):
        out = super().forward(x)
        self.masks.append(out != 0)
        return out


def _masks_and_batches(replay: bool, steps: int = 120):
    from torch_geometric.nn import GraphSAGE
    from tritongnn import NeighborLoader
    from tritongnn.datasets import chung_lu
    device = torch.device("cuda")
    data = chung_lu(20_000, 200_000, num_classes=4, num_features=16, seed=3, device="cpu")
    torch.manual_seed(11)
    loader = NeighborLoader(data, [8, 4], batch_size=128, shuffle=True, seed=5, device=device)
    if not replay:
        loader.sampler.cuda_graph = False  # nothing captured: eager batches only
    recorder = Recorder(0.5).to(device)
    model = GraphSAGE(16, 32, 2, 4, dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    batches, step = [], 0
    while step < steps:
        for batch in loader:
            out = model(recorder(batch.x), batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batches.append((batch.n_id.cpu(), batch.edge_index.cpu()))
            step += 1
            if step == steps:
                break
    captured = sum(len(s) for s in loader.replay.slots.values()) + sum(
        c is not None for c in loader.sampler._captured.values())
    return [m.cpu() for m in recorder.masks], batches, torch.cuda.get_rng_state(), captured


def test_dropout_masks_are_those_of_a_loader_that_never_captures():
    masks, batches, state, captured = _masks_and_batches(replay=True)
    eager_masks, eager_batches, eager_state, eager_captured = _masks_and_batches(replay=False)
    assert captured > 0 and eager_captured == 0
    assert len(masks) == len(eager_masks) == 120
    for a, b in zip(masks, eager_masks):
        assert torch.equal(a, b)
    assert torch.equal(state, eager_state)  # the CUDA generator advanced alike (GraphSAGE's own dropout too)
    for (n_id, edges), (eager_n_id, eager_edges) in zip(batches, eager_batches):  # seed=: the same batches
        assert torch.equal(n_id, eager_n_id) and torch.equal(edges, eager_edges)
