"""Load a checkpoint into a model: HF directories (safetensors, memory-mapped) and GGUF files.

Nothing here unpickles: `.bin`/`.pt` checkpoints can execute code when loaded and are refused.
The model is built on the meta device (no memory, no random init) and each parameter is then
assigned straight from the file, converted to the compute dtype, so there is never a second copy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from tqdm import tqdm

from tokenstep.config import ModelConfig, read_json_file
from tokenstep.model.registry import model_class
from tokenstep.text.tokenizer import Tokenizer

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
PROGRESS_MIN_TENSORS = 50  # below this a load is instant; no bar


@dataclass
class LoadedModel:
    model: nn.Module
    config: ModelConfig
    tokenizer: Tokenizer | None
    eos_token_ids: tuple[int, ...]
    generation_config: dict[str, Any] = field(default_factory=dict)  # the model's sampling defaults


def load_model(path: str | os.PathLike, dtype: torch.dtype, device: torch.device,
               progress: bool = True) -> LoadedModel:
    """Load an HF model directory or a .gguf file. Errors are one-line ValueError/FileNotFoundError."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model path {str(path)!r} does not exist")
    if path.is_file() and path.suffix == ".gguf":
        return _load_gguf(path, dtype, device, progress)
    if path.is_file():
        if path.suffix in PICKLE_SUFFIXES:
            raise ValueError(_pickle_refusal(path))
        raise ValueError(f"{path}: expected a model directory (config.json + *.safetensors) or a .gguf file")
    return _load_hf_dir(path, dtype, device, progress)


def _load_hf_dir(path: Path, dtype: torch.dtype, device: torch.device, progress: bool) -> LoadedModel:
    hf_config = read_json_file(path / "config.json")
    if not hf_config:
        raise ValueError(f"{path}: no config.json; expected an HF model directory or a .gguf file")
    files = _safetensors_files(path)
    config = ModelConfig.from_hf(hf_config)
    model = _build(hf_config, config)
    total = sum(len(_keys(f)) for f in files)
    _assign_weights(model, _iter_safetensors(files), total, dtype, device, progress)
    tokenizer = Tokenizer.from_hf_dir(path)
    generation_config = read_json_file(path / "generation_config.json")
    eos = _eos_ids(config, generation_config, tokenizer)
    return LoadedModel(model, config, tokenizer, eos, generation_config)


def _load_gguf(path: Path, dtype: torch.dtype, device: torch.device, progress: bool) -> LoadedModel:
    from tokenstep.model import gguf  # the gguf package is only needed for .gguf files

    file = gguf.GGUFFile(path)
    contents = file.contents()
    config = ModelConfig.from_hf(contents.config)
    model = _build(contents.config, config)
    _assign_weights(model, file.tensors(dtype), file.num_tensors(), dtype, device, progress)
    tokenizer = Tokenizer(contents.tokenizer, contents.chat_template, contents.bos_token, contents.eos_token)
    eos = tuple(dict.fromkeys(contents.eos_token_ids + _eos_ids(config, {}, tokenizer)))
    return LoadedModel(model, config, tokenizer, eos)


def _build(hf_config: dict[str, Any], config: ModelConfig) -> nn.Module:
    cls = model_class(hf_config)
    with torch.device("meta"):
        return cls(config)


def _assign_weights(model: nn.Module, tensors: Iterator[tuple[str, torch.Tensor]], total: int,
                    dtype: torch.dtype, device: torch.device, progress: bool) -> None:
    """Put every checkpoint tensor into its parameter; fail clearly on missing or unknown weights."""
    params = dict(model.named_parameters())
    tied = getattr(model.config, "tie_word_embeddings", False)
    bar = tqdm(total=total, desc="Loading weights", unit="tensor", leave=False,
               disable=not progress or total < PROGRESS_MIN_TENSORS)
    loaded: set[str] = set()
    for raw_name, tensor in tensors:
        bar.update(1)
        mapped = model.remap_weight(raw_name, tensor)
        if mapped is None or (tied and mapped[0] == "lm_head.weight"):
            continue
        name, tensor = mapped
        if name not in params:
            raise ValueError(f"checkpoint tensor {raw_name!r} does not belong to {type(model).__name__}")
        if tuple(tensor.shape) != tuple(params[name].shape):
            raise ValueError(f"checkpoint tensor {raw_name!r} has shape {tuple(tensor.shape)}, "
                             f"expected {tuple(params[name].shape)}")
        module_name, _, attr = name.rpartition(".")
        value = tensor.to(device=device, dtype=dtype)
        setattr(model.get_submodule(module_name), attr, nn.Parameter(value, requires_grad=False))
        loaded.add(name)
    bar.close()
    if tied:
        model.lm_head.weight = model.get_submodule(_embedding_name(model)).weight
        loaded.add("lm_head.weight")
    missing = sorted(set(params) - loaded)
    if missing:
        raise ValueError(f"checkpoint is missing {len(missing)} weights, e.g. {', '.join(missing[:3])}")
    if hasattr(model, "fuse_projections"):
        model.fuse_projections()
    for name, buffer in model.named_buffers():  # rotary tables were built on CPU at construction
        module_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(module_name), attr, buffer.to(device))
    model.eval()


def _embedding_name(model: nn.Module) -> str:
    return "transformer.wte" if hasattr(model, "transformer") else "model.embed_tokens"


def _safetensors_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(read_json_file(index).get("weight_map", {}).values()))
        files = [path / name for name in names]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise ValueError(f"{path}: shards listed in the index are missing: {', '.join(absent)}")
        return files
    files = sorted(path.glob("*.safetensors"))
    if files:
        return files
    pickles = [p for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
    if pickles:
        raise ValueError(_pickle_refusal(pickles[0]))
    raise ValueError(f"{path}: no *.safetensors weights found")


def _keys(file: Path) -> list[str]:
    try:
        with safe_open(file, framework="pt") as handle:
            return list(handle.keys())
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{file}: not a valid safetensors file (truncated or corrupt?): {error}") from None


def _iter_safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    for file in files:
        try:
            with safe_open(file, framework="pt") as handle:
                for key in handle.keys():
                    yield key, handle.get_tensor(key)
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{file}: not a valid safetensors file (truncated or corrupt?): {error}") from None


def _eos_ids(config: ModelConfig, generation_config: dict[str, Any], tokenizer: Tokenizer | None) -> tuple[int, ...]:
    """Every id that means end-of-sequence: config.json, generation_config.json and the tokenizer's."""
    ids = list(config.eos_token_ids)
    generation_eos = generation_config.get("eos_token_id")
    if generation_eos is not None:
        ids += generation_eos if isinstance(generation_eos, list) else [generation_eos]
    if tokenizer is not None and tokenizer.token_to_id(tokenizer.eos_token) is not None:
        ids.append(tokenizer.token_to_id(tokenizer.eos_token))
    return tuple(dict.fromkeys(int(i) for i in ids))


def _pickle_refusal(path: Path) -> str:
    return (f"{path.name}: refusing to load a pickle checkpoint (loading it can execute arbitrary code); "
            "convert it to safetensors first")
