"""LLM: the synchronous offline API over the Engine (generate, stream, chat)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from tqdm import tqdm

from tokenstep.config import EngineConfig
from tokenstep.engine.engine import Engine
from tokenstep.outputs import CompletionOutput, RequestOutput
from tokenstep.params import SamplingParams, resolve_sampling_params
from tokenstep.text.tokenizer import Tokenizer

PROGRESS_MIN_PROMPTS = 8  # a progress bar for generate() over at least this many prompts

Message = dict[str, Any]


class LLM:
    """Load a model and generate from it.

    `model` is an HF directory (config.json + *.safetensors + tokenizer.json), a .gguf file, or None
    for the bundled default model (SmolLM2-135M-Instruct). Other keyword arguments are EngineConfig
    fields (dtype, device, max_model_len, kv_cache_memory, num_threads, ...).
    """

    def __init__(self, model: str | None = None, *, progress: bool = True, **engine_args: Any) -> None:
        self.config = EngineConfig(model=None if model is None else str(model), **engine_args)
        self.engine = Engine.from_config(self.config, progress)
        self._ids = itertools.count()

    @property
    def tokenizer(self) -> Tokenizer | None:
        return self.engine.tokenizer

    def default_sampling_params(self, **overrides: Any) -> SamplingParams:
        """SamplingParams from the model's generation_config.json, then `overrides`. Never applied
        silently: generate() uses exactly the SamplingParams it is given."""
        return resolve_sampling_params(overrides, None, self.engine.generation_config)[0]

    def generate(self, prompts: str | Sequence[str] | None = None,
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 *, prompt_token_ids: Sequence[Sequence[int]] | None = None, use_tqdm: bool = True) -> list[RequestOutput]:
        """Generate for every prompt at once; results in input order, each with its full text.
        `sampling_params` is one SamplingParams for all prompts, or a list with one per prompt."""
        inputs = self._inputs(prompts, prompt_token_ids)
        if isinstance(sampling_params, Sequence):
            if len(sampling_params) != len(inputs):
                raise ValueError(f"{len(sampling_params)} sampling_params for {len(inputs)} prompts")
            params_list = list(sampling_params)
        else:
            params_list = [sampling_params or SamplingParams()] * len(inputs)
        request_ids = []
        try:
            for (prompt, token_ids), params in zip(inputs, params_list):
                request_ids.append(self._add(prompt, token_ids, params))
            return self._run_to_completion(request_ids, use_tqdm and len(inputs) >= PROGRESS_MIN_PROMPTS)
        except BaseException:
            for request_id in request_ids:  # leave the engine clean for the next call
                self.engine.abort(request_id)
            self.engine.pending_outputs.clear()
            raise

    def stream(self, prompt: str | None = None, sampling_params: SamplingParams | None = None,
               *, prompt_token_ids: Sequence[int] | None = None) -> Iterator[RequestOutput]:
        """Yield deltas for one prompt as tokens are produced: `outputs[i].text` is the new text only."""
        request_id = self._add(prompt, prompt_token_ids, sampling_params or SamplingParams())
        finished = False
        try:
            while not finished:
                for output in self.engine.step():
                    if output.request_id == request_id:
                        finished = output.finished
                        yield output
        finally:
            if not finished:  # the caller stopped early (or an error): free the request
                self.engine.abort(request_id)
                self.engine.pending_outputs.clear()

    def chat(self, messages: list[Message] | list[list[Message]], sampling_params: SamplingParams | None = None,
             *, use_tqdm: bool = True, **template_args: Any) -> list[RequestOutput]:
        """Generate replies to one conversation or a list of them, via the model's chat template."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [self.render_chat(c, **template_args) for c in conversations]
        token_ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        outputs = self.generate(None, sampling_params, prompt_token_ids=token_ids, use_tqdm=use_tqdm)
        for output, prompt in zip(outputs, prompts):
            output.prompt = prompt
        return outputs

    def render_chat(self, messages: list[Message], **template_args: Any) -> str:
        """The prompt text the chat template makes of `messages` (with the assistant turn opened)."""
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer, so it has no chat template")
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **template_args)

    # -- internals --------------------------------------------------------------------------------
    def _inputs(self, prompts, prompt_token_ids) -> list[tuple[str | None, list[int] | None]]:
        if prompt_token_ids is not None:
            return [(None, list(ids)) for ids in prompt_token_ids]
        if prompts is None:
            raise ValueError("give prompts or prompt_token_ids")
        if isinstance(prompts, str):
            prompts = [prompts]
        return [(prompt, None) for prompt in prompts]

    def _add(self, prompt: str | None, token_ids: Sequence[int] | None, params: SamplingParams) -> str:
        request_id = str(next(self._ids))
        self.engine.add_request(request_id, prompt, params, None if token_ids is None else list(token_ids))
        return request_id

    def _run_to_completion(self, request_ids: list[str], progress: bool) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        with tqdm(total=len(request_ids), desc="Generating", unit="prompt", disable=not progress) as bar:
            while len(results) < len(request_ids) or any(not r.finished for r in results.values()):
                for delta in self.engine.step():
                    merged = results.setdefault(delta.request_id, _empty_like(delta))
                    _merge(merged, delta)
                    if merged.finished:
                        bar.update(1)
        return [results[request_id] for request_id in request_ids]


def _empty_like(delta: RequestOutput) -> RequestOutput:
    choices = [CompletionOutput(c.index, "", [], logprobs=None if c.logprobs is None else [],
                                logprobs_mode=c.logprobs_mode) for c in delta.outputs]
    return RequestOutput(delta.request_id, delta.prompt, delta.prompt_token_ids, choices,
                         num_cached_tokens=delta.num_cached_tokens)


def _merge(full: RequestOutput, delta: RequestOutput) -> None:
    for choice, new in zip(full.outputs, delta.outputs):
        choice.text += new.text
        choice.token_ids.extend(new.token_ids)
        if new.logprobs is not None:
            choice.logprobs = (choice.logprobs or []) + new.logprobs
            choice.logprobs_mode = new.logprobs_mode
        if new.trace is not None:
            choice.trace = (choice.trace or []) + new.trace
        choice.finish_reason, choice.stop_reason = new.finish_reason, new.stop_reason
    full.finished = delta.finished
