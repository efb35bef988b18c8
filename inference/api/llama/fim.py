"""Fill-in-the-middle prompts for code models, laid out as llama-server lays them out.

A code model trained for FIM has three tokens (prefix, suffix, middle) and often two more for
repository-level context (a repo-name token and a file separator). Their names differ by family
(Qwen2.5-Coder's `<|fim_prefix|>`, StarCoder's `<fim_prefix>`, CodeLlama's `▁<PRE>`,
DeepSeek-Coder's `<｜fim▁begin｜>`, ...); the served tokenizer's vocabulary says which it has.
The layout follows llama-server's `format_prompt_infill` (the repo-level pattern of Qwen2.5-Coder's
report):

    [REPO]myproject\\n [SEP]filename0\\n extra chunk 0 ... [SEP]filename\\n
    [BOS] [PRE]prefix prompt [SUF]suffix [MID]

with the prefix cut to its last 3/4 of a 2,048-token batch and the suffix to its first quarter,
as llama-server does by default. Text is tokenized with special tokens read as text, as
llama-server does, so code that spells a FIM token cannot forge one. A tokenizer without the
three FIM tokens cannot do this: `FimError`.
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass

from ..common.errors import bad_request

FIM_BATCH = 2048  # llama-server's default n_batch, which sizes its prefix and suffix cuts
FAMILIES = (  # (prefix, suffix, middle, repo name, file separator)
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"),
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<repo_name>", "<file_sep>"),
    ("<fim-prefix>", "<fim-suffix>", "<fim-middle>", None, None),
    ("▁<PRE>", "▁<SUF>", "▁<MID>", None, None),
    ("<PRE>", "<SUF>", "<MID>", None, None),
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", None, None),
)
FILE_SEPARATORS = ("<|file_sep|>", "<file_sep>", "<|file_separator|>")
REPO_NAMES = ("<|repo_name|>", "<repo_name>", "<reponame>")
# llama-server's separator between extra chunks for models without a file separator
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"


class FimError(ValueError):
    """The served model has no fill-in-the-middle tokens."""


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int
    repo: int | None
    separator: int | None


def fim_tokens(tokenizer) -> FimTokens:
    """The tokenizer's FIM tokens (looked up once per tokenizer: its vocabulary is large)."""
    found = _found.get(tokenizer)
    if found is None:
        found = _found[tokenizer] = _lookup(tokenizer)
    if isinstance(found, FimError):
        raise found
    return found


_found: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _lookup(tokenizer) -> FimTokens | FimError:
    vocab = tokenizer.get_vocab()
    for prefix, suffix, middle, repo, separator in FAMILIES:
        if prefix in vocab and suffix in vocab and middle in vocab:
            repo_id = vocab.get(repo) if repo else next((vocab[n] for n in REPO_NAMES if n in vocab), None)
            separator_id = vocab.get(separator) if separator else next((vocab[n] for n in FILE_SEPARATORS if n in vocab), None)
            return FimTokens(vocab[prefix], vocab[suffix], vocab[middle], repo_id, separator_id)
    return FimError("the served model has no fill-in-the-middle tokens (prefix, suffix, middle): it cannot infill")


_splitting: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _splitting_backend(tokenizer):
    """A copy of a fast tokenizer's backend that reads special-token names as text, made once per
    tokenizer. transformers' `split_special_tokens=True` flips a flag on the shared backend, and
    prompts are tokenized in worker threads: a chat prompt tokenized meanwhile would have its
    template's special tokens split too. None for a tokenizer without a backend (a slow one)."""
    backend = _splitting.get(tokenizer)
    if backend is None and getattr(tokenizer, "_tokenizer", None) is not None:
        backend = copy.deepcopy(tokenizer._tokenizer)
        backend.encode_special_tokens = True
        _splitting[tokenizer] = backend
    return backend


def _text_ids(tokenizer, text: str) -> list[int]:
    """Text as tokens, special-token names read as text (llama-server's parse_special=false)."""
    if not text:
        return []
    backend = _splitting_backend(tokenizer)
    if backend is None:
        return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids)
    return list(backend.encode_batch([text], add_special_tokens=False)[0].ids)  # the batch call frees the GIL


def _adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a").input_ids[:1] == [bos]


def infill_prompt(
    tokenizer, prefix: str, suffix: str, extra: list[dict] | None = None, prompt: str = "", *, context: int, max_tokens: int = 0
) -> list[int]:
    """The token ids of a FIM prompt: `extra` chunks ({"filename", "text"}) before the prefix,
    `prompt` after it (llama-server's /infill fields). Extra context fills what `context` (the
    model's length) leaves after a batch and twice `max_tokens`, as llama-server's n_ctx and
    n_predict do."""
    fim = fim_tokens(tokenizer)
    extra_ids: list[int] = []
    if fim.repo is not None:
        extra_ids += [fim.repo, *_text_ids(tokenizer, "myproject\n")]
    for chunk in extra or []:
        if fim.separator is not None:
            extra_ids += [fim.separator, *_text_ids(tokenizer, chunk.get("filename", "tmp") + "\n")]
        else:
            extra_ids += _text_ids(tokenizer, CHUNK_SEPARATOR)
        extra_ids += _text_ids(tokenizer, chunk.get("text", ""))
    if fim.separator is not None:
        extra_ids += [fim.separator, *_text_ids(tokenizer, "filename\n")]
    prefix_ids, suffix_ids, prompt_ids = _text_ids(tokenizer, prefix), _text_ids(tokenizer, suffix), _text_ids(tokenizer, prompt)
    prefix_take = min(len(prefix_ids), 3 * (FIM_BATCH // 4))
    suffix_take = min(len(suffix_ids), max(0, FIM_BATCH // 4 - (2 + len(prompt_ids))))
    head = [fim.prefix, *prefix_ids[len(prefix_ids) - prefix_take :], *prompt_ids]
    tail = [fim.suffix, *suffix_ids[:suffix_take]]
    if _adds_bos(tokenizer):
        head.insert(0, tokenizer.bos_token_id)
    core = head + tail + [fim.middle]
    room = context - len(core) - max(max_tokens, 1)  # never more than the context holds beside the reply
    extra_take = max(0, min(context - FIM_BATCH - 2 * max_tokens, room, len(extra_ids)))
    return extra_ids[len(extra_ids) - extra_take :] + core


def fim_ids(info, prefix: str, suffix: str, *, max_tokens: int, param: str, extra=None, prompt: str = "") -> list[int]:
    """A fill-in-the-middle prompt for the served model (api/llama/fim.py); a model without FIM tokens is a 400."""
    try:
        context = info.token_limit or info.max_model_len or 0
        return infill_prompt(info.tokenizer, prefix, suffix, extra, prompt, context=context, max_tokens=max_tokens)
    except FimError as exc:
        raise bad_request(str(exc), param=param, code="fim_not_supported") from None
