"""Request history: one row per request the server accepted (or refused after validation)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


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
        MESSAGES = "messages", "/v1/messages"
        RESPONSES = "responses", "/v1/responses"
        INFILL = "infill", "/infill"
        EMBEDDINGS = "embeddings", "/v1/embeddings"
        OLLAMA_CHAT = "ollama.chat", "/api/chat"
        OLLAMA_GENERATE = "ollama.generate", "/api/generate"

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
    output_text = models.TextField(blank=True, help_text="The completion (with n > 1: the first choice's).")
    choices = models.JSONField(
        default=list, blank=True, help_text="Every choice: index, text, finish_reason, stop_reason, completion_tokens."
    )
    prompt_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0, help_text="Prompt tokens served from the prefix cache.")
    completion_tokens = models.PositiveIntegerField(default=0, help_text="Summed over the choices.")
    spec_draft_tokens = models.PositiveIntegerField(default=0, help_text="Tokens speculative decoding guessed.")
    spec_accepted_tokens = models.PositiveIntegerField(default=0, help_text="Of those, the ones verification accepted.")
    resumes = models.JSONField(
        default=list,
        blank=True,
        help_text="Where it ran when an engine died serving it: [{engine, tokens}] in order (empty: one engine throughout).",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    finish_reason = models.CharField(max_length=16, blank=True)
    error = models.TextField(blank=True)
    # Seconds, from the engine's own clock: arrival -> first scheduled, -> first token, -> finished.
    queue_time = models.FloatField(null=True, blank=True)
    time_to_first_token = models.FloatField(null=True, blank=True)
    latency = models.FloatField(null=True, blank=True)
    # Which API key made the request (blank when the server runs without keys).
    api_key = models.ForeignKey("ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="requests")
    api_key_label = models.CharField(max_length=64, blank=True, help_text="The key's prefix and name, or env:N.")

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["status", "created"])]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class ApiKey(models.Model):
    """An API key created in the admin. Only its SHA-256 is stored; the key is shown once."""

    name = models.CharField(max_length=100, help_text="Who or what uses this key.")
    prefix = models.CharField(max_length=16, editable=False, help_text="The key's first characters, to recognise it.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.BooleanField(default=False, db_index=True, help_text="A revoked key is refused from now on.")

    class Meta:
        ordering = ["-created"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def label(self) -> str:
        return f"{self.prefix}… {self.name}"[:64]


class StoredResponse(models.Model):
    """A Responses API response kept (`store`, default true) for GET / DELETE, input_items and
    `previous_response_id`: in the database, so every web process of a deployment sees it and it
    survives a restart. Only the API key that made it may read it.

    A conversation is stored once: each row holds its own turn's messages and links to the
    response it continued (`previous`); the whole conversation is the chain's turns, oldest first
    (stored_responses.conversation), so a 50-turn chain keeps 50 turns, not 50 growing copies."""

    id = models.CharField(primary_key=True, max_length=64)  # "resp_…", the request's id in the history
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    last_turn = models.DateTimeField(
        default=timezone.now,
        db_index=True,
        help_text="When its conversation last grew (a later turn continued it): retention counts from here.",
    )
    model = models.CharField(max_length=255, blank=True)
    owner = models.CharField(max_length=64, blank=True, help_text="The key that made it (blank: a server without keys).")
    response = models.JSONField(help_text="The response object, as returned.")
    input_items = models.JSONField(default=list, help_text="The request's input items, with their ids.")
    previous = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,  # deleting or purging a turn breaks the chains after it (OpenAI's rule)
        db_constraint=False,
        related_name="+",
        help_text="The response this one continued (previous_response_id); its messages come before this row's.",
    )
    messages = models.JSONField(
        default=list,
        help_text="This turn's chat messages (its input, then the reply; without instructions): the conversation is the chain's turns.",
    )

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return self.id
