"""ModelRunner: owns the model weights and the KV cache pool; turns a scheduled batch into a
ForwardBatch, runs one forward pass, and hands the logits at the sample positions to the sampler.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tokenstep.config import EngineConfig
from tokenstep.layers.attention import KVCache
from tokenstep.model.default import default_model_path
from tokenstep.model.loader import LoadedModel, load_model
from tokenstep.runner import device as devices
from tokenstep.runner.forward_batch import ForwardBatch
from tokenstep.sampling.sampler import SamplingRow, sample


@dataclass
class SequenceChunk:
    """One sequence's share of a forward pass: `token_ids` at positions start_position..., whose
    K/V go into the slots of `block_ids` (which cover the whole context)."""

    token_ids: list[int]
    start_position: int
    block_ids: list[int]


class ModelRunner:
    def __init__(self, loaded: LoadedModel, num_blocks: int, block_size: int, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.model = loaded.model
        self.config = loaded.config
        self.device = device
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.bytes_per_block = self.kv_bytes_per_block(loaded, block_size, dtype)
        # torch.empty: the OS hands out pages as they are first written, so start-up does not pay for
        # the whole pool. Attention only reads slots a sequence wrote, or the zeroed null block.
        shape = (self.config.num_kv_heads, num_blocks * block_size, self.config.head_dim)  # head-major
        self.caches = [KVCache(torch.empty(shape, dtype=dtype, device=device),
                               torch.empty(shape, dtype=dtype, device=device))
                       for _ in range(self.config.num_layers)]
        for cache in self.caches:
            cache.key[:, :block_size].zero_()  # the null block (block 0)
            cache.value[:, :block_size].zero_()

    @classmethod
    def from_config(cls, config: EngineConfig, progress: bool = True) -> tuple[ModelRunner, LoadedModel]:
        """Load the model named by `config` (the bundled default if none) and size the KV pool."""
        devices.set_num_threads(config.num_threads)
        device, dtype = devices.resolve_device(config.device), devices.resolve_dtype(config.dtype)
        loaded = load_model(config.model or default_model_path(), dtype, device, progress)
        per_block = cls.kv_bytes_per_block(loaded, config.block_size, dtype)
        budget = config.kv_cache_memory or devices.default_kv_cache_bytes(device)
        max_len = config.max_model_len or loaded.config.max_position_embeddings
        wanted = config.max_num_seqs * -(-max_len // config.block_size)  # every sequence at full length
        num_blocks = max(2, min(budget // per_block, wanted + 1))  # + the null block
        return cls(loaded, num_blocks, config.block_size, device, dtype), loaded

    @staticmethod
    def kv_bytes_per_block(loaded: LoadedModel, block_size: int, dtype: torch.dtype) -> int:
        config = loaded.config
        return 2 * config.num_layers * config.num_kv_heads * config.head_dim * block_size * dtype.itemsize

    @torch.inference_mode()
    def forward(self, chunks: list[SequenceChunk], all_logits: bool = False) -> torch.Tensor:
        """Run the chunks; logits [num_chunks, vocab] of each chunk's last token, or [T, vocab] of every
        token when `all_logits` (float32 either way)."""
        batch = self.build_batch(chunks, all_logits)
        hidden = self.model(batch, self.caches)  # [T, hidden]
        return self.model.compute_logits(hidden[batch.logits_index]).float()

    def execute(self, scheduled) -> dict:
        """Run a SchedulerOutput; return {request_id: SampledToken} for the chunks that end a sequence's
        known tokens (decode steps and final prefill chunks)."""
        from tokenstep.engine.engine import SampledToken

        chunks = [SequenceChunk(c.request.all_token_ids[c.request.num_computed_tokens:
                                                        c.request.num_computed_tokens + c.num_tokens],
                                c.request.num_computed_tokens, c.request.block_ids) for c in scheduled.chunks]
        logits = self.forward(chunks)  # [B, V]
        rows = [i for i, c in enumerate(scheduled.chunks) if c.samples]
        if not rows:
            return {}
        requests = [scheduled.chunks[i].request for i in rows]
        result = sample(logits[rows], [_sampling_row(r) for r in requests])
        return {r.request_id: SampledToken(token, logprob, trace)
                for r, token, logprob, trace in zip(requests, result.token_ids, result.logprobs, result.traces)}

    def build_batch(self, chunks: list[SequenceChunk], all_logits: bool = False) -> ForwardBatch:
        device, block_size = self.device, self.block_size
        query_lens = [len(c.token_ids) for c in chunks]
        context_lens = [c.start_position + n for c, n in zip(chunks, query_lens)]
        num_tokens, max_query, max_context = sum(query_lens), max(query_lens), max(context_lens)
        input_ids = torch.tensor([t for c in chunks for t in c.token_ids], dtype=torch.long)
        positions = torch.cat([torch.arange(c.start_position, c.start_position + n) for c, n in zip(chunks, query_lens)])
        seq_index = torch.repeat_interleave(torch.arange(len(chunks)), torch.tensor(query_lens))  # [T]
        # Slots of every context position: block_table[b, pos // block_size] * block_size + pos % block_size.
        max_blocks = -(-max_context // block_size)
        table = torch.tensor([c.block_ids[:max_blocks] + [0] * (max_blocks - len(c.block_ids[:max_blocks]))
                              for c in chunks], dtype=torch.long)  # [B, max_blocks]
        context_slots = (table[:, :, None] * block_size + torch.arange(block_size)).flatten(1)[:, :max_context]
        # Past its own context a shorter sequence reads the null slot 0: never memory nobody wrote.
        context_slots.masked_fill_(torch.arange(max_context) >= torch.tensor(context_lens)[:, None], 0)
        slot_mapping = context_slots[seq_index, positions]  # [T]
        starts = torch.tensor([0] + query_lens[:-1]).cumsum(0)  # [B] first flat index of each chunk
        offsets = positions - torch.tensor([c.start_position for c in chunks])[seq_index]  # [T] index within chunk
        query_index = (starts[:, None] + torch.arange(max_query)).clamp(max=num_tokens - 1)  # [B, Q]
        output_index = seq_index * max_query + offsets
        last = torch.tensor(query_lens).cumsum(0) - 1
        batch = ForwardBatch(
            input_ids=input_ids, positions=positions, slot_mapping=slot_mapping, context_slots=context_slots,
            query_index=query_index, output_index=output_index, attn_mask=None, causal=False,
            logits_index=torch.arange(num_tokens) if all_logits else last,
        )
        window = self.config.sliding_window
        fits_window = window is None or max_context <= window
        if len(chunks) == 1 and chunks[0].start_position == 0 and fits_window:
            batch.causal = True
        elif not (len(chunks) == 1 and num_tokens == 1 and fits_window):
            batch.attn_mask = self._mask(chunks, query_lens, max_query, max_context, window)
        return _to_device(batch, device)

    @staticmethod
    def _mask(chunks: list[SequenceChunk], query_lens: list[int], max_query: int, max_context: int,
              window: int | None) -> torch.Tensor:
        # A query at position p sees keys at positions <= p (and > p - window). Padded query rows get
        # position 0, so they see key 0 only: never an all-masked row (which would give NaN).
        query_pos = torch.zeros(len(chunks), max_query, dtype=torch.long)
        for b, (chunk, n) in enumerate(zip(chunks, query_lens)):
            query_pos[b, :n] = torch.arange(chunk.start_position, chunk.start_position + n)
        key_pos = torch.arange(max_context)
        mask = key_pos[None, None, :] <= query_pos[:, :, None]  # [B, Q, K]
        if window is not None:
            mask &= query_pos[:, :, None] - key_pos[None, None, :] < window
        return mask[:, None]  # [B, 1, Q, K]


def _to_device(batch: ForwardBatch, device: torch.device) -> ForwardBatch:
    if device.type == "cpu":
        return batch
    for name, value in vars(batch).items():
        if isinstance(value, torch.Tensor):
            setattr(batch, name, value.to(device, non_blocking=True))
    return batch


def _sampling_row(request) -> SamplingRow:
    params = request.params
    stop_ids = frozenset(params.stop_token_ids) | request.eos_token_ids
    return SamplingRow(params, request.seed, request.choice_index, len(request.output_token_ids),
                       request.prompt_token_ids, request.output_token_ids, stop_ids)
