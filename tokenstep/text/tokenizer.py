"""Tokenizer: text <-> token ids with the `tokenizers` library, and chat templates rendered in a
jinja2 sandbox (a template shipped inside a model file is untrusted code: it may not touch Python
objects, attributes or files).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tokenstep.config import read_json_file


class Tokenizer:
    """A `tokenizers.Tokenizer` plus what generation needs around it: EOS ids, special tokens and
    the chat template."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        chat_template: str | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
    ) -> None:
        self.backend = backend
        self.chat_template = chat_template
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.special_ids = frozenset(
            token_id for token_id, token in backend.get_added_tokens_decoder().items() if token.special
        )
        self._template: jinja2.Template | None = None

    @classmethod
    def from_hf_dir(cls, path: Path) -> Tokenizer | None:
        """Read tokenizer.json (+ tokenizer_config.json / chat_template.jinja); None if absent."""
        tokenizer_file = path / "tokenizer.json"
        if not tokenizer_file.is_file():
            return None
        try:
            backend = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        except Exception as error:  # the library raises a bare Exception on malformed JSON
            raise ValueError(f"{tokenizer_file}: not a valid tokenizer.json ({error})") from None
        config = read_json_file(path / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # several named templates: take the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        template_file = path / "chat_template.jinja"  # transformers >= 4.43 saves it beside
        if template_file.is_file():
            template = template_file.read_text(encoding="utf-8")
        return cls(backend, template, _token_text(config.get("bos_token")), _token_text(config.get("eos_token")))

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; `add_special_tokens` applies the model's BOS/EOS post-processing."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str:
        return self.backend.id_to_token(token_id) or ""

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            **extra: Any) -> str:
        """Render `messages` with the model's chat template, as transformers would."""
        if not self.chat_template:
            raise ValueError("this model has no chat template; use generate() with a plain prompt")
        if self._template is None:
            self._template = _compile_template(self.chat_template)
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "", **extra,
            )
        except jinja2.TemplateError as error:
            raise ValueError(f"chat template failed: {error}") from None


def _compile_template(source: str) -> jinja2.Template:
    # The same environment options transformers uses, so whitespace renders identically.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as error:
        raise ValueError(f"invalid chat template: {error}") from None


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _token_text(token: str | dict | None) -> str | None:
    # tokenizer_config.json stores special tokens as a string or as an AddedToken dict.
    return token.get("content") if isinstance(token, dict) else token
