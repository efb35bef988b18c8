"""Stored Responses API responses: kept, read, listed and deleted through the async ORM, each
visible to the API key that made it only (`owner`); another key's reads are "not found".

A conversation is stored once: a response keeps its own turn and a link to the one it continued,
and `conversation` rebuilds the whole chain with one recursive query. A response whose
conversation last grew more than MINIVLLM_RESPONSES_RETENTION_DAYS ago (`last_turn`: saving a turn
renews every turn before it, so a conversation continued within the period keeps its chain) reads
as missing, and `purge` deletes it (manage.py purge_responses; the server runs it hourly). Deleting or purging a turn breaks the chains after it:
continuing one names the missing response (`BrokenChain`)."""

from __future__ import annotations

import datetime
import logging

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from .models import StoredResponse

log = logging.getLogger("inference.stored_responses")
PURGE_INTERVAL_S = 3600.0  # the server's purge: hourly (expired rows already read as missing in between)
MAX_CHAIN = 100_000  # a bound on the recursive walk: ids are random, so a loop cannot form, but a bound costs nothing


class BrokenChain(LookupError):
    """A response of the chain is gone (deleted, expired or purged): the conversation cannot be rebuilt."""

    def __init__(self, missing: str):
        self.missing = missing
        super().__init__(missing)


def owner_of(caller) -> str:
    """The owner string of an auth.Caller (None: a server without keys): an admin key by its id,
    an environment key by its digest (never by its position in the list, which changes)."""
    if caller is None:
        return ""
    return f"key:{caller.key_id}" if caller.key_id is not None else f"env:{caller.fingerprint}"


def expired_before() -> datetime.datetime | None:
    """Responses whose last turn came before this have expired (None: MINIVLLM_RESPONSES_RETENTION_DAYS=0, kept forever)."""
    days = settings.MINIVLLM_RESPONSES_RETENTION_DAYS
    return timezone.now() - datetime.timedelta(days=days) if days and days > 0 else None


def _live(owner: str):
    """This owner's responses that have not expired: what every read sees."""
    rows = StoredResponse.objects.filter(owner=owner)
    cutoff = expired_before()
    return rows.filter(last_turn__gte=cutoff) if cutoff is not None else rows


async def save(*, response: dict, model: str, owner: str, input_items: list, messages: list, previous: str | None) -> None:
    """Keeps a response with its own turn (`messages`) and the id of the response it continued,
    whose turns' retention starts again now (`renew`)."""
    now = timezone.now()
    await StoredResponse.objects.aupdate_or_create(
        id=response["id"],
        defaults=dict(
            model=model[:255],
            owner=owner,
            response=response,
            input_items=input_items,
            messages=messages,
            previous_id=previous,
            last_turn=now,
        ),
    )
    if previous is not None:
        await sync_to_async(renew, thread_sensitive=True)(previous, now)


RENEW_AFTER = datetime.timedelta(days=1)  # a turn renewed more recently than this is not renewed again


def renew(response_id: str, when: datetime.datetime) -> int:
    """Every turn of the chain ending at `response_id` last grew `when`, in one statement: how many
    were renewed. A renewal renews the whole chain at once, so the walk stops at the first turn
    renewed within RENEW_AFTER (every turn before it was too): a busy conversation's turns write
    nothing more, and retention, counted in days, loses at most a day."""
    table = connection.ops.quote_name(StoredResponse._meta.db_table)
    stale = when - RENEW_AFTER
    sql = f"""
        WITH RECURSIVE chain(id, previous_id, depth) AS (
            SELECT id, previous_id, 0 FROM {table} WHERE id = %s AND last_turn < %s
            UNION ALL
            SELECT r.id, r.previous_id, chain.depth + 1 FROM {table} r JOIN chain ON r.id = chain.previous_id
            WHERE chain.depth < %s AND r.last_turn < %s
        )
        UPDATE {table} SET last_turn = %s WHERE id IN (SELECT id FROM chain)
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [response_id, stale, MAX_CHAIN, stale, when])
        return cursor.rowcount


async def find(response_id: str, owner: str) -> StoredResponse | None:
    return await _live(owner).filter(id=response_id).afirst()


async def delete(response_id: str, owner: str) -> bool:
    deleted, _ = await _live(owner).filter(id=response_id).adelete()
    return deleted > 0


def _chain_sql() -> str:
    table = connection.ops.quote_name(StoredResponse._meta.db_table)
    return f"""
        WITH RECURSIVE chain(id, previous_id, depth) AS (
            SELECT id, previous_id, 0 FROM {table} WHERE id = %s
            UNION ALL
            SELECT r.id, r.previous_id, chain.depth + 1 FROM {table} r JOIN chain ON r.id = chain.previous_id
            WHERE chain.depth < %s
        )
        SELECT r.id, r.previous_id, r.owner, r.last_turn, r.messages FROM chain JOIN {table} r ON r.id = chain.id
    """


def _conversation(response_id: str, owner: str) -> list[dict]:
    rows = {row.id: row for row in StoredResponse.objects.raw(_chain_sql(), [response_id, MAX_CHAIN])}
    cutoff = expired_before()
    turns, wanted = [], response_id
    while wanted is not None:
        row = rows.get(wanted)
        if row is None or row.owner != owner or (cutoff is not None and row.last_turn < cutoff):
            raise BrokenChain(wanted)
        turns.append(row.messages)
        wanted = row.previous_id
    return [message for turn in reversed(turns) for message in turn]


async def conversation(response_id: str, owner: str) -> list[dict]:
    """The chat messages up to and including `response_id`'s reply (without instructions), oldest
    first, read in one recursive query (SQLite and PostgreSQL both have WITH RECURSIVE). Raises
    BrokenChain naming the first response of the chain that is gone (the requested one included)."""
    return await sync_to_async(_conversation, thread_sensitive=True)(response_id, owner)


def purge() -> int:
    """Deletes every expired response (any owner); the number deleted (0 when kept forever)."""
    cutoff = expired_before()
    if cutoff is None:
        return 0
    deleted, _ = StoredResponse.objects.filter(last_turn__lt=cutoff).delete()
    return deleted


def purge_logged() -> int | None:
    """`purge` for the server's timer, run in a worker thread: a database error is logged, never
    raised (a web process or an engine keeps serving), and the thread's connection is closed."""
    try:
        deleted = purge()
        if deleted:
            log.info("purged %d expired stored response(s)", deleted)
        return deleted
    except DatabaseError as exc:
        log.warning("could not purge expired stored responses: %s", exc)
        return None
    except Exception:  # e.g. no database configured for this process: never fatal
        log.exception("could not purge expired stored responses")
        return None
    finally:
        close_old_connections()
