"""BlockAllocator: the pool of fixed-size KV cache blocks, with prefix caching.

Pure Python: the tensors live in the ModelRunner; this decides which block ids belong to whom.
- Every block has a reference count; a block with count 0 is free.
- A full block whose K/V are computed is registered under a chained hash of its tokens (the hash of
  the previous block + its own token ids), so a later request whose prompt starts with the same
  tokens reuses it instead of recomputing it. The chain makes a block's identity its whole prefix.
- Free blocks keep their contents and registration until they are needed: allocation takes the
  least recently freed block first and only then forgets (evicts) its hash.
Block 0 is the null block: never handed out, always zeros (attention padding points there).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

NULL_BLOCK = 0
ROOT_HASH = b""  # the "previous block" of a sequence's first block
HASH_BYTES = 16  # blake2b digest size: collisions are out of reach (2^-64 birthday bound at 2^32 blocks)
TOKEN_BYTES = 4  # token ids are < 2^32


def block_hash(parent: bytes, token_ids: Sequence[int]) -> bytes:
    """The chained hash of one full block."""
    digest = hashlib.blake2b(parent, digest_size=HASH_BYTES)
    digest.update(b"".join(t.to_bytes(TOKEN_BYTES, "little") for t in token_ids))
    return digest.digest()


class BlockAllocator:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks - 1  # usable blocks: all but the null block
        self.block_size = block_size
        self.ref_counts = [0] * num_blocks
        self.free_ids: OrderedDict[int, None] = OrderedDict((i, None) for i in range(NULL_BLOCK + 1, num_blocks))
        self.cached: dict[bytes, int] = {}  # block hash -> block id
        self.hash_of: dict[int, bytes] = {}  # block id -> its registered hash

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` slots."""
        return -(-num_tokens // self.block_size)

    def allocate(self, count: int) -> list[int]:
        """`count` fresh blocks (least recently freed first; their old registration is evicted)."""
        if count > len(self.free_ids):
            raise RuntimeError(f"KV cache exhausted: need {count} blocks, {len(self.free_ids)} free")
        block_ids = []
        for _ in range(count):
            block_id, _ = self.free_ids.popitem(last=False)
            old_hash = self.hash_of.pop(block_id, None)
            if old_hash is not None:
                del self.cached[old_hash]
            self.ref_counts[block_id] = 1
            block_ids.append(block_id)
        return block_ids

    def lookup(self, hashes: Sequence[bytes]) -> list[int]:
        """Block ids of the longest cached prefix of `hashes` (not yet referenced: see `take`)."""
        hits = []
        for digest in hashes:
            block_id = self.cached.get(digest)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def take(self, block_ids: Sequence[int]) -> None:
        """Reference cached blocks found by `lookup` (a free one leaves the free list)."""
        for block_id in block_ids:
            if self.ref_counts[block_id] == 0:
                del self.free_ids[block_id]
            self.ref_counts[block_id] += 1

    def register(self, block_id: int, digest: bytes) -> None:
        """Make a full, computed block findable by its hash (first writer wins on a duplicate)."""
        if digest not in self.cached and block_id not in self.hash_of:
            self.cached[digest] = block_id
            self.hash_of[block_id] = digest

    def free(self, block_ids: Sequence[int]) -> None:
        """Drop one reference to each block. Blocks are released tail first, so a sequence's last
        blocks are evicted before its first ones (shared prefixes live longest)."""
        for block_id in reversed(block_ids):
            self.ref_counts[block_id] -= 1
            if self.ref_counts[block_id] < 0:
                raise RuntimeError(f"block {block_id} freed more often than it was taken")
            if self.ref_counts[block_id] == 0:
                self.free_ids[block_id] = None
