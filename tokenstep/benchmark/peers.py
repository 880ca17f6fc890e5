"""The peers' side of the benchmarks, on the same token ids and the same GGUF file.

- transformers: the same HF directory tokenstep loads (checkpoint.py), in the same dtype, and
  `generate` over left-padded batches of `hf_batch_size` prompts, greedy.
- llama.cpp (llama-cpp-python): the low-level batched API, so N sequences decode together in one
  `llama_decode` per step, greedy by argmax over each sequence's logits. It runs the GGUF's own
  quantized kernels (Q4_1 for the bundled model), so it reads fewer bytes per token than an engine
  that dequantized to bf16: compare with that in mind.
"""

from __future__ import annotations

import ctypes
import importlib.util
import statistics
import time
from pathlib import Path

from tokenstep.benchmark.workload import Result, Workload, percentile

PAD_TOKEN = 0


def available(peer: str) -> bool:
    module = {"transformers": "transformers", "llama.cpp": "llama_cpp"}[peer]
    return importlib.util.find_spec(module) is not None


def run_transformers(hf_dir: Path, dtype: str, workload: Workload, batch_size: int, threads: int) -> Result:
    import torch
    import transformers

    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=getattr(torch, dtype)).eval()
    requests = workload.requests()
    started = time.perf_counter()
    produced = 0
    for start in range(0, len(requests), batch_size):
        group = requests[start:start + batch_size]
        width = max(len(p) for p, _ in group)
        ids = torch.tensor([[PAD_TOKEN] * (width - len(p)) + p for p, _ in group])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in group])
        new_tokens = max(n for _, n in group)
        model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, eos_token_id=None, pad_token_id=PAD_TOKEN)
        produced += sum(n for _, n in group)  # what was asked; padding rows' extra tokens are not counted
    return Result(f"transformers (batch {batch_size})", produced, time.perf_counter() - started)


def run_llama_cpp(gguf_path: Path, workload: Workload, threads: int) -> Result:
    """All sequences of `workload` decoded together, one llama_decode per step (greedy)."""
    import llama_cpp as lc
    import numpy as np

    requests = workload.requests()
    quiet = lc.llama_log_callback(lambda level, text, user_data: None)  # keep a reference while in use
    lc.llama_log_set(quiet, ctypes.c_void_p())
    lc.llama_backend_init()
    model_params = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(str(gguf_path).encode(), model_params)
    params = lc.llama_context_default_params()
    params.n_seq_max = len(requests)
    params.n_ctx = sum(len(p) + n for p, n in requests) + 64
    params.n_batch = params.n_ubatch = max(512, max(len(p) for p, _ in requests))
    params.n_threads = params.n_threads_batch = threads
    ctx = lc.llama_init_from_model(model, params)
    vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    batch = lc.llama_batch_init(params.n_batch, 0, 1)

    def decode(entries: list[tuple[int, int, int]]) -> list[int]:
        """entries: (token, position, sequence); returns the argmax after each entry's sequence."""
        batch.n_tokens = len(entries)
        for i, (token, position, seq) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
            batch.seq_id[i][0], batch.logits[i] = seq, 1
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [int(np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i), shape=(vocab,)).argmax())
                for i in range(len(entries))]

    started = time.perf_counter()
    first, last, counts, next_token = {}, {}, {}, {}
    for seq, (prompt, _) in enumerate(requests):  # prefill one prompt per call, logits of its last token
        for start in range(0, len(prompt), params.n_batch):
            chunk = [(t, start + i, seq) for i, t in enumerate(prompt[start:start + params.n_batch])]
            token = decode(chunk)[-1]
        next_token[seq] = token
        first[seq] = last[seq] = time.perf_counter()
        counts[seq] = 1
    while any(counts[s] < n for s, (_, n) in enumerate(requests)):
        active = [s for s, (_, n) in enumerate(requests) if counts[s] < n]
        tokens = decode([(next_token[s], len(requests[s][0]) + counts[s] - 1, s) for s in active])
        now = time.perf_counter()
        for s, token in zip(active, tokens):
            next_token[s], last[s] = token, now
            counts[s] += 1
    seconds = time.perf_counter() - started
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    tpots = [(last[s] - first[s]) / (counts[s] - 1) for s in counts if counts[s] > 1]
    return Result("llama.cpp", sum(counts.values()), seconds, ttft_mean=statistics.mean(first[s] - started for s in first),
                  tpot_mean=statistics.mean(tpots), tpot_p99=percentile(tpots, 99), note=f"{gguf_path.suffix} quantized kernels")

