"""tokenstep's side of the benchmarks: every request submitted at once, timed per delta."""

from __future__ import annotations

import statistics
import time

from tokenstep.benchmark.workload import Result, Workload, percentile
from tokenstep.engine.llm import LLM
from tokenstep.params import SamplingParams


def run(llm: LLM, workload: Workload) -> Result:
    """Submit every request of `workload` at once and run the engine until all finish."""
    engine = llm.engine
    requests = workload.requests()
    started = time.perf_counter()
    for index, (prompt, output_len) in enumerate(requests):
        params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
        engine.add_request(f"bench-{index}", None, params, prompt)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    counts: dict[str, int] = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            now = time.perf_counter()
            new = len(output.outputs[0].token_ids)
            if new:
                first.setdefault(output.request_id, now)
                last[output.request_id] = now
                counts[output.request_id] = counts.get(output.request_id, 0) + new
    seconds = time.perf_counter() - started
    tpots = [(last[r] - first[r]) / (counts[r] - 1) for r in counts if counts[r] > 1]
    return Result("tokenstep", sum(counts.values()), seconds,
                  ttft_mean=statistics.mean(first[r] - started for r in first),
                  tpot_mean=statistics.mean(tpots) if tpots else None,
                  tpot_p99=percentile(tpots, 99) if tpots else None)


def warm_up(llm: LLM) -> None:
    """One short request, so one-time costs (kernel selection, page faults) stay out of the figures."""
    llm.generate(prompt_token_ids=[[1000, 1001, 1002]], sampling_params=SamplingParams(max_tokens=4), use_tqdm=False)
