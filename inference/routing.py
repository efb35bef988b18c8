from django.urls import path

from .api import consumers

websocket_urlpatterns = [
    path("ws/stats", consumers.StatsConsumer.as_asgi()),
]
