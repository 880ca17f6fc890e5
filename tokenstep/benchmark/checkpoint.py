"""The default model as an HF directory, so every engine can load the *same* checkpoint.

transformers 5 runs a GGUF with its weights still packed (quantized kernels), which is not the
"same checkpoint and dtype" comparison the benchmarks promise. So the bundled GGUF is dequantized
once into config.json + model.safetensors + tokenizer.json (float32, ~540 MB, cached under
~/.cache/tokenstep) and both tokenstep and transformers load that directory in the benchmark dtype.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from tokenstep.model import gguf
from tokenstep.model.default import default_model_path

CACHE_DIR = Path(os.environ.get("TOKENSTEP_CACHE", Path.home() / ".cache" / "tokenstep"))


def default_model_as_hf_dir() -> Path:
    """Directory with the default model in HF format (written on first use)."""
    source = default_model_path()
    target = CACHE_DIR / f"{source.stem}-hf"
    if (target / "model.safetensors").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    file = gguf.GGUFFile(source)
    contents = file.contents()
    tensors = {name: tensor.contiguous() for name, tensor in file.tensors(torch.float32)}
    if contents.config.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)
    save_file(tensors, str(target / "model.safetensors.partial"), metadata={"format": "pt"})
    contents.tokenizer.save(str(target / "tokenizer.json"))
    (target / "config.json").write_text(json.dumps({**contents.config, "torch_dtype": "float32"}, indent=2))
    (target / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": contents.bos_token, "eos_token": contents.eos_token, "chat_template": contents.chat_template,
        "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2))
    os.replace(target / "model.safetensors.partial", target / "model.safetensors")  # complete or absent
    return target
