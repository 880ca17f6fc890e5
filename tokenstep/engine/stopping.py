"""check_stop: the four ways a generation ends, checked after every appended token.

Order: a stop token (EOS or stop_token_ids, unless min_tokens not yet reached or ignore_eos) or a
stop string (found by the detokenizer) -> "stop"; max_tokens -> "length"; the deadline -> "timeout".
"""

from __future__ import annotations

import time

from tokenstep.engine.request import Request
from tokenstep.outputs import FinishReason


def check_stop(request: Request, matched_stop_string: str | None, now: float | None = None) -> FinishReason | None:
    """Set and return the request's finish reason, or None if it goes on."""
    params = request.params
    num_output = len(request.output_token_ids)
    last = request.output_token_ids[-1]
    if num_output >= params.min_tokens:
        if last in params.stop_token_ids:
            return _finish(request, FinishReason.STOP, last)
        if last in request.eos_token_ids and not params.ignore_eos:
            return _finish(request, FinishReason.STOP, None)
        if matched_stop_string is not None:
            return _finish(request, FinishReason.STOP, matched_stop_string)
    if num_output >= request.max_tokens:
        return _finish(request, FinishReason.LENGTH, None)
    if params.timeout is not None and (now or time.monotonic()) - request.arrival_time >= params.timeout:
        return _finish(request, FinishReason.TIMEOUT, None)
    return None


def _finish(request: Request, reason: FinishReason, stop_reason: str | int | None) -> FinishReason:
    request.finish_reason = reason
    request.stop_reason = stop_reason
    return reason
