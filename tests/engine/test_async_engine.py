"""AsyncEngine: concurrent streams, cancellation frees blocks, overload and a dead loop are reported."""

from __future__ import annotations

import asyncio

import pytest

from tokenstep import SamplingParams
from tokenstep.config import EngineConfig
from tokenstep.engine.async_engine import AsyncEngine, EngineDeadError, QueueFullError


@pytest.fixture
def engine(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    engine = AsyncEngine.from_config(EngineConfig(model=str(directory)), max_waiting=4, progress=False).start()
    yield engine
    engine.shutdown()


async def _collect(engine, prompt, params):
    text, last = "", None
    async for output in engine.generate(prompt, params):
        text += output.outputs[0].text
        last = output
    return text, last


def test_concurrent_streams_match_sequential_results(engine):
    params = [SamplingParams(temperature=0.8, seed=i, max_tokens=12, ignore_eos=True) for i in range(4)]

    async def run():
        together = await asyncio.gather(*(_collect(engine, "Hello", p) for p in params))
        alone = [await _collect(engine, "Hello", p) for p in params]
        return together, alone

    together, alone = asyncio.run(run())
    assert [t for t, _ in together] == [t for t, _ in alone]
    assert all(last.finished and last.outputs[0].finish_reason == "length" for _, last in together)


def test_cancelled_stream_frees_its_blocks(engine):
    async def run():
        started = asyncio.Event()

        async def consume():
            async for _ in engine.generate("Hello", SamplingParams(max_tokens=200, ignore_eos=True)):
                started.set()
                await asyncio.sleep(0.01)  # a slow client: the request is still running when cancelled

        task = asyncio.create_task(consume())
        await started.wait()
        assert engine.stats().num_running == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):
            if engine.stats().num_blocks_used == 0 and engine.stats().num_running == 0:
                break
            await asyncio.sleep(0.05)

    asyncio.run(run())
    stats = engine.stats()
    assert (stats.num_running, stats.num_waiting, stats.num_blocks_used) == (0, 0, 0)


def test_bad_input_is_raised_to_the_caller_and_the_engine_keeps_serving(engine):
    async def run():
        with pytest.raises(ValueError, match="outside the vocabulary"):
            await _collect(engine, "Hi", SamplingParams(logit_bias={10**6: 1.0}))
        return await _collect(engine, "ok", SamplingParams(max_tokens=3, temperature=0))

    _, last = asyncio.run(run())
    assert last.finished and engine.is_alive


def test_queue_full_is_reported(checkpoint_factory):
    directory, _ = checkpoint_factory("llama-gqa-untied")
    engine = AsyncEngine.from_config(EngineConfig(model=str(directory)), max_waiting=0, progress=False).start()
    try:
        with pytest.raises(QueueFullError):
            asyncio.run(_collect(engine, "Hello", SamplingParams(max_tokens=2)))
    finally:
        engine.shutdown()


def test_a_failing_step_marks_the_engine_dead(engine, monkeypatch):
    def broken_step():
        raise RuntimeError("simulated kernel failure")

    monkeypatch.setattr(engine.engine, "step", broken_step)
    with pytest.raises(EngineDeadError, match="simulated kernel failure"):
        asyncio.run(_collect(engine, "Hello", SamplingParams(max_tokens=5)))
    engine._thread.join(timeout=5)
    assert not engine.is_alive
    with pytest.raises(EngineDeadError):
        asyncio.run(_collect(engine, "Hello", SamplingParams(max_tokens=5)))
