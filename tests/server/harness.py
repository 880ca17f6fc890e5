"""Start and stop a real `tokenstep serve` process (one per test module) on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

API_KEY = "test-key-123"
START_TIMEOUT_S = 90  # import torch + load the tiny model on a busy 2-core machine
STOP_TIMEOUT_S = 30


@dataclass
class Server:
    process: subprocess.Popen
    url: str  # http://127.0.0.1:PORT
    model: str
    api_key: str | None
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model_dir: Path, log: Path, *extra: str, api_key: str | None = API_KEY) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "tokenstep", "serve", "--model", str(model_dir), "--port", str(port), *extra]
    if api_key:
        command += ["--api-key", api_key]
    env = dict(os.environ, TOKENSTEP_API_KEY="")
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    server = Server(process, f"http://127.0.0.1:{port}", model_dir.name, api_key, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{server.log_text()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise RuntimeError(f"server did not become healthy:\n{server.log_text()}")


def stop_server(server: Server) -> int:
    """SIGTERM, then SIGKILL if it does not stop; returns the exit code."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
    return server.process.returncode


def metric(text: str, name: str) -> float:
    """The value of an unlabelled sample in Prometheus' text format."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)
