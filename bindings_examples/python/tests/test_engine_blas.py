"""`python -m kvblock.engine` chooses its BLAS thread count itself (issue 27 item 3): the plain command,
with no OPENBLAS_NUM_THREADS in the environment, runs the model's small matmuls on one BLAS thread, and
a thread count the user set in the environment is left alone."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvblock
from kvblock.engine import blas

PKG_PARENT = str(Path(kvblock.__file__).resolve().parent.parent)


def python(code, **env_extra):
    env = {k: v for k, v in os.environ.items() if k not in blas.ENV_VARS}
    env["PYTHONPATH"] = PKG_PARENT
    env.update(env_extra)
    r = subprocess.run([sys.executable, *code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_plain_engine_command_uses_one_blas_thread():
    out = python(["-m", "kvblock.engine", "--requests", "2", "--shared-prefix", "16", "--max-tokens", "2"])
    assert "(BLAS threads: 1, " in out.splitlines()[0], out
    out = python(["-m", "kvblock.engine", "--requests", "2", "--shared-prefix", "16", "--max-tokens", "2"],
                 OPENBLAS_NUM_THREADS="2")
    assert "(BLAS threads: 2, environment)" in out.splitlines()[0], out


def test_limit_reaches_the_loaded_blas():
    code = ("import numpy; from kvblock.engine import blas; before = blas.openblas_threads(); "
            "how = blas.limit_threads(1); print(before, how[0], blas.openblas_threads())")
    before, how, after = python(["-c", code]).split()
    if how == "unavailable":
        pytest.skip("numpy's BLAS is not OpenBLAS and threadpoolctl is not installed: nothing to limit")
    if after == "None":
        pytest.skip(f"limited through {how}, but no OpenBLAS to read the count back from")
    assert after == "1", (before, how, after)
