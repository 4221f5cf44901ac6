"""The BLAS thread count of the mini engine's numpy matmuls, chosen by the engine itself.

The model's matmuls are small (one decode row per sequence, a few hundred columns): OpenBLAS's thread
pool costs more than it saves there, and `python -m kvblock.engine` ran 18% slower with its default than
with OPENBLAS_NUM_THREADS=1 (issue 27). The environment variable must be set before numpy loads, which
`python -m kvblock.engine` cannot do (the kvblock package imports numpy first), so the limit is applied
to the loaded library instead: threadpoolctl when installed (any BLAS, OpenMP too), else OpenBLAS's own
`*openblas_set_num_threads*` found among the loaded shared objects (numpy's wheels bundle OpenBLAS, with
prefixed and suffixed symbol names). A thread count the user set in the environment is left alone."""
from __future__ import annotations

import ctypes
import os
from typing import Optional, Tuple

ENV_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
# OpenBLAS's setter under the names its builds export (plain, 64-bit-int suffix, numpy's scipy_ prefix)
_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")


def _openblas_libraries() -> list:
    """Paths of the loaded shared objects that look like OpenBLAS (Linux: /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    except OSError:
        return []
    return sorted(paths)


def openblas_threads() -> Optional[int]:
    """The loaded OpenBLAS's thread count, or None when none is found (for tests and reports)."""
    for path in _openblas_libraries():
        lib = ctypes.CDLL(path)
        for name in _SETTERS:
            getter = getattr(lib, name.replace("set_num", "get_num"), None)
            if getter is not None:
                return int(getter())
    return None


def limit_threads(n: int = 1) -> Tuple[str, Optional[int]]:
    """Limits the loaded BLAS to n threads unless the environment already chose. Returns (how, n): how
    is "environment" (left alone), "threadpoolctl", "openblas" or "unavailable" (n then None)."""
    chosen = next((os.environ[v] for v in ENV_VARS if os.environ.get(v)), None)
    if chosen is not None:
        return "environment", int(chosen) if chosen.isdigit() else None
    import numpy  # noqa: F401  (the BLAS to limit is the one numpy loaded)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        threadpool_limits(limits=n, user_api="blas")  # for the rest of the process
        return "threadpoolctl", n
    for path in _openblas_libraries():
        lib = ctypes.CDLL(path)
        for name in _SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter.argtypes = [ctypes.c_int]
                setter(n)
                return "openblas", n
    return "unavailable", None
