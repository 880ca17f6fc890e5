"""Scheduler: decides which requests run in the next forward pass and how many tokens each.

Every step: running requests first (a decode token each, or their next prefill chunk), then waiting
requests are admitted in arrival order while the token budget and the KV pool allow. A long prompt
is cut into chunks so it never stalls the running streams for more than one budget's worth.
Admission reserves blocks for the whole prompt + max_tokens, so a running request never runs out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tokenstep.engine.block_allocator import BlockAllocator
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


class Scheduler:
    def __init__(self, allocator: BlockAllocator, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.allocator = allocator
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        output = SchedulerOutput()
        budget = self.max_num_batched_tokens
        for request in self.running:
            if budget == 0:
                break
            num = min(request.num_tokens - request.num_computed_tokens, budget)
            output.chunks.append(ScheduledChunk(request, num))
            budget -= num
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            needed = self.allocator.blocks_for(len(request.prompt_token_ids) + request.max_tokens)
            if needed > self.allocator.num_free:
                break  # first come, first served: later requests wait behind it
            self.waiting.popleft()
            request.block_ids = self.allocator.allocate(needed)
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            num = min(request.num_tokens - request.num_computed_tokens, budget)
            output.chunks.append(ScheduledChunk(request, num))
            budget -= num
        return output

    def finish(self, request: Request) -> None:
        """Release a finished or aborted request's blocks and drop it from the queues."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.allocator.free(request.block_ids)
        request.block_ids = []
        request.status = RequestStatus.FINISHED
