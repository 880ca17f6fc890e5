"""The command line, run as a user runs it: a subprocess, its exit code and what it prints."""

from __future__ import annotations

import subprocess
import sys


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokenstep", *args], capture_output=True, text=True,
                          input=stdin, timeout=300)


def test_generate_streams_text(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    result = _run("generate", "Hello world", "--model", str(directory), "--max-tokens", "6", "-T", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout
    assert "6 tokens" in result.stderr


def test_chat_reads_turns_until_end_of_input(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    result = _run("chat", "--model", str(directory), "--max-tokens", "4", stdin="Hi\n/reset\nHello again\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("4 tokens") + result.stderr.count("tokens,") >= 2


def test_errors_are_one_line_without_traceback(checkpoint_factory, tmp_path):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    cases = [
        (["generate", "x", "--model", str(tmp_path / "missing")], "does not exist"),
        (["generate", "x", "--model", str(directory), "-T", "-1"], "temperature"),
        (["generate", "x", "--model", str(directory), "--top-p", "0"], "top_p"),
    ]
    for args, expected in cases:
        result = _run(*args)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert expected in result.stderr
        assert len([line for line in result.stderr.splitlines() if line.startswith("tokenstep: error")]) == 1


def test_inspect_shows_each_step_with_alternatives(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    result = _run("inspect", "Hello world", "--model", str(directory), "--max-tokens", "5", "--seed", "3",
                  "--alternatives", "2")
    assert result.returncode == 0, result.stderr
    step_lines = [line for line in result.stdout.splitlines() if "nucleus=" in line]
    assert len(step_lines) == 5
    assert all(" p=" in line and "raw=" in line for line in step_lines)
