"""Writes to the request history. Async ones run on the server's event loop (async ORM), never
on the engine thread; the one sync function runs at start-up, before any request."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.utils import timezone

from .models import GenerationRequest

log = logging.getLogger("inference.services")
Status = GenerationRequest.Status


async def request_create(
    *,
    request_id: str,
    endpoint: str,
    model: str,
    client_address: str,
    stream: bool,
    prompt: str,
    messages: list | None,
    sampling_params: dict,
    status: str = Status.QUEUED,
    error: str = "",
    api_key_id: int | None = None,
    api_key_label: str = "",
) -> GenerationRequest:
    finished = timezone.now() if status in GenerationRequest.TERMINAL else None
    return await GenerationRequest.objects.acreate(
        id=request_id,
        endpoint=endpoint,
        model=model[:255],
        client_address=client_address[:64],
        stream=stream,
        prompt=prompt,
        messages=messages,
        sampling_params=sampling_params,
        status=status,
        error=error,
        finished=finished,
        api_key_id=api_key_id,
        api_key_label=api_key_label[:64],
    )


def key_fields(caller) -> dict:
    """The history row's record of which API key made the request (an auth.Caller or None)."""
    if caller is None:
        return {}
    return {"api_key_id": caller.key_id, "api_key_label": caller.label}


async def request_mark_running(*, request_id: str, queue_time: float | None) -> None:
    await GenerationRequest.objects.filter(id=request_id, status=Status.QUEUED).aupdate(
        status=Status.RUNNING, queue_time=queue_time
    )


async def request_finish(
    *,
    request_id: str,
    status: str,
    output_text: str,
    prompt_tokens: int,
    completion_tokens: int,
    choices: list | None = None,
    spec_draft_tokens: int = 0,
    spec_accepted_tokens: int = 0,
    resumes: list | None = None,
    cached_tokens: int = 0,
    finish_reason: str = "",
    error: str = "",
    queue_time: float | None = None,
    time_to_first_token: float | None = None,
    latency: float | None = None,
) -> None:
    await GenerationRequest.objects.filter(id=request_id).aupdate(
        status=status,
        output_text=output_text,
        choices=choices or [],
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        completion_tokens=completion_tokens,
        spec_draft_tokens=spec_draft_tokens,
        spec_accepted_tokens=spec_accepted_tokens,
        resumes=resumes or [],
        finish_reason=finish_reason or "",
        error=error,
        queue_time=queue_time,
        time_to_first_token=time_to_first_token,
        latency=latency,
        finished=timezone.now(),
    )


def requests_fail_interrupted() -> int:
    """Rows a crashed process left queued/running can never finish: mark them failed."""
    try:
        count = GenerationRequest.objects.filter(status__in=[Status.QUEUED, Status.RUNNING]).update(
            status=Status.FAILED,
            error="server stopped before the request finished",
            finished=timezone.now(),
        )
    except DatabaseError as exc:  # e.g. `migrate` not run yet: serving still works, history does not
        log.warning("could not repair request history (%s); run `manage.py migrate`", exc)
        return 0
    if count:
        log.warning("marked %d interrupted request(s) failed", count)
    return count
