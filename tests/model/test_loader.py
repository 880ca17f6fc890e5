"""Loading: what is refused (pickles, unknown architectures, broken files) and how it says so."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from tokenstep.model.loader import load_model

CPU = torch.device("cpu")


def _copy(directory, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(directory, target)
    return target


def test_pickle_checkpoint_is_refused(checkpoint_factory, tmp_path):
    target = _copy(checkpoint_factory("gpt2")[0], tmp_path)
    (target / "model.safetensors").unlink()
    (target / "pytorch_model.bin").write_bytes(b"not even read")
    with pytest.raises(ValueError, match="refusing to load a pickle checkpoint"):
        load_model(target, torch.float32, CPU)
    with pytest.raises(ValueError, match="refusing to load a pickle checkpoint"):
        load_model(target / "pytorch_model.bin", torch.float32, CPU)


def test_truncated_safetensors_gives_a_clear_error(checkpoint_factory, tmp_path):
    target = _copy(checkpoint_factory("llama-gqa-untied")[0], tmp_path)
    weights = target / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        load_model(target, torch.float32, CPU)


def test_unknown_architecture_names_it_and_lists_supported(checkpoint_factory, tmp_path):
    target = _copy(checkpoint_factory("llama-gqa-untied")[0], tmp_path)
    config = json.loads((target / "config.json").read_text())
    config["architectures"] = ["FalconForCausalLM"]
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"unsupported architecture 'FalconForCausalLM'; supported: .*Qwen3ForCausalLM"):
        load_model(target, torch.float32, CPU)


def test_missing_weight_is_reported(checkpoint_factory, tmp_path):
    target = _copy(checkpoint_factory("llama-gqa-untied")[0], tmp_path)
    from safetensors.torch import load_file

    tensors = load_file(target / "model.safetensors")
    del tensors["model.norm.weight"]
    save_file(tensors, target / "model.safetensors")
    with pytest.raises(ValueError, match="missing 1 weights, e.g. model.norm.weight"):
        load_model(target, torch.float32, CPU)


def test_sharded_checkpoint_loads_like_the_single_file(checkpoint_factory, tmp_path):
    directory, hf_model = checkpoint_factory("qwen2-qkv-bias")
    target = tmp_path / "sharded"
    hf_model.save_pretrained(target, max_shard_size="100KB")
    shutil.copy(directory / "tokenizer.json", target)
    assert (target / "model.safetensors.index.json").is_file()
    single = load_model(directory, torch.float32, CPU).model.state_dict()
    sharded = load_model(target, torch.float32, CPU).model.state_dict()
    assert single.keys() == sharded.keys()
    assert all(torch.equal(single[k], sharded[k]) for k in single)


def test_missing_path_and_non_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_model(tmp_path / "nowhere", torch.float32, CPU)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="expected a model directory"):
        load_model(tmp_path / "notes.txt", torch.float32, CPU)
    with pytest.raises(ValueError, match="no config.json"):
        load_model(tmp_path, torch.float32, CPU)
