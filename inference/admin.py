"""Read-only admin over the request history: it is a log, not something to edit."""
from __future__ import annotations

from django.contrib import admin

from .models import GenerationRequest


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


@admin.register(GenerationRequest)
class GenerationRequestAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "created",
        "endpoint",
        "status",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "queue_ms",
        "ttft_ms",
        "latency_ms",
        "client_address",
    )
    list_filter = ("status", "finish_reason", "endpoint", "created")
    search_fields = ("id", "prompt", "output_text")
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

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
