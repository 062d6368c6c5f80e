"""Feature gather: bit-exact rows for every dtype and width, both tiers."""
import pytest
import torch
from hypothesis import given, strategies as st

from tritongnn.kernels import gather_rows

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def table(num_rows, width, dtype, seed):
    x = torch.randn(num_rows, width, generator=torch.Generator().manual_seed(seed)).to(dtype)
    flat = x.view(-1)
    flat[::7] = -0.0  # a sum-based select would turn these into +0.0
    flat[::11] = float("nan")
    return x


def assert_bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype]))


@given(num_rows=st.integers(1, 200), width=st.sampled_from([1, 3, 127, 128, 257, 1433]),
       dtype=st.sampled_from(DTYPES), num_ids=st.integers(0, 300), data=st.data())
def test_gather_matches_index_select(device, num_rows, width, dtype, num_ids, data):
    x = table(num_rows, width, dtype, num_ids)
    ids = torch.randint(0, num_rows, (num_ids,), generator=torch.Generator().manual_seed(width))
    num_hot = data.draw(st.integers(0, num_rows))
    hot = x[:num_hot].to(device).clone()
    source = x.pin_memory() if device.type == "cuda" and data.draw(st.booleans()) else x.to(device)
    out = torch.full((num_ids, width), 3.0, dtype=dtype, device=device)  # poisoned
    gather_rows(source, ids.to(device), out, hot=hot, num_hot=num_hot)
    assert_bits_equal(out.cpu(), x[ids])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="UVA needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_from_pinned_host_memory(dtype):
    x = table(100_000, 128, dtype, 0).pin_memory()
    ids = torch.randint(0, x.size(0), (50_000,), device="cuda")
    assert_bits_equal(gather_rows(x, ids).cpu(), x[ids.cpu()])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gather_refuses_pageable_host_memory():
    x = torch.randn(10, 4)  # not pinned: a kernel cannot read it
    with pytest.raises(ValueError, match="pinned"):
        gather_rows(x, torch.zeros(3, dtype=torch.int64, device="cuda"))


def test_gather_bad_arguments():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match="2-D"):
        gather_rows(x[0], torch.zeros(1, dtype=torch.int64))
    with pytest.raises(TypeError, match="int64"):
        gather_rows(x, torch.zeros(1, dtype=torch.int32))
    with pytest.raises(ValueError, match="out must be"):
        gather_rows(x, torch.zeros(2, dtype=torch.int64), out=torch.empty(3, 4))


def test_gather_persistent_grid(monkeypatch):
    # On a GPU, rows read through UVA are walked by a grid smaller than the
    # number of row blocks; each program loops. Force that loop here.
    from tritongnn.kernels import gather
    monkeypatch.setattr(gather, "_num_programs", lambda *args: 3)
    x = table(500, 40, torch.float32, 1)
    ids = torch.randint(0, 500, (2000,), generator=torch.Generator().manual_seed(0))
    num_blocks = -(-ids.numel() // gather._launch_settings(160, 4, True)[0])
    assert num_blocks > 3  # several blocks per program
    for num_hot in (0, 200, 500):
        out = torch.zeros(2000, 40)
        gather_rows(x, ids, out, hot=x[:num_hot].clone(), num_hot=num_hot)
        assert_bits_equal(out, x[ids])


def test_gather_bad_num_hot():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match="num_hot"):
        gather_rows(x, torch.zeros(2, dtype=torch.int64), hot=x[:3], num_hot=5)
    with pytest.raises(ValueError, match="num_hot"):
        gather_rows(x, torch.zeros(2, dtype=torch.int64), hot=x, num_hot=11)
