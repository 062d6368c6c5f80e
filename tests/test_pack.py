"""Packing valid prefixes: equal to ``torch.cat`` of the prefixes, element for
element, from any start, never writing outside the packed range or past
``out``; the kernel and the CPU reference alike."""
import contextlib

import pytest
import torch
from hypothesis import given, strategies as st

from tritongnn.kernels import pack, pack_prefixes, reference
from tritongnn.kernels._launch import reference_on_cpu

PATHS = ["kernel", "reference"]
BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
SENTINEL = -7


def backend(path):
    """The kernel (compiled, or interpreted on the CPU) or the pure-torch
    reference (the CPU path without Triton)."""
    return reference_on_cpu() if path == "reference" else contextlib.nullcontext()


def values(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) < 0.5
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g).to(dtype)
        x[::5] = float("nan")  # moved as bits: NaN and -0.0 come out as they went in
        x[1::5] = -0.0
        return x
    return torch.randint(-10**6, 10**6, (n,), generator=g).to(dtype)


def bits(t):
    return t.view(BITS[t.element_size()]).cpu()


def scalar(v, device, zero_d=False):
    return torch.tensor(v if zero_d else [v], dtype=torch.int64, device=device)


def expected(parts, counts, size, start, dtype):
    """What ``out`` (filled with SENTINEL) holds after the pack: the
    positions each part's prefix covers, within ``[0, size)``."""
    want = torch.full((size,), SENTINEL).to(dtype)
    offset = start
    for part, c in zip(parts, counts):
        for i in range(min(max(c, 0), part.numel())):
            if 0 <= offset + i < size:
                want[offset + i] = part[i].cpu()
        offset += c
    return want, offset


def run(path, device, parts, counts, size, start=None, dtype=torch.int64, zero_d=False):
    out = torch.full((size,), SENTINEL, device=device).to(dtype)
    with backend(path):
        end = pack_prefixes(parts, [scalar(c, device, zero_d) for c in counts], out,
                            None if start is None else scalar(start, device, zero_d))
    assert end.shape == (1,) and end.dtype == torch.int64 and end.device == out.device
    want, want_end = expected(parts, counts, size, start or 0, dtype)
    assert torch.equal(bits(out), bits(want))
    assert end.item() == want_end
    return out


@pytest.mark.parametrize("path", PATHS)
@given(bounds=st.lists(st.integers(0, 300), max_size=4), dtype=st.sampled_from(
    [torch.int64, torch.int32, torch.float32, torch.bfloat16, torch.bool]), data=st.data())
def test_pack_matches_cat_of_prefixes(device, monkeypatch, path, bounds, dtype, data):
    # several programs a part too (a small block), a start or none, out large
    # enough or too small (the tail dropped, the end still the full length)
    monkeypatch.setattr(pack, "BLOCK", data.draw(st.sampled_from([16, pack.BLOCK])))
    parts = [values(b, dtype, i).to(device) for i, b in enumerate(bounds)]
    counts = [data.draw(st.integers(0, b)) for b in bounds]
    start = data.draw(st.none() | st.integers(0, 40))
    total = (start or 0) + sum(counts)
    size = data.draw(st.integers(0, total + 20))
    out = run(path, device, parts, counts, size, start, dtype, zero_d=data.draw(st.booleans()))
    packed = torch.cat([p[:c].cpu() for p, c in zip(parts, counts)] + [torch.empty(0, dtype=dtype)])
    lo = start or 0
    assert torch.equal(bits(out[lo:total]), bits(packed[:max(0, size - lo)]))  # torch.cat's, as far as out goes


@pytest.mark.parametrize("path", PATHS)
def test_pack_from_a_start_into_a_view(device, path):
    # out a view into a larger buffer (flat[E:]): its data pointer is used,
    # the buffer before and after it untouched
    flat = torch.full((30,), SENTINEL, dtype=torch.int64, device=device)
    parts = [torch.arange(100, 108, device=device), torch.arange(200, 205, device=device)]
    with backend(path):
        end = pack_prefixes(parts, [scalar(6, device), scalar(3, device)], flat[4:20], scalar(2, device))
    assert end.tolist() == [11]
    want = torch.full((30,), SENTINEL)
    want[6:12] = torch.arange(100, 106)
    want[12:15] = torch.arange(200, 203)
    assert torch.equal(flat.cpu(), want)


@pytest.mark.parametrize("path", PATHS)
def test_pack_overflow_is_cut_at_out(device, monkeypatch, path):
    # more than fits: written up to out's end, nothing past it (the buffer
    # behind the view), and the end says how much there was
    monkeypatch.setattr(pack, "BLOCK", 4)
    flat = torch.full((12,), SENTINEL, dtype=torch.int64, device=device)
    parts = [torch.arange(10, 15, device=device), torch.arange(20, 29, device=device)]
    with backend(path):
        end = pack_prefixes(parts, [scalar(5, device), scalar(9, device)], flat[:10], scalar(3, device))
    assert end.tolist() == [17]
    assert flat.cpu().tolist() == [SENTINEL] * 3 + [10, 11, 12, 13, 14, 20, 21] + [SENTINEL] * 2
    # starting past out: nothing written
    with backend(path):
        end = pack_prefixes(parts, [scalar(5, device), scalar(9, device)], flat[:10], scalar(10, device))
    assert end.tolist() == [24]
    assert flat.cpu().tolist() == [SENTINEL] * 3 + [10, 11, 12, 13, 14, 20, 21] + [SENTINEL] * 2


@pytest.mark.parametrize("path", PATHS)
def test_pack_zero_counts_and_empty_parts(device, path):
    empty = torch.empty(0, dtype=torch.int64, device=device)
    part = torch.arange(5, 10, device=device)
    run(path, device, [empty, part, empty, part], [0, 0, 0, 3], 8, start=1)
    run(path, device, [part, part], [0, 0], 6, start=4)
    run(path, device, [empty], [0], 0)
    run(path, device, [part], [5], 0)  # an empty out: nothing written, the end still 5
    # no parts at all: the end is the start (0 without one)
    out = torch.full((4,), SENTINEL, dtype=torch.int64, device=device)
    with backend(path):
        assert pack_prefixes([], [], out).tolist() == [0]
        assert pack_prefixes([], [], out, scalar(3, device)).tolist() == [3]
        assert pack_prefixes([], [], out, scalar(3, device, zero_d=True)).tolist() == [3]
    assert out.cpu().tolist() == [SENTINEL] * 4


@pytest.mark.parametrize("path", PATHS)
def test_pack_clamps_counts_to_their_part(device, monkeypatch, path):
    # a count past its part (against the contract) copies the part only;
    # the next part starts count positions later (the gap is left as it
    # was), and the end is start + sum(counts). A negative one copies nothing.
    monkeypatch.setattr(pack, "BLOCK", 4)
    parts = [torch.arange(10, 13, device=device), torch.arange(20, 26, device=device)]
    out = run(path, device, parts, [5, 6], 16, start=1)
    assert out.cpu().tolist() == [SENTINEL, 10, 11, 12, SENTINEL, SENTINEL] + list(range(20, 26)) + [SENTINEL] * 4
    out = run(path, device, parts, [-2, 6], 10, start=3)
    assert out.cpu().tolist() == [SENTINEL, 20, 21, 22, 23, 24, 25] + [SENTINEL] * 3


def test_pack_reference_is_the_cpu_path():
    # the function itself on the CPU without Triton is the reference's call
    parts = [torch.arange(4), torch.arange(7, 9)]
    out = torch.zeros(6, dtype=torch.int64)
    end = reference.pack_prefixes(parts, [torch.tensor([3]), torch.tensor(2)], out, torch.tensor([1]))
    assert end.tolist() == [6] and out.tolist() == [0, 0, 1, 2, 7, 8]


def test_pack_bad_arguments(device):
    i64 = torch.arange(4, device=device)
    one = scalar(1, device)
    with pytest.raises(ValueError, match="parts and counts must have one entry per part, got 2 parts and 1"):
        pack_prefixes([i64, i64], [one], i64.clone())
    with pytest.raises(TypeError, match=r"parts\[1\] must be a tensor of out's dtype torch.int64, got torch.int32"):
        pack_prefixes([i64, i64.int()], [one, one], i64.clone())
    with pytest.raises(ValueError, match=r"parts\[0\] must be 1-D and contiguous"):
        pack_prefixes([i64.view(2, 2)], [one], i64.clone())
    with pytest.raises(ValueError, match=r"parts\[0\] must be 1-D and contiguous"):
        pack_prefixes([i64[::2]], [one], i64.clone())
    with pytest.raises(ValueError, match="out must be a 1-D tensor"):
        pack_prefixes([i64], [one], i64.view(2, 2))
    with pytest.raises(ValueError, match="out must be contiguous"):
        pack_prefixes([i64], [one], torch.zeros(8, dtype=torch.int64, device=device)[::2])
    with pytest.raises(TypeError, match=r"counts\[0\] must be an int64 tensor, got torch.int32"):
        pack_prefixes([i64], [one.int()], i64.clone())
    with pytest.raises(TypeError, match=r"counts\[0\] must be an int64 tensor, got int"):
        pack_prefixes([i64], [1], i64.clone())
    with pytest.raises(ValueError, match=r"counts\[0\] must hold one value"):
        pack_prefixes([i64], [i64[:2]], i64.clone())
    with pytest.raises(ValueError, match="start must hold one value"):
        pack_prefixes([i64], [one], i64.clone(), start=i64[:2])
    with pytest.raises(TypeError, match="start must be an int64 tensor"):
        pack_prefixes([i64], [one], i64.clone(), start=one.float())
    with pytest.raises(TypeError, match="parts and counts must be lists"):
        pack_prefixes(i64, [one], i64.clone())
    with pytest.raises(TypeError, match="not supported"):
        pack_prefixes([i64.to(torch.complex128)], [one], i64.to(torch.complex128))
    other = torch.device("meta")  # a device other than out's, on any machine
    with pytest.raises(ValueError, match=r"counts\[0\] lives on meta"):
        pack_prefixes([i64], [one.to(other)], i64.clone())
    with pytest.raises(ValueError, match=r"parts\[0\] lives on meta"):
        pack_prefixes([i64.to(other)], [one], i64.clone())
    with pytest.raises(ValueError, match="start lives on meta"):
        pack_prefixes([i64], [one], i64.clone(), start=one.to(other))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pack_in_a_cuda_graph():
    # no host sync: the call is captured, and each replay packs the counts
    # the device holds then
    parts = [torch.arange(100, 110, device="cuda"), torch.arange(200, 230, device="cuda")]
    counts = [scalar(0, "cuda"), scalar(0, "cuda")]
    start = scalar(0, "cuda")
    out = torch.full((32,), SENTINEL, dtype=torch.int64, device="cuda")
    pack_prefixes(parts, counts, out, start)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        end = pack_prefixes(parts, counts, out, start)
    for s, a, b in ((0, 10, 30), (2, 3, 4), (5, 7, 30)):
        out.fill_(SENTINEL)
        start.fill_(s)
        counts[0].fill_(a)
        counts[1].fill_(b)
        graph.replay()
        want, want_end = expected([p.cpu() for p in parts], [a, b], 32, s, torch.int64)
        assert end.item() == want_end and torch.equal(out.cpu(), want)
