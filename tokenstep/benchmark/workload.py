"""The requests a benchmark sends: token ids chosen without a tokenizer, reproducible by seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

FIRST_ORDINARY_TOKEN = 1000  # well past special tokens in every vocabulary we load
TOKEN_SPAN = 20_000


@dataclass(frozen=True)
class Workload:
    num_requests: int
    prompt_len: int
    output_len: int
    mixed: bool = False  # lengths drawn from [len/2, 3*len/2] instead of all equal
    seed: int = 0

    def requests(self) -> list[tuple[list[int], int]]:
        """(prompt token ids, output length) per request."""
        rng = random.Random(self.seed)
        result = []
        for _ in range(self.num_requests):
            prompt_len, output_len = self.prompt_len, self.output_len
            if self.mixed:
                prompt_len = rng.randint(max(1, prompt_len // 2), prompt_len * 3 // 2)
                output_len = rng.randint(max(1, output_len // 2), output_len * 3 // 2)
            prompt = [FIRST_ORDINARY_TOKEN + rng.randrange(TOKEN_SPAN) for _ in range(prompt_len)]
            result.append((prompt, output_len))
        return result


@dataclass
class Result:
    """What one engine did with one workload."""

    engine: str
    output_tokens: int
    seconds: float
    ttft_mean: float | None = None  # seconds from submission to first token
    tpot_mean: float | None = None  # seconds per output token after the first, per request
    tpot_p99: float | None = None
    note: str = ""

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]
