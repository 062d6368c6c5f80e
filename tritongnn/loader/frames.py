"""Node and edge attributes that are not tensors, as PyG's ``filter_data``
treats them (``loader/utils.py``, ``data/storage.py`` of PyG 2.8):

- a list or tuple with one entry a node (or an edge) is a node (edge)
  attribute (``is_node_attr``), and ``index_select`` refuses it: PyG's
  loader raises ``ValueError`` at its first batch. Here it is refused when
  the loader is built, by name (copied whole into every batch it would be
  silently wrong). One of any other length is a graph attribute, copied.
- a ``torch_frame.TensorFrame`` with one row a node (else an edge) is
  sliced by ``n_id`` (``e_id``): ``frame[index]``, the index on the frame's
  device. Where torch_frame is not installed PyG copies other objects
  whole; here any table-like object (``num_rows``, indexable by an int64
  tensor of rows) is a frame too, so a TensorFrame's stand-in slices as
  the real one would.

A frame is sliced where it lives and the slice moved to the loader's
device (not the whole frame up front: ``TensorFrame.to`` converts its
dict-valued columns inside the caller's own dicts)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch_geometric.typing import TensorFrame


def is_frame(value) -> bool:
    """A TensorFrame, or an object that answers as one: ``num_rows`` and
    ``__getitem__`` (tensors, arrays, sequences and mappings are not)."""
    if isinstance(value, TensorFrame):
        return True
    if isinstance(value, (torch.Tensor, np.ndarray, list, tuple, str, bytes, Mapping)):
        return False
    return isinstance(getattr(value, "num_rows", None), int) and hasattr(type(value), "__getitem__")


def frame_kind(value, num_nodes: int, num_edges: int) -> bool | None:
    """True for a node frame, False for an edge frame, None for neither
    (copied whole): by its rows, nodes first (PyG's ``is_node_attr``)."""
    rows = value.num_rows if hasattr(value, "num_rows") else len(value)
    return True if rows == num_nodes else (False if rows == num_edges else None)


def check_sequences(data) -> None:
    """``ValueError`` naming the first list or tuple attribute of node or
    edge length: PyG's loader slices no such attribute (it raises)."""
    for key, value in data.items():
        if isinstance(value, (list, tuple)) and (data.is_node_attr(key) or data.is_edge_attr(key)):
            what = "node" if data.is_node_attr(key) else "edge"
            raise ValueError(
                f"data.{key} is a {type(value).__name__} of {len(value)} entries, one a {what}: batches cannot "
                f"slice it by {'n_id' if what == 'node' else 'e_id'} (PyG's loader raises on it at its first "
                f"batch, \"Encountered invalid feature tensor type\"); pass a tensor (a numpy array, a "
                f"TensorFrame), or keep it outside data and index it by batch.{'n_id' if what == 'node' else 'e_id'}")


class FrameRows:
    """A frame as the assembler slices a tensor attribute:
    ``index_select(0, index)`` gives ``frame[index]`` on ``device``."""

    def __init__(self, frame, device: torch.device):
        self.frame, self.device = frame, device
        self.on = getattr(frame, "device", None) or torch.device("cpu")

    def index_select(self, dim: int, index: torch.Tensor):
        part = self.frame[index.to(self.on, torch.int64)]
        return part.to(self.device) if hasattr(part, "to") else part
