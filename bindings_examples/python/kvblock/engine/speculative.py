"""Token-tree speculative decoding in the engine (EngineConfig.speculative_tree = (depth, width); numpy and
torch backends alike: it drives the engine's runner).

In a step where some decoding sequences speculate (greedy ones, temperature 0; sampled sequences decode one
token as usual, in the same batch):
  1. Reserve: the scheduler appended each one's last sampled token as a plain decode token; it is rolled
     back and a placeholder tree of the final size is appended (Manager.append_tree); once every sequence
     has one, they are all dropped (commit_tree of an empty path): the step's trees are known to fit the
     free blocks together. A sequence whose tree does not fit gets its token back and decodes plainly.
  2. Draft (draft.py): level by level, each tree so far is appended, the draft model (the target's first
     layers, on the same KV cache; or a separate smaller model, on its own KV cache) runs it with the tree
     mask and its nodes' positions (committed + depth), and the tree is dropped again; the frontier's
     logits grow the next level. d levels = d draft passes.
  3. Verify: the final trees are appended and the target runs ONE batched step over plain decode rows,
     the trees and the scheduler's prompt chunks (the prompt-chunk call carries the tree mask: causal words
     for prompt chunks, the export's ancestor words for trees).
  4. Accept: the longest path whose drafted tokens equal the target's greedy tokens is committed
     (Manager.commit_tree), the slot copies that compact it run on every layer (kernels.copy_slots), and
     the path's tokens plus the target's bonus token after it are emitted. Only accepted tokens are hashed,
     so the prefix cache and its events never see a rejected draft token.
A separate draft model (Engine's draft_model) keeps its K/V in caches of its own shape over the same manager,
block ids and slots: one manager decides for both models, so prefix hits, preemption, swaps, copy-on-write
and slot copies hold for the draft's layers as for the target's (the block mover and _finish run every copy
on both). The draft runs every batch the target runs (shadow), so that its K/V exist for every token the
manager commits; a second manager would have to mirror every decision of the first instead.
The outputs are the target's greedy tokens, as without speculation. Not combined with sliding windows (the
kernels limit a tree node's window by its slot, not by its depth) nor with prefix groups in tree steps (the
kernels refuse a tree mask with them: tree steps export without groups, other steps keep them)."""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._tree_calls import MAX_TREE_NODES
from ..errors import KvbError
from ..errors import Status as KvbStatus
from ..kernels import KVCache, copy_slots
from ..manager import BatchBuffers
from .draft import DraftTree, accept, draft_model
from .numpy_runner import NumpyRunner
from .sequence import Seq
from .step import StepBatch, StepRunner

if TYPE_CHECKING:
    from .engine import Engine

_CAUSAL = np.array([(1 << (j + 1)) - 1 for j in range(64)] + [0], dtype=np.uint64)


@dataclass
class SpecStats:
    target_steps: int = 0      # engine steps whose target pass verified at least one tree
    verified: int = 0          # trees verified (one per speculating sequence and step)
    drafted: int = 0           # draft levels proposed, summed over trees (the most tokens they could accept)
    accepted: int = 0          # drafted tokens accepted
    emitted: int = 0           # tokens emitted by verified trees (accepted + one bonus token each)
    fallbacks: int = 0         # speculating sequences decoded plainly because their tree did not fit

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_target_step(self) -> float:
        """Tokens a speculating sequence gains per target pass (1.0 without speculation)."""
        return self.emitted / self.verified if self.verified else 0.0


class TreeSpeculator:
    def __init__(self, eng: "Engine") -> None:
        cfg, mc = eng.cfg, eng.model.cfg
        assert cfg.speculative_tree is not None
        self.depth, self.width = (int(x) for x in cfg.speculative_tree)
        if self.depth < 1 or self.width < 1 or 1 + self.depth * self.width > MAX_TREE_NODES:
            raise ValueError(f"speculative_tree {self.depth}x{self.width}: depth and width must be >= 1 with "
                             f"1 + depth * width <= {MAX_TREE_NODES} tree nodes")
        if mc.window or mc.hybrid:
            raise ValueError("speculative_tree with a sliding-window model: not supported (the kernels limit a "
                             "tree node's window by its slot, not by its depth)")
        self.eng = eng
        self.draft_cache: Optional[KVCache] = None  # a separate draft model's device cache
        if eng.draft_model is not None:
            _check_draft(eng, eng.draft_model)
            self.draft_cache, host = eng._make_caches(eng.draft_model.cfg)
            eng.mover.add_caches(self.draft_cache, host)
            self.draft_layers = eng.draft_model.cfg.num_layers
            self.draft_runner = _draft_runner(eng, eng.draft_model, self.draft_cache)
        else:
            self.draft_layers = cfg.draft_layers or max(1, mc.num_layers // 2)
            self.draft_runner = _draft_runner(eng, draft_model(eng.model, self.draft_layers), eng.cache)
        self.bufs = BatchBuffers(cfg.max_num_seqs, 64, cfg.max_batched_tokens, tree_mask=True)
        self.stats = SpecStats()
        self._depths: Dict[int, np.ndarray] = {}  # per tree sequence: its appended nodes' depths

    # -- one step ------------------------------------------------------------------------------------
    def step(self, decodes: List[Seq], prefills: List[Tuple[Seq, int]]) -> bool:
        """Runs the step (True) when some sequence speculates; False (nothing changed): run it plainly."""
        cands = [s for s in decodes if s.request.temperature <= 0 and self._levels(s) >= 1]
        if not cands:
            return False
        trees = self._reserve(cands)
        if not trees:
            return False
        self._draft(trees)
        tree_ids = {s.seq_id for s, _ in trees}
        plain = [s for s in decodes if s.seq_id not in tree_ids]
        for s, t in trees:
            self._append(s, t)
        b, tree_rows = self._batch(plain, trees, prefills, verify=True)
        logits, tokens = self.eng.runner.run(b)
        self.shadow(b)
        self._finish(b, logits, tokens, trees, tree_rows)
        return True

    def shadow(self, b: StepBatch) -> None:
        """A separate draft model computes its K/V of the target's batch (no logits): every token the manager
        commits then has them in the draft's cache as in the target's. Nothing for a self-draft."""
        if self.draft_cache is not None:
            self.draft_runner.run(dataclasses.replace(b, rows=b.rows[:0]))

    def _levels(self, s: Seq) -> int:
        """Levels s drafts: the tree's depth, but no more tokens than the request still emits (the step emits
        the accepted draft tokens and a bonus token)."""
        return min(self.depth, s.request.max_tokens - len(s.output) - 1)

    def _reserve(self, cands: List[Seq]) -> List[Tuple[Seq, DraftTree]]:
        eng, mgr = self.eng, self.eng.mgr
        trees = []
        for s in cands:
            levels = self._levels(s)
            n = 1 + levels * self.width
            with eng._mgr_clock:
                mgr.rollback(s.seq_id, 1)  # the scheduler's decode token: the root of the tree instead
                try:
                    mgr.append_tree(s.seq_id, [s.tokens[-1]] * n, np.arange(-1, n - 1))
                except KvbError as e:
                    if e.status != KvbStatus.OUT_OF_BLOCKS:
                        raise
                    mgr.append(s.seq_id, [s.tokens[-1]])  # the block the rollback freed takes it back
                    self.stats.fallbacks += 1
                    continue
            self._after_append()
            trees.append((s, DraftTree.root(s.tokens[-1], levels)))
        with eng._mgr_clock:  # dropped once all fit together: smaller trees (the draft's) fit as well
            for s, _ in trees:
                mgr.commit_tree(s.seq_id, [])
        return trees

    def _append(self, s: Seq, t: DraftTree) -> None:
        with self.eng._mgr_clock:
            self._depths[s.seq_id] = self.eng.mgr.append_tree(s.seq_id, t.tokens, t.parents)
        self._after_append()

    def _after_append(self) -> None:
        """After an append: the blocks it took from the cache are offloaded to the host cache before any
        forward pass writes them, and a shared partial last block is copied (the reservation's append)."""
        self.eng.mover.host_transfers()
        with self.eng._mgr_clock:
            pairs = self.eng.mgr.drain_copies()
        if len(pairs):
            self.eng.mover.copy_on_write(pairs)

    def _draft(self, trees: List[Tuple[Seq, DraftTree]]) -> None:
        eng = self.eng
        for level in range(1, self.depth + 1):
            grow = [(s, t) for s, t in trees if t.depth >= level]
            if not grow:
                break
            for s, t in grow:
                self._append(s, t)
            b, rows = self._batch([], grow, [], verify=False)
            logits, _ = self.draft_runner.run(b)
            host = eng._host_logits(logits)
            with eng._mgr_clock:
                for s, _ in grow:
                    eng.mgr.commit_tree(s.seq_id, [])  # dropped: the next level appends the grown tree
            for (s, t), r in zip(grow, rows):
                t.expand(host[r:r + len(t.frontier)], self.width)

    def _batch(self, plain: List[Seq], trees: List[Tuple[Seq, DraftTree]], prefills: List[Tuple[Seq, int]],
               verify: bool) -> Tuple[StepBatch, List[int]]:
        """The step's inputs: plain decode rows, then the trees and the prompt chunks in the prompt-chunk call.
        Logits rows: decodes, prompts this step completes, then (verify) every tree node or (draft) each
        tree's frontier. Returns the batch and, per tree, its first row among the logits rows."""
        eng = self.eng
        seqs = plain + [s for s, _ in trees] + [s for s, _ in prefills]
        nd, nt = len(plain), len(trees)
        ids = np.fromiter((s.seq_id for s in seqs), np.int64, len(seqs))
        with eng._mgr_clock:
            batch = eng.mgr.batch_export(ids, self.bufs)
        qs = batch.query_start
        lens = [t.size for _, t in trees] + [c for _, c in prefills]
        toks = [np.fromiter((s.tokens[-1] for s in plain), np.int64, nd)]
        pos = [np.fromiter((len(s.tokens) - 1 for s in plain), np.int64, nd)]
        slots, masks = [batch.slot_mapping[:nd]], []
        assert batch.tree_mask is not None
        for j, s in enumerate(seqs[nd:]):
            start, n = int(qs[nd + j]), lens[j]
            slots.append(batch.slot_mapping[start:start + n])
            if j < nt:
                toks.append(np.asarray(trees[j][1].tokens, np.int64))
                pos.append(s.num_computed + self._depths[s.seq_id].astype(np.int64))
                masks.append(batch.tree_mask[start:start + n])
            else:
                toks.append(np.asarray(s.tokens[s.num_computed:s.num_computed + n], np.int64))
                pos.append(np.arange(s.num_computed, s.num_computed + n, dtype=np.int64))
                masks.append(_CAUSAL[np.minimum(np.arange(n), 64)])
        qs_p = np.zeros(len(lens) + 1, np.int32)
        np.cumsum(lens, out=qs_p[1:])
        sl_p = np.array([s.num_computed + n for s, n in zip(seqs[nd:], lens)], np.int32)
        finishing = [(s, nd + int(qs_p[nt + j + 1]) - 1) for j, (s, c) in enumerate(prefills)
                     if s.num_computed + c == len(s.tokens)]
        rows = list(range(nd)) + [r for _, r in finishing]
        tree_rows = []
        for j, (_, t) in enumerate(trees):
            tree_rows.append(len(rows))
            first = nd + int(qs_p[j])
            rows += [first + i for i in (range(t.size) if verify else t.frontier)]
        plain_seqs = plain + [s for s, _ in prefills]
        b = StepBatch(plain_seqs, np.fromiter((s.seq_id for s in plain_seqs), np.int64, len(plain_seqs)), plain,
                      [(s, t.size) for s, t in trees] + prefills, np.concatenate(toks), np.concatenate(pos),
                      [(np.concatenate(slots), batch.block_tables[:nd], batch.block_tables[nd:])],
                      batch.seq_lens[:nd], qs_p, sl_p, finishing, np.array(rows, np.int64),
                      np.array([1] * nd + [c for _, c in prefills], np.int64), [],
                      np.ascontiguousarray(np.concatenate(masks)) if masks else None)
        return b, tree_rows

    def _finish(self, b: StepBatch, logits: Any, tokens: Optional[List[int]], trees: List[Tuple[Seq, DraftTree]],
                tree_rows: List[int]) -> None:
        eng, st = self.eng, self.stats
        greedy = tokens if tokens is not None else [int(x) for x in np.argmax(logits, axis=-1)]
        paths = []
        with eng._mgr_clock:
            for (s, t), r in zip(trees, tree_rows):
                path = accept(t, greedy[r:r + t.size])
                eng.mgr.commit_tree(s.seq_id, path)
                s.num_computed += len(path)
                paths.append(path)
            pairs = eng.mgr.drain_slot_copies()
        if len(pairs):
            with eng._kernel_clock:
                copy_slots(eng.cache, pairs)
                if self.draft_cache is not None:
                    copy_slots(self.draft_cache, pairs)
        n_plain = len(b.decodes) + len(b.finishing)
        if b.seqs:
            eng._finish(b, logits[:n_plain], None if tokens is None else tokens[:n_plain])
        st.target_steps += 1
        for (s, t), r, path in zip(trees, tree_rows, paths):
            st.verified, st.drafted, st.accepted = st.verified + 1, st.drafted + t.depth, st.accepted + len(path) - 1
            st.emitted += len(path)
            for node in path:  # the target's token after each path node: the next node's, then the bonus
                eng._emit(s, logits[r + node], None if tokens is None else tokens[r + node])

    def summary(self) -> List[str]:
        st = self.stats
        drafter = (f"a {self.draft_layers}-layer draft model" if self.draft_cache is not None
                   else f"the target's first {self.draft_layers} layers")
        return [f"speculation:       token trees {self.depth}x{self.width} drafted by {drafter}: acceptance rate "
                f"{st.acceptance_rate:.3f} ({st.accepted}/{st.drafted} drafted tokens), "
                f"{st.tokens_per_target_step:.2f} tokens per target step ({st.verified} trees in {st.target_steps} "
                f"steps, {st.fallbacks} plain for want of blocks)"]


def _draft_runner(eng: "Engine", model: Any, cache: KVCache) -> StepRunner:
    """The engine's kind of runner on the draft model and its KV cache (eager on torch)."""
    if isinstance(eng.runner, NumpyRunner):
        return NumpyRunner(model, cache, eng._kernel_clock, eng.cache.dtype)
    from .runner import ModelRunner
    r: Any = eng.runner
    return ModelRunner(model, cache, eng.cfg.max_num_seqs, cuda_graph=False, kernel_clock=r.kernel_clock,
                       attn_dtype=r.attn_dtype)


def _check_draft(eng: "Engine", draft: Any) -> None:
    """A separate draft model: the target's kind of model, vocabulary, device and dtype; no second draft."""
    cfg, target = eng.cfg, eng.model
    if cfg.draft_layers:
        raise ValueError(f"draft_layers {cfg.draft_layers} and a draft model: the draft is one or the other")
    if type(draft) is not type(target):
        raise TypeError(f"the draft model is a {type(draft).__name__}, the target a {type(target).__name__}: "
                        "the engine runs both with one kind of runner")
    why = draft_vocab_error(target, draft)
    if why:
        raise ValueError(why)
    if draft.cfg.window or draft.cfg.hybrid:
        raise ValueError("a sliding-window draft model: not supported (as for the target)")
    for what in ("device", "dtype"):
        if getattr(draft, what, None) != getattr(target, what, None):
            raise ValueError(f"the draft model's {what} {getattr(draft, what)} is not the target's "
                             f"{getattr(target, what)}")
    if cfg.store:
        raise ValueError(f"store {cfg.store!r} with a draft model: the store keeps the target's K/V only")


# -- command line -------------------------------------------------------------------------------------------
def parse_tree(text: str) -> Tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1 or 1 + int(m.group(1)) * int(m.group(2)) > MAX_TREE_NODES:
        raise argparse.ArgumentTypeError(f"expected DEPTHxWIDTH with depth, width >= 1 and 1 + depth * width <= "
                                         f"{MAX_TREE_NODES}, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speculative decoding (numpy and torch engines)")
    g.add_argument("--speculative-tree", type=parse_tree, metavar="DEPTHxWIDTH",
                   help="greedy requests draft a token tree of DEPTH levels of WIDTH nodes each (EAGLE-2-like beam: "
                        "the WIDTH likeliest paths), verified by the target in one step; prints the acceptance "
                        "rate and tokens per target step")
    which = g.add_mutually_exclusive_group()
    which.add_argument("--draft-layers", type=int, default=0, metavar="N",
                       help="the draft model is the target's first N layers (default: half of them)")
    which.add_argument("--draft-model", metavar="DIR",
                       help="the draft model is a separate, smaller checkpoint with the target's vocabulary, on a "
                            "KV cache of its own (torch engine: --model DIR or --bench)")


def draft_vocab_error(target: Any, draft: Any, target_dir: str = "", draft_dir: str = "") -> Optional[str]:
    """Why `draft` cannot draft for `target`: another vocabulary size or, when both checkpoint directories have
    a tokenizer, another map of tokens to ids. None when it can."""
    if draft.cfg.vocab != target.cfg.vocab:
        return (f"the draft model's vocabulary ({draft.cfg.vocab} tokens) is not the target's ({target.cfg.vocab} "
                f"tokens): a draft proposes the target's token ids")
    if target_dir and draft_dir:
        from .checkpoint import load_tokenizer
        t, d = load_tokenizer(target_dir), load_tokenizer(draft_dir)
        if t is not None and d is not None and t.get_vocab() != d.get_vocab():
            return (f"the draft's tokenizer ({draft_dir}/tokenizer.json) maps tokens to other ids than the "
                    f"target's ({target_dir}/tokenizer.json)")
    return None


def load_draft_model(a: argparse.Namespace, target: Any, target_dir: str, device: str, dtype: str,
                     max_len: int) -> Any:
    """--draft-model DIR for the torch engine (None without it): the checkpoint, or a usage error (exit 2)
    when it cannot be read or cannot draft for the target."""
    if not getattr(a, "draft_model", None):
        return None
    from .checkpoint import CheckpointError
    from .torch_model import TorchModel
    why: Optional[str] = None
    try:
        draft = TorchModel.from_pretrained(a.draft_model, device, dtype, max_len=max_len)
        why = draft_vocab_error(target, draft, target_dir, a.draft_model)
    except (CheckpointError, FileNotFoundError) as e:
        why = " ".join(str(e).split())
    if why:
        print(f"python -m kvblock.engine: error: --draft-model {a.draft_model}: {why}", file=sys.stderr)
        raise SystemExit(2)
    return draft


def config_fields(a: argparse.Namespace) -> dict:
    """EngineConfig fields of the options above."""
    return dict(speculative_tree=getattr(a, "speculative_tree", None), draft_layers=getattr(a, "draft_layers", 0))


def summary_lines(eng: Any) -> Sequence[str]:
    spec = getattr(eng, "speculator", None)
    return spec.summary() if spec is not None else []
