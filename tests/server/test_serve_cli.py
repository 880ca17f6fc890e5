"""`tokenstep serve` start-up errors: one line on stderr, exit code 2, before any model is loaded."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenstep", "serve", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("args", "expected"), [
    (["--max-n", "0"], "max_n"),
    (["--default", "temprature=1"], "NAME=VALUE"),
    (["--default", "top_p=5"], "top_p"),
    (["--default", "max_tokens=5"], "--max-tokens-default"),
])
def test_bad_flags_are_one_line_errors(tiny_model, args, expected):
    result = _serve("--model", str(tiny_model), *args)
    assert result.returncode == 2 and expected in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_taken_port_fails_before_loading(tiny_model):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = _serve("--model", str(tiny_model), "--port", str(taken.getsockname()[1]))
    assert result.returncode == 2 and "cannot listen" in result.stderr and "loaded" not in result.stderr


def test_the_server_binds_loopback_by_default():
    from tokenstep.cli import build_parser

    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.max_n) == ("127.0.0.1", 8000, 16)
