"""Server test fixtures: the tiny random checkpoint every server module serves."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_model(checkpoint_factory) -> Path:
    directory, _ = checkpoint_factory("llama-gqa-untied")
    return directory
