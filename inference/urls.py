from django.urls import path

from . import api, views
from .metrics import metrics_view

urlpatterns = [
    path("generate", views.generate, name="generate"),
    path("v1/completions", views.completions, name="completions"),
    path("v1/chat/completions", views.chat_completions, name="chat-completions"),
    path("v1/models", views.models, name="models"),
    path("health", views.health, name="health"),
    path("stats", api.StatsView.as_view(), name="stats"),
    path("metrics", metrics_view, name="metrics"),
    path("api/requests/", api.RequestListView.as_view(), name="request-list"),
]
