"""A job's engine outputs as OpenAI's server-sent events: `data: {chunk}` ... `data: [DONE]`.

One chunk per choice delta (as OpenAI sends them); chat streams open each choice with a role delta;
`stream_options.include_usage` adds a last chunk with `choices: []` and the usage; an `explain`
block rides on the first chunk. An error after the stream started is an error event followed by
`[DONE]`, since the status line has already gone out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from tokenstep.engine.async_engine import EngineDeadError, QueueFullError
from tokenstep.outputs import CompletionOutput, RequestOutput
from tokenstep.server import responses as api
from tokenstep.server.choices import ChoiceState, chat_chunk_choice, completion_choice, usage
from tokenstep.server.errors import APIError, from_engine_error, from_value_error, internal_error
from tokenstep.server.http import DONE_EVENT, sse_event
from tokenstep.server.jobs import Job, Progress
from tokenstep.server.protocol import REQUEST_FIELDS
from tokenstep.text.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

Chunk = api.Completion | api.ChatCompletionChunk


async def stream_events(job: Job, outputs: AsyncIterator[tuple[int, RequestOutput]],
                        tokenizer: Tokenizer | None) -> AsyncIterator[bytes]:
    """The event stream of one job (a disconnect cancels it mid-way; the response then aborts the
    job's engine requests)."""
    progress = Progress(job)
    explain = job.explain
    try:
        if job.kind == "chat":
            for state in progress.states:
                yield sse_event(_chunk(job, _role_choice(state), explain))
                explain = None
        async for prompt_index, output in outputs:
            progress.record_cache(prompt_index, output)
            for delta in output.outputs:
                state = progress.state(prompt_index, delta.index)
                if state.add(delta) and _worth_sending(job, delta):
                    yield sse_event(_chunk(job, _delta_choice(job, state, delta, tokenizer), explain))
                    explain = None
        if job.include_usage:
            total = usage(progress.prompt_lengths, progress.states, sum(progress.cached_tokens))
            yield sse_event(_chunk(job, None, None, total))
    except Exception as error:  # the stream has started: report in-band, then end it properly
        yield sse_event(_error(error).body())
    yield DONE_EVENT


def _worth_sending(job: Job, delta: CompletionOutput) -> bool:
    # A token whose text is held back (a possible stop string, half a UTF-8 character) makes an
    # empty delta: send it only when it carries something else the client asked for.
    return bool(delta.text or delta.finish_reason is not None or (job.want_logprobs and delta.logprobs)
                or delta.trace)


def _delta_choice(job: Job, state: ChoiceState, delta: CompletionOutput,
                  tokenizer: Tokenizer | None) -> api.CompletionChoice | api.ChatChunkChoice:
    if job.kind == "chat":
        return chat_chunk_choice(state, delta, tokenizer, job.want_logprobs)
    text = delta.text
    if not state.started:  # echo: the prompt goes out before the first generated text
        state.started, state.text_offset = True, len(state.prefix)
        text = state.prefix + text
    return completion_choice(state, text, delta, tokenizer, job.want_logprobs)


def _role_choice(state: ChoiceState) -> api.ChatChunkChoice:
    state.started = True
    return api.ChatChunkChoice(index=state.index, delta=api.Delta(role="assistant", content=""))


def _chunk(job: Job, choice: api.CompletionChoice | api.ChatChunkChoice | None, explain: dict | None,
           total: api.Usage | None = None) -> Chunk:
    choices = [] if choice is None else [choice]
    model = api.ChatCompletionChunk if job.kind == "chat" else api.Completion
    return model(id=job.id, created=job.created, model=job.model, choices=choices, usage=total, explain=explain)


def _error(error: Exception) -> APIError:
    if isinstance(error, APIError):
        return error
    if isinstance(error, ValueError):
        return from_value_error(error, REQUEST_FIELDS)
    if isinstance(error, (QueueFullError, EngineDeadError)):
        return from_engine_error(error)
    logger.exception("stream failed")
    return internal_error()
