"""The OpenAI API's request bodies (/v1/completions, /v1/chat/completions) checked field by field into token
ids and SamplingParams (a ParamError names the first bad field), and its response bodies and stream chunks.
Besides OpenAI's fields it takes vLLM's top_k, min_tokens, stop_token_ids and ignore_eos."""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .generation import MAX_LOGPROBS, Generation, ParamError, SamplingParams

_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class ServedModel:
    """What the request checks need from the served checkpoint."""
    name: str
    vocab: int
    max_len: int                      # prompt + max_tokens, at most
    generation: Generation            # eos ids, tokenizer (None: token-id prompts only)
    chat_template: Optional[Any] = None  # chat_template.ChatTemplate


@dataclass
class ApiRequest:
    chat: bool
    prompts: List[List[int]]
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))


def _get(body: Dict[str, Any], name: str, types: Tuple[type, ...], what: str) -> Any:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) and bool not in types or not isinstance(v, types):
        raise ParamError(name, f"must be {what}, got {type(v).__name__} {str(v)[:40]!r}")
    return v


def _opt_int(body: Dict[str, Any], name: str) -> Optional[int]:
    v: Optional[int] = _get(body, name, (int,), "an integer")
    return v


def _int(body: Dict[str, Any], name: str, default: int) -> int:
    v = _opt_int(body, name)
    return default if v is None else v


def _float(body: Dict[str, Any], name: str, default: float) -> float:
    v = _get(body, name, (int, float), "a number")
    if v is not None and not math.isfinite(v):
        raise ParamError(name, f"must be finite, got {v}")
    return default if v is None else float(v)


def _bool(body: Dict[str, Any], name: str) -> bool:
    return bool(_get(body, name, (bool,), "true or false"))


def _token_list(v: Any, name: str, vocab: int) -> List[int]:
    if not isinstance(v, list) or not v or not all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        raise ParamError(name, "must be a non-empty list of token ids (integers)")
    bad = [t for t in v if not 0 <= t < vocab]
    if bad:
        raise ParamError(name, f"token id {bad[0]} is outside the vocabulary [0, {vocab})")
    return list(v)


def _unsupported(body: Dict[str, Any]) -> None:
    """Fields this server does not implement are refused unless they ask for the default behaviour."""
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        v = body.get(name)
        if v not in (None, 0, 0.0) and not (name == "repetition_penalty" and v == 1):
            raise ParamError(name, "is not supported (only its neutral value)")
    if body.get("logit_bias"):
        raise ParamError("logit_bias", "is not supported")
    if body.get("echo"):
        raise ParamError("echo", "is not supported")
    if body.get("suffix"):
        raise ParamError("suffix", "is not supported")
    if body.get("tools") or body.get("functions"):
        raise ParamError("tools", "tool calls are not supported")
    if body.get("best_of") not in (None, body.get("n") or 1):
        raise ParamError("best_of", "is supported only equal to n")


def _sampling(body: Dict[str, Any], m: ServedModel, prompt_len: int, max_tokens: Optional[int],
              logprobs: Optional[int]) -> SamplingParams:
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(x, str) for x in stop)):
        raise ParamError("stop", "must be a string or a list of strings")
    stop_ids = body.get("stop_token_ids")
    if stop_ids is not None:  # [] = none, as null; any other non-list (0, {}, "") is an error, not "none"
        stop_ids = _token_list(stop_ids, "stop_token_ids", m.vocab) if stop_ids != [] else []
    room = m.max_len - prompt_len
    if room < 1:
        raise ParamError("prompt" if "prompt" in body else "messages",
                         f"{prompt_len} tokens leave no room to generate (the model takes {m.max_len})")
    if max_tokens is None:
        max_tokens = room
    elif max_tokens > room:
        raise ParamError("max_tokens", f"{max_tokens} with a prompt of {prompt_len} tokens exceeds the "
                         f"model's {m.max_len}")
    top_k = _int(body, "top_k", 0)
    p = SamplingParams(max_tokens=max_tokens, min_tokens=_int(body, "min_tokens", 0),
                       temperature=_float(body, "temperature", 1.0), top_p=_float(body, "top_p", 1.0),
                       top_k=0 if top_k == -1 else top_k, seed=_opt_int(body, "seed"),
                       n=_int(body, "n", 1), stop=tuple(stop or ()), stop_token_ids=tuple(stop_ids or ()),
                       ignore_eos=_bool(body, "ignore_eos"), logprobs=logprobs)
    m.generation.check(p, m.vocab)
    return p


def _stream_options(body: Dict[str, Any], stream: bool) -> bool:
    opts = _get(body, "stream_options", (dict,), "an object")
    if opts is None:
        return False
    if not stream:
        raise ParamError("stream_options", "is only allowed with stream: true")
    return bool(_get(opts, "include_usage", (bool,), "true or false"))


def _check_model(body: Dict[str, Any], m: ServedModel) -> None:
    name = _get(body, "model", (str,), "a string")
    if name is not None and name != m.name:
        raise LookupError(f"the model {name!r} does not exist (this server serves {m.name!r})")


def _check_body(body: Any, m: ServedModel) -> None:
    """What both endpoints ask of a body: a JSON object for this model, without unsupported fields."""
    if not isinstance(body, dict):
        raise ParamError("body", "must be a JSON object")
    _check_model(body, m)
    _unsupported(body)


def parse_completion(body: Any, m: ServedModel) -> ApiRequest:
    _check_body(body, m)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise ParamError("prompt", "must be a string, a list of strings, a list of token ids or a list of them")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompt = [prompt]
    prompts: List[List[int]] = []
    for p in prompt:
        if isinstance(p, str):
            if m.generation.tokenizer is None:
                raise ParamError("prompt", "text prompts need the checkpoint's tokenizer.json (send token ids)")
            ids = m.generation.tokenizer.encode(p).ids
            if not ids:
                raise ParamError("prompt", "a prompt is empty once tokenized")
            prompts.append(ids)
        elif isinstance(p, list):
            prompts.append(_token_list(p, "prompt", m.vocab))
        else:
            raise ParamError("prompt", f"a prompt must be a string or a list of token ids, got {type(p).__name__}")
    logprobs = _opt_int(body, "logprobs")
    stream = _bool(body, "stream")
    max_tokens = _int(body, "max_tokens", 16)
    params = _sampling(body, m, max(len(p) for p in prompts), max_tokens, logprobs)
    return ApiRequest(False, prompts, params, stream, _stream_options(body, stream))


def _message_text(msg: Any, i: int) -> Dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise ParamError(where, "must be an object with role and content")
    role = msg.get("role")
    if role not in _ROLES:
        raise ParamError(f"{where}.role", f"must be one of {', '.join(_ROLES)}, got {str(role)[:40]!r}")
    content = msg.get("content")
    if isinstance(content, list):  # content parts: only text ones
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ParamError(f"{where}.content[{j}]", "only text parts ({type: text, text}) are supported")
            parts.append(part["text"])
        content = "".join(parts)
    if content is None and role == "assistant":
        content = ""
    if not isinstance(content, str):
        raise ParamError(f"{where}.content", "must be a string or a list of text parts")
    return {"role": role, "content": content}


def parse_chat(body: Any, m: ServedModel) -> ApiRequest:
    from .chat_template import TemplateError
    _check_body(body, m)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ParamError("messages", "must be a non-empty list of messages")
    messages = [_message_text(x, i) for i, x in enumerate(msgs)]
    if m.chat_template is None or m.generation.tokenizer is None:
        raise ParamError("messages", "the checkpoint has no chat template (tokenizer_config.json chat_template) "
                                     "or no tokenizer.json: use /v1/completions")
    try:
        text = m.chat_template.render(messages)
    except TemplateError as e:
        raise ParamError("messages", str(e)) from e
    ids = m.generation.tokenizer.encode(text, add_special_tokens=False).ids
    logprobs = None
    if _bool(body, "logprobs"):
        logprobs = _int(body, "top_logprobs", 0)
    elif body.get("top_logprobs") is not None:
        raise ParamError("top_logprobs", "needs logprobs: true")
    max_tokens = _opt_int(body, "max_completion_tokens")
    max_tokens = _opt_int(body, "max_tokens") if max_tokens is None else max_tokens
    stream = _bool(body, "stream")
    params = _sampling(body, m, len(ids), max_tokens, logprobs)
    return ApiRequest(True, [ids], params, stream, _stream_options(body, stream))


# -- responses --------------------------------------------------------------------------------------------
def logprobs_json(entries: Sequence[Tuple[int, float, list]], gen: Generation, chat: bool,
                  offset: int = 0) -> Optional[Dict[str, Any]]:
    """The logprobs of some generated tokens in the endpoint's layout (text_offset from `offset`)."""
    if chat:
        def item(t: int, lp: float) -> Dict[str, Any]:
            s = gen.token_text(t)
            return {"token": s, "logprob": lp, "bytes": list(s.encode())}
        return {"content": [dict(item(t, lp), top_logprobs=[item(u, v) for u, v in top])
                            for t, lp, top in entries]}
    tokens = [gen.token_text(t) for t, _, _ in entries]
    offsets = []
    for s in tokens:
        offsets.append(offset)
        offset += len(s)
    return {"tokens": tokens, "token_logprobs": [lp for _, lp, _ in entries],
            "top_logprobs": [{gen.token_text(u): v for u, v in top} for _, _, top in entries],
            "text_offset": offsets}


def usage(prompt_tokens: int, completion_tokens: int) -> Dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def envelope(r: ApiRequest, model: str, chunk: bool) -> Dict[str, Any]:
    kind = ("chat.completion" if r.chat else "text_completion") + (".chunk" if chunk and r.chat else "")
    return {"id": ("chatcmpl-" if r.chat else "cmpl-") + r.id, "object": kind, "created": r.created,
            "model": model}


def choice(r: ApiRequest, index: int, text: str, logprobs: Optional[Dict[str, Any]],
           finish_reason: Optional[str], chunk: bool, first: bool = False) -> Dict[str, Any]:
    """A choice of a response (chunk: of a stream chunk, `first`: the sample's first one, carrying the role)."""
    c: Dict[str, Any] = {"index": index}
    if not r.chat:
        c["text"] = text
    elif chunk:
        c["delta"] = ({"role": "assistant", "content": text} if first else {"content": text})
    else:
        c["message"] = {"role": "assistant", "content": text}
    c["logprobs"] = logprobs
    c["finish_reason"] = finish_reason
    return c


def error_body(message: str, kind: str = "invalid_request_error", param: Optional[str] = None,
               code: Optional[int] = None) -> Dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code},
            "object": "error", "message": message}


__all__ = ["ApiRequest", "ServedModel", "parse_completion", "parse_chat", "logprobs_json", "usage", "envelope",
           "choice", "error_body", "MAX_LOGPROBS"]
