"""Seeds sharded across data-parallel ranks: in one process with explicit
ranks, and in two processes under torch.distributed with gloo (CPU)."""
import os

import pytest
import torch
import torch.multiprocessing as mp

from tritongnn import NeighborLoader
from tritongnn.kernels._launch import reference_on_cpu
from tritongnn.loader.shard import SeedShards, resolve_ranks

from test_loader import random_data


def epoch_seeds(loader):
    return torch.cat([b.input_id for b in loader]).tolist()


def shards(data, world_size, epochs=2, **kwargs):
    """Input ids per rank per epoch, one loader per rank as each process would make."""
    args = dict(num_neighbors=[2], batch_size=7, shuffle=True, seed=3, input_nodes=data.train_mask,
                device="cpu")
    args.update(kwargs)
    out = []
    with reference_on_cpu():
        for rank in range(world_size):
            loader = NeighborLoader(data, rank=rank, world_size=world_size, **args)
            out.append([(len(loader), epoch_seeds(loader)) for _ in range(epochs)])
    return out


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_shards_are_disjoint_cover_every_seed_and_change_with_the_epoch(world_size, drop_last):
    data = random_data()
    num_seeds = int(data.train_mask.sum())
    per_rank = shards(data, world_size, drop_last=drop_last)
    for epoch in range(2):
        seeds = [per_rank[r][epoch][1] for r in range(world_size)]
        lengths = {per_rank[r][epoch][0] for r in range(world_size)}
        assert len(lengths) == 1  # the same number of batches on every rank
        flat = [s for rank in seeds for s in rank]
        if drop_last:  # cut to a multiple of world_size, then batches of 7 with the tail dropped
            assert len(set(flat)) == len(flat)
            assert num_seeds - len(set(flat)) < world_size + world_size * 7
        else:  # padded: every seed, a few twice
            assert set(flat) == set(data.train_mask.nonzero().flatten().tolist())  # a mask's: node ids
            assert len(flat) - num_seeds == (-num_seeds) % world_size
    for rank in range(world_size):
        assert per_rank[rank][0][1] != per_rank[rank][1][1]  # reshuffled
    assert shards(data, world_size, drop_last=drop_last) == per_rank  # same seed, same shards


def test_set_epoch_replays_an_epoch():
    data = random_data()
    with reference_on_cpu():
        loader = NeighborLoader(data, [2], batch_size=7, shuffle=True, seed=1, rank=1, world_size=2)
        first = [b.input_id for b in loader]
        loader.set_epoch(0)
        again = [b.input_id for b in loader]
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_seed_shards_pad_beyond_the_list():
    # fewer seeds than ranks: padding wraps around, every rank still gets one
    parts = [SeedShards(2, r, 5, shuffle=False, drop_last=False, seed=0).positions(0).tolist()
             for r in range(5)]
    assert parts == [[0], [1], [0], [1], [0]]
    with pytest.raises(ValueError, match="without seeds"):
        SeedShards(2, 0, 5, shuffle=False, drop_last=True, seed=0)


def test_bad_ranks():
    with pytest.raises(ValueError, match="together"):
        resolve_ranks(0, None)
    with pytest.raises(ValueError, match="rank < world_size"):
        resolve_ranks(2, 2)
    with pytest.raises(TypeError, match="world_size must be an int"):
        resolve_ranks(0, 2.0)
    with pytest.raises(ValueError, match="epoch"):
        NeighborLoader(random_data(), [2], batch_size=4, device="cpu").set_epoch(-1)
    assert resolve_ranks(None, None) == (0, 1)  # no process group


def _worker(rank, world_size, init, out_dir):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    try:
        data = random_data()
        with reference_on_cpu():
            loader = NeighborLoader(data, [2], batch_size=7, shuffle=True, seed=11,
                                    input_nodes=data.train_mask, device="cpu")
            assert (loader.rank, loader.world_size) == (rank, world_size)
            seeds = [epoch_seeds(loader) for _ in range(2)]
        # the ranks agree on the number of batches: a collective over them
        count = torch.tensor([len(loader)])
        dist.all_reduce(count)
        torch.save({"seeds": seeds, "batches": len(loader), "total": int(count)},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_gloo(tmp_path, name, world_size=2):
    out = tmp_path / name
    out.mkdir()
    init = f"file://{tmp_path / (name + '.init')}"
    mp.spawn(_worker, args=(world_size, init, str(out)), nprocs=world_size, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(world_size)]


def test_two_processes_with_gloo(tmp_path):
    # torch.distributed initialised: the loader takes rank and world size
    # from it; shards disjoint, covering every seed, changing with the epoch,
    # identical on a rerun with the same seed
    data = random_data()
    num_seeds = int(data.train_mask.sum())
    first = run_gloo(tmp_path, "a")
    assert first[0]["batches"] == first[1]["batches"] and first[0]["total"] == 2 * first[0]["batches"]
    for epoch in range(2):
        a, b = first[0]["seeds"][epoch], first[1]["seeds"][epoch]
        assert set(a) | set(b) == set(data.train_mask.nonzero().flatten().tolist())  # a mask's: node ids
        assert len(a) + len(b) - num_seeds == num_seeds % 2  # padding only
        assert len(set(a) & set(b)) <= num_seeds % 2
    assert first[0]["seeds"][0] != first[0]["seeds"][1]
    again = run_gloo(tmp_path, "b")
    assert [r["seeds"] for r in again] == [r["seeds"] for r in first]


def _cache_worker(rank, world_size, init, out_dir, profile_paths=None):
    import datetime
    import torch.distributed as dist
    # a rank left waiting in a broadcast fails the test in 2 minutes, not gloo's 30
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=120))
    try:
        data = random_data()
        with reference_on_cpu():
            loader = NeighborLoader(data, [3, 2], batch_size=16, shuffle=True, seed=5,
                                    input_nodes=data.train_mask, device="cpu", placement="host",
                                    cache_budget=40 * data.x.size(1) * 4, profile_epochs=1,
                                    cache_profile=None if profile_paths is None else profile_paths[rank])
        p = loader.cache_profile
        torch.save({"feature": p.feature, "adjacency": p.adjacency, "seconds": p.seconds,
                    "order": loader.cache.plan.order}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("saved", [False, True])
def test_profile_computed_once_and_broadcast(tmp_path, saved):
    # GARDEN profiles on one GPU and broadcasts: every rank plans its caches
    # from rank 0's profile (its counts and its timing), so the caches agree.
    # With a profile path, only rank 0 looks for the file: a rank that found
    # one (saved by rank 0 meanwhile, or a stale one on its own host; here
    # each rank is given its own path, and rank 1's holds another profile)
    # skipped the broadcast, planned from another profile and left rank 0
    # in the broadcast
    out = tmp_path / "cache"
    out.mkdir()
    paths = None
    if saved:
        from tritongnn.cache import AccessProfile
        paths = [str(tmp_path / "rank0.profile"), str(tmp_path / "rank1.profile")]
        n = random_data().num_nodes
        AccessProfile(torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.int64),
                      torch.zeros(n, dtype=torch.int64), 1, 1, 0.0, [3, 2], [1.0, 1.0]).save(paths[1])
    mp.spawn(_cache_worker, args=(2, f"file://{tmp_path / 'cache.init'}", str(out), paths), nprocs=2, join=True)
    if saved:
        assert os.path.exists(paths[0])  # rank 0 profiled and saved
    a, b = (torch.load(out / f"rank{r}.pt") for r in range(2))
    assert torch.equal(a["feature"], b["feature"]) and torch.equal(a["adjacency"], b["adjacency"])
    assert a["seconds"] == b["seconds"] and a["feature"].sum() > 0
    assert torch.equal(a["order"], b["order"])


# --- data-parallel training against one process with the same global batch --

def _train(data, rank, world_size, device, batch_size, steps_out):
    """Two epochs of GraphSAGE on ``data`` (DDP when world_size > 1); the
    mean training loss of each epoch, over every rank's seeds."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from tritongnn.nn import GraphSAGE
    loader = NeighborLoader(data, [5, 5], input_nodes=data.train_mask, batch_size=batch_size, shuffle=True,
                            seed=0, device=device, rank=rank, world_size=world_size)
    torch.manual_seed(0)  # the same initial model on every rank and in the single run
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=int(data.y.max()) + 1).to(device)
    if world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(2):
        total = torch.zeros(2, dtype=torch.float64, device=device)
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item() * batch.batch_size, batch.batch_size], dtype=torch.float64,
                                  device=device)
        if world_size > 1:
            dist.all_reduce(total)
        losses.append(float(total[0] / total[1]))
    steps_out.append(len(loader))
    return losses


def _learnable_data():
    from tritongnn.datasets import chung_lu
    return chung_lu(3000, 30000, num_classes=4, num_features=16, seed=0, device="cpu")


def _ddp_worker(rank, world_size, init, out_dir, device_type):
    import torch.distributed as dist
    if device_type == "cuda":
        os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast off on the lent machines
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo", init_method=init, rank=rank,
                            world_size=world_size)
    try:
        device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
        steps = []
        with reference_on_cpu():
            losses = _train(_learnable_data(), rank, world_size, device, 64, steps)
        torch.save({"losses": losses, "steps": steps[0]}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _ddp_matches_one_process(tmp_path, device_type):
    out = tmp_path / "ddp"
    out.mkdir()
    mp.spawn(_ddp_worker, args=(2, f"file://{tmp_path / 'ddp.init'}", str(out), device_type), nprocs=2,
             join=True)
    ranks = [torch.load(out / f"rank{r}.pt") for r in range(2)]
    steps = []
    with reference_on_cpu():
        single = _train(_learnable_data(), 0, 1, torch.device(device_type, 0) if device_type == "cuda"
                        else torch.device("cpu"), 128, steps)  # the same global batch, one process
    ddp = ranks[0]["losses"]
    assert ranks[1]["losses"] == ddp  # all-reduced: every rank reports the same
    assert ranks[0]["steps"] == steps[0]  # as many optimizer steps per epoch
    assert ddp[1] < 0.8 * ddp[0] and single[1] < 0.8 * single[0]  # both learn
    # same global batch, same steps, same initial model: the same loss up to
    # sampling noise (different neighbours and shards)
    assert abs(ddp[1] - single[1]) < 0.15 * single[1], (ddp, single)


def test_ddp_with_gloo_matches_one_process(tmp_path):
    # DistributedDataParallel over two CPU processes trains like one process
    # with their global batch: the loop users write, the example's
    _ddp_matches_one_process(tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (nvidia-h200-x2)")
def test_ddp_on_two_gpus_matches_one_gpu():
    # NCCL on two GPUs against one GPU with the same global batch
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        _ddp_matches_one_process(Path(tmp), "cuda")
