"""Generation as serving APIs define it: when a sample stops (the checkpoint's end-of-sequence tokens, stop
token ids, stop strings matched on the decoded text, max_tokens, never before min_tokens), how a token is
drawn (temperature, top-k, top-p, a seed per request), the log-probabilities of the top k, and a finish reason
per sample ("stop", "length", "abort").

A Request with `params` (SamplingParams) is generated this way by the engine's Generation; one without keeps
the engine's own greedy / Gumbel sampling and runs to max_tokens. Draws are keyed by (the request's seed, the
sample's index, its output position), so the same seed gives the same text whatever else runs beside it."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

MAX_LOGPROBS = 20


class ParamError(ValueError):
    """A request's field is invalid: `param` names it (the server answers 400 with both)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param, self.message = param, message


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    min_tokens: int = 0             # EOS and stop token ids are masked until this many tokens are out
    temperature: float = 1.0        # 0: greedy
    top_p: float = 1.0              # the smallest set of tokens whose probability reaches top_p
    top_k: int = 0                  # 0: every token; 1: greedy
    seed: Optional[int] = None      # None: the engine's request seed (Request.seed)
    n: int = 1
    stop: Tuple[str, ...] = ()      # stop strings: the text ends before the first one found
    stop_token_ids: Tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: Optional[int] = None  # the top-k log-probabilities of every generated token (0: its own only)

    def validate(self, vocab: Optional[int] = None) -> "SamplingParams":
        """self, or ParamError naming the first bad field."""
        def need(ok: bool, param: str, message: str) -> None:
            if not ok:
                raise ParamError(param, message)

        need(self.max_tokens >= 1, "max_tokens", f"must be >= 1, got {self.max_tokens}")
        need(0 <= self.min_tokens <= self.max_tokens, "min_tokens",
             f"must be in [0, max_tokens = {self.max_tokens}], got {self.min_tokens}")
        need(np.isfinite(self.temperature) and 0 <= self.temperature <= 100, "temperature",
             f"must be in [0, 100], got {self.temperature}")
        need(np.isfinite(self.top_p) and 0 < self.top_p <= 1, "top_p", f"must be in (0, 1], got {self.top_p}")
        need(self.top_k >= 0 or self.top_k == -1, "top_k", f"must be >= 0 (or -1: all), got {self.top_k}")
        need(self.seed is None or 0 <= self.seed < 2 ** 63, "seed", f"must be in [0, 2^63), got {self.seed}")
        need(1 <= self.n <= 64, "n", f"must be in [1, 64], got {self.n}")
        need(all(isinstance(s, str) and s for s in self.stop), "stop", "stop strings must be non-empty strings")
        bad = [t for t in self.stop_token_ids if not 0 <= t < (vocab or 2 ** 31)]
        need(not bad, "stop_token_ids", f"token id {bad[0] if bad else 0} is outside the vocabulary")
        need(self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS, "logprobs",
             f"must be in [0, {MAX_LOGPROBS}], got {self.logprobs}")
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


def eos_token_ids(model_dir: str) -> Tuple[int, ...]:
    """The checkpoint's end-of-sequence ids: generation_config.json's and config.json's eos_token_id (an int
    or a list in either), together."""
    ids: List[int] = []
    for name in ("generation_config.json", "config.json"):
        path = Path(model_dir) / name
        if not path.is_file():
            continue
        eos = json.loads(path.read_text()).get("eos_token_id")
        for t in (eos if isinstance(eos, list) else [eos]):
            if isinstance(t, int) and t not in ids:
                ids.append(t)
    return tuple(ids)


def draw(logits: np.ndarray, p: SamplingParams, key: Sequence[int] = (0,), banned: Sequence[int] = ()) -> int:
    """A token from one row of logits: argmax when greedy, else Gumbel-max over the tokens top-k and top-p
    keep (temperature-scaled), the noise fixed by `key`. `banned` tokens are never drawn."""
    x = np.asarray(logits, np.float64).copy()
    if len(banned):
        x[np.asarray(banned, np.int64)] = -np.inf
    if p.greedy:
        return int(np.argmax(x))
    x /= p.temperature
    keep = np.arange(x.shape[0])
    if 0 < p.top_k < x.shape[0]:
        keep = np.argpartition(-x, p.top_k - 1)[:p.top_k]
    if p.top_p < 1:
        order = keep[np.argsort(-x[keep], kind="stable")]
        pr = np.exp(x[order] - x[order[0]])
        cum = np.cumsum(pr) / pr.sum()
        keep = order[:int(np.searchsorted(cum, p.top_p)) + 1]  # the first token that reaches top_p is kept
    g = np.random.default_rng(list(key)).gumbel(size=keep.shape[0])
    return int(keep[np.argmax(x[keep] + g)])


def top_logprobs(logits: np.ndarray, token: int, k: int) -> Tuple[float, List[Tuple[int, float]]]:
    """(log-probability of `token`, the k most likely tokens with theirs), from the model's distribution
    (before temperature, top-k, top-p and min_tokens masking)."""
    x = np.asarray(logits, np.float64)
    lp = x - x.max()
    lp -= np.log(np.exp(lp).sum())
    top: List[Tuple[int, float]] = []
    if k > 0:
        idx = np.argpartition(-lp, k - 1)[:k] if k < lp.shape[0] else np.arange(lp.shape[0])
        idx = idx[np.argsort(-lp[idx], kind="stable")]
        top = [(int(i), float(lp[i])) for i in idx]
    return float(lp[token]), top


@dataclass
class SeqText:
    """A sample's decoded text, decoded incrementally: `text` holds the output's tokens [0, read) (up to a
    stop string, which it never contains); tokens [prefix, read) are the context the next ones are decoded
    in (a token's text can depend on its neighbours), and text is added only once it no longer ends in an
    incomplete UTF-8 character. Until the first tokens are added, the prompt's last tokens (`context`) are
    decoded before them. A stop string's search starts `searched` characters in."""
    text: str = ""
    prefix: int = 0
    read: int = 0
    searched: int = 0
    context: List[int] = field(default_factory=list)


# Prompt tokens decoded before the first output tokens: a token's text can depend on what precedes it (a
# SentencePiece decoder drops the space of the first token it decodes, so " Hello" would come out "Hello").
CONTEXT_TOKENS = 5


class Generation:
    """The engine's side of SamplingParams: eos (the checkpoint's ids) and the tokenizer (for stop strings
    and text; None: token ids only)."""

    def __init__(self, eos: Sequence[int] = (), tokenizer: Optional[Any] = None) -> None:
        self.eos, self.tokenizer = tuple(eos), tokenizer

    def check(self, p: SamplingParams, vocab: int) -> None:
        """ParamError for what this engine cannot do with p (besides p.validate's checks)."""
        p.validate(vocab)
        if p.stop and self.tokenizer is None:
            raise ParamError("stop", "stop strings need the checkpoint's tokenizer (tokenizer.json)")

    def _stop_ids(self, p: SamplingParams) -> Tuple[int, ...]:
        return p.stop_token_ids + (() if p.ignore_eos else self.eos)

    def next_token(self, s: Any, host_logits: Callable[[], np.ndarray], device_token: Optional[int]) -> int:
        """The sample's next token (device_token: the runner's greedy one, used when nothing else is
        needed); its log-probabilities go to s.logprobs when asked for."""
        p: SamplingParams = s.request.params
        banned = self._stop_ids(p) if len(s.output) < p.min_tokens else ()
        if p.greedy and not banned and p.logprobs is None and device_token is not None:
            return device_token
        logits = host_logits()
        seed = s.request.seed if p.seed is None else p.seed
        tok = draw(logits, p, (seed, s.index, len(s.output)), banned)
        if p.logprobs is not None:
            s.logprobs.append((tok,) + top_logprobs(logits, tok, p.logprobs))
        return tok

    def finish_reason(self, s: Any) -> Optional[str]:
        """After a token: "stop" (a stop token, or a stop string in the text: the text is cut before it),
        "length" (max_tokens), or None: it goes on."""
        p: SamplingParams = s.request.params
        tok = s.output[-1]
        if len(s.output) >= p.min_tokens and tok in self._stop_ids(p):
            self._decode(s, len(s.output) - 1)  # the stop token is not part of the text
            return "stop"
        self._decode(s, len(s.output))
        if p.stop and len(s.output) >= p.min_tokens:
            t = s.text
            longest = max(len(x) for x in p.stop)
            start = max(0, t.searched - longest + 1)
            hits = [i for i in (t.text.find(x, start) for x in p.stop) if i >= 0]
            t.searched = len(t.text)
            if hits:
                t.text = t.text[:min(hits)]
                return "stop"
        return "length" if len(s.output) >= p.max_tokens else None

    def _decode(self, s: Any, n: int) -> None:
        """Adds the text of output tokens [t.read, n) (n: all but a stop token); with `final`, even if it
        ends in an incomplete character."""
        if s.text is None:
            prompt = getattr(s.request, "prompt", None) or []
            s.text = SeqText(context=list(prompt[-CONTEXT_TOKENS:]))
        t = s.text
        if self.tokenizer is None or n <= t.read:
            return
        context = t.context if t.prefix == 0 else []  # later, output tokens are the context
        before = self.tokenizer.decode(context + s.output[t.prefix:t.read], skip_special_tokens=True)
        if before.endswith("\ufffd"):  # a prompt ending inside a character: decode the output alone
            context, before = [], self.tokenizer.decode(s.output[t.prefix:t.read], skip_special_tokens=True)
        after = self.tokenizer.decode(context + s.output[t.prefix:n], skip_special_tokens=True)
        final = n < len(s.output) or len(s.output) >= s.request.params.max_tokens
        if len(after) > len(before) and (final or not after.endswith("\ufffd")):
            t.text += after[len(before):]
            t.prefix, t.read = t.read, n

    def stable_text(self, s: Any) -> str:
        """The part of the sample's text that later tokens cannot change: all of it once finished; before,
        without an incomplete UTF-8 character at its end, nor an ending that could begin a stop string."""
        if s.text is None:
            return ""
        t = s.text.text
        if s.finish_reason is not None:
            return t
        t = t.rstrip("\ufffd")
        p: SamplingParams = s.request.params
        for x in p.stop:
            for k in range(min(len(x) - 1, len(t)), 0, -1):
                if t.endswith(x[:k]):
                    t = t[:-k]
                    break
        return t

    def token_text(self, tok: int) -> str:
        """A token as logprobs show it: its text, or token_id:N without a tokenizer."""
        if self.tokenizer is None:
            return f"token_id:{tok}"
        return self.tokenizer.decode([tok], skip_special_tokens=False)
