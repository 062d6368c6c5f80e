"""The README's first command: the example training run works end to end."""
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
                              "--cache-budget", "1000000", "--dynamic-cache"])
    out = capsys.readouterr().out
    assert "cache plan" in out and "feature hit rate" in out and "dynamic" in out
    assert "time: sampling" in out
    assert results["Cora"] > 0.5
