"""Both engine clients implement the declared EngineClient interface, member for member."""

from __future__ import annotations

import inspect

import pytest

from inference.engine.config import EngineConfig
from inference.engine.engine_state import EngineState
from inference.engine.engine_thread import EngineThread
from inference.serving.engine_client import EngineClient
from inference.serving.remote.client import RemoteEngine

DECLARED = [name for name in vars(EngineClient) if not name.startswith("_")] + list(EngineClient.__annotations__)
METHODS = [name for name in DECLARED if inspect.isfunction(vars(EngineClient).get(name))]


@pytest.fixture(params=["local", "remote"])
def client(request):
    if request.param == "local":
        return EngineThread(EngineConfig(device="cpu"), max_queue=4)
    return RemoteEngine(EngineConfig(device="cpu"), max_queue=4, tokenizer=None)


def test_each_client_has_every_declared_member_with_the_declared_parameters(client):
    assert isinstance(client, EngineClient)
    for name in DECLARED:
        assert hasattr(client, name), name
    for name in METHODS:
        declared = list(inspect.signature(getattr(EngineClient, name)).parameters)[1:]
        assert list(inspect.signature(getattr(client, name)).parameters) == declared, name


def test_an_unstarted_client_states_it_and_has_no_model_yet(client):
    assert client.state in (EngineState.NEW, EngineState.LOADING) and not client.ready
    assert client.model_info is None and client.not_ready_reason()


def test_states_are_the_strings_the_api_has_always_shown():
    assert [str(s) for s in EngineState] == ["new", "loading", "ready", "restarting", "stopping", "stopped", "dead", "no_engine"]
    assert EngineState.READY == "ready" and f"{EngineState.DEAD}" == "dead"
