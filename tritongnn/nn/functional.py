"""A layer's bias, added as torch adds it, with its gradient summed by one
Triton pass (``kernels.reduce.column_sum``).

torch's backward of ``linear`` / ``x + bias`` sums the output gradient over
the rows with its own reduction, which is slow for a tall, narrow gradient
(``kernels.reduce``'s docstring): 0.40 ms of a 3.6 ms GraphSAGE step on an
H200. ``linear`` and ``add_bias`` compute the same forward and the same
gradients otherwise (the matmuls are torch's).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.reduce import column_sum


def _bias_grad(grad: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``grad`` summed to ``bias``'s shape (its last dimension)."""
    return column_sum(grad.reshape(-1, grad.size(-1))).to(bias.dtype)


def _sum_tangents(*terms):
    """The sum of the terms that are not None (forward-mode AD's tangent of
    a sum); None if all are."""
    terms = [t for t in terms if t is not None]
    return sum(terms[1:], terms[0]) if terms else None


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight, bias)
        ctx.save_for_forward(x, weight)
        return F.linear(x, weight, bias)

    @staticmethod
    def jvp(ctx, x_t, weight_t, bias_t):
        x, weight = ctx.saved_tensors[:2]
        return _sum_tangents(None if x_t is None else F.linear(x_t, weight),
                             None if weight_t is None else F.linear(x, weight_t), bias_t)

    @staticmethod
    def backward(ctx, grad):
        x, weight, bias = ctx.saved_tensors
        grad_x = grad.mm(weight) if ctx.needs_input_grad[0] else None
        grad_weight = grad.t().mm(x) if ctx.needs_input_grad[1] else None
        grad_bias = _bias_grad(grad, bias) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


class _AddBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(bias)
        return x + bias

    @staticmethod
    def backward(ctx, grad):
        bias, = ctx.saved_tensors
        grad_bias = _bias_grad(grad, bias) if ctx.needs_input_grad[1] else None
        return (grad if ctx.needs_input_grad[0] else None), grad_bias

    @staticmethod
    def jvp(ctx, x_t, bias_t):
        return _sum_tangents(x_t, bias_t)


def _ours(x: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Where the column sum applies: a bias that needs its gradient, in a
    dtype the kernel reads, outside autocast and functorch's transforms
    (torch's own there). On a CPU without the interpreter ``column_sum`` is
    torch's sum; forward-mode AD gets each Function's ``jvp``."""
    return (bias is not None and bias.requires_grad and torch.is_grad_enabled()
            and x.dtype == bias.dtype and x.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and not torch.is_autocast_enabled(x.device.type)
            and not torch._C._functorch.is_functorch_wrapped_tensor(x))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for a 2-D ``x``, its bias gradient by
    ``column_sum``."""
    if x.dim() != 2 or not _ours(x, bias):
        return F.linear(x, weight, bias)
    return _Linear.apply(x, weight, bias)


def add_bias(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x + bias`` (``bias`` over ``x``'s last dimension; ``x`` if None),
    its bias gradient by ``column_sum``."""
    if bias is None:
        return x
    if bias.dim() != 1 or x.dim() < 1 or x.size(-1) != bias.numel() or not _ours(x, bias):
        return x + bias
    return _AddBias.apply(x, bias)
