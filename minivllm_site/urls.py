from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("inference.urls")),
    path("", include("dashboard.urls")),
]

handler404 = "inference.api.views.not_found"
handler500 = "inference.api.views.server_error"
