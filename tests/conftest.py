"""Shared fixtures: tiny random checkpoints (built once per session) and the bundled default model."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory):
    """build(case) -> (directory, transformers model); each case is built once per session."""
    from tests.checkpoints import build_checkpoint, write_tokenizer

    built = {}

    def build(case: str):
        if case not in built:
            directory = tmp_path_factory.mktemp(case)
            model = build_checkpoint(case, directory)
            write_tokenizer(directory)
            built[case] = (directory, model)
        return built[case]

    return build


@pytest.fixture(scope="session")
def default_model_path():
    from tokenstep.model.default import default_model_path

    try:
        return default_model_path()
    except FileNotFoundError as error:
        pytest.fail(str(error))  # `make test` installs it: a missing model is a broken set-up


@pytest.fixture(scope="session")
def default_llm(default_model_path):
    from tokenstep import LLM

    return LLM(str(default_model_path), progress=False)
