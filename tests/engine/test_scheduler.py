"""The control plane without a model: a fake runner drives the real Engine, Scheduler and
BlockAllocator, so properties are checked over thousands of random workloads in seconds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenstep import SamplingParams
from tokenstep.config import EngineConfig
from tokenstep.engine.block_allocator import NULL_BLOCK, BlockAllocator, block_hash
from tokenstep.engine.engine import Engine, SampledToken

VOCAB = 50
BLOCK_SIZE = 4


class FakeRunner:
    """Returns a token that depends only on (request, position), like a seeded sampler."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.calls = 0

    def execute(self, scheduled):
        self.calls += 1
        for chunk in scheduled.chunks:  # the K/V of every token it runs must have a slot
            covered = len(chunk.request.block_ids) * BLOCK_SIZE
            assert covered >= chunk.request.num_computed_tokens + chunk.num_tokens
            assert NULL_BLOCK not in chunk.request.block_ids
        return {c.request.request_id: SampledToken(3 + (hash(c.request.request_id) + c.request.num_tokens) % (VOCAB - 3))
                for c in scheduled.chunks if c.samples}


def make_engine(num_blocks: int, max_num_seqs: int = 8, budget: int = 16, prefix_caching: bool = True) -> Engine:
    config = EngineConfig(block_size=BLOCK_SIZE, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                          enable_prefix_caching=prefix_caching)
    return Engine(FakeRunner(num_blocks), None, (), config, max_model_len=64, vocab_size=VOCAB)


def run(engine: Engine, max_steps: int = 10_000) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return tokens
        for output in engine.step():
            tokens.setdefault(output.request_id, []).extend(output.outputs[0].token_ids)
        check_invariants(engine)
    raise AssertionError("the engine made no progress")


def check_invariants(engine: Engine) -> None:
    allocator, scheduler = engine.allocator, engine.scheduler
    holders = [0] * len(allocator.ref_counts)
    for request in scheduler.running:
        for block_id in request.block_ids:
            holders[block_id] += 1
    assert holders == allocator.ref_counts, "reference counts drifted from the block tables"
    assert all((allocator.ref_counts[b] == 0) == (b in allocator.free_ids) for b in range(1, len(holders)))
    assert all(allocator.cached[h] == b for b, h in allocator.hash_of.items())
    assert all(not r.block_ids for r in scheduler.waiting)


workloads = st.lists(st.tuples(st.integers(1, 20), st.integers(1, 12), st.integers(0, 3)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(workloads, st.integers(12, 40), st.booleans(), st.lists(st.integers(0, 11), max_size=3))
def test_random_workloads_finish_without_leaks_and_tokens_do_not_depend_on_pressure(work, num_blocks, caching, aborts):
    def submit(engine):
        for i, (prompt_len, max_tokens, family) in enumerate(work):
            prompt = [family + 3] * 8 + list(range(3, 3 + prompt_len))  # families share an 8-token prefix
            engine.add_request(f"r{i}", None, SamplingParams(max_tokens=max_tokens, ignore_eos=True), prompt)

    roomy = make_engine(400, prefix_caching=False)
    submit(roomy)
    expected = run(roomy)
    tight = make_engine(num_blocks, prefix_caching=caching)
    submit(tight)
    for index in aborts:
        if index < len(work):
            tight.abort(f"r{index}")
    got = run(tight)
    for request_id, token_ids in got.items():
        if int(request_id[1:]) not in aborts:
            assert token_ids == expected[request_id]
    assert tight.allocator.num_free == tight.allocator.num_blocks, "blocks leaked"


def test_preemption_happens_under_pressure_and_is_recovered():
    engine = make_engine(num_blocks=10, budget=64)
    for i in range(6):
        engine.add_request(f"r{i}", None, SamplingParams(max_tokens=12, ignore_eos=True), list(range(3, 15)))
    run(engine)
    assert engine.scheduler.stats.num_preemptions > 0
    assert engine.allocator.num_free == engine.allocator.num_blocks


def test_prefix_cache_skips_the_shared_blocks():
    engine = make_engine(num_blocks=64)
    shared = list(range(3, 3 + 3 * BLOCK_SIZE))  # three full blocks
    engine.add_request("cold", None, SamplingParams(max_tokens=2, ignore_eos=True), shared + [40, 41])
    run(engine)
    before = engine.scheduler.stats.num_computed_tokens
    engine.add_request("warm", None, SamplingParams(max_tokens=1, ignore_eos=True), shared + [42, 43, 44])
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert engine.scheduler.stats.num_computed_tokens - before == 3  # only the new tokens
    assert outputs[-1].num_cached_tokens == 3 * BLOCK_SIZE


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "free", "hit"]), st.integers(1, 4)), max_size=60))
def test_allocator_reference_counts_stay_consistent(ops):
    allocator = BlockAllocator(num_blocks=12, block_size=BLOCK_SIZE)
    owned: list[list[int]] = []
    for op, count in ops:
        if op == "alloc" and count <= allocator.num_free:
            blocks = allocator.allocate(count)
            for i, block_id in enumerate(blocks):
                allocator.register(block_id, block_hash(b"", [count, i]))
            owned.append(blocks)
        elif op == "free" and owned:
            allocator.free(owned.pop(count % len(owned)))
        elif op == "hit":
            hits = allocator.lookup([block_hash(b"", [count, 0]), block_hash(b"", [count, 1])])
            allocator.take(hits)
            owned.append(hits)
        held = sorted(b for blocks in owned for b in blocks)
        assert sum(allocator.ref_counts) == len(held)
        assert allocator.num_free == allocator.num_blocks - len(set(held))
    for blocks in owned:
        allocator.free(blocks)
    assert allocator.num_free == allocator.num_blocks
