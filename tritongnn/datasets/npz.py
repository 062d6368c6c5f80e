"""Load graphs stored as pickle-free ``.npz`` CSR files into PyG ``Data``.

File layout (see ``shared/data/README.md``): ``indptr`` [N + 1] and ``indices``
[E] (int64) hold the CSR adjacency with row = source node and sorted column
ids; labelled sets add ``x`` [N, F], ``y`` [N] (int64, -1 = unlabelled) and
boolean ``train_mask``/``val_mask``/``test_mask`` [N].

The CSR becomes PyG's ``edge_index = [row, col]``, so messages flow from the
CSR row (source) to the column (target), as PyG expects
``edge_index[0] -> edge_index[1]``. Edges are not symmetrised: a directed
graph such as cnr2000 stays directed.
"""

from __future__ import annotations

import os
from importlib import resources

import numpy as np
import torch
from torch_geometric.data import Data

__all__ = ["load_npz", "cora"]

_MASK_KEYS = ("train_mask", "val_mask", "test_mask")


def load_npz(path: str | os.PathLike) -> Data:
    """Load a CSR ``.npz`` graph into a PyG ``Data``, validating it.

    Args:
        path: the ``.npz`` file. Opened with ``allow_pickle=False``.

    Returns:
        ``Data`` with ``edge_index`` [2, E] int64 (``[source, target]``, in
        CSR order), ``num_nodes`` = N and, where the file has them, ``x``
        [N, F] float32 (integer multi-hot features are converted), ``y`` [N]
        int64 and ``train_mask``/``val_mask``/``test_mask`` [N] bool.
        Other keys in the file are ignored.

    Raises:
        ValueError: the file lacks ``indptr`` or ``indices``; ``indptr`` does
            not start at 0, decreases, or does not end at ``len(indices)``;
            a column id is outside [0, N); ``x``, ``y`` or a mask has a row
            count other than N, the wrong number of dimensions, or the wrong
            dtype kind; ``y`` holds a value below -1. The message names the
            file, the key and the offending value.

    Example:
        >>> data = load_npz("shared/data/cnr2000.npz")
        >>> data.edge_index.shape
        torch.Size([2, 3216152])
    """
    name = os.fspath(path)
    try:
        loaded = np.load(path, allow_pickle=False)
    except OSError:
        raise
    except ValueError as error:  # not an .npz/.npy: numpy's message names neither
        raise ValueError(f"{name}: not an .npz archive of arrays ({error})") from error
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError(f"{name}: an .npy array, not an .npz archive with 'indptr' and 'indices'")
    with loaded as arrays:
        # Read every array once: NpzFile decompresses on each key access.
        try:
            stored = {key: arrays[key] for key in arrays.files}
        except ValueError as error:  # e.g. an object array (pickled)
            raise ValueError(f"{name}: a member is not a plain array ({error})") from error
    for key, value in stored.items():
        if not isinstance(value, np.ndarray):
            raise ValueError(f"{name}: {key!r} is not a .npy array ({type(value).__name__})")

    for key in ("indptr", "indices"):
        if key not in stored:
            raise ValueError(f"{name}: missing key {key!r} (found {sorted(stored)})")
    indptr = _integer_vector(name, "indptr", stored["indptr"])
    indices = _integer_vector(name, "indices", stored["indices"])
    num_nodes = indptr.shape[0] - 1
    if num_nodes < 0:
        raise ValueError(f"{name}: 'indptr' is empty; it needs num_nodes + 1 >= 1 entries")
    if indptr[0] != 0:
        raise ValueError(f"{name}: 'indptr' must start at 0, got indptr[0] = {indptr[0]}")
    degrees = np.diff(indptr)  # [N]
    if degrees.size and degrees.min() < 0:
        row = int(np.argmax(degrees < 0))
        raise ValueError(
            f"{name}: 'indptr' must be non-decreasing, got indptr[{row}] = {indptr[row]} "
            f"> indptr[{row + 1}] = {indptr[row + 1]}"
        )
    if indptr[-1] != indices.shape[0]:
        raise ValueError(
            f"{name}: 'indptr' must end at len(indices) = {indices.shape[0]}, "
            f"got indptr[-1] = {indptr[-1]}"
        )
    if indices.size:
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= num_nodes:
            bad = low if low < 0 else high
            raise ValueError(
                f"{name}: 'indices' holds node id {bad}, outside [0, {num_nodes}) "
                f"(num_nodes = len(indptr) - 1)"
            )

    row = torch.repeat_interleave(
        torch.arange(num_nodes, dtype=torch.int64), torch.from_numpy(degrees)
    )  # [E]
    col = torch.from_numpy(indices)  # [E]
    data = Data(edge_index=torch.stack([row, col]), num_nodes=num_nodes)

    if "x" in stored:
        x = stored["x"]
        _check_rows(name, "x", x, num_nodes, ndim=2)
        if x.dtype.kind not in "biuf":
            raise ValueError(f"{name}: 'x' must be numeric, got dtype {x.dtype}")
        data.x = torch.from_numpy(x.astype(np.float32, copy=False))
    if "y" in stored:
        y = stored["y"]
        _check_rows(name, "y", y, num_nodes, ndim=1)
        if y.dtype.kind not in "iu":
            raise ValueError(f"{name}: 'y' must be an integer class id, got dtype {y.dtype}")
        if y.dtype == np.uint64 and y.size and y.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{name}: 'y' holds {y.max()}, beyond int64")
        y = y.astype(np.int64, copy=False)
        if y.size and y.min() < -1:
            raise ValueError(f"{name}: 'y' must be >= -1 (-1 = unlabelled), got {y.min()}")
        data.y = torch.from_numpy(y)
    for key in _MASK_KEYS:
        if key in stored:
            mask = stored[key]
            _check_rows(name, key, mask, num_nodes, ndim=1)
            if mask.dtype != np.bool_:
                raise ValueError(f"{name}: {key!r} must be bool, got dtype {mask.dtype}")
            data[key] = torch.from_numpy(mask)
    return data


def cora() -> Data:
    """Cora citation graph with the standard Planetoid split.

    Read from the copy packaged in ``tritongnn/datasets/data/cora.npz``
    (provenance in the README there) through ``importlib.resources``, so it
    also works from an installed wheel or zip.

    Returns:
        ``Data`` with 2,708 nodes, ``edge_index`` [2, 10556] (symmetric),
        ``x`` [2708, 1433] float32, ``y`` [2708] int64 over 7 classes and
        the 140 / 500 / 1,000 train / val / test masks.

    Example:
        >>> data = cora()
        >>> int(data.train_mask.sum()), int(data.test_mask.sum())
        (140, 1000)
    """
    packaged = resources.files(__package__).joinpath("data", "cora.npz")
    with resources.as_file(packaged) as path:
        return load_npz(path)


def _integer_vector(name: str, key: str, array: np.ndarray) -> np.ndarray:
    """Return ``array`` as a 1-D int64 vector, or raise naming file and key."""
    if array.ndim != 1:
        raise ValueError(f"{name}: {key!r} must be 1-D, got shape {array.shape}")
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name}: {key!r} must hold integers, got dtype {array.dtype}")
    if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: {key!r} holds {array.max()}, beyond int64")
    return array.astype(np.int64, copy=False)


def _check_rows(name: str, key: str, array: np.ndarray, num_nodes: int, ndim: int) -> None:
    """Raise unless ``array`` has ``ndim`` dimensions and ``num_nodes`` rows."""
    if array.ndim != ndim:
        raise ValueError(f"{name}: {key!r} must be {ndim}-D, got shape {array.shape}")
    if array.shape[0] != num_nodes:
        raise ValueError(
            f"{name}: {key!r} has {array.shape[0]} rows, expected num_nodes = {num_nodes}"
        )
