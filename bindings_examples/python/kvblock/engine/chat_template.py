"""The checkpoint's chat template (tokenizer_config.json's chat_template, a Jinja2 template) turning chat
messages into the prompt text, rendered in Jinja2's sandbox as Hugging Face's tokenizers render it
(trim_blocks, lstrip_blocks; bos_token, eos_token, add_generation_prompt and raise_exception defined)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional


class TemplateError(ValueError):
    """The template refused the messages (its raise_exception) or failed on them."""


def _token_text(t: Any) -> str:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(t, dict):
        return str(t.get("content", ""))
    return "" if t is None else str(t)


class ChatTemplate:
    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
        self.template = env.from_string(source)
        self.bos_token, self.eos_token = bos_token, eos_token

    @classmethod
    def from_checkpoint(cls, model_dir: str) -> Optional["ChatTemplate"]:
        """The checkpoint's template (a named list: the "default" one), or None when it has none."""
        path = Path(model_dir) / "tokenizer_config.json"
        if not path.is_file():
            return None
        cfg = json.loads(path.read_text())
        src = cfg.get("chat_template")
        if isinstance(src, list):
            named = {t.get("name"): t.get("template") for t in src if isinstance(t, dict)}
            src = named.get("default") or next(iter(named.values()), None)
        if not isinstance(src, str) or not src:
            return None
        return cls(src, _token_text(cfg.get("bos_token")), _token_text(cfg.get("eos_token")))

    def render(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = True) -> str:
        try:
            return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                        bos_token=self.bos_token, eos_token=self.eos_token)
        except TemplateError:
            raise
        except Exception as e:  # the template's own failure on these messages (jinja2's errors, TypeError...)
            raise TemplateError(f"the chat template failed on these messages: {type(e).__name__}: {e}") from e
