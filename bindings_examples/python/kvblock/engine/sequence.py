"""Requests and their sequences as the scheduler sees them."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

import numpy as np


class Status(enum.Enum):
    WAITING = 0
    RUNNING = 1
    SWAPPED = 2
    FINISHED = 3


@dataclass
class Request:
    req_id: int
    prompt: List[int]
    max_tokens: int
    n: int = 1                 # parallel samples (fork after the prompt)
    temperature: float = 0.0   # 0 = greedy
    seed: int = 0
    cache_salt: Optional[str] = None  # as vLLM's: requests with different salts never share cached blocks
    # generation.SamplingParams: stop conditions, top-k / top-p, logprobs; its seed (or `seed`) keys the draws.
    # None: greedy / temperature sampling for exactly max_tokens.
    params: Optional[Any] = None


@dataclass
class Seq:
    """One sample of a request. `tokens` = prompt + generated; when `pending`, the last token is sampled but
    not yet in the manager (the next step appends it and computes its K/V). `num_computed` mirrors the
    manager's count of tokens whose K/V are written."""
    seq_id: int
    request: Request
    index: int                 # sample index within the request
    tokens: List[int]
    num_computed: int = 0
    pending: bool = False
    filling: bool = False      # store gets in flight: it waits (kvblock.h, "Store tier")
    allocated: int = 0         # tokens handed to the manager: all of a prompt but a windowed one admitted in part
    status: Status = Status.WAITING
    output: List[int] = field(default_factory=list)
    logits: List[np.ndarray] = field(default_factory=list)  # per generated token, when recorded
    finish_reason: Optional[str] = None  # "stop", "length" or "abort" once finished
    # with request.params: (token, its logprob, [(token, logprob)] top k) per generated token when asked for,
    # and the decoded text (generation.SeqText)
    logprobs: List[Tuple[int, float, List[Tuple[int, float]]]] = field(default_factory=list)
    text: Optional[Any] = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or len(self.output) >= self.request.max_tokens
