"""Packing valid prefixes: equal to ``torch.cat`` of the prefixes, element for
element, from any start, never writing outside the packed range or past
``out``; the kernel and the CPU reference alike."""
import contextlib

import pytest
import torch
from hypothesis import given, strategies as st

from tritongnn.kernels import pack, pack_prefixes, pack_segments, reference
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


def expected_segments(part, ptr, starts, size, dtype, want=None):
    """``out`` (filled with SENTINEL, or ``want`` as it is) after
    ``pack_segments`` of one part, element by element."""
    want = torch.full((size,), SENTINEL).to(dtype) if want is None else want
    for k, start in enumerate(starts):
        for i in range(max(ptr[k], 0), min(ptr[k + 1], part.numel())):
            if 0 <= start + i - ptr[k] < size:
                want[start + i - ptr[k]] = part[i].cpu()
    return want


def run_segments(path, device, part, ptr, starts, size, dtype=torch.int64, second=None):
    """One part, or two (``second``: its part and starts) in one call."""
    out = torch.full((size,), SENTINEL, device=device).to(dtype)
    parts, all_starts = [part], [starts]
    if second is not None:
        parts.append(second[0])
        all_starts.append(second[1])
    with backend(path):
        pack_segments(parts, torch.tensor(ptr, dtype=torch.int64, device=device),
                      [torch.tensor(s, dtype=torch.int64, device=device) for s in all_starts], out)
    want = None
    for p, s in zip(parts, all_starts):
        want = expected_segments(p, ptr, s, size, dtype, want)
    assert torch.equal(bits(out), bits(want))
    return out


@pytest.mark.parametrize("path", PATHS)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=17), dtype=st.sampled_from(
    [torch.int64, torch.int32, torch.float32, torch.bool]), data=st.data())
def test_segments_go_to_their_starts(device, monkeypatch, path, sizes, dtype, data):
    # K segments (empty ones too) from ptr[0] on, any order of starts, a
    # part longer than its segments (a bound), out too small at times:
    # each element at its segment's start plus its offset in the segment
    monkeypatch.setattr(pack, "BLOCK", data.draw(st.sampled_from([8, pack.BLOCK])))
    first = data.draw(st.integers(0, 5))
    ptr = [first]
    for n in sizes:
        ptr.append(ptr[-1] + n)
    part = values(ptr[-1] + data.draw(st.integers(0, 10)), dtype, len(sizes)).to(device)
    order = data.draw(st.permutations(range(len(sizes))))
    starts, at = [0] * len(sizes), data.draw(st.integers(0, 4))
    for k in order:  # the segments' places: disjoint, in any order
        starts[k], at = at, at + sizes[k]
    size = data.draw(st.integers(0, at + 4))
    second = None
    if data.draw(st.booleans()):  # a second part of the same segments (a hop's columns), after the first's
        second = (values(part.numel() + data.draw(st.sampled_from([0, 3])), dtype, 99).to(device),
                  [s + at for s in starts])
        size = data.draw(st.integers(0, 2 * at + 4))
    out = run_segments(path, device, part, ptr, starts, size, dtype, second)
    for k in range(len(sizes)):  # torch's slices, as far as out goes
        got, want = out[starts[k]:starts[k] + sizes[k]].cpu(), part[ptr[k]:ptr[k + 1]].cpu()
        assert torch.equal(bits(got), bits(want[:got.numel()]))


@pytest.mark.parametrize("path", PATHS)
def test_segments_out_of_range_are_skipped(device, path):
    # a segment past the part's end copies what the part holds; starts
    # before 0 or past out skip what falls outside; the positions past
    # ptr[K] are not read
    part = torch.arange(100, 110, device=device)
    out = run_segments(path, device, part, [2, 5, 12, 12], [-1, 6, 3], 9)
    assert out.cpu().tolist() == [103, 104] + [SENTINEL] * 4 + [105, 106, 107]
    run_segments(path, device, part, [0, 0], [0], 3)
    run_segments(path, device, part[:0], [0, 0, 0], [0, 1], 3)


def test_segments_bad_arguments(device):
    i64 = torch.arange(4, device=device)
    ptr, starts = torch.tensor([0, 2, 4], device=device), torch.tensor([2, 0], device=device)
    with pytest.raises(ValueError, match=r"ptr must hold one entry more than starts\[0\]"):
        pack_segments([i64], ptr, [starts[:1].clone()], i64.clone())
    with pytest.raises(ValueError, match="parts and starts must have one entry per part, got 2 parts and 1"):
        pack_segments([i64, i64], ptr, [starts], i64.clone())
    with pytest.raises(TypeError, match="parts and starts must be lists"):
        pack_segments(i64, ptr, starts, i64.clone())
    with pytest.raises(TypeError, match=r"parts\[1\] must be of out's dtype torch.int64, got torch.int32"):
        pack_segments([i64, i64.int()], ptr, [starts, starts], i64.clone())
    with pytest.raises(TypeError, match="ptr must be a 1-D int64 tensor, got torch.int32"):
        pack_segments([i64], ptr.int(), [starts], i64.clone())
    with pytest.raises(TypeError, match=r"starts\[0\] must be a 1-D int64 tensor, got list"):
        pack_segments([i64], ptr, [[2, 0]], i64.clone())
    with pytest.raises(ValueError, match=r"parts\[0\] must be 1-D and contiguous"):
        pack_segments([i64.view(2, 2)], ptr, [starts], i64.clone())
    with pytest.raises(ValueError, match="out must be 1-D and contiguous"):
        pack_segments([i64], ptr, [starts], torch.zeros(8, dtype=torch.int64, device=device)[::2])
    with pytest.raises(TypeError, match="out must be a tensor, got list"):
        pack_segments([i64], ptr, [starts], [0] * 4)
    with pytest.raises(ValueError, match="ptr lives on meta"):
        pack_segments([i64], ptr.to("meta"), [starts], i64.clone())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_segments_in_a_cuda_graph():
    # offsets read on the device: captured once, each replay moves the
    # segments the device's ptr and starts say then
    part = torch.arange(100, 130, device="cuda")
    ptr = torch.tensor([0, 0, 0], device="cuda")
    starts = torch.tensor([0, 0], device="cuda")
    out = torch.full((40,), SENTINEL, dtype=torch.int64, device="cuda")
    pack_segments([part], ptr, [starts], out)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pack_segments([part], ptr, [starts], out)
    for p, s in (([0, 10, 30], [20, 0]), ([3, 3, 9], [5, 30]), ([1, 20, 21], [0, 39])):
        out.fill_(SENTINEL)
        ptr.copy_(torch.tensor(p))
        starts.copy_(torch.tensor(s))
        graph.replay()
        assert torch.equal(out.cpu(), expected_segments(part.cpu(), p, s, 40, torch.int64))
