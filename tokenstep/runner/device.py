"""Device and dtype selection: the only file that names "cuda"."""

from __future__ import annotations

import os

import torch

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}
KV_CACHE_FRACTION = 0.25  # of free memory, when no explicit budget is given
KV_CACHE_CAP_BYTES = 4 << 30  # a default budget never exceeds this; pass kv_cache_memory for more


def resolve_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; supported: float32, bfloat16, float16") from None


def resolve_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available on this machine")
    return device


def free_memory_bytes(device: torch.device) -> int:
    """Memory free for the KV cache on `device` right now."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def default_kv_cache_bytes(device: torch.device) -> int:
    return min(int(free_memory_bytes(device) * KV_CACHE_FRACTION), KV_CACHE_CAP_BYTES)


def set_num_threads(num_threads: int | None) -> None:
    if num_threads:
        torch.set_num_threads(num_threads)
