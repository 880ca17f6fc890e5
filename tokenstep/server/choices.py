"""Engine deltas -> OpenAI choices. One ChoiceState per choice gathers its text, tokens, logprobs and
trace; the same delta makes a stream chunk's choice, and the gathered whole makes the final one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tokenstep.outputs import CompletionOutput, StepTrace, TokenLogprob
from tokenstep.server import responses as api
from tokenstep.text.tokenizer import Tokenizer


def token_text(tokenizer: Tokenizer | None, token_id: int) -> str:
    """A token as text (special tokens included); `token_id:N` for a model without a tokenizer."""
    if tokenizer is None:
        return f"token_id:{token_id}"
    return tokenizer.decode([token_id], skip_special_tokens=False)


@dataclass
class ChoiceState:
    """Everything one choice has produced so far."""

    index: int  # OpenAI's choice index: prompt index * n + choice index
    prefix: str = ""  # echoed prompt text, emitted before the first generated text
    text: str = ""
    num_tokens: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)
    logprobs_mode: str | None = None
    trace: list[StepTrace] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    text_offset: int = 0  # characters before the next token (completions' logprobs.text_offset)
    started: bool = False  # a first chunk went out (chat: the role delta)

    def add(self, delta: CompletionOutput) -> bool:
        """Take one delta; False when it brings nothing new (a choice that finished earlier)."""
        if self.finish_reason is not None:
            return False
        self.text += delta.text
        self.num_tokens += len(delta.token_ids)
        self.logprobs.extend(delta.logprobs or [])
        self.logprobs_mode = delta.logprobs_mode or self.logprobs_mode
        self.trace.extend(delta.trace or [])
        if delta.finish_reason is not None:
            self.finish_reason, self.stop_reason = str(delta.finish_reason), delta.stop_reason
        return bool(delta.text or delta.token_ids or delta.finish_reason is not None)


def trace_dicts(trace: list[StepTrace] | None) -> list[dict[str, Any]] | None:
    return [dataclasses.asdict(step) for step in trace] if trace else None


def completion_logprobs(entries: list[TokenLogprob], tokenizer: Tokenizer | None,
                        state: ChoiceState) -> api.CompletionLogprobs:
    """OpenAI's legacy logprobs: parallel lists; text_offset counts from the start of the output
    (of the echoed prompt with echo), continuing across stream chunks."""
    result = api.CompletionLogprobs()
    for entry in entries:
        text = token_text(tokenizer, entry.token_id)
        result.tokens.append(text)
        result.token_logprobs.append(entry.logprob)
        result.top_logprobs.append({token_text(tokenizer, t): lp for t, lp in entry.top.items()})
        result.text_offset.append(state.text_offset)
        state.text_offset += len(text)
    return result


def chat_logprobs(entries: list[TokenLogprob], tokenizer: Tokenizer | None) -> api.ChatLogprobs:
    content = []
    for entry in entries:
        text = token_text(tokenizer, entry.token_id)
        top = [api.TopLogprob(token=t, logprob=lp, bytes=list(t.encode()))
               for t, lp in ((token_text(tokenizer, i), lp) for i, lp in entry.top.items())]
        content.append(api.TokenLogprob(token=text, logprob=entry.logprob, bytes=list(text.encode()), top_logprobs=top))
    return api.ChatLogprobs(content=content)


def completion_choice(state: ChoiceState, text: str, delta: CompletionOutput | None,
                      tokenizer: Tokenizer | None, want_logprobs: bool) -> api.CompletionChoice:
    """A completion choice: from one delta when streaming, or (delta None) from the whole state."""
    entries = state.logprobs if delta is None else (delta.logprobs or [])
    trace = state.trace if delta is None else delta.trace
    finish = state.finish_reason if delta is None or delta.finish_reason is not None else None
    return api.CompletionChoice(
        index=state.index, text=text, finish_reason=finish,
        logprobs=completion_logprobs(entries, tokenizer, state) if want_logprobs else None,
        stop_reason=state.stop_reason if finish else None, logprobs_mode=state.logprobs_mode if want_logprobs else None,
        trace=trace_dicts(trace))


def chat_choice(state: ChoiceState, tokenizer: Tokenizer | None, want_logprobs: bool) -> api.ChatChoice:
    return api.ChatChoice(
        index=state.index, message=api.AssistantMessage(content=state.text), finish_reason=state.finish_reason,
        logprobs=chat_logprobs(state.logprobs, tokenizer) if want_logprobs else None,
        stop_reason=state.stop_reason, logprobs_mode=state.logprobs_mode if want_logprobs else None,
        trace=trace_dicts(state.trace))


def chat_chunk_choice(state: ChoiceState, delta: CompletionOutput, tokenizer: Tokenizer | None,
                      want_logprobs: bool) -> api.ChatChunkChoice:
    finish = str(delta.finish_reason) if delta.finish_reason is not None else None
    return api.ChatChunkChoice(
        index=state.index, delta=api.Delta(content=delta.text if delta.text or not finish else None),
        finish_reason=finish, logprobs=chat_logprobs(delta.logprobs or [], tokenizer) if want_logprobs else None,
        stop_reason=state.stop_reason if finish else None,
        logprobs_mode=state.logprobs_mode if want_logprobs else None, trace=trace_dicts(delta.trace))


def usage(prompt_lengths: list[int], states: list[ChoiceState], cached_tokens: int) -> api.Usage:
    prompt_tokens = sum(prompt_lengths)
    completion_tokens = sum(state.num_tokens for state in states)
    return api.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     total_tokens=prompt_tokens + completion_tokens,
                     prompt_tokens_details=api.PromptTokensDetails(cached_tokens=cached_tokens))
