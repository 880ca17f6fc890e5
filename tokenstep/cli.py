"""Command line: `tokenstep generate | chat | serve | lab | inspect`. Errors are one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

EXIT_USAGE = 2  # argparse's own code for bad arguments; we use it for bad input too
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell convention
LAB_WIDTH = 110
API_KEY_ENV = "TOKENSTEP_API_KEY"  # a key in the environment stays out of `ps` output


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.run(args) or 0
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"tokenstep: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenstep", description="A fast, transparent LLM inference engine.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    generate = commands.add_parser("generate", help="complete a prompt, streaming tokens as they come")
    generate.add_argument("prompt", help="the prompt text")
    generate.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the chat template")
    _model_arguments(generate)
    _sampling_arguments(generate)
    generate.set_defaults(run=_run_generate)
    chat = commands.add_parser("chat", help="talk to the model interactively (uses its chat template)")
    chat.add_argument("--system", help="a system message to start the conversation with")
    _model_arguments(chat)
    _sampling_arguments(chat)
    chat.set_defaults(run=_run_chat)
    serve = commands.add_parser("serve", help="OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)")
    _serve_arguments(serve)
    _model_arguments(serve)
    serve.set_defaults(run=_run_serve)
    bench = commands.add_parser("bench", help="single-stream and concurrent speed beside transformers and llama.cpp")
    from tokenstep.benchmark.report import add_arguments as bench_arguments

    bench_arguments(bench)
    bench.set_defaults(run=_run_bench)
    lab = commands.add_parser("lab", help="the sampler's arithmetic on a logits vector you type")
    lab.add_argument("logits", help="comma-separated logits, e.g. 4,3,2,1,0.5")
    lab.add_argument("--labels", help="comma-separated token labels, e.g. the,a,an,and,or")
    lab.add_argument("-T", "--temperature", type=float, default=1.0, help="temperature (default 1)")
    lab.add_argument("--top-k", type=int, default=0, help="top-k, 0 = off (default 0)")
    lab.add_argument("--top-p", type=float, default=1.0, help="top-p in (0, 1] (default 1 = off)")
    lab.add_argument("--min-p", type=float, default=0.0, help="min-p in [0, 1] (default 0 = off)")
    lab.set_defaults(run=_run_lab)
    inspect = commands.add_parser("inspect", help="generate and show every step's distribution")
    inspect.add_argument("prompt", help="the prompt text")
    inspect.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the chat template")
    inspect.add_argument("--alternatives", type=int, default=4, help="alternatives listed per step (default 4)")
    _model_arguments(inspect)
    _sampling_arguments(inspect, max_tokens=24)
    inspect.set_defaults(run=_run_inspect)
    return parser


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", help="HF model directory or .gguf file (default: bundled SmolLM2-135M-Instruct)")
    group.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="compute dtype (default float32)")
    group.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda (default cpu)")
    group.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    group.add_argument("--kv-cache-memory", type=_bytes, metavar="SIZE",
                       help="KV cache pool, e.g. 2GiB or 512MiB (default: a quarter of free memory, at most 4 GiB)")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from tokenstep.server import settings as server

    group = parser.add_argument_group("server")
    group.add_argument("--host", default=server.DEFAULT_HOST, help=f"address to bind (default {server.DEFAULT_HOST})")
    group.add_argument("--port", type=int, default=server.DEFAULT_PORT, help=f"port (default {server.DEFAULT_PORT})")
    group.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                       help=f"require `Authorization: Bearer KEY` (default: ${API_KEY_ENV}; unset = no key)")
    group.add_argument("--served-model-name", help="the model id clients use (default: from the model path)")
    group.add_argument("--max-n", type=int, default=server.DEFAULT_MAX_N, help=f"largest n (default {server.DEFAULT_MAX_N})")
    group.add_argument("--max-tokens-default", type=int, default=server.DEFAULT_CHAT_MAX_TOKENS,
                       help=f"chat max_tokens when a request gives none (default {server.DEFAULT_CHAT_MAX_TOKENS})")
    group.add_argument("--default", action="append", default=[], metavar="NAME=VALUE",
                       help="a server-wide sampling default, e.g. temperature=0.7 (repeatable)")
    group.add_argument("--max-body-bytes", type=int, default=server.DEFAULT_MAX_BODY_BYTES,
                       help=f"largest request body (default {server.DEFAULT_MAX_BODY_BYTES})")
    group.add_argument("--max-waiting", type=int, default=server.DEFAULT_MAX_WAITING,
                       help=f"queued requests before 429 (default {server.DEFAULT_MAX_WAITING})")
    group.add_argument("--max-num-seqs", type=int, default=64, help="sequences in the running batch (default 64)")
    group.add_argument("--max-model-len", type=int, help="context window (default: the model's)")
    group.add_argument("--drain-timeout", type=float, default=server.DEFAULT_DRAIN_TIMEOUT_S,
                       help=f"SIGTERM: seconds in-flight requests may finish (default {server.DEFAULT_DRAIN_TIMEOUT_S:g})")
    group.add_argument("--access-log", action="store_true", help="log every HTTP request")


BYTE_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def _bytes(text: str) -> int:
    """'2GiB' / '512MiB' / '1000000' -> bytes (argparse type)."""
    value = text.strip().lower()
    unit = next((u for u in sorted(BYTE_UNITS, key=len, reverse=True) if value.endswith(u)), "b")
    number = value[: len(value) - len(unit)] if value.endswith(unit) else value
    try:
        return int(float(number) * BYTE_UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 2GiB, 512MiB)") from None


def _sampling_arguments(parser: argparse.ArgumentParser, max_tokens: int = 256) -> None:
    group = parser.add_argument_group("sampling")
    group.add_argument("--max-tokens", type=int, default=max_tokens, help=f"most tokens to generate (default {max_tokens})")
    group.add_argument("-T", "--temperature", type=float, default=0.7, help="0 = greedy (default 0.7)")
    group.add_argument("--top-p", type=float, default=0.9, help="nucleus threshold in (0, 1] (default 0.9)")
    group.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens, 0 = off (default 0)")
    group.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min_p x top probability (default 0)")
    group.add_argument("--seed", type=int, help="seed for reproducible sampling (default: random)")
    group.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")


def _sampling_params(args: argparse.Namespace, **extra):
    from tokenstep.params import SamplingParams

    return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                          top_k=args.top_k, min_p=args.min_p, seed=args.seed, stop=args.stop, **extra)


def _load(args: argparse.Namespace):
    from tokenstep.engine.llm import LLM

    started = time.perf_counter()
    llm = LLM(args.model, dtype=args.dtype, device=args.device, num_threads=args.threads,
              kv_cache_memory=args.kv_cache_memory)
    print(f"[loaded in {time.perf_counter() - started:.1f}s]", file=sys.stderr)
    return llm


def _stream(llm, prompt_token_ids: list[int], params, write: Callable[[str], None]) -> str:
    """Stream one reply to `write`; return its full text. Ctrl-C stops the reply, not the program."""
    text, count, started = [], 0, time.perf_counter()
    try:
        for output in llm.stream(prompt_token_ids=prompt_token_ids, sampling_params=params):
            delta = output.outputs[0]
            write(delta.text)
            text.append(delta.text)
            count += len(delta.token_ids)
    except KeyboardInterrupt:
        write(" [stopped]")
    elapsed = time.perf_counter() - started
    print(f"\n[{count} tokens, {count / elapsed:.1f} tok/s]" if elapsed > 0 else "", file=sys.stderr)
    return "".join(text)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _prompt_ids(llm, args: argparse.Namespace) -> list[int]:
    if llm.tokenizer is None:
        raise ValueError("this model has no tokenizer.json, so text prompts cannot be encoded")
    if args.chat:
        return llm.tokenizer.encode(llm.render_chat([{"role": "user", "content": args.prompt}]), add_special_tokens=False)
    return llm.tokenizer.encode(args.prompt)


def _run_generate(args: argparse.Namespace) -> int:
    params = _sampling_params(args)
    llm = _load(args)
    _stream(llm, _prompt_ids(llm, args), params, _write)
    return 0


def _run_bench(args: argparse.Namespace) -> int:
    from tokenstep.benchmark.report import run

    run(args)
    return 0


def _run_serve(args: argparse.Namespace) -> int:
    from tokenstep.config import EngineConfig
    from tokenstep.server.launch import serve
    from tokenstep.server.settings import ServerSettings, model_name_from_path, parse_sampling_defaults

    settings = ServerSettings(
        model_name=args.served_model_name or model_name_from_path(args.model), api_key=args.api_key or None,
        max_body_bytes=args.max_body_bytes, max_n=args.max_n, chat_max_tokens=args.max_tokens_default,
        sampling_defaults=parse_sampling_defaults(args.default), drain_timeout=args.drain_timeout)
    config = EngineConfig(model=args.model, dtype=args.dtype, device=args.device, num_threads=args.threads,
                          max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                          kv_cache_memory=args.kv_cache_memory)
    return serve(config, settings, args.host, args.port, args.max_waiting, args.access_log)


def _run_lab(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tokenstep.cli_views import print_lab
    from tokenstep.sampling.lab import exercise

    try:
        logits = [float(x) for x in args.logits.split(",")]
    except ValueError:
        raise ValueError(f"logits must be comma-separated numbers, got {args.logits!r}") from None
    labels = args.labels.split(",") if args.labels else None
    console = Console(width=max(Console().width, LAB_WIDTH))  # the table needs ~100 columns
    print_lab(exercise(logits, labels, args.temperature, args.top_k, args.top_p, args.min_p), console)
    return 0


def _run_inspect(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tokenstep.cli_views import print_inspection

    params = _sampling_params(args, trace=max(args.alternatives + 1, 5))
    llm = _load(args)
    output = llm.generate(prompt_token_ids=[_prompt_ids(llm, args)], sampling_params=params, use_tqdm=False)[0]
    print_inspection(output.outputs[0], Console(), args.alternatives)
    return 0


def _run_chat(args: argparse.Namespace) -> int:
    params = _sampling_params(args)
    llm = _load(args)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    print("Type a message; /reset clears the conversation, /exit (or Ctrl-D) quits.", file=sys.stderr)
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            print(file=sys.stderr)
            return 0
        if line in ("/exit", "/quit"):
            return 0
        if line == "/reset":
            messages = messages[:1] if args.system else []
            continue
        if not line:
            continue
        messages.append({"role": "user", "content": line})
        prompt = llm.render_chat(messages)
        reply = _stream(llm, llm.tokenizer.encode(prompt, add_special_tokens=False), params, _write)
        messages.append({"role": "assistant", "content": reply})


if __name__ == "__main__":
    raise SystemExit(main())
