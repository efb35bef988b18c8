"""Reads of the request history (the admin and GET /api/requests)."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import GenerationRequest


def recent_requests() -> QuerySet[GenerationRequest]:
    return GenerationRequest.objects.order_by("-created")
