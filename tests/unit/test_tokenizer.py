"""Tokenizer wrapper and the sandboxed chat template."""

from __future__ import annotations

import json

import pytest
import tokenizers

from tokenstep.text.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from tests.checkpoints import write_tokenizer

    directory = tmp_path_factory.mktemp("tok")
    write_tokenizer(directory)
    return Tokenizer.from_hf_dir(directory)


def test_encode_decode_round_trip(tokenizer):
    text = "The capital of France is Paris. ünïcödé 東京 🙂"
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_tokens_are_known_and_skipped(tokenizer):
    ids = tokenizer.encode("<|im_start|>user", add_special_tokens=False)
    assert ids[0] in tokenizer.special_ids
    assert tokenizer.decode(ids) == "user"
    assert tokenizer.decode(ids, skip_special_tokens=False) == "<|im_start|>user"


def test_chat_template_renders_like_transformers(tokenizer, tmp_path):
    import transformers

    tokenizer.backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": tokenizer.chat_template,
                                                                "bos_token": "<s>", "eos_token": "</s>"}))
    reference = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"),
                                                     chat_template=tokenizer.chat_template)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    expected = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.apply_chat_template(messages) == expected


@pytest.mark.parametrize("template", [
    "{{ messages.__class__.__mro__[1].__subclasses__() }}",  # classic sandbox escape
    "{{ ''.__class__.__base__ }}",
    "{% set x = messages.append(1) %}{{ x }}",  # mutation is refused by the immutable sandbox
])
def test_template_injection_is_refused(template):
    backend = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok = Tokenizer(backend, chat_template=template)
    with pytest.raises(ValueError, match="chat template"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])


def test_raise_exception_in_template_is_a_clear_error():
    tok = Tokenizer(tokenizers.Tokenizer(tokenizers.models.BPE()),
                    chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ValueError, match="roles must alternate"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])


def test_model_without_template_says_so():
    tok = Tokenizer(tokenizers.Tokenizer(tokenizers.models.BPE()))
    with pytest.raises(ValueError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])
