"""DRF serializers for the request history."""

from rest_framework import serializers

from .models import GenerationRequest


class GenerationRequestSerializer(serializers.ModelSerializer):
    class Meta:
        model = GenerationRequest
        fields = [
            "id",
            "created",
            "finished",
            "endpoint",
            "model",
            "client_address",
            "stream",
            "prompt",
            "messages",
            "sampling_params",
            "output_text",
            "prompt_tokens",
            "completion_tokens",
            "spec_draft_tokens",
            "spec_accepted_tokens",
            "status",
            "finish_reason",
            "error",
            "queue_time",
            "time_to_first_token",
            "latency",
            "api_key_label",
        ]
        read_only_fields = fields
