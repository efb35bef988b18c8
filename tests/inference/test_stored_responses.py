"""Stored Responses (inference/stored_responses.py) on the real database: a conversation is stored
once (a 50-turn previous_response_id chain grows linearly and is rebuilt in one query), a turn
deleted or expired in the middle breaks the chain by name, retention hides expired responses, and
the purge (manage.py purge_responses, the engine worker's timer) deletes them without ever failing
the process that runs it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inference import stored_responses
from inference.models import StoredResponse
from inference.serving.remote.worker import purge_stored_responses_forever

pytestmark = pytest.mark.django_db(transaction=True)
TURNS = 50


def turn(index: int) -> list[dict]:
    return [{"role": "user", "content": f"question {index}"}, {"role": "assistant", "content": f"answer {index}"}]


def store_chain(turns: int, owner: str = "") -> list[str]:
    """`turns` responses, each continuing the one before, saved as the Responses view saves them."""
    ids, previous = [], None
    for index in range(turns):
        response_id = f"resp_chain{index:03d}"
        asyncio.run(
            stored_responses.save(
                response={"id": response_id, "object": "response"},
                model="m",
                owner=owner,
                input_items=[{"id": f"msg_{index}", "role": "user"}],
                messages=turn(index),
                previous=previous,
            )
        )
        ids.append(response_id)
        previous = response_id
    return ids


def age(response_id: str, days: float, last_turn_days: float | None = None) -> None:
    """The response made `days` ago, its conversation last grown `last_turn_days` ago (then too by default)."""
    now = timezone.now()
    StoredResponse.objects.filter(id=response_id).update(
        created=now - datetime.timedelta(days=days),
        last_turn=now - datetime.timedelta(days=days if last_turn_days is None else last_turn_days),
    )


def test_a_50_turn_chain_grows_linearly_and_is_rebuilt_in_one_query():
    stored_per_turn = []
    previous = None
    for index in range(TURNS):
        response_id = f"resp_chain{index:03d}"
        asyncio.run(
            stored_responses.save(
                response={"id": response_id}, model="m", owner="", input_items=[], messages=turn(index), previous=previous
            )
        )
        stored_per_turn.append(sum(len(row.messages) for row in StoredResponse.objects.all()))
        previous = response_id
    # each turn stores its own two messages: 2, 4, 6, ... (a copied conversation would be 2, 6, 12, ...)
    assert stored_per_turn == [2 * (index + 1) for index in range(TURNS)]
    with CaptureQueriesContext(connection) as queries:
        whole = stored_responses._conversation(previous, "")
    assert len(queries) == 1
    assert whole == [message for index in range(TURNS) for message in turn(index)]


def test_deleting_a_turn_in_the_middle_breaks_the_chains_after_it_by_name():
    ids = store_chain(5)
    assert asyncio.run(stored_responses.delete(ids[2], ""))
    with pytest.raises(stored_responses.BrokenChain) as broken:
        stored_responses._conversation(ids[4], "")
    assert broken.value.missing == ids[2]
    assert len(stored_responses._conversation(ids[1], "")) == 4  # the turns before it still continue
    assert asyncio.run(stored_responses.find(ids[4], "")) is not None  # and the later ones still read


def test_another_owners_chain_is_not_rebuilt():
    ids = store_chain(2, owner="key:1")
    with pytest.raises(stored_responses.BrokenChain):
        stored_responses._conversation(ids[1], "key:2")


def test_an_expired_response_reads_as_missing_and_breaks_its_chain(settings):
    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 30
    ids = store_chain(3)
    age(ids[0], 31)
    assert asyncio.run(stored_responses.find(ids[0], "")) is None
    assert not asyncio.run(stored_responses.delete(ids[0], ""))
    with pytest.raises(stored_responses.BrokenChain) as broken:
        stored_responses._conversation(ids[2], "")
    assert broken.value.missing == ids[0]
    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 0  # kept forever: nothing expires
    assert asyncio.run(stored_responses.find(ids[0], "")) is not None
    assert len(stored_responses._conversation(ids[2], "")) == 6


def test_purge_responses_deletes_the_expired_and_says_how_many(settings):
    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 30
    ids = store_chain(4)
    age(ids[0], 40)
    age(ids[1], 31)
    out = StringIO()
    call_command("purge_responses", stdout=out)
    assert "deleted 2 " in out.getvalue()
    assert sorted(StoredResponse.objects.values_list("id", flat=True)) == ids[2:]
    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 0
    age(ids[2], 1000)
    out = StringIO()
    call_command("purge_responses", stdout=out)
    assert "deleted 0" in out.getvalue() and StoredResponse.objects.count() == 2


async def test_the_workers_purge_runs_off_the_loop_and_survives_database_errors(monkeypatch, settings):
    """The engine worker's timer (worker.py): each purge runs in a worker thread, and a database
    error is logged, not raised, so the worker keeps serving and purges again next time."""
    calls: list[threading.Thread] = []

    def purge() -> int:
        calls.append(threading.current_thread())
        if len(calls) == 1:
            raise OperationalError("database is locked")
        return 3

    monkeypatch.setattr(stored_responses, "purge", purge)
    task = asyncio.create_task(purge_stored_responses_forever(interval_s=0.01))
    for _ in range(500):
        if len(calls) >= 3 or task.done():
            break
        await asyncio.sleep(0.01)
    alive = not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert alive and len(calls) >= 3, task
    assert threading.main_thread() not in calls


def test_a_conversation_continued_within_the_retention_keeps_its_chain(settings):
    """Retention counts from the last turn: a first turn made 45 days ago whose conversation grew
    25 days ago is still there; continuing it today renews every turn, and nothing is purged."""
    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 30
    ids = store_chain(2)
    age(ids[0], 45, last_turn_days=25)
    age(ids[1], 25)
    assert len(stored_responses._conversation(ids[1], "")) == 4
    asyncio.run(
        stored_responses.save(
            response={"id": "resp_today"}, model="m", owner="", input_items=[], messages=turn(2), previous=ids[1]
        )
    )
    assert all(row.last_turn > timezone.now() - datetime.timedelta(minutes=5) for row in StoredResponse.objects.all())
    assert stored_responses.purge() == 0
    assert len(stored_responses._conversation("resp_today", "")) == 6
    age(ids[0], 80, last_turn_days=31)  # a conversation left alone past the period still goes
    assert stored_responses.purge() == 1


def test_rows_kept_before_the_last_turn_existed_are_not_purged_at_the_upgrade(settings, caplog):
    """Migrating from 0008 (retention counted from creation) keeps every row for a full period
    from the upgrade and says how many the old rule would have purged."""
    from django.db.migrations.executor import MigrationExecutor

    settings.MINIVLLM_RESPONSES_RETENTION_DAYS = 30
    executor = MigrationExecutor(connection)
    executor.migrate([("inference", "0008_ollama_endpoints")])
    try:
        old = executor.loader.project_state([("inference", "0008_ollama_endpoints")]).apps.get_model(
            "inference", "StoredResponse"
        )
        old.objects.create(id="resp_old", response={}, messages=turn(0))
        old.objects.filter(id="resp_old").update(created=timezone.now() - datetime.timedelta(days=400))
        executor = MigrationExecutor(connection)
        with caplog.at_level(logging.WARNING, logger="minivllm.site"):
            executor.migrate(executor.loader.graph.leaf_nodes())
    finally:
        MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    assert "1 stored response(s) are older than MINIVLLM_RESPONSES_RETENTION_DAYS" in caplog.text
    assert stored_responses.purge() == 0 and asyncio.run(stored_responses.find("resp_old", "")) is not None
