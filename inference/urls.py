from django.conf import settings
from django.urls import path, re_path

from .api import stats_views as api
from .api import views
from .api.anthropic import views as anthropic_views
from .api.common.auth import require_key_or_staff
from .api.llama import infill_views, router_views, tokenizer_views
from .api.metrics import metrics_view
from .api.ollama import views as ollama_views
from .api.openai import embeddings as embeddings_views
from .api.openai import views as openai_views
from .api.responses import views as responses_views

urlpatterns = [
    path("generate", views.generate, name="generate"),
    path("v1/completions", openai_views.completions, name="completions"),
    path("v1/chat/completions", openai_views.chat_completions, name="chat-completions"),
    path("v1/messages", anthropic_views.messages, name="messages"),
    path("v1/messages/count_tokens", anthropic_views.count_tokens, name="messages-count-tokens"),
    path("v1/responses", responses_views.create, name="responses"),
    path("v1/responses/input_tokens", responses_views.input_tokens, name="responses-input-tokens"),
    path("v1/responses/<str:response_id>", responses_views.stored, name="response"),
    path("v1/responses/<str:response_id>/input_items", responses_views.input_items, name="response-input-items"),
    path("v1/responses/<str:response_id>/cancel", responses_views.cancel, name="response-cancel"),
    path("v1/embeddings", embeddings_views.embeddings, name="embeddings"),
    path("v1/models", openai_views.models, name="models"),
    path("v1/models/<path:model_id>", openai_views.model, name="model"),
    path("models", router_views.models, name="router-models"),
    path("models/load", router_views.load, name="router-load"),
    path("models/unload", router_views.unload, name="router-unload"),
    path("infill", infill_views.infill, name="infill"),
    path("tokenize", tokenizer_views.tokenize, name="tokenize"),
    path("detokenize", tokenizer_views.detokenize, name="detokenize"),
    path("tokenizer_info", tokenizer_views.tokenizer_info, name="tokenizer-info"),
    path("health", views.health, name="health"),
    path("stats", require_key_or_staff(api.StatsView.as_view()), name="stats"),
    path("metrics", require_key_or_staff(metrics_view), name="metrics"),
    path("api/requests/", require_key_or_staff(api.RequestListView.as_view()), name="request-list"),
    path("api/chat", ollama_views.chat, name="ollama-chat"),
    path("api/generate", ollama_views.generate, name="ollama-generate"),
    path("api/embed", ollama_views.embed_view, name="ollama-embed"),
    path("api/embeddings", ollama_views.embeddings, name="ollama-embeddings"),
    path("api/tags", ollama_views.tags, name="ollama-tags"),
    path("api/ps", ollama_views.ps, name="ollama-ps"),
    path("api/show", ollama_views.show, name="ollama-show"),
    path("api/version", ollama_views.version, name="ollama-version"),
    re_path(r"^api/(?!requests)(?P<rest>.*)$", ollama_views.unknown),  # Ollama's other paths: its JSON 404
    re_path(r"^v1/(?P<rest>.*)$", views.unknown_api_path),  # last: any other /v1/ path is a JSON 404
]

if settings.MINIVLLM_FAULT_INJECTION:  # test-only; never routed by default
    from .serving.fault_injection import inject_fault

    urlpatterns.append(path("_test/fault", inject_fault, name="test-fault"))
