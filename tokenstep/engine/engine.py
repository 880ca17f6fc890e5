"""Engine: add_request / abort / step. One step = schedule -> forward + sample -> update.

The engine itself is pure Python: tensors live in the ModelRunner. Each call to `step()` returns
RequestOutput *deltas* (new tokens and text since the last step) for the requests that advanced.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from tokenstep.config import EngineConfig
from tokenstep.engine.block_allocator import BlockAllocator
from tokenstep.engine.request import Request
from tokenstep.engine.scheduler import ScheduledChunk, Scheduler
from tokenstep.engine.stopping import check_stop
from tokenstep.outputs import CompletionOutput, FinishReason, RequestOutput, StepTrace, TokenLogprob
from tokenstep.params import SamplingParams
from tokenstep.text.detokenizer import IncrementalDetokenizer
from tokenstep.text.tokenizer import Tokenizer

SEED_BITS = 63  # a fresh seed for requests that give none: fits a signed 64-bit int everywhere


@dataclass
class SampledToken:
    """The sampler's answer for one request: the token and, if asked, its logprobs and trace."""

    token_id: int
    logprob: TokenLogprob | None = None
    trace: StepTrace | None = None


class Engine:
    def __init__(self, runner, tokenizer: Tokenizer | None, eos_token_ids: tuple[int, ...],
                 config: EngineConfig, max_model_len: int, vocab_size: int,
                 generation_config: dict | None = None) -> None:
        self.runner = runner  # a ModelRunner: the only owner of tensors
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.generation_config = generation_config or {}  # the model's sampling defaults, applied only on request
        self.allocator = BlockAllocator(runner.num_blocks, config.block_size)
        self.scheduler = Scheduler(self.allocator, config.max_num_seqs, config.max_num_batched_tokens,
                                   config.enable_prefix_caching)
        self.requests: dict[str, list[Request]] = {}  # parent request id -> its choices
        self.pending_outputs: list[RequestOutput] = []  # finals of aborted/expired requests

    @classmethod
    def from_config(cls, config: EngineConfig, progress: bool = True) -> Engine:
        from tokenstep.runner.model_runner import ModelRunner  # torch stays out of the control plane

        runner, loaded = ModelRunner.from_config(config, progress)
        max_model_len = min(config.max_model_len or loaded.config.max_position_embeddings,
                            loaded.config.max_position_embeddings)
        return cls(runner, loaded.tokenizer, loaded.eos_token_ids, config, max_model_len, loaded.config.vocab_size,
                   loaded.generation_config)

    # -- public API -------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: str | None, params: SamplingParams,
                    prompt_token_ids: list[int] | None = None) -> None:
        """Queue a prompt (text, or token ids) for generation; raises ValueError on bad input."""
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        token_ids = self._prompt_ids(prompt, prompt_token_ids)
        self._check_token_ids(params)
        max_tokens = self._max_tokens(len(token_ids), params)
        seed = params.seed if params.seed is not None else secrets.randbits(SEED_BITS)
        eos = frozenset() if params.ignore_eos else self.eos_token_ids
        choices = []
        for index in range(params.n):
            detokenizer = None if self.tokenizer is None else IncrementalDetokenizer(
                self.tokenizer, token_ids, params.stop, params.skip_special_tokens,
                params.include_stop_str_in_output)
            request_key = request_id if params.n == 1 else f"{request_id}#{index}"
            choices.append(Request(request_key, request_id, index, prompt, list(token_ids), params, seed,
                                   eos, max_tokens, detokenizer))
        self.requests[request_id] = choices
        for request in choices:
            self.scheduler.add(request)

    def abort(self, request_id: str) -> None:
        """Cancel a request; its blocks are freed now and a final output is returned by the next step."""
        if request_id in self.requests:
            self._end(request_id, FinishReason.ABORT)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def step(self) -> list[RequestOutput]:
        """Run one forward pass over the scheduled batch and return the outputs that advanced."""
        self._expire_deadlines()
        scheduled = self.scheduler.schedule()
        sampled = self.runner.execute(scheduled) if not scheduled.is_empty else {}
        return self._update(scheduled.chunks, sampled)

    # -- internals --------------------------------------------------------------------------------
    def _update(self, chunks: list[ScheduledChunk], sampled: dict[str, SampledToken]) -> list[RequestOutput]:
        advanced: dict[str, None] = {}
        for chunk in chunks:
            request = chunk.request
            request.num_computed_tokens += chunk.num_tokens
            self.scheduler.register_computed_blocks(request)
            if request.request_id in sampled:
                self._append(request, sampled[request.request_id])
                advanced[request.parent_id] = None
        outputs, self.pending_outputs = self.pending_outputs, []
        for parent_id in advanced:
            choices = self.requests[parent_id]
            outputs.append(self._output(choices))
            if all(r.finished for r in choices):
                del self.requests[parent_id]
        return outputs

    def _append(self, request: Request, sampled: SampledToken) -> None:
        request.output_token_ids.append(sampled.token_id)
        if sampled.logprob is not None:
            request.logprobs.append(sampled.logprob)
        if sampled.trace is not None:
            if self.tokenizer is not None:
                for candidate in sampled.trace.candidates:
                    candidate.text = self.tokenizer.decode([candidate.token_id], skip_special_tokens=False)
            request.traces.append(sampled.trace)
        matched = None
        if request.detokenizer is not None:
            allowed = len(request.output_token_ids) >= request.params.min_tokens
            matched = request.detokenizer.add_token(sampled.token_id, check_stop=allowed)
        if check_stop(request, matched) is not None:
            if request.detokenizer is not None and matched is None:
                request.detokenizer.flush_pending()
            self.scheduler.finish(request)

    def _output(self, choices: list[Request]) -> RequestOutput:
        """A delta RequestOutput: for each choice, what is new since the last output."""
        completions = []
        for request in choices:
            new_ids = request.output_token_ids[request.num_emitted_tokens:]
            request.num_emitted_tokens = len(request.output_token_ids)
            text = request.detokenizer.take_delta(request.finished) if request.detokenizer else ""
            logprobs = None
            if request.params.logprobs is not None:
                logprobs = request.logprobs[request.num_emitted_logprobs:]
                request.num_emitted_logprobs = len(request.logprobs)
            trace = None
            if request.params.trace:
                trace = request.traces[request.num_emitted_traces:]
                request.num_emitted_traces = len(request.traces)
            completions.append(CompletionOutput(
                request.choice_index, text, new_ids, request.finish_reason, request.stop_reason, logprobs,
                request.params.logprobs_mode if logprobs is not None else None, trace))
        first = choices[0]
        return RequestOutput(first.parent_id, first.prompt, first.prompt_token_ids, completions,
                             finished=all(r.finished for r in choices), num_cached_tokens=first.num_cached_tokens)

    def _expire_deadlines(self) -> None:
        now = time.monotonic()
        for parent_id, choices in list(self.requests.items()):
            timeout = choices[0].params.timeout
            if timeout is not None and now - choices[0].arrival_time >= timeout:
                self._end(parent_id, FinishReason.TIMEOUT, flush_text=True)

    def _end(self, parent_id: str, reason: FinishReason, flush_text: bool = False) -> None:
        """End every unfinished choice of a request now; its final output goes out with the next step."""
        choices = self.requests.pop(parent_id)
        for request in choices:
            if not request.finished:
                request.finish_reason = reason
                if flush_text and request.detokenizer is not None:
                    request.detokenizer.flush_pending()
                self.scheduler.finish(request)
        self.pending_outputs.append(self._output(choices))

    def _prompt_ids(self, prompt: str | None, prompt_token_ids: list[int] | None) -> list[int]:
        if prompt_token_ids is None:
            if prompt is None:
                raise ValueError("give a prompt or prompt_token_ids")
            if self.tokenizer is None:
                raise ValueError("this model has no tokenizer.json; pass prompt_token_ids instead of text")
            prompt_token_ids = self.tokenizer.encode(prompt)
        if not prompt_token_ids:
            raise ValueError("the prompt is empty: at least one token is needed")
        bad = [t for t in prompt_token_ids if not isinstance(t, int) or isinstance(t, bool)
               or not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token id {bad[0]!r} is outside the vocabulary [0, {self.vocab_size})")
        return list(prompt_token_ids)

    def _check_token_ids(self, params: SamplingParams) -> None:
        for name, ids in (("logit_bias", params.logit_bias or {}), ("stop_token_ids", params.stop_token_ids)):
            bad = [t for t in ids if t >= self.vocab_size]
            if bad:
                raise ValueError(f"{name}: token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")

    def _max_tokens(self, num_prompt: int, params: SamplingParams) -> int:
        room = self.max_model_len - num_prompt
        if room <= 0:
            raise ValueError(f"the prompt has {num_prompt} tokens but the context window is "
                             f"{self.max_model_len}; shorten the prompt")
        if params.max_tokens is not None and params.max_tokens > room:
            raise ValueError(f"prompt ({num_prompt} tokens) + max_tokens ({params.max_tokens}) exceeds the "
                             f"context window ({self.max_model_len}); lower max_tokens to at most {room}")
        needed = self.allocator.blocks_for(num_prompt + (params.max_tokens or room))
        if needed > self.allocator.num_blocks:
            raise ValueError(f"prompt + max_tokens needs {needed} KV blocks but the cache has "
                             f"{self.allocator.num_blocks}; raise kv_cache_memory or lower max_tokens")
        return params.max_tokens or room
