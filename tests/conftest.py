"""Test set-up: Triton's interpreter on machines without a GPU, hypothesis
profiles, and the devices every kernel test runs on.

``TRITON_INTERPRET`` must be set before any kernel module is imported, so it is
set here, at collection, before the tests import tritongnn.
"""
import collections
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The interpreter runs every kernel op in Python: few, small examples, no
# deadline.
settings.register_profile("interpreter", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])
# The GPU profile explores more; with --slow, more again.
for name, examples in (("gpu", 40), ("gpu-slow", 150)):
    settings.register_profile(name, max_examples=examples, deadline=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("gpu" if torch.cuda.is_available() else "interpreter")

CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")])


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow")


def pytest_configure(config):
    if torch.cuda.is_available() and config.getoption("--slow"):
        settings.load_profile("gpu-slow")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run with ``--slow`` or where ``-m`` names them."""
    if config.getoption("--slow") or "slow" in (config.getoption("-m") or ""):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture(params=["cpu", CUDA])
def device(request):
    """Kernel tests run on the CPU (interpreter in CI) and on the GPU (compiled)."""
    return torch.device(request.param)


class FakeStream:
    """A stand-in for ``torch.cuda.Stream`` on machines without a GPU: a
    handle on a device, equal and hashed by both as torch's streams are, and
    the waits asked of it recorded."""

    def __init__(self, device, handle, name=""):
        self.device, self.cuda_stream, self.name = torch.device(device), handle, name
        self.waited = []

    def __eq__(self, other):
        return isinstance(other, FakeStream) and (self.cuda_stream, self.device) == (other.cuda_stream, other.device)

    def __hash__(self):
        return hash((self.cuda_stream, self.device))

    def wait_event(self, event):
        self.waited.append(event)

    def wait_stream(self, stream):
        self.waited.append(stream)


@pytest.fixture
def stream_pool(monkeypatch):
    """``torch.cuda.Stream`` handing streams out round robin from a pool of
    ``stream_pool.size`` per device, as torch does from 32 (a fresh Python
    object each time), with tritongnn's registries of streams emptied."""
    from tritongnn.kernels import _launch, sample_grouped
    from tritongnn import cuda_graph

    class Pool:
        size = 4

        def __init__(self):
            self.drawn = collections.Counter()

        def __call__(self, device=None, priority=0):
            device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
            n = self.drawn[device.index]
            self.drawn[device.index] += 1
            return FakeStream(device, 1000 * (device.index or 0) + n % self.size)

    pool = Pool()
    monkeypatch.setattr(torch.cuda, "Stream", pool)
    monkeypatch.setattr(_launch, "_reserved", set())
    monkeypatch.setattr(_launch, "_alive", collections.Counter())
    monkeypatch.setattr(sample_grouped, "_side_streams", {})
    monkeypatch.setattr(cuda_graph, "_capture_streams", {})
    return pool
