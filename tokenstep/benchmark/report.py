"""Run tokenstep and its peers on the same workloads and print the results as ratios."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from tokenstep.benchmark.workload import Result, Workload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight for the throughput run")
    parser.add_argument("--mixed", action="store_true", help="mixed prompt/output lengths (len/2 .. 3len/2)")
    parser.add_argument("--hf-batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--peers", default="transformers,llama.cpp", help="comma-separated; '' for none")
    parser.add_argument("--skip-single", action="store_true", help="only the throughput run")


def run(args: argparse.Namespace) -> None:
    import torch

    from tokenstep.benchmark import ours, peers
    from tokenstep.benchmark.checkpoint import default_model_as_hf_dir
    from tokenstep.engine.llm import LLM
    from tokenstep.model.default import default_model_path

    args.threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(args.threads)
    path = default_model_path()
    hf_dir = default_model_as_hf_dir()  # the same checkpoint for tokenstep and transformers
    wanted = [p for p in args.peers.split(",") if p]
    llm = LLM(str(hf_dir), dtype=args.dtype, max_num_seqs=max(args.concurrency, 1), progress=False)
    ours.warm_up(llm)
    print(f"model={hf_dir.name} (llama.cpp: {path.name}) dtype={args.dtype} threads={args.threads} prompt={args.prompt_len} "
          f"output={args.output_len} mixed={args.mixed}")
    scenarios = [] if args.skip_single else [("single stream", Workload(1, args.prompt_len, args.output_len))]
    scenarios.append((f"{args.concurrency} concurrent",
                      Workload(args.concurrency, args.prompt_len, args.output_len, mixed=args.mixed, seed=1)))
    for title, workload in scenarios:
        results = [ours.run(llm, workload)]
        runners: dict[str, Callable[[], Result]] = {
            "transformers": lambda: peers.run_transformers(hf_dir, args.dtype, workload,
                                                           min(args.hf_batch_size, workload.num_requests), args.threads),
            "llama.cpp": lambda: peers.run_llama_cpp(path, workload, args.threads),
        }
        for peer in wanted:
            if not peers.available(peer):
                print(f"  ({peer} not installed: skipped)")
                continue
            results.append(runners[peer]())
        print_table(title, results)


def print_table(title: str, results: list[Result]) -> None:
    base = results[0]
    print(f"\n{title}")
    print(f"  {'engine':<24}{'tok/s':>9}{'TTFT ms':>9}{'TPOT ms':>9}{'p99 TPOT':>10}{'tokenstep is':>16}")
    for result in results:
        ratio = base.tokens_per_second / result.tokens_per_second
        print(f"  {result.engine:<24}{result.tokens_per_second:>9.1f}{_ms(result.ttft_mean):>9}"
              f"{_ms(result.tpot_mean):>9}{_ms(result.tpot_p99):>10}{'' if result is base else f'{ratio:.2f}x':>16}"
              f"  {result.note}")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="tokenstep beside transformers and llama.cpp, as ratios")
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
