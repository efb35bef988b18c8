"""Tool calls that always parse: a reply with tools offered under tool_choice "auto" stays free
until it opens a call, and from there the call's grammar constrains it.

Small models behind agent frameworks write almost-calls: the call with an extra pair of braces or
unquoted keys, a fenced block, instead of their template's `<tool_call>{...}</tool_call>`.
What opens a call (the request path says, per chat template family, in
`SamplingParams.tool_trigger`: {"grammar": the spec, "calls": the same without other JSON, "tags":
[...], "bare": bool}):
- one of the family's tags, anywhere in the answer (`<tool_call>`; Llama 3's `<|python_tag|>`;
  for Qwen3.5's XML function blocks also `<function=`, a block written without its tags; Gemma
  4's `<|tool_call>`): text or a single added token alike, since a token's text is read with its
  special tokens;
- where `bare` (families whose models write bare calls): a `{` as the answer's first non-blank
  text, or a ```json fence opening it.

A ToolTrigger per sequence watches its answer (after any reasoning block). At the answer's first
non-blank token, a token that starts with `{` is drawn again from the same logits row among the
`{` tokens the grammar allows (ToolCallSteps._open_calls_at_start), so a first token `{{` becomes
`{` or `{"`; a tag or a fence written later hands the sequence a grammar matcher fed what
opened the call (`observe` says what), and the rest is constrained as a structured request's
reply is. A reply that opens with prose and writes no tag is never constrained: its tokens are
the ones it has without the trigger.

A `{` or a fence is not yet a call: JSON asked for is written the same way. So the grammar also
allows any other JSON value (api/common/tool_parsers.py), and the trigger is DECIDING: the engine
hands it a second matcher of the calls alone (`spec["calls"]`), fed the same tokens. Once the
model's own tokens no longer fit a call (`settled` "other"), the engine drops the sequence's
matcher, the reply goes on free and the trigger watches for a tag again; once they make a whole
call (`settled` "call"), the calls' matcher holds the rest (the end of the turn, or more calls),
as a fenced JSON answer's would not. Until then the mask is the union, so a second `{` or an
unquoted key is still redrawn into JSON.

Speculation goes on while a trigger watches the prose of an answer: the proposer cuts a guess
just before the token that would complete a tag (`speculable`), so that token is drawn by the model
and the tag seen here exactly where it would be without speculation, and what follows it is drawn
under the grammar (spec_decode/proposer.py); while a `{` or a fence decides, a guess goes as far as
a call still takes it, stopping before the token that would make the call whole. The answer's first non-blank token is never guessed (it may be drawn
again): a guess in a reasoning block stops before the end marker's last token
(engine/sample/reasoning.py), and none is proposed while the answer has not begun.

Plain bookkeeping over token ids and their text: no tensors, no tokenizer beyond the two
callables the engine hands in, and the calls' matcher while DECIDING.
"""

from __future__ import annotations

from collections.abc import Callable

FENCE = "```json"

START, FENCE_OPENING, PROSE, DECIDING, DONE = "start", "fence", "prose", "deciding", "done"


class ToolTrigger:
    """One sequence's watch for a call opening. `piece(token_id)`: a token's text on its own
    (special tokens included); `encode(text)`: token ids spelling the text (no BOS)."""

    def __init__(self, spec: dict, piece: Callable[[int], str], encode: Callable[[str], list[int]]):
        self.grammar: dict = spec["grammar"]
        self.calls: dict = spec.get("calls") or spec["grammar"]
        self.tags: list[str] = list(spec.get("tags") or [])
        self.bare: bool = bool(spec.get("bare"))
        self.piece, self.encode = piece, encode
        self.state = START if self.bare else PROSE
        self.tokens: list[int] = []  # the answer's tokens seen so far
        self.text = ""  # their text
        self.opened_by: str | None = None  # "tag", "brace" or "fence", once a call opened
        # set by `observe` when a DECIDING reply settled: "call" (a whole call written: the engine
        # holds the rest to `calls_matcher`) or "other" (not a call: the engine lets the reply go)
        self.settled: str | None = None
        self.calls_matcher = None  # while DECIDING

    @property
    def armed(self) -> bool:
        """Still watching: the reply may yet open a call."""
        return self.state != DONE

    @property
    def at_start(self) -> bool:
        """The next token is the answer's first non-blank one, which may open a bare call."""
        return self.state == START

    def opens_bare(self, token_id: int) -> bool:
        """Whether `token_id`, sampled as the answer's first non-blank token, opens a bare call
        (it starts with `{`): the engine then draws it again under the grammar."""
        return self.at_start and self.piece(token_id).lstrip().startswith("{")

    def opened(self, how: str, calls_matcher=None) -> None:
        """A call opened (`how`: "tag", "brace", "fence"); a `{` or a fence is only DECIDING, while
        `calls_matcher` (the calls alone, fed what opened it) takes the tokens written."""
        deciding = how in ("brace", "fence") and calls_matcher is not None
        self.state, self.opened_by, self.calls_matcher = (DECIDING if deciding else DONE), how, calls_matcher
        self.settled = None

    def drop(self) -> None:
        """Stops watching: the reply stays free (the grammar could not take what was written)."""
        self.state, self.opened_by = DONE, None

    @property
    def may_guess(self) -> bool:
        """Whether guessed tokens may be proposed at all: not before the answer's prose began (its
        first token may be drawn again)."""
        return self.state in (PROSE, DECIDING, DONE)

    def speculable(self, draft: list[int]) -> int:
        """How many of the guessed tokens `draft` (to follow what was observed) may be proposed:
        in prose, those before the token that would complete a tag; while a `{` decides, those a
        call still takes (the token that leaves every call is drawn under the grammar's union, as
        without speculation, and the reply is let go after it); none before the prose began."""
        if not self.may_guess:
            return 0
        if self.state == DECIDING:
            return self._before_whole_call(draft)
        if self.state == DONE:
            return len(draft)
        text = self.text
        for count, token_id in enumerate(draft):
            before = len(text)
            text += self.piece(token_id)
            if _tag_at(text, before, self.tags) is not None:
                return count
        return len(draft)

    def _before_whole_call(self, draft: list[int]) -> int:
        """How many guesses a call still takes, stopping before the one that would make it whole
        (that token is the model's own draw, and the calls alone hold what follows it)."""
        matcher, taken, count = self.calls_matcher, 0, 0
        for token_id in draft[: matcher.validate_tokens(draft)]:
            matcher.consume_token(token_id)
            taken += 1
            if matcher.is_accepting():
                break
            count += 1
        if taken and not matcher.rollback(taken):
            raise RuntimeError("the calls' matcher could not go back over the guesses")
        return count

    def observe(self, answer_ids: list[int]) -> list[int] | None:
        """After tokens were written (`answer_ids`: the whole answer so far, reasoning excluded):
        the token ids a fresh matcher must be fed when a call opened with them, else None."""
        for token_id in answer_ids[len(self.tokens) :]:
            if self.state == DONE:
                return None
            opening = self._see(token_id)
            if opening is not None:
                return opening
        return None

    def _see(self, token_id: int) -> list[int] | None:
        before = len(self.text)
        self.tokens.append(token_id)
        self.text += self.piece(token_id)
        if self.state == DECIDING:
            if not self.calls_matcher.consume_token(token_id):  # not a call after all: the reply goes on free
                self.state, self.opened_by, self.settled, self.calls_matcher = PROSE, None, "other", None
            elif self.calls_matcher.is_accepting():  # a whole call: from here the calls alone hold it
                self.state, self.settled = DONE, "call"
            return None
        at = _tag_at(self.text, before, self.tags)
        if at is not None:
            self.opened("tag")
            rest = self.text[at:]
            return None if "\ufffd" in rest else self.encode(rest)  # a cut character: nothing to feed, stay free
        if self.state in (START, FENCE_OPENING):
            lead = self.text.lstrip()
            if not lead:
                return None  # blanks: the answer has not started
            if self.state == START and lead.startswith("{"):
                self.opened("brace")  # (a first token not drawn again: it opened before the trigger could)
                return list(self.tokens)
            if lead[: len(FENCE)].lower() == FENCE:
                self.opened("fence")
                return list(self.tokens)
            self.state = FENCE_OPENING if FENCE.startswith(lead.lower()) else PROSE
        return None


def _tag_at(text: str, before: int, tags: list[str]) -> int | None:
    """Where a tag that the text past `before` completed begins in `text`, or None."""
    found = [at for tag in tags if (at := text.find(tag, max(0, before - len(tag) + 1))) != -1]
    return min(found) if found else None
