"""Scheduler: which requests run in the next forward pass, and how many tokens each.

Every step, within a token budget (`max_num_batched_tokens`):
1. running requests, oldest first: one decode token each, or the next chunk of their prompt
   (chunked prefill: a long prompt never stalls the running streams for more than one budget);
2. then waiting requests in arrival order, while the budget, `max_num_seqs` and free blocks allow.
   A new request first reuses the cached blocks of its longest cached prefix (prefix caching).
Blocks are allocated as tokens need them. When a running request needs a block and none is free,
the newest running request is preempted: its blocks are freed and it goes back to the front of the
waiting queue with its output so far; it is recomputed later (its cached blocks may still be hit).
Sampling is keyed by (seed, choice, position), so a preempted request produces the same tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tokenstep.engine.block_allocator import ROOT_HASH, BlockAllocator, block_hash
from tokenstep.engine.request import Request, RequestStatus


@dataclass
class ScheduledChunk:
    request: Request
    num_tokens: int  # tokens of request.all_token_ids to run, from request.num_computed_tokens

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the known tokens, so a new token is drawn after it."""
        return self.request.num_computed_tokens + self.num_tokens == self.request.num_tokens


@dataclass
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@dataclass
class SchedulerStats:
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    num_computed_tokens: int = 0  # tokens run through the model


class Scheduler:
    def __init__(self, allocator: BlockAllocator, max_num_seqs: int, max_num_batched_tokens: int,
                 enable_prefix_caching: bool = True) -> None:
        self.allocator = allocator
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_prefix_caching = enable_prefix_caching
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.stats = SchedulerStats()

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def schedule(self) -> SchedulerOutput:
        output = SchedulerOutput()
        budget = self.max_num_batched_tokens
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num = min(request.num_tokens - request.num_computed_tokens, budget)
            if not self._grow(request, num):
                break  # `request` itself was the newest and got preempted
            output.chunks.append(ScheduledChunk(request, num))
            budget -= num
            index += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            chunk = self._admit(self.waiting[0], budget)
            if chunk is None:
                break  # first come, first served: later requests wait behind it
            self.waiting.popleft()
            output.chunks.append(chunk)
            budget -= chunk.num_tokens
        self.stats.num_computed_tokens += sum(c.num_tokens for c in output.chunks)
        return output

    def _grow(self, request: Request, num_tokens: int) -> bool:
        """Make `request`'s blocks cover `num_tokens` more tokens, preempting the newest running
        requests if needed. False if `request` had to preempt itself."""
        needed = self.allocator.blocks_for(request.num_computed_tokens + num_tokens) - len(request.block_ids)
        while needed > self.allocator.num_free:
            victim = self.running[-1]
            self._preempt(victim)
            if victim is request:
                return False
        request.block_ids += self.allocator.allocate(max(needed, 0))
        return True

    def _admit(self, request: Request, budget: int) -> ScheduledChunk | None:
        hits = self._prefix_hits(request)
        num_cached = len(hits) * self.allocator.block_size
        num = min(request.num_tokens - num_cached, budget)
        needed = self.allocator.blocks_for(num_cached + num) - len(hits)
        hits_now_free = sum(self.allocator.ref_counts[b] == 0 for b in hits)
        if needed + hits_now_free > self.allocator.num_free:
            return None
        self.allocator.take(hits)
        request.block_ids = hits + self.allocator.allocate(needed)
        request.num_computed_tokens = num_cached
        request.num_registered_blocks = len(hits)
        if request.num_cached_tokens == 0:  # the first admission is what the user sees
            request.num_cached_tokens = num_cached
        self.stats.num_cached_tokens += num_cached
        request.status = RequestStatus.RUNNING
        self.running.append(request)
        return ScheduledChunk(request, num)

    def _prefix_hits(self, request: Request) -> list[int]:
        if not self.enable_prefix_caching:
            return []
        hashes = self._full_block_hashes(request, request.num_tokens)
        hits = self.allocator.lookup(hashes)
        # The last token must be run to get logits: a fully cached sequence recomputes its last block.
        if len(hits) * self.allocator.block_size >= request.num_tokens:
            hits = hits[:-1]
        return hits

    def _full_block_hashes(self, request: Request, num_tokens: int) -> list[bytes]:
        """Chained hashes of the full blocks among the first `num_tokens` tokens (memoised)."""
        size = self.allocator.block_size
        tokens = request.all_token_ids
        while len(request.block_hashes) < num_tokens // size:
            start = len(request.block_hashes) * size
            parent = request.block_hashes[-1] if request.block_hashes else ROOT_HASH
            request.block_hashes.append(block_hash(parent, tokens[start:start + size]))
        return request.block_hashes[:num_tokens // size]

    def register_computed_blocks(self, request: Request) -> None:
        """After a forward pass: make the request's newly completed blocks findable by later requests."""
        if not self.enable_prefix_caching or request.finished:
            return
        hashes = self._full_block_hashes(request, request.num_computed_tokens)
        for index in range(request.num_registered_blocks, len(hashes)):
            self.allocator.register(request.block_ids[index], hashes[index])
        request.num_registered_blocks = len(hashes)

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self.allocator.free(request.block_ids)
        request.block_ids = []
        request.num_computed_tokens = 0
        request.num_registered_blocks = 0
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)
        self.stats.num_preemptions += 1

    def finish(self, request: Request) -> None:
        """Release a finished or aborted request's blocks and drop it from the queues."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.allocator.free(request.block_ids)
        request.block_ids = []
        request.status = RequestStatus.FINISHED
