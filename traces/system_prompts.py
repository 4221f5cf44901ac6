#!/usr/bin/env python3
"""Writes a Mooncake-format trace of prompts that share system prompts (stdout), for
`kvblock replay --groups`: 40 system prompts of 8 hash blocks (4,096 tokens; a block is 512 tokens),
chosen with a heavy-tailed (Pareto 1.2) popularity, each followed by 1-6 blocks of its own; 1,500
requests arriving as a Poisson process of 4 requests/s; 50-400 output tokens. A hit on a system prompt
needs, in a window group, the blocks of its last window tokens. Deterministic: argument 1 is the seed
(default 1). docs/perf/manager.md ("KV cache groups: eviction order") uses seed 1."""
import json
import random
import sys

random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
PROMPTS, PROMPT_BLOCKS, REQUESTS, RATE = 40, 8, 1500, 4.0
next_id = PROMPTS * PROMPT_BLOCKS
t = 0.0
for _ in range(REQUESTS):
    t += random.expovariate(RATE)
    p = min(int(random.paretovariate(1.2)) - 1, PROMPTS - 1)
    own = random.randint(1, 6)
    ids = list(range(p * PROMPT_BLOCKS, (p + 1) * PROMPT_BLOCKS)) + list(range(next_id, next_id + own))
    next_id += own
    n_in = (PROMPT_BLOCKS + own - 1) * 512 + random.randint(1, 512)
    print(json.dumps({"timestamp": int(t * 1000), "input_length": n_in,
                      "output_length": random.randint(50, 400), "hash_ids": ids}))
