import pytest

import kvblock

BLOCK = 16


@pytest.fixture
def mgr():
    with kvblock.Manager(num_blocks=8, block_size=BLOCK) as m:
        yield m
        m.check_invariants()
