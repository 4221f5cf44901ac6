"""The draft side of token-tree speculative decoding (speculative.py): the draft model, the tree it grows and
the greedy acceptance of the target's verdict.

The draft model is the target's first `layers` layers followed by the target's final norm and LM head
(self-speculation, as LayerSkip's early exit): it needs no weights and no KV cache of its own, because the
K/V its layers compute for committed tokens are the target's K/V of those layers, already in the cache.

The tree (EAGLE-2's beam-like expansion, simplified): node 0 is the root, the sequence's last sampled token
(not yet in the KV cache: the target verifies it along with the draft). Level 1 holds the draft's top
`width` tokens after the root; each further level takes the top `width` children of every node of the level
before and keeps `width` of them: the draft's greedy child of the draft's greedy chain (so that the tree
holds the chain a chain draft of depth d would propose, and a draft equal to the target accepts every level),
then those with the highest cumulative draft log-probability. A tree of depth d thus has 1 + d * width
nodes, in level order, and `width` paths of length d. Every parent's children are distinct tokens."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, List

import numpy as np


def draft_model(model: Any, layers: int) -> Any:
    """The target model cut after its first `layers` layers (a shallow copy sharing every weight): the numpy
    Model and the TorchModel both run the layers of their `layers` list, then the final norm and LM head."""
    n = len(model.layers)
    if not 1 <= layers <= n:
        raise ValueError(f"draft_layers must be in [1, {n}] (the target's layers), got {layers}")
    d = copy.copy(model)
    d.layers = model.layers[:layers]
    return d


@dataclass
class DraftTree:
    """One sequence's draft tree: tokens[i], parents[i] (-1 for the root), the cumulative draft log-probability
    of the path to node i, and the nodes of the last level (those the next expansion grows)."""
    depth: int                     # levels below the root this step drafts
    tokens: List[int]
    parents: List[int] = field(default_factory=lambda: [-1])
    scores: List[float] = field(default_factory=lambda: [0.0])
    frontier: List[int] = field(default_factory=lambda: [0])

    @classmethod
    def root(cls, token: int, depth: int) -> "DraftTree":
        return cls(depth, [int(token)])

    @property
    def size(self) -> int:
        return len(self.tokens)

    def expand(self, logits: np.ndarray, width: int) -> None:
        """Adds one level from the draft's logits [len(frontier), vocab] of the frontier nodes."""
        x = logits.astype(np.float64)
        logp = x - x.max(axis=-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(axis=-1, keepdims=True))
        cands = []  # (score, frontier position, rank of the token under its parent, token)
        for f, node in enumerate(self.frontier):
            top = np.argsort(-logp[f], kind="stable")[:width]
            cands += [(self.scores[node] + float(logp[f, t]), f, r, int(t)) for r, t in enumerate(top)]
        # frontier[0] is the greedy chain's node, and cands[0] its greedy child: kept first. The others by
        # score; ties: earlier parents, then likelier tokens.
        cands[1:] = sorted(cands[1:], key=lambda c: (-c[0], c[1], c[2]))
        frontier = []
        for score, f, _, tok in cands[:width]:
            frontier.append(len(self.tokens))
            self.tokens.append(tok)
            self.parents.append(self.frontier[f])
            self.scores.append(score)
        self.frontier = frontier


def accept(tree: DraftTree, target: List[int]) -> List[int]:
    """Greedy acceptance: target[i] is the target's greedy token after node i. From the root, follow the child
    whose token is the target's choice while there is one: the accepted path as node indices, root first.
    The tokens the step emits are target[path[j]] for every j (the path's drafted tokens, then the bonus)."""
    path = [0]
    while True:
        u = path[-1]
        nxt = next((c for c in range(u + 1, tree.size) if tree.parents[c] == u and tree.tokens[c] == target[u]), None)
        if nxt is None:
            return path
        path.append(nxt)
