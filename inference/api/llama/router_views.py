"""llama-server's router routes, so launchers written for it work here: GET /models lists every
model with its status (as GET /v1/models does), POST /models/load and POST /models/unload take
{"model": id} and answer {"success": true} once the model is loaded, or unloaded (a model with
requests in flight goes when its last one ends); 409 in remote mode, where the `runengine`
workers hold the models. Behind the API keys when keys are on."""

from __future__ import annotations

from django.http import JsonResponse

from ...serving.models.registry import ModelNotFound, ModelUnavailable
from ..common.endpoint import api_endpoint, model_not_found, model_registry
from ..common.errors import ApiError, bad_request
from ..common.request_body import parse_json_body
from ..openai.views import listed_models


@api_endpoint("GET", "HEAD")
async def models(request):
    return JsonResponse({"object": "list", "data": listed_models()})


def _model(request) -> str:
    body = parse_json_body(request)
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise bad_request("model is required: the id of a model GET /models lists", param="model")
    return name


@api_endpoint("POST")
async def load(request):
    name = _model(request)
    try:
        slot = await model_registry().load(name)
    except ModelNotFound:
        raise model_not_found(name) from None
    except ModelUnavailable as exc:
        if exc.code == "not_managed":  # remote mode: the runengine workers hold the models
            raise ApiError(409, str(exc), code=exc.code) from None
        raise ApiError(503, str(exc), code=exc.code, headers={"Retry-After": "5"}) from None
    if slot.status != "loaded":
        raise ApiError(503, f"the model {slot.name} failed to load: {slot.error}", code="model_unavailable")
    return JsonResponse({"success": True})


@api_endpoint("POST")
async def unload(request):
    name = _model(request)
    try:
        await model_registry().unload(name)
    except ModelNotFound:
        raise model_not_found(name) from None
    except ModelUnavailable as exc:  # remote mode: the runengine workers hold the models
        raise ApiError(409, str(exc), code=exc.code) from None
    return JsonResponse({"success": True})
