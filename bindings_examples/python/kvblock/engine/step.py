"""What the parts of the engine hand each other, as in nano-vllm's split (engine.py drives a step,
scheduler.py decides what runs, a runner runs the model: numpy_runner.py, or runner.py on torch): the model
shape the engine reads, one step's batch on the host, and what a runner does with it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Protocol, Tuple

import numpy as np

from .sequence import Seq


class ModelShape(Protocol):
    """The fields of a model's config that the engine reads (model.ModelConfig, checkpoint.HFConfig)."""

    @property
    def vocab(self) -> int: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def num_kv_heads(self) -> int: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def window(self) -> int: ...

    @property
    def sink(self) -> int: ...

    @property
    def hybrid(self) -> bool: ...

    def layer_window(self, layer: int) -> Tuple[int, int]: ...


class EngineModel(Protocol):
    """A model the engine serves (model.Model, torch_model.TorchModel): its runner does the rest."""

    @property
    def cfg(self) -> ModelShape: ...


@dataclass
class StepBatch:
    """One step's model inputs on the host: decode rows first (one token each), then prompt chunks."""
    seqs: List[Seq]
    ids: np.ndarray                   # [num_seqs] int64 seq ids, decodes then prefills
    decodes: List[Seq]
    prefills: List[Tuple[Seq, int]]   # (sequence, chunk length)
    tokens: np.ndarray                # [num_tokens] int64
    positions: np.ndarray             # [num_tokens] int64
    # per KV cache group: (slot_mapping, decode block tables, prefill block tables)
    per_group: List[Tuple[np.ndarray, np.ndarray, np.ndarray]]
    seq_lens_d: np.ndarray            # [num_decodes] int32
    query_start_p: np.ndarray         # [num_prefills + 1] int32
    seq_lens_p: np.ndarray            # [num_prefills] int32
    finishing: List[Tuple[Seq, int]]  # prompts completed this step and the row of their last token
    rows: np.ndarray                  # rows whose logits are needed: decodes, then finishing prompts
    counts: np.ndarray                # tokens computed per sequence (for batch_commit)
    # per KV cache group: the prefix groups of the decode rows and of the prompt-chunk rows (renumbered
    # from 0 for each of the two kernel calls), None where no rows share blocks (kvblock.PrefixGroups)
    prefix_groups: List[Tuple[Any, Any]] = field(default_factory=list)
    # uint64 [rows of the prompt-chunk call]: token trees' ancestor words (kvb_prefill_args.tree_mask), None = causal
    tree_mask: Optional[np.ndarray] = None


class StepRunner(Protocol):
    """Runs the model on one step's batch: (logits of b.rows, the greedy tokens when the runner samples them
    on its device, else None)."""

    def run(self, b: StepBatch) -> Tuple[Any, Optional[List[int]]]: ...
