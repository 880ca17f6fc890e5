"""Single-stream speed of tokenstep beside transformers.generate, same checkpoint, same dtype, one run.

Measures: model load time, prefill time for a 128-token prompt, batch-1 decode tokens/s, for each
dtype; prints a table with tokenstep/transformers ratios. The checkpoint is the bundled default
model (SmolLM2-135M-Instruct): tokenstep loads the GGUF (its load time is the one users see),
transformers loads the same weights dequantized into an HF directory (benchmark/checkpoint.py), in
the same dtype — transformers 5 would otherwise run the GGUF with packed quantized kernels.

    python bench/bench_decode.py [--dtypes float32 bfloat16] [--prompt-tokens 128] [--output-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokenstep import LLM, SamplingParams
from tokenstep.model.default import default_model_path


def bench_tokenstep(dtype: str, prompt_ids: list[int], output_tokens: int, repeats: int) -> dict[str, float]:
    started = time.perf_counter()
    llm = LLM(dtype=dtype, progress=False)
    load = time.perf_counter() - started
    params = SamplingParams(temperature=0, max_tokens=output_tokens, ignore_eos=True)
    llm.generate(prompt_token_ids=[prompt_ids[:16]], sampling_params=SamplingParams(max_tokens=4))  # warm-up
    prefills, decodes = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        first = None
        for output in llm.stream(prompt_token_ids=prompt_ids, sampling_params=params):
            if first is None:
                first = time.perf_counter()
        end = time.perf_counter()
        prefills.append(first - started)
        decodes.append((output_tokens - 1) / (end - first))
    return {"load_s": load, "prefill_ms": 1000 * statistics.median(prefills), "decode_tok_s": statistics.median(decodes)}


def bench_transformers(dtype: str, prompt_ids: list[int], output_tokens: int, repeats: int) -> dict[str, float]:
    import transformers

    from tokenstep.benchmark.checkpoint import default_model_as_hf_dir

    hf_dir = default_model_as_hf_dir()
    started = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=getattr(torch, dtype)).eval()
    load = time.perf_counter() - started
    input_ids = torch.tensor([prompt_ids])

    def run(new_tokens: int) -> float:
        started = time.perf_counter()
        model.generate(input_ids, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       eos_token_id=None, pad_token_id=0)
        return time.perf_counter() - started

    run(4)  # warm-up
    prefills = [run(1) for _ in range(repeats)]
    totals = [run(output_tokens) for _ in range(repeats)]
    prefill = statistics.median(prefills)
    return {"load_s": load, "prefill_ms": 1000 * prefill,
            "decode_tok_s": (output_tokens - 1) / (statistics.median(totals) - prefill)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    vocab_floor = 1000  # ordinary word pieces, far from special tokens
    prompt_ids = [vocab_floor + (i * 37) % 20000 for i in range(args.prompt_tokens)]
    print(f"threads={args.threads} prompt={args.prompt_tokens} output={args.output_tokens} model={default_model_path().name}")
    print(f"{'dtype':<10}{'engine':<14}{'load s':>8}{'prefill ms':>12}{'decode tok/s':>14}")
    for dtype in args.dtypes:
        ours = bench_tokenstep(dtype, prompt_ids, args.output_tokens, args.repeats)
        theirs = bench_transformers(dtype, prompt_ids, args.output_tokens, args.repeats)
        for name, result in (("tokenstep", ours), ("transformers", theirs)):
            print(f"{dtype:<10}{name:<14}{result['load_s']:>8.1f}{result['prefill_ms']:>12.1f}{result['decode_tok_s']:>14.1f}")
        print(f"{dtype:<10}{'ratio':<14}{theirs['load_s'] / ours['load_s']:>7.2f}x"
              f"{theirs['prefill_ms'] / ours['prefill_ms']:>11.2f}x{ours['decode_tok_s'] / theirs['decode_tok_s']:>13.2f}x"
              "   (>1 = tokenstep faster)")


if __name__ == "__main__":
    main()
