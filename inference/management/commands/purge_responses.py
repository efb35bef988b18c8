"""`manage.py purge_responses`: deletes the stored Responses API responses older than
MINIVLLM_RESPONSES_RETENTION_DAYS and prints how many went. The server runs the same purge hourly
(each web process in local mode, each `runengine` worker in remote mode); this is for cron, or a
shorter retention applied now."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from inference import stored_responses


class Command(BaseCommand):
    help = "Delete stored Responses API responses older than MINIVLLM_RESPONSES_RETENTION_DAYS."

    def handle(self, *args, **opts):
        days = settings.MINIVLLM_RESPONSES_RETENTION_DAYS
        if not days or days <= 0:
            self.stdout.write("MINIVLLM_RESPONSES_RETENTION_DAYS=0: responses are kept forever; deleted 0")
            return
        deleted = stored_responses.purge()
        self.stdout.write(f"deleted {deleted} stored response(s) older than {days:g} day(s)")
