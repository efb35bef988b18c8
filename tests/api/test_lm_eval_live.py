"""Scoring clients: lm-evaluation-harness's `local-completions` model against the live server, on a
multiple-choice task and a rolling log-likelihood task written here, its tokenizer read from the
server (/tokenizer_info, /tokenize). Each log-likelihood it computes from our echoed prompt
logprobs matches transformers' float32 on the same model and the same token ids."""

from __future__ import annotations

import json
import os

import pytest
import torch

pytestmark = [pytest.mark.live, pytest.mark.real_model]
QUESTIONS = [
    {"question": "The capital of France is", "choices": ["Paris", "Berlin", "a banana"], "answer": 0},
    {"question": "Two plus two equals", "choices": ["four", "seven", "purple"], "answer": 0},
    {"question": "Water freezes at zero degrees", "choices": ["Celsius", "Kelvin"], "answer": 0},
]
TEXTS = [
    {"text": "The quick brown fox jumps over the lazy dog. It was a sunny day in the park."},
    {"text": "Once upon a time, there was a small village by the sea where fishermen lived."},
]
MC_TASK = """task: minivllm_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder}/mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
ROLLING_TASK = """task: minivllm_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder}/text.jsonl
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
"""


def write_tasks(folder) -> None:
    for name, rows in (("mc.jsonl", QUESTIONS), ("text.jsonl", TEXTS)):
        (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "minivllm_mc.yaml").write_text(MC_TASK.format(folder=folder))
    (folder / "minivllm_rolling.yaml").write_text(ROLLING_TASK.format(folder=folder))


def reference_loglikelihood(model, context: list[int], continuation: list[int]) -> float:
    """transformers' float32: the continuation's summed log-probability after the context."""
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return sum(logprobs[len(context) + i - 1, token].item() for i, token in enumerate(continuation))


def first_loglikelihood(resp) -> float:
    """A logged response's log-likelihood: lm-eval nests it ([ll], [(ll, is_greedy)], ...)."""
    while isinstance(resp, (list, tuple)):
        resp = resp[0]
    return float(resp)


def test_lm_eval_log_likelihoods_match_transformers(default_server, served_model, real_hf_model, smollm_tokenizer, tmp_path):
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the tasks' data are local files
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    write_tasks(tmp_path)
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args={
            "base_url": f"{default_server.url}/v1/completions",
            "model": served_model,
            "tokenizer_backend": "remote",
            "num_concurrent": 1,
            "max_retries": 1,
        },
        tasks=["minivllm_mc", "minivllm_rolling"],
        task_manager=TaskManager(include_path=str(tmp_path)),
        log_samples=True,
    )
    encode = lambda text: smollm_tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731 (lm-eval's remote encode)
    checked = 0
    for sample in results["samples"]["minivllm_mc"]:
        for (context, continuation), resp in zip(sample["arguments"], sample["resps"]):
            ours = first_loglikelihood(resp)
            whole, context_ids = encode(context + continuation), encode(context)
            expected = reference_loglikelihood(real_hf_model, context_ids, whole[len(context_ids) :])
            assert ours == pytest.approx(expected, abs=0.01), (context, continuation)
            checked += 1
    assert checked == sum(len(q["choices"]) for q in QUESTIONS)
    # lm-eval's prefix token for a window with no context: the remote tokenizer's BOS, else its EOS
    prefix = encode(smollm_tokenizer.bos_token or smollm_tokenizer.eos_token)[0]
    for sample in results["samples"]["minivllm_rolling"]:
        ours = first_loglikelihood(sample["resps"][0])
        expected = reference_loglikelihood(real_hf_model, [prefix], encode(sample["doc"]["text"]))
        assert ours == pytest.approx(expected, abs=0.01)
    assert results["results"]["minivllm_mc"]["acc,none"] >= 0
