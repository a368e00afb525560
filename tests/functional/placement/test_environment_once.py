"""The process environment is read once per endpoint, not on every
Placement request (rtagent.placement.environment; issue 35): a steady tick
reads nothing from it, and each request still uses the proxies, no_proxy
and CA bundle the environment gave at start."""

import collections.abc
import os
import traceback

import pytest
import requests

from rtagent.placement import environment
from rtagent.placement.backoff import SyncBackoff
from rtagent.placement.client import PlacementClient
from rtagent.service import builder
from rtagent.testing.placement_server import PlacementServer, admin_adapter


class CountingEnviron(collections.abc.MutableMapping):
    """os.environ, with every read recorded (the key and who read it)."""

    def __init__(self, real):
        self._real = real
        self.reads = []

    def _note(self, key):
        caller = traceback.extract_stack(limit=4)[0]
        self.reads.append((key, f"{caller.filename}:{caller.lineno}"))

    def __getitem__(self, key):
        self._note(key)
        return self._real[key]

    def __contains__(self, key):
        self._note(key)
        return key in self._real

    def __iter__(self):
        self._note("*")
        return iter(self._real)

    def __len__(self):
        return len(self._real)

    def __setitem__(self, key, value):
        self._real[key] = value

    def __delitem__(self, key):
        del self._real[key]


@pytest.fixture
def placement_process():
    # A process, not the in-process fixture: Placement's own environment
    # reads (oslo.policy finding its file) must not count as the agent's.
    with PlacementServer() as server:
        yield server


@pytest.fixture
def agent_and_adapter(placement_process, make_conf):
    adapter = placement_process.admin_adapter()
    agent = builder.build_agent(
        make_conf(), adapter=adapter, make_backoff=lambda: SyncBackoff(window=0)
    )
    yield agent, adapter
    agent.close()


def test_a_steady_tick_reads_nothing_from_the_environment(agent_and_adapter, monkeypatch):
    agent, _adapter = agent_and_adapter
    agent.audit()
    agent.audit()  # steady from here on
    counting = CountingEnviron(os.environ)
    monkeypatch.setattr(os, "environ", counting)
    for _ in range(3):
        agent.audit()
    assert counting.reads == []


def test_without_it_the_same_ticks_read_the_environment(agent_and_adapter, monkeypatch):
    # The test above can fail: a session trusting the environment, as
    # keystoneauth builds it, reads it on every request.
    agent, adapter = agent_and_adapter
    agent.audit()
    transport = adapter.session.session
    transport.trust_env = True
    monkeypatch.delattr(transport, "merge_environment_settings")
    counting = CountingEnviron(os.environ)
    monkeypatch.setattr(os, "environ", counting)
    agent.audit()
    assert any(key == "*" for key, _where in counting.reads)


ENV = {
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:10",
    "no_proxy": "identity.test,127.0.0.5",
    "REQUESTS_CA_BUNDLE": "/etc/rtagent-test/ca.pem",
}
URLS = [
    "http://placement.test:8778/resource_providers",
    "https://placement.test/placement/resource_providers",
    "http://identity.test/v3/auth/tokens",
    "https://127.0.0.5:8778/",
]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("verify", [True, None, False, "/etc/ssl/own.pem"])
def test_each_request_gets_what_the_environment_gave_at_start(monkeypatch, url, verify):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    trusting = requests.Session()
    expected = trusting.merge_environment_settings(url, {}, None, verify, None)

    session = requests.Session()
    environment.read_once(session)
    environment.read_once(session)  # idempotent
    first = session.merge_environment_settings(url, {}, None, verify, None)
    for name in ENV:
        monkeypatch.delenv(name)  # a later change is not seen: read at start
    again = session.merge_environment_settings(url, {}, None, verify, None)

    assert first == again == expected
    assert session.trust_env is False


def test_the_client_applies_it_to_its_session(placement):
    adapter = admin_adapter(placement.endpoint)
    PlacementClient(adapter)
    assert adapter.session.session.trust_env is False
