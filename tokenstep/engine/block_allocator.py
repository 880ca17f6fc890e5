"""BlockAllocator: the pool of fixed-size KV cache blocks (pure Python; the tensors live in the
ModelRunner, this only decides which block ids belong to whom)."""

from __future__ import annotations

from collections import deque

NULL_BLOCK = 0  # never handed out: padding in attention points here, so it always holds zeros


class BlockAllocator:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks - 1  # usable blocks: all but the null block
        self.block_size = block_size
        self.free_ids: deque[int] = deque(range(NULL_BLOCK + 1, num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` slots."""
        return -(-num_tokens // self.block_size)

    def allocate(self, count: int) -> list[int]:
        if count > len(self.free_ids):
            raise RuntimeError(f"KV cache exhausted: need {count} blocks, {len(self.free_ids)} free")
        return [self.free_ids.popleft() for _ in range(count)]

    def free(self, block_ids: list[int]) -> None:
        self.free_ids.extend(block_ids)
