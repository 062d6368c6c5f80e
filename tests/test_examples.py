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
    # Cora's x once (15.52 MB), not once per loader; each graph with its e_id map
    assert "host arrays 15.95 MB" in run.stdout


# ---------------------------------------------------------------- bench/
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")
MODULES = ["common.py", "link.py"]  # imported by the scripts, not run
SCRIPTS = sorted(f for f in os.listdir(BENCH) if f.endswith(".py") and f not in MODULES)


def run_bench(script, args, device="cpu"):
    """A benchmark script's smoke test on the CPU, from the checkout root
    (its kernels on the torch path unless the script asks for the interpreter)."""
    root = os.path.join(BENCH, "..")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = root
    run = subprocess.run([sys.executable, f"bench/{script}", *(["--device", device] if device else []), *args],
                         capture_output=True, text=True, timeout=600, cwd=root, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def last_record(path):
    import json
    return json.loads(path.read_text().splitlines()[-1])


def _bench_module(name):
    sys.path.insert(0, BENCH)
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_script_parses_its_arguments(script):
    # a script a GPU session runs and that fails on import or in argparse costs a device call
    out = run_bench(script, ["--help"], device=None)
    assert "usage:" in out and ("--out" in out or script == "plots.py")  # every benchmark appends a record


def test_benchmark_scripts_import_no_private_tritongnn_name():
    # public arguments only: no module switch set, no private helper called
    import re
    for script in SCRIPTS + MODULES:
        text = open(os.path.join(BENCH, script)).read()
        assert not re.search(r"from tritongnn[\w.]* import [^\n]*\b_\w", text), script
        assert not re.search(r"tritongnn[\w.]*\._\w", text), script
        assert "set_constants" not in text and "import_module" not in text, script
        assert not re.search(r"\b\w+_module\.[A-Z_]{3,}\s*=", text), script


@pytest.mark.parametrize("script, args", [
    ("cache.py", ["--nodes", "3000", "--edges", "30000", "--budgets-gb", "0.0002", "--sweep-gb", "0.0001",
                  "--epochs", "1", "--profile-epochs", "1", "--reuse"]),
    ("sampler.py", ["--d-max", "16", "--ks", "1", "2", "--methods", "foundation", "--cuda-graphs", "on", "off",
                    "--profile", "5", "--cnr2000", "/nonexistent"]),
    ("gather.py", []),
    ("loader.py", ["--scale", "10", "--edges", "2**13", "--batch-size", "64", "--batches", "3",
                   "--train-batches", "3"]),
    ("aggregate.py", ["--nodes", "3000", "--edges", "30000", "--batch-size", "64", "--batches", "2",
                      "--widths", "16"]),
])
def test_benchmark_scripts_run_on_the_cpu(tmp_path, script, args):
    out = tmp_path / "record.json"
    stdout = run_bench(script, [*args, "--out", str(out)])
    record = last_record(out)
    assert record["rows"], script
    assert stdout.startswith("{") or "\n{" in stdout  # the settings line, first
    if script == "sampler.py":
        hops = [r for r in record["rows"] if r["scenario"] == "hop"]
        floors = [r for r in hops if r["method"] == "floor"]  # each hop's reads alone, checked
        assert len(floors) == 3 and all(r["correct"] and r["ms_cold"] > 0 for r in floors)
        assert {r["method"] for r in hops} == {"foundation", "grouped", "grouped_split", "fused", "floor"}
        assert all(r["correct"] for r in hops)
        batches = [r for r in record["rows"] if r["scenario"] == "super_batch"]
        assert [(r["K"], r["cuda_graph"]) for r in batches] == [(1, True), (2, True), (1, False), (2, False)]
        assert all(r["correct"] and r["speedup_vs_k1"] > 0 for r in batches)
        for row in batches:  # the top 5 operators and their sum, per batch
            kernels = row["kernels_ms_per_batch"]
            assert 0 < len(kernels["top"]) <= 5 and kernels["total"] >= sum(kernels["top"].values()) > 0
    if script == "gather.py":
        assert {r["scenario"] for r in record["rows"]} == {"random", "bounded"}
        assert all(r["correct"] for r in record["rows"]) and record["ratios"]
    if script == "loader.py":
        assert [r["kind"] for r in record["rows"]] == ["a", "b", "c"]
        assert any(k.startswith("(c)/(b)") for k in record["ratios"])
    if script == "aggregate.py":
        assert all(r["correct"] and r["speedup"] > 0 for r in record["rows"])


def test_loader_benchmark_link_rows(tmp_path):
    # --link: our link rows per mode (one placement on a CPU), then PyG's or
    # the reason they are skipped, each row with its sampled edges per batch
    import torch_geometric.typing as pyg_typing
    out = tmp_path / "record.json"
    stdout = run_bench("loader.py", ["--scale", "10", "--edges", "2**13", "--batch-size", "64", "--batches", "3",
                                     "--train-batches", "2", "--link", "--link-edges", "300", "--workers", "0",
                                     "--out", str(out)])
    record = last_record(out)
    assert record["settings"]["link_modes"] == ["binary", "triplet"] and record["settings"]["link_edges"] == 300
    rows = [r for r in record["rows"] if r["kind"] == "l"]
    ours = [r["name"] for r in rows if r["name"].startswith("tritongnn")]
    assert ours == ["tritongnn link [device, binary]", "tritongnn link [device, triplet]"]
    assert all(r["value"] > 0 and r["edges_per_batch"] > 0 for r in rows)
    if pyg_typing.WITH_TORCH_SPARSE or pyg_typing.WITH_PYG_LIB:
        assert [r["name"] for r in rows if r["name"].startswith("PyG")] == \
            ["PyG link binary workers=0", "PyG link triplet workers=0"]
        assert sum(k.startswith("(l)") for k in record["ratios"]) == 2
    else:
        assert "PyG's link rows skipped" in stdout and len(rows) == 2


def test_link_benchmark_pyg_rows_and_ratios(monkeypatch):
    # PyG's link rows without torch-sparse: PyG's LinkNeighborLoader as the
    # benchmark builds it, over our PyGSampler in place of PyG's sampler
    import argparse
    import torch
    import torch_geometric.sampler
    from tritongnn import PyGSampler
    from tritongnn.datasets import rmat
    link = _bench_module("link")
    monkeypatch.setattr(torch_geometric.sampler, "NeighborSampler",
                        lambda data, num_neighbors, is_sorted: PyGSampler(data, num_neighbors, device="cpu"))
    data = rmat(8, 2000, num_classes=4, num_features=8, device="cpu", seed=0)
    args = argparse.Namespace(num_neighbors=[3, 2], batch_size=32, batches=2, pyg_batches=20, workers=[0],
                              placements=["device"], link_modes=["binary", "triplet"], link_edges=5000,
                              skip_pyg=False)
    rows = []
    with reference_on_cpu():
        link.bench_link(data, data, args, torch.device("cpu"), rows.append)
    assert [r["name"] for r in rows] == ["tritongnn link [device, binary]", "tritongnn link [device, triplet]",
                                         "PyG link binary workers=0", "PyG link triplet workers=0"]
    assert all(r["value"] > 0 and r["edges_per_batch"] > 0 for r in rows)
    # every edge supervised (fewer than asked), endpoints and negatives sampled around: more edges than 32
    assert all(r["edges_per_batch"] > 32 for r in rows)
    ratios = link.link_ratios(rows)
    assert sorted(ratios) == ["(l) tritongnn link [device, binary] / PyG best (link binary workers=0)",
                              "(l) tritongnn link [device, triplet] / PyG best (link triplet workers=0)"]
    assert ratios[sorted(ratios)[0]] == rows[0]["value"] / rows[2]["value"]


SMALL_GRAPH = ["--nodes", "3000", "--edges", "20000", "--classes", "8", "--train", "400", "--val", "100",
               "--test", "100", "--batch-size", "64", "--num-neighbors", "4", "3"]


def test_end_to_end_scenarios_on_a_small_graph(tmp_path):
    out, table = tmp_path / "e2e.json", tmp_path / "e2e.csv"
    stdout = run_bench("end_to_end.py", [
        "--scenario", "alone", "headline", "ablation", "models", "scaling",
        *SMALL_GRAPH, "--budgets-gb", "0.0001", "0", "--warmup", "1", "--batches", "2",
        "--alone-repeats", "3", "--loaders", "{}", '{"super_batch": 2, "reuse": "group"}',
        "--scaling-batch-sizes", "32", "--scaling-fanouts", "3,2", "--scaling-budgets-gb", "0.0001",
        "--data-dir", str(tmp_path / "data"), "--out", str(out), "--csv", str(table)])
    record = last_record(out)
    rows = record["rows"]
    by = {s: [r for r in rows if r["scenario"] == s] for s in ("alone", "headline", "ablation", "models", "scaling")}
    assert all(by.values()), {s: len(v) for s, v in by.items()}
    # headline: each budget with each keyword set, through the loader's public arguments
    assert [(r["loader"].get("super_batch"), r["loader"].get("reuse")) for r in by["headline"]] == \
        [(None, None), (2, "group")] * 2
    assert all(r["loader"]["placement"] == "host" and r["loader"]["cache_budget"] > 0 for r in by["headline"])
    assert len(by["ablation"]) == 2 * 9 + 1 and all(r["epoch_seconds"] > 0 for r in by["ablation"])
    assert all(r["vs_model_alone"] > 0 for r in by["ablation"] + by["headline"] + by["models"])
    assert {r["model"] for r in by["models"]} == {"gcn", "gat"}
    # the model alone: the median of three windows, each model with both layers
    windows = [r for r in by["alone"] if "windows_seconds" in r]
    assert {(r["model"], r["library"]) for r in windows} == {(m, lib) for m in ("sage", "gcn", "gat")
                                                             for lib in ("pyg", "tritongnn")}
    assert all(r["epoch_seconds"] == sorted(r["windows_seconds"])[1] for r in windows)
    assert [r["axis"] for r in by["scaling"]] == ["batch_size", "fanouts", "budget_gb", "width"]
    for row in by["ablation"]:  # the split counts the timed batches, not the warm-up
        assert row["split"]["batches"] >= 2 and all(v >= 0 for v in row["split"].values())
    assert len(table.read_text().splitlines()) == 1 + len(rows)
    assert "vs PyG best" in stdout
    # the README's figures from the CSV
    run_bench("plots.py", ["end_to_end", str(table), "--ablation-png", str(tmp_path / "a.png"),
                           "--scaling-png", str(tmp_path / "s.png")], device=None)
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "s.png").stat().st_size > 0
    # whole passes (--epochs): every batch of each pass counted, 400 seeds by 64
    passes = tmp_path / "passes.json"
    run_bench("end_to_end.py", ["--scenario", "headline", *SMALL_GRAPH, "--budgets-gb", "0", "--loaders", "{}",
                                "--warmup", "1", "--epochs", "2", "--data-dir", str(tmp_path / "data"),
                                "--out", str(passes)])
    [row] = last_record(passes)["rows"]
    assert row["epochs_timed"] == 2 and row["batches_per_epoch"] == 7 and \
        row["split"]["batches"] == row["batches_timed"] == 2 * 7


def test_end_to_end_ablation_line_and_branches():
    e2e = _bench_module("end_to_end")
    configs = e2e.ablation_configs(24, all_bytes=10**11)
    names = [name for name, _, _ in configs]
    assert len(configs) == 9 and all(name.endswith("[24 GB]") for name in names)
    kwargs = [k for _, k, _ in configs]
    # the line: each step keeps the one before; its last exact step is FULL, then float16
    assert all(kwargs[i].items() <= kwargs[i + 1].items() for i in range(4))
    assert kwargs[4] == dict(e2e.FULL, cache_budget=24 * 10**9)
    assert kwargs[5]["feature_dtype"] is __import__("torch").float16
    assert [kwargs[6].get("dynamic_cache"), kwargs[7].get("reorder_group"), kwargs[8].get("sample_kernel"),
            kwargs[8].get("super_batch")] == [True, 16, "grouped", None]
    assert e2e.ablation_configs(0, all_bytes=10**11)[1][1]["cache_budget"] == int(1.25 * 10**11)  # holds all


def test_end_to_end_loader_sets_take_only_neighbor_loader_arguments():
    e2e = _bench_module("end_to_end")
    assert e2e.loader_sets(["{}", '{"super_batch": 16, "reuse": "group"}']) == \
        [{}, {"super_batch": 16, "reuse": "group"}]
    for bad in ('{"sampling.loader.HALVE_LAST_GROUPS": false}', '{"superbatch": 16}', "[1]"):
        with pytest.raises(ValueError):
            e2e.loader_sets([bad])
    with pytest.raises(SystemExit):  # argparse's usage error
        e2e.parse_args(["--loaders", '{"kernels.gather.UVA_SMS_PER_PROGRAM": 2}'])


def test_end_to_end_memory_caps_run_the_papers100m_script_once_per_cap():
    e2e = _bench_module("end_to_end")
    args = e2e.parse_args(["--scenario", "memory_caps", "--caps-gb", "24", "0", "--caps-out", "caps.json"])
    commands = e2e.memory_cap_commands(args)
    assert [c[1].endswith("bench_papers100m.py") for c in commands] == [True, True]
    assert [c[c.index("--cap-gb") + 1] for c in commands] == ["24", "0"]
    assert all(c[c.index("--out") + 1] == "caps.json" and c[c.index("--fanouts") + 1:][:3] == ["15", "10", "5"]
               for c in commands)


def test_cache_benchmark_figure(tmp_path):
    out, table = tmp_path / "cache.json", tmp_path / "cache.csv"
    run_bench("cache.py", ["--nodes", "3000", "--edges", "30000", "--budgets-gb", "0.0002", "--sweep-gb", "0.0001",
                           "--epochs", "1", "--profile-epochs", "1", "--out", str(out), "--csv", str(table)])
    run_bench("plots.py", ["cache", str(table), str(tmp_path / "c.png")], device=None)
    assert (tmp_path / "c.png").stat().st_size > 0


@pytest.mark.parametrize("num_neighbors", [[10, 5], [-1, 3, 2], [2]])
def test_hop_counts_derived_from_a_batch_match_the_loaders(num_neighbors):
    # PyG's baseline runs torch-sparse, whose batches carry no per-hop counts:
    # the benchmarks derive them from the edges (common.hop_counts), here
    # against the counts our loader returns for the same batches, and
    # through PyG's own NodeLoader with a sampler that leaves them out
    from torch_geometric.loader import NodeLoader
    from tritongnn import NeighborLoader, PyGSampler
    from tritongnn.datasets import cora
    common = _bench_module("common")
    data = cora()
    with reference_on_cpu():
        loader = NeighborLoader(data, num_neighbors, input_nodes=data.train_mask, batch_size=48,
                                shuffle=True, device="cpu", seed=1)
        for batch in loader:
            derived = common.hop_counts(batch.edge_index[0], batch.edge_index[1], batch.batch_size,
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
                         transform_sampler_output=common.with_hop_counts(len(num_neighbors)))
        batches = list(pyg)
    assert [(b.num_sampled_nodes, b.num_sampled_edges) for b in batches] == sampler.counts


def test_hop_counts_refuses_a_batch_out_of_hop_order():
    import torch
    common = _bench_module("common")
    row, col = torch.tensor([1, 2, 3, 0]), torch.tensor([0, 1, 2, 0])  # a hop-1 edge after hop 2's
    with pytest.raises(ValueError, match="not in hop order"):
        common.hop_counts(row, col, 1, 2)
    assert common.hop_counts(row[:3], col[:3], 1, 3) == ([1, 1, 1, 1], [1, 1, 1])


def test_time_epoch_counts_a_window_across_epochs():
    # a window of batches past an epoch: the split sums each epoch's timed part
    import torch
    from test_loader import random_data
    from tritongnn import NeighborLoader
    common = _bench_module("common")
    data = random_data()
    with reference_on_cpu():
        loader = NeighborLoader(data, [3, 2], batch_size=40, input_nodes=data.train_mask, device="cpu",
                                prefetch=0, seed=0)
        per_epoch = len(loader)
        row = common.time_epoch(loader, 1, 2 * per_epoch + 1, torch.device("cpu"))
    assert per_epoch >= 3
    assert row["batches_timed"] == row["split"]["batches"] == 2 * per_epoch + 1
