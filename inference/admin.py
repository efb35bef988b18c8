"""Read-only admin over the request history: it is a log, not something to edit."""

from __future__ import annotations

from django.contrib import admin, messages

from .keys import PREFIX_CHARS, generate_key, hash_key
from .models import ApiKey, GenerationRequest, StoredResponse


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


class ReadOnlyAdmin(admin.ModelAdmin):
    """A log in the admin: read, filter, delete; never added or edited."""

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(GenerationRequest)
class GenerationRequestAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "created",
        "model",
        "endpoint",
        "status",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "spec_accepted_tokens",
        "queue_ms",
        "ttft_ms",
        "latency_ms",
        "engines",
        "client_address",
        "api_key_label",
    )
    list_filter = ("model", "status", "finish_reason", "endpoint", "created", "api_key_label")
    search_fields = ("id", "prompt", "output_text", "api_key_label")
    date_hierarchy = "created"
    list_per_page = 50
    show_full_result_count = False

    @admin.display(description="queue", ordering="queue_time")
    def queue_ms(self, obj: GenerationRequest) -> str:
        return _ms(obj.queue_time)

    @admin.display(description="TTFT", ordering="time_to_first_token")
    def ttft_ms(self, obj: GenerationRequest) -> str:
        return _ms(obj.time_to_first_token)

    @admin.display(description="latency", ordering="latency")
    def latency_ms(self, obj: GenerationRequest) -> str:
        return _ms(obj.latency)

    @admin.display(description="resumed on")
    def engines(self, obj: GenerationRequest) -> str:
        """Where a request ran when an engine died serving it: "a (12 tok) -> b (28 tok)"; blank otherwise."""
        return " -> ".join(f"{segment['engine']} ({segment['tokens']} tok)" for segment in obj.resumes or [])


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Create a key by name: the full key is shown once, in the message after saving; only its
    SHA-256 and first characters are stored. Revoke (never edit) a key to stop it."""

    list_display = ("name", "prefix", "created", "last_used_at", "revoked")
    list_filter = ("revoked",)
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created", "last_used_at")
    actions = ("revoke",)

    def get_fields(self, request, obj=None):
        return ("name",) if obj is None else ("name", "prefix", "created", "last_used_at", "revoked")

    def save_model(self, request, obj, form, change):
        if not change:
            raw = generate_key()
            obj.key_hash = hash_key(raw)
            obj.prefix = raw[:PREFIX_CHARS]
            super().save_model(request, obj, form, change)
            messages.warning(request, f"The new API key for {obj.name!r} is {raw} — copy it now: it will not be shown again.")
            return
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected API keys")
    def revoke(self, request, queryset):
        count = queryset.update(revoked=True)
        self.message_user(request, f"Revoked {count} key(s).", messages.SUCCESS)


@admin.register(StoredResponse)
class StoredResponseAdmin(ReadOnlyAdmin):
    """Responses API responses kept for retrieval and continuation: read or delete, never edit.
    Each row holds its own turn and links to the response it continued (`previous`): deleting
    one breaks the conversations that continue it. Expired rows go with purge_responses."""

    list_display = ("id", "created", "model", "owner", "previous_id")
    list_filter = ("created", "owner")
    search_fields = ("id",)
    date_hierarchy = "created"
