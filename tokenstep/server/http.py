"""HTTP plumbing under the routes: reading a JSON body, noticing a client that went away, and the
server-sent-events response that stops (and so aborts its requests) when it does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tokenstep.server.errors import APIError, bad_request, from_validation_error, shutting_down
from tokenstep.server.protocol import REQUEST_FIELDS

JSON_TYPES = ("application/json",)
DONE_EVENT = b"data: [DONE]\n\n"  # OpenAI's end-of-stream marker
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy may buffer the stream

Model = TypeVar("Model", bound=BaseModel)
T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was complete."""


async def read_request(request: Request, model: type[Model]) -> Model:
    """The body as `model`: 415 for a non-JSON content type, 400 for invalid JSON, a body that is not
    an object, or any field pydantic refuses (OpenAI's error shape, never FastAPI's 422)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in JSON_TYPES:
        raise APIError(415, f"Content-Type must be application/json, got {content_type or 'none'!r}",
                       code="unsupported_media_type")
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, bad UTF-8, absurdly long ints
        raise bad_request(f"the body is not valid JSON: {_first_line(error)}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request(f"the body must be a JSON object, got {type(data).__name__}", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise from_validation_error(error, REQUEST_FIELDS) from None


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__


async def wait_for_disconnect(receive: Receive) -> None:
    """Return once the client has gone (the body has been read already, so only that can come)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(awaitable: Awaitable[T], receive: Receive) -> T:
    """Await `awaitable`; if the client disconnects first, cancel it (which aborts its engine
    requests) and raise ClientDisconnected."""
    work = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler itself is cancelled (server shutdown)
        watcher.cancel()
        if not work.done():
            work.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await work
    if work.cancelled():
        raise ClientDisconnected()
    return work.result()


class EventStreamResponse(StreamingResponse):
    """`text/event-stream` whose body stops the moment the client disconnects, whatever ASGI
    version the server speaks. `on_close` runs however the response ends, even when the client
    left before the body started (then the body's own cleanup never runs)."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(events, headers=SSE_HEADERS)
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await unless_disconnected(self.stream_response(send), receive)
        except ClientDisconnected:
            pass
        except asyncio.CancelledError:  # the drain time after SIGTERM is over: end the stream properly
            asyncio.current_task().uncancel()
            with suppress(Exception):  # (if the stream had not even started, uvicorn answers 500)
                await send({"type": "http.response.body", "body": sse_event(shutting_down().body()) + DONE_EVENT,
                            "more_body": False})
        finally:
            self.on_close()


def sse_event(payload: BaseModel | dict) -> bytes:
    """One `data: {json}\\n\\n` event."""
    body = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
    return b"data: " + body.encode() + b"\n\n"


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Items of several async iterators as they come, tagged with the iterator's index. Closing the
    merged iterator cancels the readers, which closes (and so aborts) every source."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def read(index: int, stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                await queue.put((index, item))
            await queue.put((index, done))
        except Exception as error:  # handed to the consumer, raised there
            await queue.put((index, error))

    readers = [asyncio.ensure_future(read(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(streams)
        while remaining:
            index, item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for reader in readers:
            reader.cancel()
