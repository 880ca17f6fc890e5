"""IncrementalDetokenizer against a toy tokenizer whose vocabulary is a hand-picked list of byte
strings, so every test controls exactly where text (and UTF-8 characters) split into tokens.

Every run checks the streaming guarantees: the deltas concatenate to the final text, nothing once
emitted is ever taken back (so a half-decoded character, "\\ufffd", never reaches the stream before
it completes), and a matched stop string (or anything after it) never reaches the stream unless
include_stop_str_in_output is set.
"""

from __future__ import annotations

import random

import pytest
import tokenizers
from tokenizers import decoders, models

from tokenstep.text.detokenizer import CONTEXT_TOKENS, IncrementalDetokenizer
from tokenstep.text.gguf_vocab import byte_to_unicode
from tokenstep.text.tokenizer import Tokenizer

EMOJI = "\U0001f600"  # F0 9F 98 80
CJK = "\u6771"  # E6 9D B1

VOCAB: list[bytes] = [
    b"Hello", b" Hello", b" world", b"Hi", b"!", b" ", b"\n",
    b"STOP", b"ST", b"OP", b"STO", b"S", b"T", b"O", b"P", b"Px", b"xyST", b"xy", b"x", b"y",
    b"END", b"EN", b"D", b"a", b"b", b"c", b"ab", b"bc", b"ba", b"abc",
    b"\xf0\x9f", b"\x98\x80", b"\xf0", b"\x9f", b"\x98", b"\x80",  # the emoji, in 2 or 4 pieces
    b"\xe6\x9d", b"\xb1", b"\xe6", b"\x9d",  # the CJK character, in 2 or 3 pieces
    b"P\xf0\x9f",  # ends a stop string and starts an emoji in one token
]
EOS = "<eos>"


def _toy_tokenizer() -> tuple[Tokenizer, dict[bytes, int]]:
    spelling = byte_to_unicode()
    vocab = {"".join(spelling[b] for b in piece): index for index, piece in enumerate(VOCAB)}
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([EOS])
    return Tokenizer(backend), {piece: index for index, piece in enumerate(VOCAB)}


TOK, IDS = _toy_tokenizer()
EOS_ID = TOK.token_to_id(EOS)


def ids(*pieces: bytes | str) -> list[int]:
    return [EOS_ID if p == EOS else IDS[p.encode() if isinstance(p, str) else p] for p in pieces]


def stream(token_ids, stop=(), prompt=(), include_stop=False, skip_special_tokens=True, min_tokens=0,
           tokenizer=TOK):
    """Drive the detokenizer as the engine does; return (final text, deltas, matched stop, tokens used)."""
    detok = IncrementalDetokenizer(tokenizer, list(prompt), stop=list(stop),
                                   skip_special_tokens=skip_special_tokens,
                                   include_stop_str_in_output=include_stop)
    deltas: list[str] = []
    matched = None
    used = 0
    for count, token_id in enumerate(token_ids, start=1):
        used = count
        matched = detok.add_token(token_id, check_stop=count >= min_tokens)
        if matched is None and count == len(token_ids):
            detok.flush_pending()  # generation ends without a stop match (length / EOS)
        deltas.append(detok.take_delta(matched is not None or count == len(token_ids)))
        emitted = "".join(deltas)
        assert detok.text.startswith(emitted), "emitted text was taken back"
        if matched is not None:
            break
    assert "".join(deltas) == detok.text
    if matched is not None and min_tokens == 0:  # (before min_tokens a stop may be emitted as text)
        emitted = "".join(deltas)
        if include_stop:
            assert emitted.endswith(matched)
            assert matched not in emitted[:-1]  # the first occurrence is the one that ended it
        else:
            assert matched not in emitted
    return detok.text, deltas, matched, used


# -- stop strings ---------------------------------------------------------------------------------
@pytest.mark.parametrize("pieces, before", [
    (["a", "STOP", "b"], "a"),  # inside a single token
    (["a", "ST", "OP", "b"], "a"),  # spanning 2 tokens
    (["a", "S", "T", "OP", "b"], "a"),  # spanning 3 tokens
    (["a", "ST", "O", "P", "b"], "a"),  # spanning 3 tokens, split differently
    (["a", "xyST", "OP", "b"], "axy"),  # starting mid-token: the text before "ST" is kept
])
@pytest.mark.parametrize("include_stop", [False, True])
def test_stop_string_split_over_tokens(pieces, before, include_stop):
    """The stop is found however it is split; the text ends before it (or with it, if included)."""
    text, deltas, matched, used = stream(ids(*pieces), stop=["STOP"], include_stop=include_stop)
    assert matched == "STOP"
    assert used == len(pieces) - 1  # it ends generation at the token that completes it
    assert text == before + ("STOP" if include_stop else "")


def test_stop_prefix_is_held_back_until_it_completes():
    """'xyST' emits only 'xy' while 'ST' could still begin 'STOP'."""
    _, deltas, matched, _ = stream(ids("xyST", "OP"), stop=["STOP"])
    assert deltas == ["xy", ""] and matched == "STOP"


def test_false_start_is_released_once_it_cannot_be_a_stop():
    """Held-back 'STO' comes out as soon as the next text rules it out; a later real STOP still ends it."""
    text, deltas, matched, _ = stream(ids("STO", "x", "a", "STOP", "b"), stop=["STOP"])
    assert deltas[0] == "" and deltas[1] == "STOx"
    assert matched == "STOP" and text == "STOxa"


def test_overlapping_false_start():
    """'STO' + 'STO' + 'P': the first 'STO' is released, the stop begins at the second one."""
    text, deltas, matched, _ = stream(ids("STO", "STO", "P", "a"), stop=["STOP"])
    assert deltas[:2] == ["", "STO"]
    assert matched == "STOP" and text == "STO"


def test_earlier_starting_stop_wins():
    """Two stops completed by the same token: the one that starts earlier in the text is matched."""
    text, _, matched, _ = stream(ids("a", "xy", "STOP"), stop=["STOP", "ySTOP"])
    assert matched == "ySTOP" and text == "ax"
    text, _, matched, _ = stream(ids("a", "xy", "STOP"), stop=["ySTOP", "STOP"])
    assert matched == "ySTOP" and text == "ax"
    # the shorter one completes first (at "ST"), so it wins although the longer started earlier
    text, _, matched, _ = stream(ids("xy", "ST", "OP"), stop=["xySTOP", "yST"])
    assert matched == "yST" and text == "x"


@pytest.mark.parametrize("pieces", [["x", "abc"], ["x", "a", "bc"], ["x", "ab", "c"]])
def test_stops_with_the_same_start_pick_the_shorter(pieces):
    """Stops 'abc' and 'a' start at the same place: 'a' (completed first) wins however the text is
    split into tokens, so include_stop_str_in_output gives the same text every time."""
    text, _, matched, _ = stream(ids(*pieces), stop=["abc", "a"], include_stop=True)
    assert matched == "a" and text == "xa"


def test_stop_prefix_at_end_of_generation_is_emitted():
    """Text that is only a prefix of a stop when generation ends (no match) is emitted at finish."""
    text, deltas, matched, _ = stream(ids("a", "ST", "O"), stop=["STOP"])
    assert matched is None
    assert deltas == ["a", "", "STO"] and text == "aSTO"


def test_check_stop_false_never_matches():
    """Before min_tokens, stop strings are ignored (and the held prefix still comes out in the end)."""
    text, _, matched, used = stream(ids("a", "STOP", "b"), stop=["STOP"], min_tokens=10)
    assert matched is None and used == 3 and text == "aSTOPb"


def test_stop_before_min_tokens_is_not_matched_later():
    """A short stop completed while check_stop was False is not matched retroactively by a later
    token (a longer stop widens the scan window, which must not reach back for the short one)."""
    text, _, matched, _ = stream(ids("x", "a", "b", "y", "STOP"), stop=["a", "xyzSTOP"], min_tokens=4)
    assert matched is None and text == "xabySTOP"
    text, _, matched, _ = stream(ids("x", "a", "b", "STOP", "a"), stop=["a", "xyzSTOP"], min_tokens=4)
    assert matched == "a" and text == "xabSTOP"


def test_stop_search_ignores_the_prompt():
    """A stop string that begins in the prompt does not match; only output text is searched."""
    text, _, matched, _ = stream(ids("OP", "a"), stop=["STOP"], prompt=ids("a", "ST"))
    assert matched is None and text == "OPa"


def test_no_stop_strings_emits_everything_immediately():
    """Without stop strings nothing is held back."""
    _, deltas, matched, _ = stream(ids("S", "T", "O", "P"))
    assert deltas == ["S", "T", "O", "P"] and matched is None


# -- special tokens ---------------------------------------------------------------------------------
@pytest.mark.parametrize("skip, expected", [(True, "ab"), (False, "a<eos>b")])
def test_special_tokens(skip, expected):
    """skip_special_tokens leaves special tokens out of the text; False keeps their literal text."""
    text, _, _, _ = stream(ids("a", EOS, "b"), skip_special_tokens=skip)
    assert text == expected


# -- UTF-8 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pieces, expected", [
    ([b"a", b"\xf0\x9f", b"\x98\x80", b"b"], "a" + EMOJI + "b"),  # 4-byte emoji over 2 tokens
    ([b"a", b"\xf0", b"\x9f", b"\x98", b"\x80", b"b"], "a" + EMOJI + "b"),  # over 4 tokens
    ([b"\xf0", b"\x9f", b"\x98", b"\x80"], EMOJI),  # nothing else around it
    ([b"a", b"\xe6\x9d", b"\xb1", b"b"], "a" + CJK + "b"),  # 3-byte CJK over 2 tokens
    ([b"\xe6", b"\x9d", b"\xb1", b"\xe6\x9d", b"\xb1"], CJK + CJK),  # over 3, then 2
    ([b"\xf0", b"\x9f", b"\x98", b"\x80"] * 3, EMOJI * 3),  # several, past the context window
])
def test_multibyte_characters_split_over_tokens(pieces, expected):
    """No delta holds a half character; the final text is the true string."""
    text, deltas, _, _ = stream(ids(*pieces))
    assert text == expected
    assert all("\ufffd" not in delta for delta in deltas)
    assert deltas[-1] != "" or pieces[-1] not in (b"\x80", b"\xb1")  # released at completion


def test_multibyte_character_with_stop_strings():
    """A stop right after a split emoji still ends the text exactly there."""
    text, deltas, matched, _ = stream(ids("a", b"\xf0", b"\x9f", b"\x98", b"\x80", "ST", "OP", "b"),
                                      stop=["STOP"])
    assert matched == "STOP" and text == "a" + EMOJI
    assert all("\ufffd" not in delta for delta in deltas)


def test_stop_completed_by_a_token_that_starts_a_character():
    """'STO' + 'P<first emoji bytes>': the stop is complete although the token's tail is not a whole
    character yet; it must be matched (not emitted), whether or not generation continues."""
    text, _, matched, used = stream(ids("a", "STO", b"P\xf0\x9f", b"\x98\x80", "b"), stop=["STOP"])
    assert matched == "STOP" and text == "a" and used <= 4
    text, _, matched, _ = stream(ids("a", "STO", b"P\xf0\x9f"), stop=["STOP"])  # generation ends there
    assert matched == "STOP" and text == "a"


def test_incomplete_character_at_the_end_is_flushed():
    """Bytes of an unfinished character when generation stops come out (as U+FFFD) at finish."""
    text, deltas, _, _ = stream(ids("a", b"\xf0\x9f"))
    assert deltas == ["a", "\ufffd"] and text == "a\ufffd"


# -- leading spaces -------------------------------------------------------------------------------
def test_byte_level_leading_spaces_are_kept():
    """Tokens ' Hello', ' world' keep their spaces, including the first output token's."""
    text, deltas, _, _ = stream(ids(" Hello", " world", "!"), prompt=ids("Hi"))
    assert deltas == [" Hello", " world", "!"] and text == " Hello world!"


def _metaspace_tokenizer() -> Tokenizer:
    words = ["<unk>", "\u2581Hi", "\u2581Hello", "\u2581world", "!", "\u2581a"]
    backend = tokenizers.Tokenizer(models.BPE(vocab={w: i for i, w in enumerate(words)}, merges=[],
                                              unk_token="<unk>"))
    backend.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    return Tokenizer(backend)


def test_sentencepiece_leading_spaces_are_kept():
    """SentencePiece strips the first token's word-boundary space on decode; with the prompt as
    context the first output word keeps its space, and so does every word after the window slides."""
    tok = _metaspace_tokenizer()
    out = [2, 3] * (CONTEXT_TOKENS + 1) + [4]
    text, deltas, _, _ = stream(out, prompt=[1], tokenizer=tok)
    assert deltas[:3] == [" Hello", " world", " Hello"]
    assert text == " Hello world" * (CONTEXT_TOKENS + 1) + "!"
    assert tok.decode([1] + out) == "Hi" + text


# -- property test -------------------------------------------------------------------------------
SAFE_PIECES = [p for p in VOCAB if p != b"P\xf0\x9f"]  # random bytes: complete or incomplete UTF-8


def _expected(output_ids: list[int], stops: list[str], include_stop: bool) -> tuple[str, int]:
    """(final text, tokens consumed), computed from whole decodes: generation ends at the first token
    after which the decoded output (less a trailing incomplete character) contains a stop string, and
    the text is cut at the earliest-starting stop string in it."""
    for count in range(1, len(output_ids) + 1):
        text = TOK.decode(output_ids[:count]).rstrip("\ufffd")
        hits = [(text.find(s), len(s), s) for s in stops if s in text]
        if hits:
            start, _, stop = min(hits)
            return (text[:start + len(stop)] if include_stop else text[:start]), count
    return TOK.decode(output_ids), len(output_ids)


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_match_a_full_decode(seed):
    """Random token sequences (incomplete and invalid UTF-8 included) and stop lists: deltas concatenate
    to the final text, generation ends at the token that completes the first stop string, and the
    final text is the full decode of the output cut there."""
    rng = random.Random(seed)
    pieces = SAFE_PIECES + ([b"P\xf0\x9f"] if seed % 2 else [])
    stop_pool = ["STOP", "ST", "OP", "P", "ab", "ba", "abc", "xy", "yS", "a", "Hello", "lo w", "END", "\n",
                 EMOJI, CJK, "x" + EMOJI, "b\n"]
    for _ in range(50):
        prompt = ids(*rng.choices(["Hi", "a", "ST", "STO", " ", "b"], k=rng.randint(0, 6)))
        output = [IDS[p] for p in rng.choices(pieces, k=rng.randint(1, 25))]
        stops = rng.sample(stop_pool, rng.randint(0, 3))
        include_stop = rng.random() < 0.3
        text, _, matched, used = stream(output, stop=stops, prompt=prompt, include_stop=include_stop)
        assert (text, used) == _expected(output, stops, include_stop), (prompt, output, stops)
        assert matched is None or matched in stops
