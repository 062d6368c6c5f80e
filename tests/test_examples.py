"""The README's first command: the example training run works end to end."""
import os
import subprocess
import sys

import pytest

from tritongnn.examples import train
from tritongnn.kernels._launch import reference_on_cpu


def test_train_example_runs_and_learns(capsys):
    with reference_on_cpu():  # kernels have their own interpreter tests
        results = train.main(["--dataset", "both", "--epochs", "3", "--nodes", "3000",
                              "--device", "cpu"])
    out = capsys.readouterr()
    assert "epoch" in out.out and "seconds" in out.out and "final test accuracy" in out.out
    assert "3/3" in out.err or "batches/s" in out.err  # the progress bar
    assert results["Cora"] > 0.6  # 3 epochs; chance is 0.14 (7 classes)
    assert results["synthetic"] > 0.5  # 16 classes; an MLP on x alone reaches ~0.4


def test_train_example_with_the_cache(capsys):
    with reference_on_cpu():
        results = train.main(["--dataset", "cora", "--epochs", "2", "--device", "cpu", "--placement", "host",
                              "--cache-budget", "1000000", "--dynamic-cache", "--feature-dtype", "float16"])
    out = capsys.readouterr().out
    assert "features stored as float16 (batches' x in torch.float32)" in out
    assert "cache plan" in out and "feature hit rate" in out and "dynamic" in out
    assert "time: sampling" in out
    assert results["Cora"] > 0.5


def test_train_example_under_torchrun_with_gloo(tmp_path):
    # the same script, two processes, no GPU: gloo, DDP, seeds sharded by
    # rank (140 Cora seeds, batch 32: 3 batches per rank), rank 0 prints;
    # placement="host": the two ranks share one host copy, and every rank's
    # host memory is printed at the end
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the reference path on CPU
    # this checkout's package, not whichever one pip installed (cwd is tmp_path)
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "-m", "tritongnn.examples.train", "--dataset", "cora", "--epochs", "3",
                          "--device", "cpu", "--placement", "host"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "data parallel: 2 ranks (gloo), 3 batches per rank per epoch" in out
    assert "one copy per host, shared by 2 ranks" in out
    assert "rank 0: rss" in out and "rank 1: rss" in out and "shared memory (Shmem)" in out
    assert out.count("final test accuracy") == 1
    accuracy = float(out.rsplit("Cora", 1)[1])
    assert accuracy > 0.6


def run_bench(script, args):
    """A benchmark script's smoke test on the CPU (its torch path unless the
    script asks for the interpreter), from the checkout root."""
    root = os.path.join(os.path.dirname(__file__), "..")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = root
    run = subprocess.run([sys.executable, f"bench/{script}", "--device", "cpu", *args], capture_output=True,
                         text=True, timeout=600, cwd=root, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


@pytest.mark.parametrize("script, args", [
    ("bench_cache.py", ["--nodes", "3000", "--edges", "30000", "--budgets-gb", "0.0002", "--sweep-gb", "0.0001",
                        "--epochs", "1", "--profile-epochs", "1", "--reuse"]),
    ("bench_super_batch.py", ["--graphs", "chung_lu", "--ks", "1", "2", "--profile", "5"]),
    ("bench_super_batch.py", ["--graphs", "chung_lu", "--ks", "1", "2", "--sync-above-log2", "30",
                              "--graph-keys-max-log2", "30", "--direct-max-gb", "0", "--cuda-graphs", "on", "off"]),
    ("bench_sampler_kernel.py", ["--d-max", "16", "--foundation-block-nodes", "--cnr2000", "/nonexistent"]),
])
def test_benchmark_scripts_run_on_the_cpu(tmp_path, script, args):
    # the scripts a GPU session runs: a broken one would cost a device call
    out = tmp_path / "record.json"
    run_bench(script, [*args, "--out", str(out)])
    import json
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["rows"], script
    if script == "bench_super_batch.py" and "--profile" in args:  # the top 5 operators and the sum, per batch
        for row in record["rows"]:
            kernels = row["kernels_ms_per_batch"]
            assert 0 < len(kernels["top"]) <= 5 and kernels["total"] >= sum(kernels["top"].values()) > 0
    if script == "bench_sampler_kernel.py":  # each hop's floor (the reads alone), its reads checked
        floors = [r for r in record["rows"] if r["method"] == "floor"]
        assert len(floors) == 3 and all(r["correct"] and r["ms_cold"] > 0 for r in floors)
    if "--cuda-graphs" in args:  # each configuration with and without the sampler's CUDA graphs, labelled
        rows = record["rows"]
        assert {(r["cuda_graph"], r["method"].endswith(" eager")) for r in rows} == {(True, False), (False, True)}
        assert all(r["speedup_vs_k1"] is not None for r in rows)
    if "--direct-max-gb" in args:  # the sampler's limits, as set, in the record's settings
        settings = record["settings"]
        assert (settings["sync_above_log2"], settings["graph_keys_max_log2"], settings["direct_max_gb"]) == (30, 30, 0)


def test_end_to_end_benchmark_runs_on_a_small_graph(tmp_path):
    # the papers100M-scale script, end to end on a tiny graph: every part runs
    # and writes its rows
    out, table = tmp_path / "e2e.json", tmp_path / "e2e.csv"
    stdout = run_bench("bench_end_to_end.py", [
        "--nodes", "3000", "--edges", "20000", "--classes", "8", "--train", "400", "--val", "100", "--test", "100",
        "--batch-size", "64", "--num-neighbors", "4", "3", "--budgets-gb", "0.0001", "0", "--warmup", "1",
        "--batches", "2", "--alone-repeats", "3", "--models", "gcn", "gat", "--acc-steps", "2", "--acc-val", "50",
        "--acc-seeds", "1",
        "--scaling-batch-sizes", "32", "--scaling-fanouts", "3,2", "--scaling-budgets-gb", "0.0001",
        "--profile-steps", "3", "--profile-loaders", "{}", '{"super_batch": 2, "reuse": "group"}', "--profile-alone",
        "--data-dir", str(tmp_path / "data"), "--out", str(out), "--csv", str(table)])
    import json
    record = json.loads(out.read_text().splitlines()[-1])
    parts = {r["part"] for r in record["rows"]}
    # pyg: no torch-sparse here; profile prints a table, no rows
    assert parts == {"ablation", "models", "alone", "accuracy", "scaling", "gather_order", "host"}
    assert stdout.count("Self CPU time total") == 4  # a profile per budget and keyword set
    assert stdout.count("steps of the model alone on 8 prepared batches") == 4  # --profile-alone, after each
    # threads: a timed pass, a profiled one and the model alone per budget (no producer thread on a CPU)
    assert stdout.count("threads [") == 6 and "producer thread 0.00 ms CPU" in stdout
    assert stdout.count("] the model alone on 8 prepared batches: ") == 2
    assert stdout.count("loader keywords {'super_batch': 2, 'reuse': 'group'}") == 2
    host = [r for r in record["rows"] if r["part"] == "host"]
    assert len(host) == 5 * 3  # each setting: two budgets and the model alone
    assert [(r["known_order"], r["pinned_sizes"]) for r in host[::3]] == \
        [(False, False), (True, False), (True, False), (True, True), (False, False)]
    assert all(r["adam"] == "foreach" for r in host)
    order = [r for r in record["rows"] if r["part"] == "gather_order"]
    assert [(r["host_rows_first"], r["resolved_rows"]) for r in order] == \
        [(False, False), (True, False), (True, True)]  # the non-zero budget only
    ablation = [r for r in record["rows"] if r["part"] == "ablation"]
    assert len(ablation) == 2 * 9 + 1 and all(r["epoch_seconds"] > 0 for r in ablation)
    # the line: its last exact step is FULL (group staging of 16), then float16; then the branches
    assert {k: ablation[4]["loader"].get(k) for k in ("super_batch", "reuse")} == {"super_batch": 16, "reuse": "group"}
    assert [r["loader"].get("feature_dtype") for r in ablation[4:6]] == [None, "torch.float16"]
    assert [ablation[6]["loader"].get("dynamic_cache"), ablation[7]["loader"].get("reorder_group"),
            ablation[8]["loader"].get("sample_kernel"), ablation[8]["loader"].get("super_batch")] == \
        [True, 16, "grouped", None]
    assert {r["model"] for r in record["rows"] if r["part"] == "models"} == {"gcn", "gat"}
    accuracy = [r for r in record["rows"] if r["part"] == "accuracy"]
    assert [r["seeds"] for r in accuracy] == [[0]] and "accuracy  tritongnn, seed 0: " in stdout  # as it ends
    assert len(table.read_text().splitlines()) == 1 + len(record["rows"])
    alone = {(r["model"], r["library"], r["matmul_precision"]) for r in record["rows"] if r["part"] == "alone"}
    assert alone == {("sage", "pyg", "high"), ("sage", "tritongnn", "high"), ("gcn", "pyg", "high"),
                     ("gcn", "tritongnn", "high"), ("gat", "pyg", "high"), ("gat", "tritongnn", "high"),
                     ("sage", "tritongnn", "highest")}
    assert all(r["vs_model_alone"] > 0 for r in ablation)  # each against the model with its aggregation
    for row in (r for r in record["rows"] if r["part"] == "alone"):  # the median of three windows
        assert len(row["windows_seconds"]) == 3 and row["epoch_seconds"] == sorted(row["windows_seconds"])[1]
    for row in ablation:  # the split counts the timed batches (and those prefetched ahead), not the warm-up
        assert row["split"]["batches"] >= 2 and all(v >= 0 for v in row["split"].values())
    # Adam foreach (PyTorch's default), fused, foreach again; whole passes timed (--epochs)
    adam = tmp_path / "adam.json"
    run_bench("bench_end_to_end.py", [
        "--nodes", "3000", "--edges", "20000", "--classes", "8", "--train", "400", "--val", "100", "--test", "100",
        "--batch-size", "64", "--num-neighbors", "4", "3", "--budgets-gb", "0", "--warmup", "1", "--epochs", "2",
        "--parts", "host", "--host-adam", "--data-dir", str(tmp_path / "data"), "--out", str(adam)])
    rows = json.loads(adam.read_text().splitlines()[-1])["rows"]
    assert [r["adam"] for r in rows] == ["foreach", "foreach", "fused", "fused", "foreach", "foreach"]
    passes = [r for r in rows if "epochs_timed" in r]  # each pass's batches, every one: 400 seeds by 64
    assert len(passes) == 3 and all(r["epochs_timed"] == 2 and r["batches_per_epoch"] == 7 and
                                    r["split"]["batches"] == r["batches_timed"] == 2 * 7 for r in passes)
    # float32 features, float16 ones, float32 again; hash id maps, direct ones, hash again
    from tritongnn.kernels import id_map
    for flags, key, want in ((["--host-feature-dtype", "float16"], "feature_dtype",
                              ["float32", "float16", "float32"]),
                             (["--host-id-map"], "direct_id_map_max_bytes", [0, id_map.DIRECT_MAX_BYTES, 0]),
                             (["--host-producer-ops", "0", "5"], "producer_calls_added", [0, 5, 0])):
        path = tmp_path / f"{key}.json"
        run_bench("bench_end_to_end.py", [
            "--nodes", "3000", "--edges", "20000", "--classes", "8", "--train", "400", "--val", "100",
            "--test", "100", "--batch-size", "64", "--num-neighbors", "4", "3", "--budgets-gb", "0.0001",
            "--warmup", "1", "--batches", "2", "--parts", "host", *flags, "--data-dir", str(tmp_path / "data"),
            "--out", str(path)])
        rows = json.loads(path.read_text().splitlines()[-1])["rows"]
        assert [r[key] for r in rows[::2]] == want, key
        loaders = [r["loader"].get("feature_dtype") for r in rows if r["library"] == "tritongnn" and "loader" in r]
        if key == "feature_dtype":
            assert loaders == [None, "torch.float16", None]
    # a run cut short: its record from the rows it wrote as measured
    again = tmp_path / "again.json"
    run_bench("bench_end_to_end.py", ["--from-rows", str(out) + ".rows", "--gpu", "test GPU", "--out", str(again),
                                      "--csv", str(tmp_path / "again.csv"), "--note", "cut short"])
    assembled = json.loads(again.read_text())
    assert assembled["gpu"] == "test GPU" and len(assembled["rows"]) == len(record["rows"])
    assert assembled["note"] == "cut short"
    assert [r["epoch_seconds"] for r in assembled["rows"] if r["part"] == "ablation"] == \
        [r["epoch_seconds"] for r in ablation]
    run_bench("bench_end_to_end.py", ["--plot-only", "--csv", str(table), "--ablation-png", str(tmp_path / "a.png"),
                                      "--png", str(tmp_path / "s.png")])
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "s.png").stat().st_size > 0


def _bench_module(name):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("num_neighbors", [[10, 5], [-1, 3, 2], [2]])
def test_hop_counts_derived_from_a_batch_match_the_loaders(num_neighbors):
    # PyG's baseline runs torch-sparse, whose batches carry no per-hop counts:
    # the benchmark derives them from the edges (bench_loader.hop_counts),
    # here against the counts our loader returns for the same batches, and
    # through PyG's own NodeLoader with a sampler that leaves them out
    from torch_geometric.loader import NodeLoader
    from tritongnn import NeighborLoader, PyGSampler
    from tritongnn.datasets import cora
    bench_loader = _bench_module("bench_loader")
    data = cora()
    with reference_on_cpu():
        loader = NeighborLoader(data, num_neighbors, input_nodes=data.train_mask, batch_size=48,
                                shuffle=True, device="cpu", seed=1)
        for batch in loader:
            derived = bench_loader.hop_counts(batch.edge_index[0], batch.edge_index[1], batch.batch_size,
                                              len(num_neighbors))
            assert derived == (list(batch.num_sampled_nodes), list(batch.num_sampled_edges))
            assert sum(derived[0]) == batch.num_nodes

        class NoCounts(PyGSampler):  # torch-sparse's output: node, row, col, edge only
            def sample_from_nodes(self, index, **kwargs):
                out = super().sample_from_nodes(index, **kwargs)
                self.counts.append((out.num_sampled_nodes, out.num_sampled_edges))
                out.num_sampled_nodes = out.num_sampled_edges = None
                return out

        sampler = NoCounts(data, num_neighbors, device="cpu")
        sampler.counts = []
        pyg = NodeLoader(data, sampler, input_nodes=data.train_mask, batch_size=48,
                         transform_sampler_output=bench_loader.with_hop_counts(len(num_neighbors)))
        batches = list(pyg)
    assert [(b.num_sampled_nodes, b.num_sampled_edges) for b in batches] == sampler.counts


def test_hop_counts_refuses_a_batch_out_of_hop_order():
    import torch
    bench_loader = _bench_module("bench_loader")
    row, col = torch.tensor([1, 2, 3, 0]), torch.tensor([0, 1, 2, 0])  # a hop-1 edge after hop 2's
    with pytest.raises(ValueError, match="not in hop order"):
        bench_loader.hop_counts(row, col, 1, 2)
    assert bench_loader.hop_counts(row[:3], col[:3], 1, 3) == ([1, 1, 1, 1], [1, 1, 1])


def test_train_command_exits_zero_and_refuses_bad_options(tmp_path):
    # the README's first command is the console script, which exits with
    # what its function returns: cli() returns None (0), not main's dict
    from tritongnn.examples import train as train_module
    for option in (["--epochs", "0"], ["--batch-size", "0"], ["--hidden", "-1"], ["--nodes", "0"],
                   ["--seed", "-1"]):
        with pytest.raises(SystemExit) as error:
            train_module.main(option)
        assert error.value.code == 2  # argparse's usage error, naming the option
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")  # this checkout's package
    run = subprocess.run([sys.executable, "-c", "import sys; from tritongnn.examples.train import cli; "
                          "sys.argv = ['tritongnn-train', '--dataset', 'cora', '--epochs', '1', '--device', "
                          "'cpu']; sys.exit(cli())"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "final test accuracy: Cora" in run.stdout
    assert "host arrays 15.78 MB" in run.stdout  # Cora's x and graph once, not once per loader


def test_end_to_end_split_counts_a_window_across_epochs():
    # --batches past an epoch: the split sums each epoch's timed part (it
    # subtracted the first epoch's warm-up counts from the second's)
    import types

    import torch
    from test_loader import random_data
    from tritongnn import NeighborLoader
    e2e = _bench_module("bench_end_to_end")
    data = random_data()
    with reference_on_cpu():
        loader = NeighborLoader(data, [3, 2], batch_size=40, input_nodes=data.train_mask, device="cpu",
                                prefetch=0, seed=0)
        per_epoch = len(loader)
        row = e2e.time_epoch(loader, types.SimpleNamespace(warmup=1, batches=2 * per_epoch + 1),
                             torch.device("cpu"))
    assert per_epoch >= 3
    assert row["batches_timed"] == row["split"]["batches"] == 2 * per_epoch + 1


def test_end_to_end_keyword_sets_split_loader_keywords_from_module_constants():
    # --host-loaders / --profile-loaders: a key "module.NAME" sets a
    # tritongnn constant for that set's runs, and is put back after
    e2e = _bench_module("bench_end_to_end")
    from tritongnn.sampling import loader as loader_module
    sets = e2e.keyword_sets(['{}', '{"super_batch": 16, "reuse": "group", "sampling.loader.HALVE_LAST_GROUPS": false}'])
    assert sets == [({}, {}), ({"super_batch": 16, "reuse": "group"}, {"sampling.loader.HALVE_LAST_GROUPS": False})]
    before = loader_module.HALVE_LAST_GROUPS
    restore = e2e.set_constants(sets[1][1])
    try:
        assert loader_module.HALVE_LAST_GROUPS is False
    finally:
        restore()
    assert loader_module.HALVE_LAST_GROUPS is before


def test_trace_streams_idle_split(tmp_path):
    # bench/trace_streams.py --idle: the GPU's idle gaps split by the
    # innermost op each host thread was in; a trace without GPU events too
    import json
    root = os.path.join(os.path.dirname(__file__), "..")
    sys.path.insert(0, os.path.join(root, "bench"))
    try:
        import trace_streams
    finally:
        sys.path.pop(0)
    events = [dict(ph="X", cat="kernel", ts=0, dur=10, name="k1", tid=7),
              dict(ph="X", cat="kernel", ts=20, dur=10, name="k2", tid=7),
              dict(ph="X", cat="cpu_op", ts=5, dur=20, name="aten::mm", tid=1),
              dict(ph="X", cat="cuda_runtime", ts=12, dur=4, name="cudaLaunchKernel", tid=1)]
    idle = trace_streams.idle_by_thread(events, steps=1, resolution=1.0)
    assert idle["idle_ms"] == pytest.approx(0.010) and idle["span_ms"] == pytest.approx(0.030)
    assert dict(idle["threads"]["1"]) == pytest.approx({"aten::mm": 0.006, "cudaLaunchKernel": 0.004})
    assert dict(idle["threads_whole_span"]["1"]) == pytest.approx(
        {"aten::mm": 0.016, "cudaLaunchKernel": 0.004, "(no op)": 0.010})
    for given in (events, events[2:]):  # the second: no GPU events at all
        path = tmp_path / "trace.json"
        path.write_text(json.dumps({"traceEvents": given}))
        run = subprocess.run([sys.executable, "bench/trace_streams.py", str(path), "--steps", "1", "--idle"],
                             capture_output=True, text=True, cwd=root, timeout=60)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "GPU idle" in run.stdout and "each host thread over the whole span" in run.stdout
