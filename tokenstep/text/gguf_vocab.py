"""Build a `tokenizers.Tokenizer` from the `tokenizer.ggml.*` metadata of a GGUF file.

A GGUF carries no `tokenizer.json`: only the token list, token types, scores or merges and a
few flags. Two vocabulary kinds are rebuilt here:

* `gpt2`  -- byte-level BPE with merges; how text is split before BPE is not stored, only a name
  (`tokenizer.ggml.pre`), which is mapped to the split the original `tokenizer.json` used
  (the same table llama.cpp keeps in `llama-vocab.cpp`).
* `llama` -- SentencePiece BPE: scores instead of merges, `<0xNN>` byte-fallback tokens, spaces
  written as "▁" and an optional leading "▁" (`add_space_prefix`).

Control tokens become special added tokens (matched whole, skippable when decoding); user-defined
ones become plain added tokens, as in transformers and llama.cpp (they are always rendered).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from gguf import TokenType
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

logger = logging.getLogger(__name__)

KEY = "tokenizer.ggml."
SPACE_MARK = "\u2581"  # SentencePiece's visible space, "▁"
DEFAULT_PRE = "default"
DEFAULT_UNK_ID = 0

# Byte-level BPE writes each byte as one printable character: printable Latin-1 bytes stand for
# themselves, the rest are shifted up past 255 (GPT-2's `bytes_to_unicode`).
PRINTABLE_BYTE_RANGES = ((ord("!"), ord("~")), (ord("\u00a1"), ord("\u00ac")), (ord("\u00ae"), ord("\u00ff")))
BYTE_COUNT = 256

# Split regexes from the original models' tokenizer.json files.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# `tokenizer.ggml.pre` name -> split family (names as llama.cpp's converter writes them).
PRE_TOKENIZER_FAMILIES: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(("default", "gpt2", "gpt-2", "mpt", "olmo", "jais", "trillion"), "gpt2"),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
                    "digits"),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                     "lfm2"), "llama3"),
    **dict.fromkeys(("dbrx", "smaug-bpe"), "llama3-merges"),
    **dict.fromkeys(("qwen2", "stablelm2", "hunyuan", "deepseek-r1-qwen", "megrez"), "qwen2"),
    "tekken": "tekken",
})
# Families whose tokenizer looks a whole pre-token up in the vocab before merging (`ignore_merges`).
IGNORE_MERGES_FAMILIES = frozenset({"llama3", "tekken"})


def build_tokenizer(metadata: Mapping[str, Any]) -> Tokenizer:
    """A `tokenizers.Tokenizer` equivalent to the one the GGUF metadata describes."""
    model = metadata.get(KEY + "model")
    tokens: Sequence[str] | None = metadata.get(KEY + "tokens")
    if not tokens:
        raise ValueError("GGUF file has no tokenizer vocabulary (tokenizer.ggml.tokens)")
    types = list(metadata.get(KEY + "token_type") or [TokenType.NORMAL] * len(tokens))
    if model == "gpt2":
        tokenizer = _byte_level_tokenizer(metadata, tokens, types)
        add_bos_default = False
    elif model == "llama":
        tokenizer = _sentencepiece_tokenizer(metadata, tokens, types)
        add_bos_default = True  # llama.cpp and SentencePiece add BOS unless the file says otherwise
    else:
        raise ValueError(f"unsupported GGUF tokenizer model {model!r}; supported: 'gpt2', 'llama'")
    _add_special_tokens(tokenizer, tokens, types)
    tokenizer.post_processor = _post_processor(metadata, tokens, add_bos_default)
    return tokenizer


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    printable = [b for lo, hi in PRINTABLE_BYTE_RANGES for b in range(lo, hi + 1)]
    table = {b: chr(b) for b in printable}
    shifted = (b for b in range(BYTE_COUNT) if b not in table)
    for offset, b in enumerate(shifted):
        table[b] = chr(BYTE_COUNT + offset)
    return table


def _byte_level_tokenizer(metadata: Mapping[str, Any], tokens: Sequence[str], types: list[int]) -> Tokenizer:
    """Byte-level BPE with the file's merges and the split named by `tokenizer.ggml.pre`."""
    spelling = byte_to_unicode()
    alphabet = set(spelling.values())
    vocab: dict[str, int] = {}
    for index, (token, token_type) in enumerate(zip(tokens, types)):
        # Added tokens are stored as their raw text; normal ones should already be byte-spelled,
        # but a few converters store raw text there too, so respell those.
        if token_type not in (TokenType.CONTROL, TokenType.USER_DEFINED) and not set(token) <= alphabet:
            token = "".join(spelling[b] for b in token.encode("utf-8"))
        vocab.setdefault(token, index)
    family = _pre_tokenizer_family(metadata.get(KEY + "pre"))
    merges = [tuple(m.split(" ", 1)) for m in metadata.get(KEY + "merges") or ()]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=family in IGNORE_MERGES_FAMILIES))
    tokenizer.pre_tokenizer = _byte_level_pre_tokenizer(family)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _pre_tokenizer_family(pre: str | None) -> str:
    """The split family for a `tokenizer.ggml.pre` name; unknown names fall back to GPT-2's split."""
    name = pre or DEFAULT_PRE
    family = PRE_TOKENIZER_FAMILIES.get(name)
    if family is None:
        # llama.cpp refuses unknown names; we warn instead so the model still loads.
        logger.warning("unknown GGUF pre-tokenizer %r; using the GPT-2 split (supported: %s)",
                       name, ", ".join(sorted(PRE_TOKENIZER_FAMILIES)))
        family = PRE_TOKENIZER_FAMILIES[DEFAULT_PRE]
    return family


def _byte_level_pre_tokenizer(family: str) -> pre_tokenizers.PreTokenizer:
    """Split text as the vocabulary's merges were learned, then map bytes to characters."""
    if family == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if family == "digits":
        # StarCoder/SmolLM: every digit on its own, then GPT-2's split.
        return pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    split = {"llama3": LLAMA3_SPLIT, "llama3-merges": LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT, "tekken": TEKKEN_SPLIT}
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split[family]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def _sentencepiece_tokenizer(metadata: Mapping[str, Any], tokens: Sequence[str], types: list[int]) -> Tokenizer:
    """SentencePiece BPE as a `tokenizers` BPE: merges ranked by score, byte fallback, "▁" spaces."""
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    stored = metadata.get(KEY + "merges")
    if stored:
        merges = [tuple(m.split(" ", 1)) for m in stored]
    else:
        merges = _merges_from_scores(tokens, types, metadata.get(KEY + "scores"), vocab)
    unk_id = metadata.get(KEY + "unknown_token_id", DEFAULT_UNK_ID)
    unk = tokens[unk_id] if 0 <= unk_id < len(tokens) else None
    bpe = models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True)
    tokenizer = Tokenizer(bpe)
    add_prefix = bool(metadata.get(KEY + "add_space_prefix", True))
    # As SentencePiece and llama.cpp: "▁" before every text segment (also after special tokens and
    # before text that already starts with a space). `Metaspace` would skip the latter, losing a
    # space on decode.
    prefix = [normalizers.Prepend(SPACE_MARK)] if add_prefix else []
    tokenizer.normalizer = normalizers.Sequence([*prefix, normalizers.Replace(" ", SPACE_MARK)])
    unprefix = [decoders.Strip(content=" ", left=1, right=0)] if add_prefix else []
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace(SPACE_MARK, " "), decoders.ByteFallback(), decoders.Fuse(), *unprefix])
    return tokenizer


def _merges_from_scores(tokens: Sequence[str], types: list[int], scores: Sequence[float] | None,
                        vocab: Mapping[str, int]) -> list[tuple[str, str]]:
    """Rebuild BPE merges from SentencePiece scores.

    SentencePiece merges the adjacent pair whose joined piece scores highest, so every split of a
    normal token into two known pieces is a merge, ranked by that token's score (ties: vocab order).
    """
    if scores is None:
        scores = [-float(i) for i in range(len(tokens))]  # no scores: earlier tokens merge first
    ranked: list[tuple[float, int, int, tuple[str, str]]] = []
    for index, (token, token_type) in enumerate(zip(tokens, types)):
        if token_type != TokenType.NORMAL or vocab.get(token) != index:
            continue  # control, byte and unused pieces are never produced by merging
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[index], index, cut, (left, right)))
    ranked.sort()
    return [pair for *_, pair in ranked]


def _add_special_tokens(tokenizer: Tokenizer, tokens: Sequence[str], types: list[int]) -> None:
    """Match control and user-defined tokens whole; only control ones are special (skippable)."""
    wanted = {TokenType.CONTROL: True, TokenType.USER_DEFINED: False}
    added: list[AddedToken] = []
    for index, (token, token_type) in enumerate(zip(tokens, types)):
        if token_type in wanted and token and tokenizer.token_to_id(token) == index:
            added.append(AddedToken(token, special=wanted[token_type], normalized=False))
    # One call per kind keeps ids: each content already exists in the model vocab at its index.
    tokenizer.add_special_tokens([t for t in added if t.special])
    tokenizer.add_tokens([t for t in added if not t.special])


def _post_processor(metadata: Mapping[str, Any], tokens: Sequence[str],
                    add_bos_default: bool) -> processors.TemplateProcessing:
    """Add BOS/EOS around each sequence as `tokenizer.ggml.add_bos_token`/`add_eos_token` say."""
    specials: list[tuple[str, int]] = []
    prefix: list[str] = []
    suffix: list[str] = []
    for flag, default, id_key, target in (("add_bos_token", add_bos_default, "bos_token_id", prefix),
                                          ("add_eos_token", False, "eos_token_id", suffix)):
        token_id = metadata.get(KEY + id_key)
        if metadata.get(KEY + flag, default) and token_id is not None and 0 <= token_id < len(tokens):
            target.append(tokens[token_id])
            specials.append((tokens[token_id], token_id))
    single = [*prefix, "$A:0", *suffix]
    pair = [*single, *prefix, "$B:1", *suffix]
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=list(dict.fromkeys(specials)))
