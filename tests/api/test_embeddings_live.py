"""Embeddings as clients fetch them from a live server on the real model: LangChain's
OpenAIEmbeddings (strings, through the official client, which asks for base64) and the official
client itself, agreeing with each other and normalized."""

from __future__ import annotations

import math

import pytest
from langchain_openai import OpenAIEmbeddings

pytestmark = [pytest.mark.live, pytest.mark.real_model]
DOCS = ["The cat sat on the mat.", "A language model reads tokens.", "Paris is the capital of France."]


def test_langchain_embeds_documents_and_queries_as_the_api_does(default_server, served_model, openai_client):
    embeddings = OpenAIEmbeddings(
        model=served_model,
        base_url=f"{default_server.url}/v1",
        api_key="unused",
        check_embedding_ctx_length=False,  # its own tiktoken token ids mean nothing to this model: send text
    )
    vectors = embeddings.embed_documents(DOCS)
    query = embeddings.embed_query(DOCS[2])
    assert len(vectors) == 3 and len({len(v) for v in vectors}) == 1
    for vector in [*vectors, query]:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-4)
    direct = openai_client.embeddings.create(model=served_model, input=DOCS[2], encoding_format="float").data[0].embedding
    assert query == pytest.approx(direct, abs=1e-5) and vectors[2] == pytest.approx(direct, abs=1e-5)
    similar = sum(a * b for a, b in zip(query, vectors[2]))
    other = sum(a * b for a, b in zip(query, vectors[0]))
    assert similar > other
