"""The request-history admin: list, search, filters and detail render for a staff user; read-only."""

import pytest
from django.urls import reverse

from inference.models import GenerationRequest

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows():
    GenerationRequest.objects.create(
        id="gen-1",
        endpoint="generate",
        model="SmolLM2-135M-Instruct.Q4_1",
        prompt="The quick brown fox",
        output_text="jumps",
        status="completed",
        finish_reason="length",
        latency=0.5,
        time_to_first_token=0.05,
        queue_time=0.01,
    )
    GenerationRequest.objects.create(
        id="chatcmpl-2",
        endpoint="chat.completions",
        model="qwen2.5-coder-0.5b-instruct",
        prompt="<|im_start|>user hi",
        messages=[{"role": "user", "content": "hi"}],
        status="aborted",
        finish_reason="abort",
    )


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(user)
    return client


def test_changelist_renders_with_latency_columns(staff_client, rows):
    resp = staff_client.get(reverse("admin:inference_generationrequest_changelist"))
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "gen-1" in html and "chatcmpl-2" in html
    assert "500 ms" in html and "50 ms" in html  # latency and TTFT columns


def test_search_by_prompt(staff_client, rows):
    resp = staff_client.get(reverse("admin:inference_generationrequest_changelist"), {"q": "brown fox"})
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "gen-1" in html and "chatcmpl-2" not in html


@pytest.mark.parametrize(
    "query", [{"status__exact": "aborted"}, {"finish_reason__exact": "length"}, {"created__gte": "2000-01-01 00:00:00+00:00"}]
)
def test_filters(staff_client, rows, query):
    assert staff_client.get(reverse("admin:inference_generationrequest_changelist"), query).status_code == 200


def test_detail_is_read_only(staff_client, rows):
    url = reverse("admin:inference_generationrequest_change", args=["gen-1"])
    resp = staff_client.get(url)
    assert resp.status_code == 200
    assert "The quick brown fox" in resp.content.decode()
    assert staff_client.post(url, {"status": "failed"}).status_code == 403
    assert GenerationRequest.objects.get(id="gen-1").status == "completed"
    assert staff_client.get(reverse("admin:inference_generationrequest_add")).status_code == 403


def test_staff_user_with_view_permission(client, django_user_model, rows):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_generationrequest"))
    client.force_login(user)
    resp = client.get(reverse("admin:inference_generationrequest_changelist"), {"q": "fox"})
    assert resp.status_code == 200 and "gen-1" in resp.content.decode()
    assert client.get(reverse("admin:inference_generationrequest_change", args=["gen-1"])).status_code == 200


def test_anonymous_is_sent_to_login(client, rows):
    resp = client.get(reverse("admin:inference_generationrequest_changelist"))
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]


def test_the_history_filters_by_model(staff_client, rows):
    """Many models, one server (issue 55): each row names the model that served it, and the list filters on it."""
    url = reverse("admin:inference_generationrequest_changelist")
    html = staff_client.get(url, {"model": "qwen2.5-coder-0.5b-instruct"}).content.decode()
    assert "chatcmpl-2" in html and "gen-1" not in html
    listed = staff_client.get(url).content.decode()
    assert "?model=SmolLM2-135M-Instruct.Q4_1" in listed  # the filter offers each model served
