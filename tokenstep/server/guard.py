"""The checks every HTTP request passes before any route sees it: header size (431), the API key
(401) and the body size (413). A plain ASGI middleware, so a streaming response passes through it
untouched. (uvicorn's h11 parser also caps headers, but only those that arrive in pieces.)"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tokenstep.server.errors import APIError
from tokenstep.server.settings import MAX_HEADER_BYTES

OPEN_PATHS = frozenset({"/health", "/"})  # load balancers probe /health; "/" is the playground page
OPEN_PREFIXES = ("/static/",)  # the page's own files: no secrets, and a page load cannot send a key
BEARER = "bearer "


class RequestGuard:
    """401 without the right `Authorization: Bearer <key>` (compared in constant time); 413 for a
    body over `max_body_bytes`, by its Content-Length or, when chunked, while it is read."""

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = _check_headers(scope) or self._check_key(scope["path"], headers) or self._check_length(headers)
        if refusal is None:
            body, refusal = await self._read_body(receive)
        if refusal is not None:
            await refusal.response()(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _check_key(self, path: str, headers: Headers) -> APIError | None:
        if self.api_key is None or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        authorization = headers.get("authorization", "")
        if not authorization.lower().startswith(BEARER):
            return APIError(401, "missing API key: send `Authorization: Bearer <key>`", code="invalid_api_key")
        given = authorization[len(BEARER):].strip().encode()
        if not hmac.compare_digest(given, self.api_key):
            return APIError(401, "incorrect API key", code="invalid_api_key")
        return None

    def _check_length(self, headers: Headers) -> APIError | None:
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return _too_large(self.max_body_bytes)
        return None

    async def _read_body(self, receive: Receive) -> tuple[bytes, APIError | None]:
        """The whole body, read up front (it is small by construction) so a route never reads past the limit."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away mid-body
                return b"", None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return b"", _too_large(self.max_body_bytes)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None


def _check_headers(scope: Scope) -> APIError | None:
    size = sum(len(name) + len(value) for name, value in scope["headers"])
    if size > MAX_HEADER_BYTES:
        return APIError(431, f"the request headers are larger than the server's limit of {MAX_HEADER_BYTES} bytes",
                        code="headers_too_large")
    return None


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is larger than the server's limit of {limit} bytes",
                    code="request_too_large")


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that hands out the body already read, then listens to the client (for disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
