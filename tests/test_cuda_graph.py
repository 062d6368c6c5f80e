"""``tritongnn.cuda_graph`` with the CUDA driver and torch's CUDA calls faked
(runs on the CPU): one capture at a time, each on its GPU's reserved stream,
in relaxed mode, never through ``torch.cuda.graph``; the caller's stream back
after a failed capture too; one warning for failures, a RuntimeError each."""
import contextlib
import queue
import threading
import time
import warnings

import pytest
import torch

from conftest import FakeStream


class FakeDriver:
    """The driver entry points ``cuda_graph`` calls, recording captures."""

    def __init__(self, local):
        self.local, self.lock = local, threading.Lock()
        self.active, self.most, self.begun, self.launched, self.destroyed = 0, 0, [], [], []
        self.threads = []

    def cuStreamBeginCapture_v2(self, handle, mode):
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.begun.append((self.local.index, handle.value or 0, mode))
            self.threads.append(threading.get_ident())
        time.sleep(0.02)
        return 0

    def cuStreamEndCapture(self, handle, graph):
        with self.lock:
            self.active -= 1
        if self.local.fail:
            return 901  # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: no graph
        graph._obj.value = 7
        return 0

    def cuGraphInstantiateWithFlags(self, exec_, graph, flags):
        exec_._obj.value = 8
        return 0

    def cuGraphLaunch(self, exec_, stream):
        self.launched.append((exec_.value, stream.value))
        return 0

    def cuGraphExecDestroy(self, exec_):
        self.destroyed.append("exec")

    def cuGraphDestroy(self, graph):
        self.destroyed.append("graph")

    def cuGetErrorName(self, result, name):
        name._obj.value = b"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
        return 0


@pytest.fixture
def faked(monkeypatch, stream_pool):
    from tritongnn import cuda_driver, cuda_graph
    local = threading.local()  # each thread's GPU and current stream
    driver = FakeDriver(local)

    @contextlib.contextmanager
    def stream(s):  # as torch.cuda.stream: the previous stream back on exit
        previous, local.stream = local.stream, s
        try:
            yield
        finally:
            local.stream = previous

    @contextlib.contextmanager
    def device(index):  # as torch.cuda.device: that GPU current within
        previous, local.index = local.index, index
        try:
            yield
        finally:
            local.index = previous

    def graph(*args, **kwargs):
        raise AssertionError("torch.cuda.graph must not be used: it puts torch's generator into capture state")

    monkeypatch.setattr(cuda_driver, "_driver", driver)
    monkeypatch.setattr(cuda_graph, "_warned", False)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "MemPool", lambda: object())
    monkeypatch.setattr(torch.cuda, "use_mem_pool", lambda pool, device=None: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: local.stream)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: local.index)
    return cuda_graph, driver, local


def test_captures_run_one_at_a_time_each_on_its_gpus_own_stream(faked):
    # a capture takes in whatever any thread launches on its stream: two
    # loaders' producer threads capture one at a time, on a stream of their
    # GPU reserved for captures, and a failed capture puts the caller's
    # stream back and raises (the caller then runs eagerly)
    from tritongnn.kernels._launch import reserved
    cuda_graph, driver, local = faked
    after, outcome = {}, {}

    def capture(i):
        local.index, local.fail = i % 2, i == 4
        local.stream = caller = FakeStream(f"cuda:{local.index}", 100 + i, "the producer's")
        runs = []
        try:
            graph, result = cuda_graph.capture(lambda: runs.append(local.stream) or len(runs))
            outcome[i] = result
            graph.replay()  # on the caller's stream
        except RuntimeError as error:
            outcome[i] = str(error)
        after[i] = local.stream is caller
        assert runs[0] is caller and reserved(runs[1]) and runs[1].device.index == i % 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=capture, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(driver.begun) == 6 and driver.most == 1  # one capture at a time
    assert after == {i: True for i in range(6)}  # the caller's stream back, the failed capture's too
    assert all(mode == 2 for _, _, mode in driver.begun)  # CU_STREAM_CAPTURE_MODE_RELAXED
    for index, handle, _ in driver.begun:
        assert handle == cuda_graph._capture_streams[index].cuda_stream  # one per GPU, kept
    assert {i: outcome[i] for i in (0, 1, 2, 3, 5)} == {i: 2 for i in (0, 1, 2, 3, 5)}  # the captured run's
    assert "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" in outcome[4]
    assert sorted(stream for _, stream in driver.launched) == [100, 101, 102, 103, 105]
    failures = [w for w in caught if "capture failed" in str(w.message)]
    assert len(failures) == 1 and failures[0].category is RuntimeWarning


def test_failures_warn_once_and_graphs_are_freed(faked):
    cuda_graph, driver, local = faked
    local.index, local.stream = 0, FakeStream("cuda:0", 100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        local.fail = True
        for _ in range(3):
            with pytest.raises(RuntimeError, match="capture failed"):
                cuda_graph.capture(lambda: None)

        def raises():  # an unsupported call inside the capture: the capture still ends
            if driver.active:
                raise RuntimeError("operation not permitted when stream is capturing")

        local.fail = False
        with pytest.raises(RuntimeError, match="not permitted"):
            cuda_graph.capture(raises)
        assert driver.active == 0
    assert len([w for w in caught if "capture failed" in str(w.message)]) == 1
    graph, _ = cuda_graph.capture(lambda: None)
    del graph
    assert driver.destroyed[-2:] == ["exec", "graph"]


def test_a_producer_hands_its_captures_to_the_loops_thread(faked):
    # under captures_on, the warm-up runs on the asking thread and the
    # capture on the one that serves the requests (the loop's, in next());
    # a request the loop never runs (it stopped) raises CaptureAbandoned
    cuda_graph, driver, local = faked
    requests, stop, out = queue.Queue(), threading.Event(), {}

    def ask(work):
        request = cuda_graph.CaptureRequest(work)
        requests.put(request)
        return request.wait(stop)

    def producer():
        local.index, local.fail, local.stream = 1, False, FakeStream("cuda:1", 100)
        ran = []
        with cuda_graph.captures_on(ask):
            out["graph"], out["result"] = cuda_graph.capture(lambda: ran.append(threading.get_ident()) or len(ran))
            try:
                cuda_graph.capture(lambda: None)
            except cuda_graph.CaptureAbandoned:
                out["abandoned"] = True
        out["ran"] = ran

    local.index, local.fail, local.stream = 0, False, FakeStream("cuda:0", 100)
    thread = threading.Thread(target=producer)
    thread.start()
    requests.get(timeout=5).run()  # the loop's thread captures
    requests.get(timeout=5)  # ... then stops without running the next request
    stop.set()
    thread.join(timeout=5)
    assert out["result"] == 2 and out.get("abandoned")
    assert out["ran"][0] == thread.ident and out["ran"][1] == threading.get_ident()
    assert driver.threads == [threading.get_ident()] and driver.begun[0][0] == 1  # on the producer's GPU


def test_a_graph_collected_during_a_capture_frees_its_pool_after_it():
    # the cyclic GC may collect an old loader's graph while another capture is
    # open; its pool must outlive that capture (freeing blocks mid-capture aborts)
    import gc
    from tritongnn.cuda_graph import Graph
    from tritongnn.host_memory import capturing
    pools = []

    class Recorded(Graph):
        def release(self):
            pools.append(self._pool)
            super().release()
            assert self._pool is None

    def a_graph(name):
        graph = Recorded.__new__(Recorded)
        graph._exec = graph._graph = None
        graph._pool = name
        graph.cycle = graph  # only the cyclic collector frees it
        return graph

    graph = a_graph("first")
    with capturing():
        del graph
        gc.collect()
        assert pools == []  # kept, its pool with it, until no capture is open
    assert pools == ["first"]
    graph = a_graph("second")
    del graph
    gc.collect()
    assert pools == ["first", "second"]  # no capture open: freed at once
