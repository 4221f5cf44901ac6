import os
import sys
from pathlib import Path

# The demos (examples/route_demo.py, indexer_client.py, bench.py) are scripts beside the package, not part
# of it: their tests import them from that folder.
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
# The engine's matmuls are tiny: a multi-threaded BLAS only spins against the other processes of a CI box.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402  (after the BLAS variables: kvblock imports numpy)

import kvblock  # noqa: E402

BLOCK = 16


@pytest.fixture
def mgr():
    with kvblock.Manager(num_blocks=8, block_size=BLOCK) as m:
        yield m
        m.check_invariants()
