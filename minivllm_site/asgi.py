"""ASGI entry point: HTTP (Django, plus static files) and WebSocket (Channels) routes.

Importing this module in a serving process starts the engine (once per process; Daphne has no
lifespan), unless MINIVLLM_AUTOSTART=0. `migrate`, `check` and tests never import it for that.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "minivllm_site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_http = get_asgi_application()  # sets Django up before the imports below

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from inference.routing import websocket_urlpatterns  # noqa: E402
from inference.serving import lifecycle  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_http),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        "lifespan": lifecycle.lifespan_app,
    }
)

lifecycle.autostart()
