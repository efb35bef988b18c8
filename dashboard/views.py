"""The landing page; the live dashboard grows here in a later issue."""
from django.shortcuts import render


def index(request):
    return render(request, "dashboard/index.html")
