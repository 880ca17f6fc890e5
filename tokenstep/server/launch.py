"""`tokenstep serve`: bind, load the model, run uvicorn; on SIGTERM stop accepting, let in-flight
requests finish (at most `drain_timeout` seconds), stop the engine and exit 0."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import time

from tokenstep.config import EngineConfig
from tokenstep.server.settings import MAX_HEADER_BYTES, ServerSettings

LISTEN_BACKLOG = 2048  # uvicorn's default: connections the kernel queues before accept()
KEEP_ALIVE_S = 5  # idle keep-alive connections are closed after this


def serve(engine_config: EngineConfig, settings: ServerSettings, host: str, port: int, max_waiting: int,
          access_log: bool = False) -> int:
    """Run the server until SIGTERM/SIGINT. Binds first, so a taken port fails before a long load."""
    import uvicorn

    from tokenstep.engine.async_engine import AsyncEngine
    from tokenstep.server.app import create_app

    sock = _bind(host, port)
    started = time.perf_counter()
    engine = AsyncEngine.from_config(engine_config, max_waiting=max_waiting, progress=sys.stderr.isatty()).start()
    print(f"[loaded {settings.model_name} in {time.perf_counter() - started:.1f}s]", file=sys.stderr)
    config = uvicorn.Config(
        create_app(engine, settings), http="h11", h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=settings.drain_timeout,
        access_log=access_log, server_header=False, log_level=logging.INFO, lifespan="on")
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal it stopped on, with the handler that was there before it: make
    # that handler ours, so a graceful SIGTERM ends in `return 0` instead of death by signal.
    signal.signal(signal.SIGTERM, _after_graceful_stop)
    try:
        server.run(sockets=[sock])
    finally:
        engine.shutdown()
    return 0


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio turns on TCP_NODELAY only for sockets that say TCP, and without
    # it a response's second write waits ~40 ms for the client's delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def _after_graceful_stop(signum: int, frame: object) -> None:
    """Runs when uvicorn re-raises SIGTERM after its graceful shutdown: nothing left to do."""
