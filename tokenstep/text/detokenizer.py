"""IncrementalDetokenizer: token ids in, text deltas out, safe for streaming.

Three guarantees:
- the deltas concatenate to exactly the final text;
- a UTF-8 character split across tokens is never emitted half-done (no "\\ufffd" mid-stream): text
  is held until the decoded window no longer ends in a replacement character;
- text that could be the start of a stop string is held back until it cannot be, so a stop string
  split over several tokens never reaches the stream; on a match the text ends before the stop
  string (or after it, with `include_stop_str_in_output`).

Cost per token: one `decode` of a short window (the tokens since the last emitted boundary, usually
1-3, plus a few tokens of left context so SentencePiece word-boundary spaces come out right), and a
stop-string scan of the last `len(new text) + max stop length` characters: O(window + stop length),
independent of how long the output already is.
"""

from __future__ import annotations

from tokenstep.text.tokenizer import Tokenizer

REPLACEMENT_CHAR = "\ufffd"
CONTEXT_TOKENS = 4  # tokens of left context decoded with the new ones (leading-space handling)


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt_token_ids: list[int], stop: list[str] | None = None,
                 skip_special_tokens: bool = True, include_stop_str_in_output: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.stop = list(stop or [])
        self.include_stop = include_stop_str_in_output
        self.max_stop_len = max((len(s) for s in self.stop), default=0)
        # The prompt's tail is context only: decoding starts from it so the first output token's
        # leading space is right, but none of it is ever emitted.
        self.token_ids = list(prompt_token_ids[-CONTEXT_TOKENS:])
        self.prefix_offset = 0  # start of the decode window
        self.read_offset = len(self.token_ids)  # tokens before this are already in `text`
        self.text = ""  # all output text decoded so far (after a stop match: cut at the stop)
        self.num_emitted = 0  # characters of `text` already returned as deltas

    def add_token(self, token_id: int, check_stop: bool = True) -> str | None:
        """Decode one more token; return the stop string it completed, if any (and `check_stop`)."""
        self.token_ids.append(token_id)
        full = self.tokenizer.decode(self.token_ids[self.prefix_offset:], self.skip_special_tokens)
        before = self.tokenizer.decode(self.token_ids[self.prefix_offset:self.read_offset], self.skip_special_tokens)
        new_text = full[len(before):]
        old_len = len(self.text)
        if full.endswith(REPLACEMENT_CHAR):
            # An incomplete UTF-8 sequence: wait for the next token, unless the complete text before
            # it already finishes a stop string (e.g. one token "P\xf0\x9f" after "STO").
            stable = new_text.rstrip(REPLACEMENT_CHAR)
            base = max(0, old_len - self.max_stop_len)  # only the tail a stop could begin in
            if not (check_stop and self.stop and self._find_stop(self.text[base:] + stable, old_len - base)):
                return None
            new_text = stable
        self.prefix_offset, self.read_offset = max(0, len(self.token_ids) - CONTEXT_TOKENS), len(self.token_ids)
        self.text += new_text
        return self._match_stop(old_len) if check_stop and self.stop else None

    def _find_stop(self, text: str, old_len: int) -> tuple[int, str] | None:
        # The earliest-starting stop string that ends after `old_len` (it may begin before it); of
        # two starting at the same place, the shorter (it completed first, whatever the tokens). Each
        # stop is searched only where it would end in the new text: one that lies wholly in older
        # text was either checked already or was completed while stops were not checked (min_tokens).
        best: tuple[int, str] | None = None
        for stop in self.stop:
            index = text.find(stop, max(0, old_len - len(stop) + 1))
            if index != -1 and (best is None or (index, len(stop)) < (best[0], len(best[1]))):
                best = (index, stop)
        return best

    def _match_stop(self, old_len: int) -> str | None:
        best = self._find_stop(self.text, old_len)
        if best is None:
            return None
        index, stop = best
        self.text = self.text[: index + len(stop)] if self.include_stop else self.text[:index]
        return stop

    def flush_pending(self) -> None:
        """At the end of generation, decode whatever incomplete bytes are left (they stay "\ufffd")."""
        if self.read_offset < len(self.token_ids):
            full = self.tokenizer.decode(self.token_ids[self.prefix_offset:], self.skip_special_tokens)
            before = self.tokenizer.decode(self.token_ids[self.prefix_offset:self.read_offset], self.skip_special_tokens)
            self.text += full[len(before):]
            self.read_offset = len(self.token_ids)

    def take_delta(self, finished: bool) -> str:
        """Text not yet emitted. While running, hold back a tail that could begin a stop string."""
        end = len(self.text) if finished else len(self.text) - self._stop_prefix_len()
        if end <= self.num_emitted:
            return ""
        delta = self.text[self.num_emitted:end]
        self.num_emitted = end
        return delta

    def _stop_prefix_len(self) -> int:
        # Longest suffix of the text that is a proper prefix of some stop string.
        longest = 0
        for stop in self.stop:
            for length in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:length]):
                    longest = length
                    break
        return longest
