"""Helpers for the Placement sync's functional tests (real Placement app)."""

import uuid

import pytest

from rtagent.placement.client import PlacementClient
from tests.functional.conftest import Recorder, make_adapter, put_allocation  # noqa: F401


def get(adapter, url):
    response = adapter.get(url)
    assert response.status_code == 200, response.text
    return response.json()


def allocations_of(adapter, consumer):
    body = get(adapter, f"/allocations/{consumer}")
    return {rp: a["resources"] for rp, a in body["allocations"].items()}


def make_provider(adapter, name, parent=None, inventories=None):
    rp = str(uuid.uuid4())
    body = {"name": name, "uuid": rp}
    if parent:
        body["parent_provider_uuid"] = parent
    resp = adapter.post("/resource_providers", json=body)
    assert resp.status_code == 200, resp.text
    if inventories:
        resp = adapter.put(
            f"/resource_providers/{rp}/inventories",
            json={"resource_provider_generation": 0, "inventories": inventories},
        )
        assert resp.status_code == 200, resp.text
    return rp


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def client(placement, recorder):
    """Our client, counting its requests with ``recorder``."""
    return PlacementClient(make_adapter(placement.endpoint), recorder)


@pytest.fixture
def service_adapter(placement):
    """An adapter with the service role (POST /reshaper needs it; with
    keystone, the agent's service user has it)."""
    adapter = make_adapter(placement.endpoint)
    adapter.additional_headers = {"X-Roles": "admin,service"}
    return adapter
