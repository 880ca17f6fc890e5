"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with the right status.

Every failure a client can cause becomes an APIError here; anything else is a 500 whose body says
only "internal error" (the traceback goes to the server log, never to the client).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import ValidationError
from starlette.responses import JSONResponse

from tokenstep.engine.async_engine import EngineDeadError, QueueFullError
from tokenstep.server.protocol import REFUSED, REFUSED_DEFAULT, SHAPES
from tokenstep.server.settings import RETRY_AFTER_S

INVALID_REQUEST = "invalid_request_error"  # OpenAI's type for every 4xx caused by the request
LEADING_NAME = re.compile(r"^([a-z_]+)\b")  # engine/SamplingParams errors start with the field name
FIELD_NAME = re.compile(r"[a-z_]+")


class APIError(Exception):
    """A failure to report to the client as-is: status, OpenAI error body, optional headers."""

    def __init__(self, status: int, message: str, *, type: str = INVALID_REQUEST, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def from_value_error(error: ValueError, known_params: Iterable[str], renames: dict[str, str] | None = None) -> APIError:
    """A 400 for a ValueError from SamplingParams or the engine, whose message starts with the
    field it is about (when it is a request field, it becomes `param`)."""
    message = str(error)
    match = LEADING_NAME.match(message)
    name = match.group(1) if match else None
    name = (renames or {}).get(name, name)
    return bad_request(message, name if name in set(known_params) else None)


def from_engine_error(error: Exception) -> APIError:
    """QueueFullError -> 429 with Retry-After; EngineDeadError -> 503."""
    if isinstance(error, QueueFullError):
        return APIError(429, str(error), type="rate_limit_error", code="rate_limit_exceeded",
                        headers={"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(error, EngineDeadError):
        return APIError(503, "the engine is not running; the server must be restarted", type="server_error",
                        code="engine_dead")
    return internal_error()


def shutting_down() -> APIError:
    return APIError(503, "the server is shutting down", type="server_error", code="shutting_down")


def internal_error() -> APIError:
    return APIError(500, "internal error (see the server log)", type="server_error", code="internal_error")


def from_validation_error(error: ValidationError, field_names: frozenset[str]) -> APIError:
    """The first problem pydantic found, as one line naming the field (`messages[0].content`)."""
    errors = error.errors(include_url=False)
    first = errors[0]
    param = _param_path(first["loc"], field_names)
    if first["type"] == "extra_forbidden":
        return bad_request(f"unrecognized request argument: {param}", param, "unknown_parameter")
    if first["type"] == "missing":
        return bad_request(f"{param} is required", param, "missing_required_parameter")
    if first["type"] == "none_required":
        return bad_request(REFUSED.get(param, f"{param} {REFUSED_DEFAULT}"), param, "unsupported_parameter")
    names = FIELD_NAME.findall(param)
    shape = SHAPES.get(names[-1]) if names else None
    if shape is not None:  # a field of several shapes fails once per shape: say what it accepts
        return bad_request(f"{param} {shape}", param, "invalid_value")
    return bad_request(f"{param}: {first['msg']}", param, "invalid_value")


def _param_path(loc: tuple, field_names: frozenset[str]) -> str:
    # loc mixes field names, list indices and pydantic's union branch tags ("str", "list[str]");
    # keep the first two kinds only.
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in field_names or not parts:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "body"
