"""CUDA's driver API through ctypes, for what torch does not expose (graph
capture on a stream of ours, ``cuda_graph``) or exposes only through the
runtime, whose refusals linger: a failed ``cudaHostRegister`` stays the
runtime's last error, which torch's next kernel launch then raises as its
own (``host_memory`` registers through the driver, which leaves none)."""
from __future__ import annotations

import ctypes
import threading

_FUNCTIONS = ("cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphLaunch",
              "cuGraphExecDestroy", "cuGraphDestroy", "cuThreadExchangeStreamCaptureMode", "cuGetErrorName",
              "cuMemHostRegister_v2", "cuMemHostUnregister")
_driver = None  # the loaded library (tests put a fake here)
_lock = threading.Lock()


def lib():
    """``libcuda``, its functions returning ``CUresult``."""
    global _driver
    with _lock:
        if _driver is None:
            loaded = ctypes.CDLL("libcuda.so.1")
            for name in _FUNCTIONS:
                getattr(loaded, name).restype = ctypes.c_int
            loaded.cuMemHostRegister_v2.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)
            loaded.cuMemHostUnregister.argtypes = (ctypes.c_void_p,)
            _driver = loaded
    return _driver


def check(result: int, what: str) -> None:
    """RuntimeError naming ``what`` and the error unless ``result`` is success."""
    if result != 0:
        name = ctypes.c_char_p()
        lib().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else result}")
