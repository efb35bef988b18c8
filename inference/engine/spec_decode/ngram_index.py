"""Where a token sequence last showed its own recent tokens: the n-gram lookup speculative
decoding guesses from (engine/spec_decode/proposer.py).

Input-grounded text repeats itself: a summary quotes its passage, an edit rewrites most of a
file unchanged, JSON repeats its keys. When the last n tokens written appeared earlier (in the
prompt or the output), the tokens that followed them there are a good guess for what comes next.
The index maps every n-gram (for each n in [min_n, max_n]) to the position just after its latest
occurrence; it grows with the sequence, a token at a time, so a lookup costs a few dict reads
instead of a scan over the context.
"""

from __future__ import annotations


class NgramIndex:
    """An index over a growing token list (`tokens`, read not copied): `extend()` after tokens are
    appended, `propose(k)` for up to k tokens that followed the longest matching suffix."""

    def __init__(self, tokens: list[int], min_n: int, max_n: int):
        self.tokens = tokens
        self.min_n = min_n
        self.max_n = max_n
        self.follower: dict[tuple[int, ...], int] = {}  # n-gram -> the position after its latest occurrence
        self.indexed = 0  # positions whose preceding n-grams are in the index

    def extend(self) -> None:
        """Indexes the n-grams that end before each new position (their follower is now known)."""
        tokens, follower = self.tokens, self.follower
        for position in range(max(self.indexed, 1), len(tokens)):
            for n in range(self.min_n, min(self.max_n, position) + 1):
                follower[tuple(tokens[position - n : position])] = position
        self.indexed = max(self.indexed, len(tokens))

    def propose(self, k: int, suffix: list[int] | None = None) -> list[int]:
        """Up to k tokens that followed the latest earlier occurrence of the longest n-gram ending
        `suffix` (default: this index's own tokens); [] when none of them occurred before. A
        continuation that runs into the end of the list (text repeating with a short period) is
        looked up again from its own end, so a loop is guessed a full k tokens ahead."""
        self.extend()
        suffix = self.tokens if suffix is None else suffix
        draft: list[int] = []
        while len(draft) < k:
            tail = (suffix[-self.max_n :] + draft)[-self.max_n :] if draft else suffix[-self.max_n :]
            found = self._continuation(tail, k - len(draft))
            if not found:
                break
            draft += found
        return draft

    def _continuation(self, tail: list[int], k: int) -> list[int]:
        for n in range(min(self.max_n, len(tail)), self.min_n - 1, -1):
            start = self.follower.get(tuple(tail[-n:]))
            if start is not None:
                return self.tokens[start : start + k]
        return []
