"""``loader(index)``: the batch of chosen seeds, as PyG's ``NodeLoader.__call__``,
and ``OnePass``: the loader's passes one at a time (a call ends the open one).

PyG's loader samples ``input_data[index]``: ``index`` holds positions into
the loader's seeds (its ``input_nodes``, in their order), not node ids, and
the batch's ``input_id`` are what a pass reports for those seeds (a bool
mask's node ids, else the positions themselves). The batch is built on the
current stream by the pass's own stages (``Schedule.build_one``): sampled,
gathered through the caches and assembled as every other batch, the
``transform`` applied.
"""
from __future__ import annotations

import weakref

import torch

from ..kernels._launch import check_ids_in_range
from .arguments import index_tensor


class OnePass:
    """The loader's open pass, one at a time: two open passes would share
    the sampler's id map and captured graphs, the dynamic cache and group
    staging, and with prefetch their producers run on unordered streams
    (wrong ids, or rows staged by the other pass). ``iter(loader)`` and
    ``loader(index)`` end the open one first: closing its generator stops
    its producer (its ``finally``: drain, join, fence), and its iterator
    ends (``zip(loader, loader)`` yields nothing)."""

    def __init__(self):
        self._open = None  # a weakref to the open pass's generator

    def start(self, epoch):
        """Make the generator ``epoch`` the open pass (not started yet),
        ending the one open before it."""
        self.end()
        self._open = weakref.ref(epoch)
        return epoch

    def end(self) -> None:
        """Stop the open pass, if any."""
        open_pass = self._open() if self._open is not None else None
        if open_pass is not None:
            open_pass.close()
        self._open = None


def check_index(index, num_inputs: int, device: torch.device) -> torch.Tensor:
    """``index`` (a tensor, numpy array, list, tuple or range of positions
    in ``[0, num_inputs)``) as a 1-D int64 tensor on ``device``; a copy
    where it is converted, never the caller's tensor written.

    PyG casts a list with ``torch.tensor(index, dtype=torch.long)`` and
    indexes with whatever it is given; here floats and bools are refused
    (a float list would be truncated to positions, a bool tensor would
    select seeds but report the mask itself as ``input_id``), and so are
    negative positions (PyG's ``input_id`` would hold them as given)."""
    positions = index_tensor(index, "index")
    if positions is None:
        raise TypeError(f"index must be a tensor, numpy array, list, tuple or range of positions into "
                        f"input_nodes, got {type(index).__name__}")
    if positions.dtype == torch.bool or positions.dtype.is_floating_point or positions.dtype.is_complex:
        raise TypeError(f"index must hold integer positions into input_nodes, got dtype {positions.dtype}")
    if positions.dim() != 1:
        raise ValueError(f"index must be 1-D, got shape {tuple(positions.shape)}")
    if positions.numel() == 0:
        raise ValueError("index is empty: a batch needs at least one seed")
    if positions.is_meta:
        raise ValueError("index is a meta tensor: it holds no positions")
    positions = positions.to(device=device, dtype=torch.int64)
    check_ids_in_range(positions, num_inputs, "index", "position")
    return positions


def batch_of(loader, index):
    """The ``Data`` batch of the seeds at positions ``index`` of
    ``loader.input_nodes`` (``NeighborLoader.__call__``)."""
    positions = check_index(index, loader.input_nodes.numel(), loader.device)
    loader.open_pass.end()  # the pass shares the sampler, caches and staging with this batch
    return loader.schedule.build_one(positions)
