"""AsyncEngine: the Engine driven by one background thread, with one asyncio.Queue per request.

The Engine is not thread-safe, so exactly one thread (the loop) touches it. Callers send commands
(add, abort) through a thread-safe queue and get per-request deltas back on their event loop. A
caller that stops listening (a client disconnect cancels its task) aborts its request, and the loop
frees the request's blocks on its next iteration. If a step raises, the engine is marked dead:
every open request gets the error and `is_alive` turns False (the server's /health says 503).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from tokenstep.config import EngineConfig
from tokenstep.engine.engine import Engine
from tokenstep.outputs import RequestOutput
from tokenstep.params import SamplingParams

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5  # how long an idle loop sleeps on its command queue before re-checking shutdown


class QueueFullError(RuntimeError):
    """Too many requests are waiting; the caller should retry later (HTTP 429)."""


class EngineDeadError(RuntimeError):
    """The engine loop stopped after an error; no request can be served (HTTP 503)."""


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for /metrics and /health."""

    num_running: int
    num_waiting: int
    num_blocks_used: int
    num_blocks_total: int
    alive: bool

    @property
    def kv_cache_usage(self) -> float:
        return self.num_blocks_used / self.num_blocks_total if self.num_blocks_total else 0.0


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue  # RequestOutput deltas, then None (end) or an exception


class AsyncEngine:
    def __init__(self, engine: Engine, max_waiting: int = 256) -> None:
        self.engine = engine
        self.max_waiting = max_waiting
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._streams: dict[str, _Stream] = {}  # touched only by the loop thread
        self._ids = itertools.count()
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tokenstep-engine", daemon=True)

    @classmethod
    def from_config(cls, config: EngineConfig, max_waiting: int = 256, progress: bool = True) -> AsyncEngine:
        return cls(Engine.from_config(config, progress), max_waiting)

    # -- caller side (any thread / event loop) ------------------------------------------------------
    def start(self) -> AsyncEngine:
        self._thread.start()
        return self

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self._error is None

    def stats(self) -> EngineStats:
        scheduler, allocator = self.engine.scheduler, self.engine.allocator
        return EngineStats(len(scheduler.running), len(scheduler.waiting),
                           allocator.num_blocks - allocator.num_free, allocator.num_blocks, self.is_alive)

    async def generate(self, prompt: str | None, params: SamplingParams, prompt_token_ids: list[int] | None = None,
                       request_id: str | None = None) -> AsyncIterator[RequestOutput]:
        """Add a request and yield its deltas until it finishes. Raises ValueError on bad input,
        QueueFullError when too many requests wait, EngineDeadError if the loop has died."""
        request_id = request_id or f"req-{next(self._ids)}"
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue())
        finished = False
        try:
            # Inside the try: a caller cancelled while its request is being added still aborts it.
            await self._call(lambda: self._add(request_id, prompt, params, prompt_token_ids, stream))
            while not finished:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
        finally:
            if not finished:  # the consumer went away (disconnect, cancel, error): free the request
                self._commands.put(lambda: self._abort(request_id))

    def abort(self, request_id: str) -> None:
        self._commands.put(lambda: self._abort(request_id))

    def shutdown(self, drain_timeout: float = 0.0) -> None:
        """Stop the loop: wait up to `drain_timeout` seconds for running requests, abort the rest."""
        deadline = time.monotonic() + drain_timeout
        while self.is_alive and self.engine.has_unfinished_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stopping.set()
        self._commands.put(lambda: None)  # wake the loop
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    async def _call(self, command: Callable[[], None]) -> None:
        """Run `command` on the loop thread and wait for it (its exceptions re-raise here)."""
        if not self.is_alive:
            raise EngineDeadError(f"the engine is not running: {self._error!r}" if self._error else "the engine is not running")
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return  # the caller was cancelled before the loop got here: nothing to do
            try:
                command()
                future.set_result(None)
            except BaseException as error:  # handed back to the caller, not raised in the loop
                future.set_exception(error)

        self._commands.put(run)
        await asyncio.wrap_future(future)

    # -- loop thread ------------------------------------------------------------------------------
    def _add(self, request_id: str, prompt: str | None, params: SamplingParams,
             prompt_token_ids: list[int] | None, stream: _Stream) -> None:
        if len(self.engine.scheduler.waiting) >= self.max_waiting:
            raise QueueFullError(f"{len(self.engine.scheduler.waiting)} requests are already waiting; retry later")
        self.engine.add_request(request_id, prompt, params, prompt_token_ids)
        self._streams[request_id] = stream

    def _abort(self, request_id: str) -> None:
        self.engine.abort(request_id)
        self._streams.pop(request_id, None)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._drain_commands(block=not self.engine.has_unfinished_requests())
                if self.engine.has_unfinished_requests():
                    self._publish(self.engine.step())
                elif self.engine.pending_outputs:
                    self._publish(self.engine.step())
        except BaseException as error:  # a broken step: every open request hears about it
            logger.exception("engine loop stopped")
            self._error = error
            for stream in self._streams.values():
                stream.loop.call_soon_threadsafe(stream.queue.put_nowait, EngineDeadError(f"engine step failed: {error!r}"))
            self._streams.clear()
        finally:
            self._abort_all()

    def _drain_commands(self, block: bool) -> None:
        try:
            command = self._commands.get(timeout=IDLE_WAIT_S) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        command()
        while True:
            try:
                self._commands.get_nowait()()
            except queue.Empty:
                return

    def _publish(self, outputs: list[RequestOutput]) -> None:
        for output in outputs:
            stream = self._streams.get(output.request_id)
            if stream is None:
                continue  # aborted by its caller: nobody listens
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, output)
            if output.finished:
                del self._streams[output.request_id]

    def _abort_all(self) -> None:
        for request_id in list(self.engine.requests):
            self.engine.abort(request_id)
        self.engine.pending_outputs.clear()
        for stream in self._streams.values():
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, EngineDeadError("the engine shut down"))
        self._streams.clear()
