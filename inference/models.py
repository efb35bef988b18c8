"""Request history: one row per request the server accepted (or refused after validation)."""
from __future__ import annotations

from django.db import models


class GenerationRequest(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        ABORTED = "aborted"
        FAILED = "failed"
        REJECTED = "rejected"

    class Endpoint(models.TextChoices):
        GENERATE = "generate", "/generate"
        COMPLETIONS = "completions", "/v1/completions"
        CHAT = "chat.completions", "/v1/chat/completions"

    TERMINAL = (Status.COMPLETED, Status.ABORTED, Status.FAILED, Status.REJECTED)

    # The engine request id ("gen-…", "cmpl-…", "chatcmpl-…"): the same id the client sees.
    id = models.CharField(primary_key=True, max_length=64)
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    finished = models.DateTimeField(null=True, blank=True)
    endpoint = models.CharField(max_length=32, choices=Endpoint.choices)
    model = models.CharField(max_length=255, blank=True)
    client_address = models.CharField(max_length=64, blank=True)
    stream = models.BooleanField(default=False)
    prompt = models.TextField(blank=True, help_text="The prompt text (for chat: the rendered template).")
    messages = models.JSONField(null=True, blank=True, help_text="Chat messages as sent.")
    sampling_params = models.JSONField(default=dict)
    output_text = models.TextField(blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    finish_reason = models.CharField(max_length=16, blank=True)
    error = models.TextField(blank=True)
    # Seconds, from the engine's own clock: arrival -> first scheduled, -> first token, -> finished.
    queue_time = models.FloatField(null=True, blank=True)
    time_to_first_token = models.FloatField(null=True, blank=True)
    latency = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["status", "created"])]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"
