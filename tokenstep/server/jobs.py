"""A Job: one HTTP request made ready for the engine (prompts tokenized, SamplingParams resolved), and
the running record of what its choices produced."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Literal

from tokenstep.outputs import RequestOutput
from tokenstep.params import SamplingParams
from tokenstep.server.choices import ChoiceState

Kind = Literal["completion", "chat"]
ID_PREFIX = {"completion": "cmpl", "chat": "chatcmpl"}  # OpenAI's id prefixes


@dataclass(frozen=True)
class Prompt:
    """One prompt as the engine gets it: token ids, and its text where there is one."""

    token_ids: list[int]
    text: str | None = None


@dataclass
class Job:
    """Everything needed to run one request and to shape its answer."""

    kind: Kind
    model: str
    prompts: list[Prompt]
    params: list[SamplingParams]  # one per prompt (they differ only where max_tokens was capped)
    stream: bool = False
    include_usage: bool = False
    want_logprobs: bool = False
    echo: bool = False
    explain: dict | None = None
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.id = self.id or f"{ID_PREFIX[self.kind]}-{uuid.uuid4().hex}"

    @property
    def n(self) -> int:
        return self.params[0].n

    def request_id(self, prompt_index: int) -> str:
        """The engine's id of one prompt's request."""
        return f"{self.id}-{prompt_index}"


@dataclass
class Progress:
    """What a job's choices have produced so far, indexed as OpenAI numbers them."""

    job: Job
    states: list[ChoiceState] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)  # per prompt, from the prefix cache

    def __post_init__(self) -> None:
        job = self.job
        self.states = [ChoiceState(p * job.n + c, prefix=(prompt.text or "") if job.echo else "")
                       for p, prompt in enumerate(job.prompts) for c in range(job.n)]
        self.cached_tokens = [0] * len(self.job.prompts)

    def state(self, prompt_index: int, choice_index: int) -> ChoiceState:
        return self.states[prompt_index * self.job.n + choice_index]

    def record_cache(self, prompt_index: int, output: RequestOutput) -> None:
        self.cached_tokens[prompt_index] = max(self.cached_tokens[prompt_index], output.num_cached_tokens)

    @property
    def prompt_lengths(self) -> list[int]:
        return [len(prompt.token_ids) for prompt in self.job.prompts]
