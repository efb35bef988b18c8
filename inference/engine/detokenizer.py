"""Incremental detokenization: token ids in, safe text deltas out.

Two things are held back before text is streamed:
- an incomplete character: byte-level tokens can split one UTF-8 character, and decoding
  such a tail yields U+FFFD; we wait for the token that completes it;
- a possible stop-string start: text that could begin a stop string is kept until it either
  completes the stop string (then it is dropped, or kept as the text's end with
  `include_stop_str_in_output`) or can no longer do so (then it is released).

Decoding uses a sliding window (prefix_offset .. end): the text of the window minus the text
of the already-released part of the window is the delta. The window stays a few tokens long,
so each token costs O(1) decode work, not a re-decode of the whole output.

Special tokens are skipped, except the marks a reply's parsers read (`PARSED_MARKS`): Gemma 4
writes its thinking channel, tool calls and their string quotes as special tokens, which the API's
reasoning and tool-call parsers must see (llama.cpp's converter re-types them for the same reason).
"""

from __future__ import annotations

_REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens decoded as left context, so tokenizers that drop a leading space on the first
# token (SentencePiece) still produce the space a continuation should have.
_PROMPT_CONTEXT_TOKENS = 5
# Special tokens kept in the text: Gemma 4's thinking channel, tool call, tool response and string quote.
PARSED_MARKS = ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>')


def hidden_special_ids(tokenizer) -> frozenset[int]:
    """The special tokens a reply's text leaves out: every special or special-flagged added token
    but the `PARSED_MARKS` this tokenizer has (empty where it has none: the plain skip applies)."""
    vocab = tokenizer.get_vocab()
    kept = {vocab[mark] for mark in PARSED_MARKS if mark in vocab}
    if not kept:
        return frozenset()
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special = set(tokenizer.all_special_ids) | {i for i, token in added.items() if getattr(token, "special", False)}
    return frozenset(special - kept)


class IncrementalDetokenizer:
    """Per-request streaming detokenizer with stop-string handling."""

    def __init__(
        self,
        tokenizer,
        prompt_token_ids: list[int],
        stop: list[str] = (),
        skip_special_tokens: bool = True,
        include_stop_str: bool = False,
        hidden_ids: frozenset[int] = frozenset(),
    ):
        """`hidden_ids`: where the tokenizer has parsed marks, the special tokens to skip (the rest are kept)."""
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.hidden_ids = hidden_ids if skip_special_tokens else frozenset()
        self.stop = [s for s in stop if s]
        self.include_stop_str = include_stop_str
        self.stop_matched: str | None = None
        self.output_text = ""
        self._tokens: list[int] = list(prompt_token_ids[-_PROMPT_CONTEXT_TOKENS:])
        self._prefix_offset = 0  # window start
        self._read_offset = len(self._tokens)  # tokens before this are already turned into text
        self._held = ""  # decoded text kept back because it may start a stop string
        self._token_text_cache: dict[int, str] = {}

    def add_tokens(self, token_ids: list[int]) -> str:
        """Feed newly generated tokens; returns the text that became safe to stream."""
        if self.stop_matched is not None:
            return ""
        self._tokens.extend(token_ids)
        return self._release(self._decode_new(final=False), final=False)

    def finish(self) -> str:
        """Release everything held back; call when generation ends other than by a stop string."""
        if self.stop_matched is not None:
            return ""
        return self._release(self._decode_new(final=True), final=True)

    def token_text(self, token_id: int) -> str:
        """Text of one token on its own (for logprobs); may be U+FFFD for a partial character."""
        text = self._token_text_cache.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            self._token_text_cache[token_id] = text
        return text

    def _decode(self, ids: list[int]) -> str:
        if self.hidden_ids:  # skip all special tokens but the parsed marks
            return self.tokenizer.decode([i for i in ids if i not in self.hidden_ids], skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def _decode_new(self, final: bool) -> str:
        """Text added by tokens past read_offset; "" while it ends in an incomplete character."""
        if self._read_offset == len(self._tokens):
            return ""
        window = self._tokens[self._prefix_offset :]
        prefix_text = self._decode(window[: self._read_offset - self._prefix_offset])
        full_text = self._decode(window)
        if not final and full_text.endswith(_REPLACEMENT_CHAR):
            return ""  # a character is still incomplete: wait for the rest of its bytes
        if not final and len(full_text) <= len(prefix_text):
            # Only invisible tokens (skipped special tokens): mark them read but keep the
            # window start, so the next visible token still has its left context.
            self._read_offset = len(self._tokens)
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._tokens)
        self._compact()
        return full_text[len(prefix_text) :]

    def _compact(self) -> None:
        """Drop tokens left of the window so memory stays bounded on long outputs."""
        if self._prefix_offset > 1024:
            del self._tokens[: self._prefix_offset]
            self._read_offset -= self._prefix_offset
            self._prefix_offset = 0

    def _release(self, new_text: str, final: bool) -> str:
        """Run stop-string matching over held + new text and return what may be streamed."""
        text = self._held + new_text
        match_at, matched = self._find_stop(text)
        if matched is not None:
            self.stop_matched = matched
            self._held = ""
            delta = text[: match_at + len(matched)] if self.include_stop_str else text[:match_at]
        else:
            keep = 0 if final else self._stop_prefix_len(text)
            self._held = text[len(text) - keep :] if keep else ""
            delta = text[: len(text) - keep]
        self.output_text += delta
        return delta

    def _find_stop(self, text: str) -> tuple[int, str | None]:
        """Earliest stop string in text (released text never holds one, nor a start of one)."""
        best_at, best = len(text), None
        for s in self.stop:
            at = text.find(s)
            if at != -1 and at < best_at:
                best_at, best = at, s
        return best_at, best

    def _stop_prefix_len(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of some stop string."""
        longest = max((len(s) for s in self.stop), default=0)
        for n in range(min(len(text), longest - 1), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self.stop):
                return n
        return 0
