"""Stored Responses API responses: kept, read, listed and deleted through the async ORM, each
visible to the API key that made it only (`owner`); another key's reads are "not found"."""

from __future__ import annotations

from .models import StoredResponse


def owner_of(caller) -> str:
    """The owner string of an auth.Caller (None: a server without keys): an admin key by its id,
    an environment key by its digest (never by its position in the list, which changes)."""
    if caller is None:
        return ""
    return f"key:{caller.key_id}" if caller.key_id is not None else f"env:{caller.fingerprint}"


async def save(*, response: dict, model: str, owner: str, input_items: list, conversation: list) -> None:
    await StoredResponse.objects.aupdate_or_create(
        id=response["id"],
        defaults=dict(model=model[:255], owner=owner, response=response, input_items=input_items, conversation=conversation),
    )


async def find(response_id: str, owner: str) -> StoredResponse | None:
    return await StoredResponse.objects.filter(id=response_id, owner=owner).afirst()


async def delete(response_id: str, owner: str) -> bool:
    deleted, _ = await StoredResponse.objects.filter(id=response_id, owner=owner).adelete()
    return deleted > 0
