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
from store_helpers import MooncakeCluster, RedisServer, mooncake_unavailable, redis_unavailable  # noqa: E402

BLOCK = 16


@pytest.fixture
def mgr():
    with kvblock.Manager(num_blocks=8, block_size=BLOCK) as m:
        yield m
        m.check_invariants()


def _server(unavailable, start, what):
    """A store server for the tests that ask for it, killed after them; skipped with the reason where
    it cannot run."""
    why = unavailable()
    if why:
        pytest.skip(f"{what} store tests: {why}")
    server = start()
    yield server
    server.kill()


@pytest.fixture
def redis_server():
    yield from _server(redis_unavailable, RedisServer, "Redis")


@pytest.fixture(scope="module")
def cluster():
    """A Mooncake Store master and a client process that lends the memory, on loopback ports."""
    yield from _server(mooncake_unavailable, MooncakeCluster, "Mooncake")
