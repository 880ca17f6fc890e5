"""Sampler overhead per step (µs) at batch 1 and 32, with every processor and filter on, and with
plain greedy for comparison. The logits are real: the default model's (SmolLM2, vocabulary 49,152)
at successive positions of an English text, so top-p sees the peaked distributions it sees in use.

    python bench/bench_sampler.py [--batch-sizes 1 32] [--steps 200]
"""

from __future__ import annotations

import argparse
import time

import torch

from tokenstep.params import SamplingParams
from tokenstep.sampling.sampler import SamplingRow, sample

VOCAB = 49_152
HISTORY = 256  # prompt + output tokens each penalty has to count

SETTINGS = {
    "greedy": SamplingParams(temperature=0),
    "T+top-p": SamplingParams(temperature=0.7, top_p=0.9),
    "everything": SamplingParams(temperature=0.7, top_k=50, top_p=0.9, min_p=0.05, repetition_penalty=1.1,
                                 presence_penalty=0.5, frequency_penalty=0.3, logit_bias={5: 2.0, 7: -1.0},
                                 min_tokens=1000, max_tokens=1000, stop_token_ids=[2], logprobs=5),
}


TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
        "combined movable metal type, oil-based ink and a screw press into a system that could produce "
        "books quickly and cheaply. Within fifty years, presses were working in more than two hundred "
        "cities across Europe, and the number of books in circulation grew from thousands to millions.")


def model_logits(max_batch: int) -> torch.Tensor:
    """The default model's logits at the first `max_batch` positions of TEXT: [max_batch, VOCAB]."""
    from tokenstep import LLM
    from tokenstep.runner.model_runner import SequenceChunk

    llm = LLM(progress=False)
    ids = llm.tokenizer.encode(TEXT)[:max_batch]
    assert len(ids) == max_batch, "TEXT is too short for this batch size"
    runner = llm.engine.runner
    blocks = list(range(1, 2 + max_batch // runner.block_size))
    return runner.forward([SequenceChunk(ids, 0, blocks)], all_logits=True)


def measure(all_logits: torch.Tensor, batch: int, params: SamplingParams, steps: int) -> float:
    generator = torch.Generator().manual_seed(0)
    logits = all_logits[:batch].contiguous()
    prompt = torch.randint(0, VOCAB, (HISTORY // 2,), generator=generator).tolist()
    output = torch.randint(0, VOCAB, (HISTORY // 2,), generator=generator).tolist()
    rows = [SamplingRow(params, 1, b, 0, prompt, output, frozenset({2})) for b in range(batch)]
    for _ in range(5):
        sample(logits, rows)
    started = time.perf_counter()
    for _ in range(steps):
        sample(logits, rows)
    return (time.perf_counter() - started) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    all_logits = model_logits(max(args.batch_sizes))
    print(f"threads={torch.get_num_threads()} vocab={VOCAB} history={HISTORY}")
    print(f"{'setting':<12}" + "".join(f"{f'batch {b} µs/step':>20}" for b in args.batch_sizes))
    for name, params in SETTINGS.items():
        print(f"{name:<12}" + "".join(f"{measure(all_logits, b, params, args.steps):>20.0f}" for b in args.batch_sizes))


if __name__ == "__main__":
    main()
