"""JSON endpoints served by DRF (sync): GET /stats and GET /api/requests/."""

from __future__ import annotations

from rest_framework import generics
from rest_framework.response import Response
from rest_framework.views import APIView

from ..selectors import recent_requests
from ..serializers import GenerationRequestSerializer
from ..serving.stats import stats_snapshot


class StatsView(APIView):
    """The same JSON the /ws/stats feed pushes."""

    def get(self, request):
        return Response(stats_snapshot())


class RequestListView(generics.ListAPIView):
    """Recent requests, newest first, paginated (?page=N). Filter with ?status=..."""

    serializer_class = GenerationRequestSerializer

    def get_queryset(self):
        queryset = recent_requests()
        status = self.request.query_params.get("status")
        if status:
            queryset = queryset.filter(status=status)
        return queryset
