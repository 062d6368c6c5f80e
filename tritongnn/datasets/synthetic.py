"""Synthetic power-law graphs with planted, neighbour-dependent node labels.

Both generators run on ``device`` with torch ops only and draw every random
number from one ``torch.Generator`` on that device, so a ``seed`` gives the
same graph on the same device and torch version (CPU and CUDA graphs differ).
They scale to GPU-sized graphs: edges are produced in chunks of ``_CHUNK``
straight into the preallocated ``edge_index`` [2, E] int64, so besides the
output only a few chunk-sized temporaries are alive at a time. Measured on
an H200 (torch 2.11, default 128 float32 features): ``chung_lu(2**24, 10**8)``
0.08 s, ``chung_lu(2**24, 2**28)`` 0.15 s with a 13.8 GiB peak, of which the
result is 12.2 GiB (x alone 8 GiB); ``rmat(24, 2**28)`` 0.23 s, 13.4 GiB peak;
``rmat(26, 2**30, num_features=16)`` 0.95 s, 26.6 GiB peak.

Both return multigraphs as sampled: an edge may repeat and self-loops occur
(at hubs especially). Call ``torch_geometric.utils.coalesce`` where that
matters. Edge ``(u, v)`` is stored as ``edge_index[:, k] = [u, v]``: PyG
passes the message ``u -> v``.

``chung_lu``: degree-corrected planted partition. Node ``i`` gets weight
``w_i = r_i ** (-1 / (exponent - 1))`` for a random rank ``r_i`` in 1..N, the
Chung-Lu expected-degree sequence of a power law ``P(deg = k) ~ k**-exponent``.
Every edge draws its target ``v ~ w``; with probability ``homophily`` its
source comes from ``v``'s class, ``u ~ w`` restricted to that class, else
``u ~ w`` over all nodes. Both are one ``searchsorted`` in the cumulative
weights of the nodes sorted by class: the class of ``v`` only narrows the
interval the uniform draw is scaled to. Expected in- and out-degree of ``i``
are about ``E * w_i / sum(w)``. The label is the class, and the features are
a noisy class centroid, so neighbours (mostly of the same class) denoise a
node's features: the edge homophily is ``homophily + (1 - homophily) / C``
in expectation.

``rmat``: R-MAT (Chakrabarti et al., 2004) over ``2**scale`` nodes. Each
edge descends ``scale`` levels of the adjacency matrix, picking a quadrant
with probabilities ``a`` (top left), ``b`` (top right), ``c`` (bottom left),
``d`` (bottom right); that sets one bit of the source (row) and one of the
target (column) per level. Node ids are then randomly permuted, because raw
R-MAT degree falls with the number of one-bits in the id and samplers or
caches must not be able to exploit that. Labels are planted so that they
depend on the in-neighbourhood: every node has a latent class ``z`` (uniform)
and features ``x = signal * centroid[z] + noise``; its label is
``y_i = argmax_c (n_ic + 1.5 * [z_i == c])`` where ``n_ic`` counts the edges
``u -> i`` with ``z_u = c`` (repeats and self-loops included). So ``y_i``
is ``z_i`` unless another class is at least 2 more frequent than ``z_i``
among ``i``'s in-neighbours, in which case it is the most frequent one (ties
go to the lowest class id). Nodes without in-edges have ``y = z``; high
in-degree nodes take the plurality class of their in-neighbours, which x
alone cannot reveal. The in-neighbours' latent classes are independent and
uniform, so that plurality is a fragile count over 16 classes: measured on
``rmat(11, 16 * 2048)``, a full-batch 2-layer GraphSAGE does not beat an MLP
by a clear margin (test accuracy 0.16-0.22 vs 0.18-0.20 at ``signal`` 2,
0.63-0.73 vs 0.58-0.61 at ``signal`` 8 with sum aggregation and 400 epochs).
Use ``chung_lu`` where a test needs a GNN to beat an MLP.
"""

from __future__ import annotations

import math

import torch
from torch_geometric.data import Data

from .arguments import (check_float_dtype, check_positive_int, check_probability, check_real, check_seed,
                        check_signal, check_split, resolve_device)

__all__ = ["chung_lu", "rmat", "class_features"]

# Elements per chunk-sized temporary (128 MiB as int64/float64): large enough
# that each op saturates a GPU, small next to a [2, 2**28] edge_index (4 GiB).
# Changing it changes the random stream, hence the graphs a seed gives.
_CHUNK = 1 << 24


def chung_lu(
    num_nodes: int,
    num_edges: int,
    num_classes: int = 16,
    num_features: int = 128,
    homophily: float = 0.8,
    exponent: float = 2.5,
    signal: float = 2.0,
    train_fraction: float = 0.6,
    val_fraction: float = 0.2,
    test_fraction: float = 0.2,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> Data:
    """Degree-corrected planted-partition graph with power-law degrees.

    See the module docstring for the model.

    Args:
        num_nodes: N, number of nodes.
        num_edges: E, number of directed edges drawn.
        num_classes: C, number of planted classes (labels), assigned
            uniformly at random.
        num_features: F, feature width.
        homophily: in [0, 1], probability that an edge's source is drawn
            from its target's class. 0 gives a plain Chung-Lu graph.
        exponent: power-law exponent of the degree distribution, > 1. The
            default 2.5 puts the largest expected degree near 0.5% of E at
            N = 325k, as in the cnr2000 web crawl (18,235 of 3.2M edges),
            and ~70x the mean degree at N = 2.7k; 2.1 concentrates far more
            (~8% of all edges on the top node at N = 2.7k).
        signal: length of the class centroids; the noise is N(0, 1) per
            coordinate, so classes sit ``signal * sqrt(2)`` apart. Measured
            at the default 2.0 on 2,000 nodes, 20,000 edges and a 60/20/20
            split: an MLP on ``x`` alone reaches 0.36-0.41 test accuracy
            (16 classes), a 2-layer GraphSAGE on the directed edges
            0.95-0.98 (``tests/test_datasets.py``); at 1.0 the MLP falls to
            0.11-0.15, near chance.
        train_fraction: fraction of nodes in ``train_mask``.
        val_fraction: fraction of nodes in ``val_mask``.
        test_fraction: fraction of nodes in ``test_mask``; the three must
            sum to at most 1 and are disjoint.
        dtype: floating dtype of ``x``.
        seed: seed of the ``torch.Generator`` all randomness comes from.
        device: where to build the graph; default CUDA if available.

    Returns:
        ``Data`` on ``device`` with ``edge_index`` [2, E] int64 (source,
        target), ``x`` [N, F] ``dtype``, ``y`` [N] int64 in [0, C),
        ``train_mask``/``val_mask``/``test_mask`` [N] bool and
        ``num_nodes`` = N.

    Raises:
        TypeError: a size is not an int or ``dtype`` is not floating.
        ValueError: a size is not positive, ``homophily`` or a fraction is
            outside [0, 1], the fractions sum above 1, or
            ``exponent <= 1``.

    Example:
        >>> data = chung_lu(10_000, 100_000, device="cpu")
        >>> data.edge_index.shape, data.x.shape
        (torch.Size([2, 100000]), torch.Size([10000, 128]))
    """
    for name, value in (
        ("num_nodes", num_nodes),
        ("num_edges", num_edges),
        ("num_classes", num_classes),
        ("num_features", num_features),
    ):
        check_positive_int(name, value)
    check_probability("homophily", homophily)
    check_real("exponent", exponent)
    if not exponent > 1:
        raise ValueError(f"exponent must be > 1, got {exponent}")
    check_signal(signal)
    check_split(train_fraction, val_fraction, test_fraction)
    check_float_dtype(dtype)
    device = resolve_device(device)
    check_seed(seed)
    generator = torch.Generator(device=device).manual_seed(seed)

    y = torch.randint(num_classes, (num_nodes,), generator=generator, device=device)  # [N]
    rank = torch.randperm(num_nodes, generator=generator, device=device) + 1  # [N]
    # float64: the cumulative sum of 2**24+ weights spanning many orders of
    # magnitude must still resolve the lightest node's interval.
    weight = rank.to(torch.float64).pow_(-1.0 / (exponent - 1.0))  # [N]
    del rank

    # Nodes sorted by class; cumulative weights in that order, with a leading
    # 0, so that class c owns positions [start[c], end[c]) and the weight
    # interval [cumulative[start[c]], cumulative[end[c]]).
    order = torch.sort(y, stable=True).indices  # [N] node id at each position
    cumulative = torch.zeros(num_nodes + 1, dtype=torch.float64, device=device)
    torch.cumsum(weight[order], dim=0, out=cumulative[1:])
    del weight
    class_size = torch.bincount(y, minlength=num_classes)  # [C]
    end = torch.cumsum(class_size, dim=0)  # [C]
    start = end - class_size  # [C]
    total = cumulative[-1]  # [] sum of all weights, kept on device
    inner = cumulative[1:]  # [N] searchsorted boundaries

    edge_index = torch.empty(2, num_edges, dtype=torch.int64, device=device)
    for begin in range(0, num_edges, _CHUNK):
        size = min(_CHUNK, num_edges - begin)
        draw = torch.rand(size, generator=generator, dtype=torch.float64, device=device)
        position = torch.searchsorted(inner, draw.mul_(total), right=True)  # [size]
        # A draw rounding up to the total would fall one past the end.
        position.clamp_(max=num_nodes - 1)
        target = order[position]  # [size]
        edge_index[1, begin : begin + size] = target
        target_class = y[target]  # [size]

        same_class = torch.rand(size, generator=generator, device=device) < homophily
        low = torch.where(same_class, start[target_class], 0)  # [size] positions
        high = torch.where(same_class, end[target_class], num_nodes)  # [size]
        draw = torch.rand(size, generator=generator, dtype=torch.float64, device=device)
        # Scale the draw to the weight interval of [low, high).
        draw.mul_(cumulative[high] - cumulative[low]).add_(cumulative[low])
        position = torch.searchsorted(inner, draw, right=True)
        # Rounding at an interval edge may land in the neighbouring class.
        position = torch.maximum(torch.minimum(position, high - 1), low)
        edge_index[0, begin : begin + size] = order[position]

    x = _features(y, num_classes, num_features, signal, dtype, generator)
    masks = _split(num_nodes, train_fraction, val_fraction, test_fraction, generator)
    return Data(x=x, edge_index=edge_index, y=y, **masks, num_nodes=num_nodes)


def rmat(
    scale: int,
    num_edges: int,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    d: float = 0.05,
    num_classes: int = 16,
    num_features: int = 128,
    signal: float = 2.0,
    train_fraction: float = 0.6,
    val_fraction: float = 0.2,
    test_fraction: float = 0.2,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> Data:
    """R-MAT graph over ``2**scale`` nodes with labels set by in-neighbours.

    See the module docstring for the model and the label rule. The default
    ``a, b, c, d`` are Graph500's.

    Args:
        scale: N = 2**scale nodes, 1 <= scale <= 62.
        num_edges: E, number of directed edges drawn (Graph500 uses
            16 * N).
        a: probability of the top-left quadrant (source bit 0, target bit 0).
        b: probability of the top-right quadrant (source 0, target 1).
        c: probability of the bottom-left quadrant (source 1, target 0).
        d: probability of the bottom-right quadrant (source 1, target 1);
            ``a + b + c + d`` must be 1.
        num_classes: C, number of latent classes and labels.
        num_features: F, feature width.
        signal: length of the latent-class centroids; the noise is N(0, 1)
            per coordinate. Same meaning and default as in ``chung_lu``.
        train_fraction: fraction of nodes in ``train_mask``.
        val_fraction: fraction of nodes in ``val_mask``.
        test_fraction: fraction of nodes in ``test_mask``; the three must
            sum to at most 1 and are disjoint.
        dtype: floating dtype of ``x``.
        seed: seed of the ``torch.Generator`` all randomness comes from.
        device: where to build the graph; default CUDA if available.

    Returns:
        ``Data`` on ``device`` with ``edge_index`` [2, E] int64 (source,
        target), ``x`` [N, F] ``dtype``, ``y`` [N] int64 in [0, C),
        ``train_mask``/``val_mask``/``test_mask`` [N] bool and
        ``num_nodes`` = N.

    Raises:
        TypeError: a size is not an int or ``dtype`` is not floating.
        ValueError: a size is not positive, ``scale`` is above 62, a
            probability is outside [0, 1], ``a + b + c + d != 1``, or the
            split fractions are invalid.

    Example:
        >>> data = rmat(16, 16 << 16, device="cpu")
        >>> data.num_nodes, data.edge_index.shape
        (65536, torch.Size([2, 1048576]))
    """
    for name, value in (
        ("scale", scale),
        ("num_edges", num_edges),
        ("num_classes", num_classes),
        ("num_features", num_features),
    ):
        check_positive_int(name, value)
    if scale > 62:
        raise ValueError(f"scale must be <= 62 so that node ids fit int64, got {scale}")
    for name, value in (("a", a), ("b", b), ("c", c), ("d", d)):
        check_probability(name, value)
    if not math.isclose(a + b + c + d, 1.0, abs_tol=1e-6):
        raise ValueError(f"a + b + c + d must be 1, got {a} + {b} + {c} + {d} = {a + b + c + d}")
    check_signal(signal)
    check_split(train_fraction, val_fraction, test_fraction)
    check_float_dtype(dtype)
    device = resolve_device(device)
    check_seed(seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    num_nodes = 1 << scale

    # Quadrant boundaries of the per-level draw r: [0, a) top left,
    # [a, a + b) top right, [a + b, a + b + c) bottom left, rest bottom right.
    # The source bit is r >= a + b; the target bit is 1 in the top-right and
    # bottom-right quadrants, i.e. (r >= a) xor (r >= a + b) xor (r >= a + b + c).
    thresholds = (a, a + b, a + b + c)
    permutation = torch.randperm(num_nodes, generator=generator, device=device)  # [N]
    edge_index = torch.empty(2, num_edges, dtype=torch.int64, device=device)
    for begin in range(0, num_edges, _CHUNK):
        size = min(_CHUNK, num_edges - begin)
        source = torch.zeros(size, dtype=torch.int64, device=device)
        target = torch.zeros(size, dtype=torch.int64, device=device)
        for _ in range(scale):
            draw = torch.rand(size, generator=generator, device=device)  # [size]
            above_a, above_ab, above_abc = (draw >= t for t in thresholds)
            source.mul_(2).add_(above_ab)
            target.mul_(2).add_(above_a ^ above_ab ^ above_abc)
        edge_index[0, begin : begin + size] = permutation[source]
        edge_index[1, begin : begin + size] = permutation[target]
    del permutation

    latent = torch.randint(num_classes, (num_nodes,), generator=generator, device=device)
    y = _in_neighbour_labels(edge_index, latent, num_classes)
    x = _features(latent, num_classes, num_features, signal, dtype, generator)
    masks = _split(num_nodes, train_fraction, val_fraction, test_fraction, generator)
    return Data(x=x, edge_index=edge_index, y=y, **masks, num_nodes=num_nodes)


def _in_neighbour_labels(
    edge_index: torch.Tensor, latent: torch.Tensor, num_classes: int
) -> torch.Tensor:
    """``y_i = argmax_c (n_ic + 1.5 [latent_i == c])``, n_ic = #edges u -> i, latent_u = c.

    Args:
        edge_index: [2, E] int64, (source, target).
        latent: [N] int64 latent class per node.
        num_classes: C.

    Returns:
        [N] int64 labels.
    """
    num_nodes, num_edges = latent.shape[0], edge_index.shape[1]
    # Integer counts keep the scatter deterministic; scores are doubled
    # (2 n + 3 for the own class) to stay integral, and int32 holds 2 E + 3
    # while E < 2**30, which is 8 GiB of edge_index.
    count_dtype = torch.int32 if num_edges < (1 << 30) else torch.int64
    counts = torch.zeros(num_nodes * num_classes, dtype=count_dtype, device=latent.device)
    ones = torch.ones(min(_CHUNK, num_edges), dtype=count_dtype, device=latent.device)
    for begin in range(0, num_edges, _CHUNK):
        source, target = edge_index[:, begin : begin + _CHUNK]
        slot = target * num_classes + latent[source]  # [chunk] flat (node, class)
        counts.index_add_(0, slot, ones[: slot.shape[0]])
    counts = counts.view(num_nodes, num_classes).mul_(2)  # [N, C]
    counts[torch.arange(num_nodes, device=latent.device), latent] += 3
    return counts.argmax(dim=1)


def _features(
    classes: torch.Tensor,
    num_classes: int,
    num_features: int,
    signal: float,
    dtype: torch.dtype,
    generator: torch.Generator,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x = signal * centroid[classes] + N(0, 1)`` noise, built in row chunks.

    Centroids have i.i.d. N(0, 1 / F) entries: near-unit length and nearly
    orthogonal, so classes sit ``signal * sqrt(2)`` apart.

    Args:
        classes: [N] int64 class per node.
        num_classes: C.
        num_features: F.
        signal: centroid length.
        dtype: dtype of the result.
        generator: source of randomness, on ``classes.device``.
        out: [N, F] ``dtype`` tensor to write into, on any device (each
            chunk is made on ``classes.device`` and copied there), or None.

    Returns:
        [N, F] ``dtype`` features (``out`` when given).
    """
    device = classes.device
    num_nodes = classes.shape[0]
    centroid = torch.randn(num_classes, num_features, generator=generator, device=device)
    centroid.mul_(signal / math.sqrt(num_features))  # [C, F]
    x = torch.empty(num_nodes, num_features, dtype=dtype, device=device) if out is None else out
    # Noise is drawn in float32 and cast per chunk, so low-precision dtypes
    # get the same values rounded and no [N, F] float32 copy is ever needed.
    rows = max(1, _CHUNK // num_features)
    for begin in range(0, num_nodes, rows):
        chunk = classes[begin : begin + rows]
        noise = torch.randn(chunk.shape[0], num_features, generator=generator, device=device)
        x[begin : begin + rows] = noise.add_(centroid[chunk]).to(dtype)
    return x


def class_features(
    y: torch.Tensor,
    num_classes: int,
    num_features: int,
    signal: float = 2.0,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Features for labels ``y`` as ``chung_lu`` draws them (a noisy class
    centroid, ``signal`` apart), from their own ``seed``: for a graph whose
    topology is stored and whose feature table is too large to store, or
    is wanted in memory of its own (``out``: e.g. a pinned host tensor that
    a loader then reads without copying).

    Args:
        y: ``[N]`` int64 labels in ``[0, num_classes)``; the features are
            made on its device.
        num_classes: C.
        num_features: F.
        signal: centroid length (see ``chung_lu``).
        dtype: floating dtype of the features.
        seed: seed of the ``torch.Generator`` on ``y``'s device.
        out: ``[N, F]`` ``dtype`` tensor to fill (any device), or None.

    Returns:
        ``[N, F]`` features: ``out``, or a new tensor on ``y``'s device.

    Example:
        >>> from tritongnn.host_memory import pinned_empty
        >>> x = class_features(y.cuda(), 172, 128, out=pinned_empty((len(y), 128), torch.float32, "cuda"))
    """
    check_positive_int("num_classes", num_classes)
    check_positive_int("num_features", num_features)
    check_signal(signal)
    check_float_dtype(dtype)
    check_seed(seed)
    if not isinstance(y, torch.Tensor) or y.dim() != 1 or y.dtype != torch.int64:
        raise TypeError(f"y must be a 1-D int64 tensor, got {getattr(y, 'dtype', type(y).__name__)} of shape "
                        f"{tuple(getattr(y, 'shape', ()))}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"y must hold labels in [0, {num_classes}), got [{int(y.min())}, {int(y.max())}]")
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != (y.numel(), num_features)
                            or out.dtype != dtype):
        got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must be a [{y.numel()}, {num_features}] {dtype} tensor, got {got}")
    generator = torch.Generator(device=y.device).manual_seed(seed)
    return _features(y, num_classes, num_features, signal, dtype, generator, out)


def _split(
    num_nodes: int,
    train_fraction: float,
    val_fraction: float,
    test_fraction: float,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """Disjoint random ``train_mask``/``val_mask``/``test_mask``, each [N] bool.

    Sizes are ``floor(fraction * N)``, taken in order from one permutation.
    """
    device = generator.device
    permutation = torch.randperm(num_nodes, generator=generator, device=device)
    masks = {}
    begin = 0
    for key, fraction in (
        ("train_mask", train_fraction),
        ("val_mask", val_fraction),
        ("test_mask", test_fraction),
    ):
        size = int(fraction * num_nodes)
        mask = torch.zeros(num_nodes, dtype=torch.bool, device=device)
        mask[permutation[begin : begin + size]] = True
        masks[key] = mask
        begin += size
    return masks
