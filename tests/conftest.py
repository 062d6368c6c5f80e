"""Test set-up: Triton's interpreter on machines without a GPU, hypothesis
profiles, and the devices every kernel test runs on.

``TRITON_INTERPRET`` must be set before any kernel module is imported, so it is
set here, at collection, before the tests import tritongnn.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The interpreter runs every kernel op in Python: few, small examples, no
# deadline. The GPU profile explores more.
settings.register_profile("interpreter", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])
settings.register_profile("gpu", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("gpu" if torch.cuda.is_available() else "interpreter")

CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")])


@pytest.fixture(params=["cpu", CUDA])
def device(request):
    """Kernel tests run on the CPU (interpreter in CI) and on the GPU (compiled)."""
    return torch.device(request.param)
