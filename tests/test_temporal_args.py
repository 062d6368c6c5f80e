"""PyG's temporal arguments checked (``loader.temporal.check_temporal``):
which attribute is the time, ``input_time``'s shape and dtype, the
strategy, PyG's errors; the user's tensors untouched."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from tritongnn.loader.temporal import check_temporal


def make_data():
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3, 3], [1, 0, 2, 1, 3, 2, 0]])
    return Data(edge_index=edge_index, num_nodes=4, time=torch.tensor([3, 1, 2, 0]),
                edge_time=torch.arange(7), x=torch.zeros(4, 2))


def check(data, time_attr, input_time=None, strategy="uniform", weight_attr=None, num_seeds=4):
    return check_temporal(data, time_attr, input_time, strategy, weight_attr, num_seeds, data.edge_index.size(1))


def test_node_and_edge_level_times():
    data = make_data()
    assert check(data, None) is None
    args = check(data, "time", strategy="last")
    assert args.node_time is data.time and args.edge_time is None and args.input_time is None
    assert args.strategy == "last" and args.time is data.time
    args = check(data, "edge_time", input_time=[4, 4, 4, 4])
    assert args.edge_time is data.edge_time and args.node_time is None
    assert args.input_time.tolist() == [4, 4, 4, 4] and args.input_time.dtype == torch.int64
    # numpy times, and float ones with float input times
    data.time = np.array([0.5, 1.0, 2.0, 3.0], dtype=np.float32)
    args = check(data, "time", input_time=torch.tensor([0.25, 1, 2, 3], dtype=torch.float64))
    assert args.node_time.dtype == torch.float32 and args.input_time.dtype == torch.float32


def test_input_time_is_not_written():
    data = make_data()
    input_time = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    before = input_time.clone()
    args = check(data, "time", input_time=input_time)
    assert args.input_time.dtype == torch.int64
    args.input_time += 1
    assert torch.equal(input_time, before)


def test_bad_temporal_arguments():
    data = make_data()
    with pytest.raises(ValueError, match="'input_time' is set while 'time_attr' is not set"):
        check(data, None, input_time=torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="temporal_strategy must be one of"):
        check(data, "time", strategy="recent")
    with pytest.raises(ValueError, match="neither a node-level or edge-level attribute"):
        check(data, "missing")
    data.other = torch.zeros(5)
    with pytest.raises(ValueError, match="neither a node-level or edge-level attribute"):
        check(data, "other")
    with pytest.raises(TypeError, match="time_attr must be the name"):
        check(data, 3)
    with pytest.raises(ValueError, match="exclude each other"):
        check(data, "time", weight_attr="w")
    with pytest.raises(ValueError, match="is edge-level: pass input_time"):
        check(data, "edge_time")
    data.time2 = torch.zeros(4, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"must be a 1-D node-level attribute of shape \[4\]"):
        check(data, "time2")
    data.time3 = torch.zeros(4, dtype=torch.bool)
    with pytest.raises(TypeError, match="must hold int64"):
        check(data, "time3")
    data.time4 = [1, 2, 3, 4]
    with pytest.raises(TypeError, match="must be a tensor of times"):
        check(data, "time4")
    with pytest.raises(ValueError, match=r"input_time must have shape \[4\]"):
        check(data, "time", input_time=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="input_time must hold integers"):
        check(data, "time", input_time=torch.zeros(4))
    with pytest.raises(TypeError, match="input_time must hold integers"):
        check(data, "time", input_time=torch.zeros(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="input_time must be a tensor"):
        check(data, "time", input_time="now")


def test_time_order_sorts_rows_as_pyg():
    # PyG's sort_csc: lexsort([time, col]) -- by target, then time, ties in edge order
    from torch_geometric.sampler.utils import sort_csc

    from tritongnn import CSCGraph
    from tritongnn.kernels.sample_temporal import rows_sorted_by_time
    from tritongnn.sampling.temporal import sampler_times, time_order

    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 9, (2, 60), generator=g)
    for level in ("node", "edge"):
        data = Data(edge_index=edge_index, num_nodes=9, t=torch.randint(0, 4, (9 if level == "node" else 60,),
                                                                        generator=g))
        args = check(data, "t", input_time=None if level == "node" else torch.zeros(4, dtype=torch.int64))
        perm = time_order(edge_index, args)
        graph = CSCGraph.from_edge_index(edge_index[:, perm], 9, keep_edge_perm=True)
        eid = perm[graph.edge_perm]  # CSC position -> the user's edge id
        _, _, expect = sort_csc(edge_index[0], edge_index[1], data.t if level == "node" else None,
                                data.t if level == "edge" else None)
        assert torch.equal(eid, expect)
        times = sampler_times(args, None, eid, torch.device("cpu"))
        assert rows_sorted_by_time(graph.indptr, graph.indices, **times)
