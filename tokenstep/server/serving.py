"""Request <-> engine: turn a validated request into a Job (tokenized prompts, resolved
SamplingParams), run it on the AsyncEngine, and shape the answer (JSON or a stream).

A request is handed to the engine and its first output awaited *before* any response starts, so
engine refusals still get their own status (400 bad token ids, 429 queue full, 503 dead engine);
from then on a stream reports errors as an error event. A client that disconnects cancels the
work, and every engine request of the job is aborted (its KV blocks are freed on the engine's next
step); one that leaves while its requests are still being added is aborted once they are in.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from tokenstep.engine.async_engine import AsyncEngine, EngineDeadError, QueueFullError
from tokenstep.outputs import RequestOutput
from tokenstep.server import responses as api
from tokenstep.server.choices import ChoiceState, chat_choice, completion_choice, usage
from tokenstep.server.errors import APIError, bad_request, from_engine_error, from_value_error, shutting_down
from tokenstep.server.events import stream_events
from tokenstep.server.http import ClientDisconnected, EventStreamResponse, merge, unless_disconnected
from tokenstep.server.jobs import Job, Kind, Progress, Prompt
from tokenstep.server.metrics import ServerMetrics
from tokenstep.server.protocol import REQUEST_FIELDS, ChatCompletionRequest, ChatMessage, CompletionRequest
from tokenstep.server.request_params import SamplingRequest, build_params, chat_sampling, completion_sampling
from tokenstep.server.settings import ServerSettings

CLIENT_CLOSED_REQUEST = 499  # nginx's status for "the client went away"; nobody receives it
TEMPLATE_ROLES = {"developer": "system"}  # OpenAI's newer role name; chat templates know "system"


class OpenAIServing:
    """The OpenAI endpoints' logic, over one AsyncEngine and one model."""

    def __init__(self, engine: AsyncEngine, settings: ServerSettings, metrics: ServerMetrics) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics
        self.tokenizer = engine.engine.tokenizer
        self.max_model_len = engine.engine.max_model_len
        self.generation_config = engine.engine.generation_config

    # -- endpoints --------------------------------------------------------------------------------
    def models(self, created: int) -> api.ModelList:
        return api.ModelList(data=[api.ModelCard(id=self.settings.model_name, created=created,
                                                 max_model_len=self.max_model_len)])

    def check_model(self, model: str) -> None:
        if model != self.settings.model_name:
            raise APIError(404, f"the model {model[:200]!r} does not exist; this server serves "
                                f"{self.settings.model_name!r}", param="model", code="model_not_found")

    async def completions(self, request: CompletionRequest, http: Request) -> Response:
        self.check_model(request.model)
        sampling = completion_sampling(request)
        prompts = await asyncio.to_thread(self._completion_prompts, request.prompt, request.echo)
        job = self._job("completion", request, prompts, sampling, request.logprobs is not None, request.echo)
        return await self._respond(job, http)

    async def chat(self, request: ChatCompletionRequest, http: Request) -> Response:
        self.check_model(request.model)
        sampling = chat_sampling(request, self.settings)
        prompt = await asyncio.to_thread(self._chat_prompt, request.messages)
        job = self._job("chat", request, [prompt], sampling, request.logprobs)
        return await self._respond(job, http)

    # -- preparing a job --------------------------------------------------------------------------
    def _job(self, kind: Kind, request: CompletionRequest | ChatCompletionRequest, prompts: list[Prompt],
             sampling: SamplingRequest, want_logprobs: bool, echo: bool = False) -> Job:
        if request.stream_options is not None and not request.stream:
            raise bad_request("stream_options is only allowed with stream: true", "stream_options")
        prompt_param = "prompt" if kind == "completion" else "messages"
        resolved = [build_params(sampling, self.settings, self.generation_config, len(prompt.token_ids),
                                 self.max_model_len, prompt_param) for prompt in prompts]
        params = [p for p, _ in resolved]
        explain = None
        if request.explain:
            explain = {"sampling": resolved[0][1], "context_window": self.max_model_len,
                       "prompts": [{"prompt_tokens": len(prompt.token_ids), "max_tokens": p.max_tokens}
                                   for prompt, p in zip(prompts, params)]}
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        return Job(kind, self.settings.model_name, prompts, params, stream=request.stream,
                   include_usage=include_usage, want_logprobs=want_logprobs, echo=echo, explain=explain)

    def _completion_prompts(self, prompt: str | list, echo: bool) -> list[Prompt]:
        items = [prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else prompt
        prompts = []
        for item in items:
            if isinstance(item, str):
                if not item:
                    raise bad_request("prompt must not be empty", "prompt")
                if self.tokenizer is None:
                    raise bad_request("this model has no tokenizer: send the prompt as token ids", "prompt")
                prompts.append(Prompt(self.tokenizer.encode(item), item))
            else:
                if not item:
                    raise bad_request("prompt must not be empty", "prompt")
                text = None
                if echo and self.tokenizer is not None:
                    text = self.tokenizer.decode(item, skip_special_tokens=False)
                prompts.append(Prompt(list(item), text))
        return prompts

    def _chat_prompt(self, messages: list[ChatMessage]) -> Prompt:
        if self.tokenizer is None or not self.tokenizer.chat_template:
            raise bad_request("this model has no chat template: use /v1/completions", "messages")
        turns: list[dict[str, Any]] = []
        for message in messages:
            turn = {"role": TEMPLATE_ROLES.get(message.role, message.role), "content": message.text()}
            if message.name is not None:
                turn["name"] = message.name
            turns.append(turn)
        try:
            text = self.tokenizer.apply_chat_template(turns, add_generation_prompt=True)
        except Exception as error:  # the model's template refused these messages (e.g. role order)
            raise bad_request(f"the model's chat template could not render these messages: {error}",
                              "messages") from None
        return Prompt(self.tokenizer.encode(text, add_special_tokens=False), text)

    # -- running a job ----------------------------------------------------------------------------
    async def _respond(self, job: Job, http: Request) -> Response:
        runs = [self._run(job, index) for index in range(len(job.prompts))]
        # Shielded: every run gets to its first output (or failure) and so owns its engine request;
        # a client that leaves this early has its requests aborted right then (docs/server.md).
        start = asyncio.ensure_future(_first_outputs(runs))
        streaming = False
        try:
            firsts = await unless_disconnected(asyncio.shield(start), http.receive)
            if job.stream:
                streaming = True  # from here the response owns the runs and their cleanup
                events = stream_events(job, _resume(firsts, runs), self.tokenizer)
                return EventStreamResponse(events, on_close=lambda: self._abort(job))
            progress = await unless_disconnected(self._collect(job, _resume(firsts, runs)), http.receive)
            return Response(self._final(progress).model_dump_json(), media_type="application/json")
        except ClientDisconnected:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except asyncio.CancelledError:  # the drain time after SIGTERM is over: say so, then stop
            asyncio.current_task().uncancel()
            return shutting_down().response()
        except ValueError as error:
            raise from_value_error(error, REQUEST_FIELDS) from None
        except (QueueFullError, EngineDeadError) as error:
            raise from_engine_error(error) from None
        finally:
            if not streaming:
                start.add_done_callback(lambda _: self._abort(job))  # runs at once if it is done

    async def _run(self, job: Job, index: int) -> AsyncIterator[RequestOutput]:
        """One prompt's deltas from the engine, recorded in the metrics; aborted if left early."""
        request_id, prompt = job.request_id(index), job.prompts[index]
        timer = self.metrics.start_request()
        finished = False
        try:
            async for output in self.engine.generate(prompt.text, job.params[index], prompt.token_ids, request_id):
                timer.observe(output)
                finished = output.finished
                yield output
        finally:
            if not finished:
                self.engine.abort(request_id)

    def _abort(self, job: Job) -> None:
        """Abort every engine request of the job (finished ones are unknown to the engine: a no-op).
        Synchronous, so it also runs from code that is being cancelled."""
        for index in range(len(job.prompts)):
            self.engine.abort(job.request_id(index))

    async def _collect(self, job: Job, outputs: AsyncIterator[tuple[int, RequestOutput]]) -> Progress:
        progress = Progress(job)
        async for prompt_index, output in outputs:
            progress.record_cache(prompt_index, output)
            for delta in output.outputs:
                progress.state(prompt_index, delta.index).add(delta)
        return progress

    def _final(self, progress: Progress) -> api.Completion | api.ChatCompletion:
        job = progress.job
        total = usage(progress.prompt_lengths, progress.states, sum(progress.cached_tokens))
        if job.kind == "chat":
            choices = [chat_choice(s, self.tokenizer, job.want_logprobs) for s in progress.states]
            return api.ChatCompletion(id=job.id, created=job.created, model=job.model, choices=choices,
                                      usage=total, explain=job.explain)
        choices = [_final_completion_choice(s, self.tokenizer, job.want_logprobs) for s in progress.states]
        return api.Completion(id=job.id, created=job.created, model=job.model, choices=choices, usage=total,
                              explain=job.explain)


def _final_completion_choice(state: ChoiceState, tokenizer, want_logprobs: bool) -> api.CompletionChoice:
    state.text_offset = len(state.prefix)
    return completion_choice(state, state.prefix + state.text, None, tokenizer, want_logprobs)


async def _first_outputs(runs: list[AsyncIterator[RequestOutput]]) -> list[RequestOutput]:
    """Start every run and wait for each one's first output (or failure), then raise the first
    failure. Siblings are waited for, not cancelled: one may still be being added (see _respond)."""
    results = await asyncio.gather(*(anext(run) for run in runs), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _resume(firsts: list[RequestOutput], runs: list[AsyncIterator[RequestOutput]]
            ) -> AsyncIterator[tuple[int, RequestOutput]]:
    """All outputs of the runs, tagged with the prompt index, starting with the awaited first ones."""
    async def chain(first: RequestOutput, run: AsyncIterator[RequestOutput]) -> AsyncIterator[RequestOutput]:
        yield first
        if not first.finished:
            async for output in run:
                yield output

    return merge([chain(first, run) for first, run in zip(firsts, runs)])
