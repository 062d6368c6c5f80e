"""Column sums (``kernels.reduce``) against torch, and the bias gradient of
``tritongnn.nn.functional.linear`` / ``add_bias`` against torch's own."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, strategies as st

from tritongnn.kernels import reference
from tritongnn.kernels.reduce import column_sum
from tritongnn.nn import functional


@given(st.integers(0, 200), st.integers(1, 140), st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       st.booleans(), st.integers(0, 2**31 - 1))
def test_column_sum_matches_torch(num_rows, width, dtype, strided, seed):
    # rows past a program's run and a tile's end, columns past a block's
    # end, a row stride wider than the row (a slice of columns)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_rows, width + 3 * strided, generator=g).to(dtype)[:, :width]
    out = column_sum(x)
    assert out.dtype == torch.float32 and out.shape == (width,)
    torch.testing.assert_close(out, x.float().sum(0), atol=1e-4 * max(1, num_rows) ** 0.5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: run with -m gpu on the GPU machine")
def test_column_sum_on_the_gpu():
    device = "cuda"
    x = torch.randn(100_003, 128, device=device)
    torch.testing.assert_close(column_sum(x), x.sum(0), atol=1e-2, rtol=1e-5)
    x = torch.randn(70_000, 172, device=device, dtype=torch.bfloat16)  # two column blocks
    torch.testing.assert_close(column_sum(x), x.float().sum(0), atol=1e-2, rtol=1e-5)
    transposed = torch.randn(172, 5000, device=device).t()  # column stride 172: made contiguous
    torch.testing.assert_close(column_sum(transposed), transposed.sum(0), atol=1e-3, rtol=1e-5)


def test_column_sum_errors_and_float64():
    with pytest.raises(ValueError, match="x must be 2-D"):
        column_sum(torch.zeros(3))
    with pytest.raises(TypeError, match="floating-point"):
        column_sum(torch.zeros(3, 2, dtype=torch.int64))
    x = torch.randn(10, 3, dtype=torch.float64)
    assert column_sum(x).dtype == torch.float64 and torch.equal(column_sum(x), reference.column_sum(x))


def grads(fn, leaves, grad_out):
    for t in leaves:
        t.grad = None
    out = fn()
    out.backward(grad_out)
    return [out.detach()] + [None if t.grad is None else t.grad.clone() for t in leaves]


@pytest.mark.parametrize("x_grad, weight_grad", [(True, True), (False, True), (True, False)])
def test_linear_and_add_bias_match_torch(device, x_grad, weight_grad):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(301, 24, generator=g).to(device).requires_grad_(x_grad)
    weight = torch.randn(40, 24, generator=g).to(device).requires_grad_(weight_grad)
    bias = torch.randn(40, generator=g).to(device).requires_grad_()
    grad_out = torch.randn(301, 40, generator=g).to(device)
    leaves = [x, weight, bias]
    ours = grads(lambda: functional.linear(x, weight, bias), leaves, grad_out)
    assert functional.linear(x, weight, bias).grad_fn.name().endswith("_LinearBackward")
    theirs = grads(lambda: F.linear(x, weight, bias), leaves, grad_out)
    for a, b in zip(ours, theirs):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    x3 = torch.randn(5, 7, 40, generator=g).to(device).requires_grad_()  # bias over the last dimension
    grad3 = torch.randn(5, 7, 40, generator=g).to(device)
    assert functional.add_bias(x3, bias).grad_fn.name().endswith("_AddBiasBackward")
    ours = grads(lambda: functional.add_bias(x3, bias), [x3, bias], grad3)
    theirs = grads(lambda: x3 + bias, [x3, bias], grad3)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_torchs_path_where_the_column_sum_does_not_apply():
    x, weight = torch.randn(6, 4), torch.randn(3, 4)
    bias = torch.randn(3, requires_grad=True)
    assert functional.add_bias(x, None) is x
    assert functional.linear(x, weight, None).grad_fn is None
    with torch.no_grad():
        assert functional.linear(x, weight, bias).grad_fn is None
    assert functional.linear(x, weight, bias.detach()).grad_fn is None  # no gradient wanted
    assert functional.linear(x[None], weight, bias).grad_fn.name() != "_LinearBackward"  # 3-D x: torch's
    y = torch.randn(6, 3)
    assert functional.add_bias(y.double(), bias.double()).grad_fn.name() != "_AddBiasBackward"
    with pytest.raises(RuntimeError):  # torch's own error for a bias of the wrong size
        functional.add_bias(y, torch.randn(4, requires_grad=True))


@pytest.mark.parametrize("duals", [(True, True, True), (True, False, False), (False, True, False),
                                   (False, False, True)])
def test_forward_mode_ad_matches_torch(duals):
    # a layer used under torch.autograd.forward_ad: each Function's jvp
    import torch.autograd.forward_ad as fwAD
    g = torch.Generator().manual_seed(0)
    x, weight, y = torch.randn(6, 4, generator=g), torch.randn(3, 4, generator=g), torch.randn(6, 3, generator=g)
    bias = torch.randn(3, generator=g, requires_grad=True)
    tangents = [torch.randn(t.shape, generator=g) for t in (x, weight, bias, y)]
    with fwAD.dual_level():
        x_d, weight_d, bias_d, y_d = [fwAD.make_dual(t, tangent) if dual else t for t, tangent, dual
                                      in zip((x, weight, bias, y), tangents, duals + duals[:1])]
        ours = functional.linear(x_d, weight_d, bias_d)
        assert ours.grad_fn.name().endswith("_LinearBackward")
        torch.testing.assert_close(fwAD.unpack_dual(ours).tangent,
                                   fwAD.unpack_dual(F.linear(x_d, weight_d, bias_d)).tangent)
        ours = fwAD.unpack_dual(functional.add_bias(y_d, bias_d)).tangent
        theirs = fwAD.unpack_dual(y_d + bias_d).tangent
        assert (ours is None) == (theirs is None)
        if ours is not None:
            torch.testing.assert_close(ours, theirs)
