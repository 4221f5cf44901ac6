"""A tiny servable checkpoint for the generation and server tests: random weights (checkpoint.py), a word-level
tokenizer.json built with `tokenizers` ("w0" .. "wN" and a few special tokens; decoding joins words with
spaces), a chat template in tokenizer_config.json and the end-of-sequence ids in generation_config.json."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence, Tuple

SPECIALS = ["<s>", "</s>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <|end|> ' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


def word(i: int) -> str:
    return f"w{i}"


def write_tokenizer(model_dir: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = {t: i for i, t in enumerate(SPECIALS)}
    words.update({word(i): i for i in range(len(SPECIALS), vocab)})
    tok = Tokenizer(models.WordLevel(words, unk_token="<s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": CHAT_TEMPLATE}))


def write_servable(model_dir: Path, eos: Sequence[int] = (1,), vocab: int = 256, seed: int = 5,
                   tokenizer: bool = True, **kw) -> Tuple[Path, object]:
    """(directory, HFConfig) of a tiny llama with `eos` in generation_config.json."""
    from kvblock.engine.checkpoint import write_tiny_checkpoint
    d, cfg = write_tiny_checkpoint(str(model_dir), "llama", vocab=vocab, hidden=128, ffn=128, num_layers=2,
                                   num_q_heads=2, num_kv_heads=1, seed=seed, **kw)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": list(eos), "bos_token_id": 0}))
    if tokenizer:
        write_tokenizer(d, vocab)
    return d, cfg
