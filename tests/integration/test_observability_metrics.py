"""/metrics for an operator, scraped from a real ``rtagent run`` (real
RabbitMQ, a real Placement process, the libvirt test driver)."""

import json
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rtagent import conf as rtconf
from tests.integration.test_daemon import Agent, wait_until

pytestmark = pytest.mark.integration

# Default ports of OpenStack services (kolla-ansible's list) and the
# Prometheus exporters' range, which compute hosts also run.
OPENSTACK_PORTS = {
    1234, 1789, 3000, 5000, 5050, 5672, 6080, 6082, 6083, 6385, 6640, 6641, 6642,
    6666, 6784, 7070, 8000, 8001, 8003, 8004, 8023, 8041, 8042, 8070, 8080, 8082,
    8085, 8086, 8089, 8090, 8125, 8386, 8774, 8775, 8776, 8777, 8778, 8779, 8780,
    8786, 8799, 8889, 8977, 8989, 8999, 9001, 9036, 9090, 9292, 9311, 9322, 9393,
    9511, 9517, 9696, 9777, 9778, 9876, 9890, 11211, 15868, 35357,
}  # fmt: skip
EXPORTERS = range(9100, 10000)


@pytest.fixture
def start_agent(tmp_path, broker, placement):
    agents = []

    def start(extra=""):
        agent = Agent(tmp_path, broker, placement, extra)
        agents.append(agent)
        agent.start()
        return agent

    yield start
    for agent in agents:
        agent.stop()
        agent.notify.close()


def scrape(agent):
    code, text = agent.get("/metrics")
    assert code == 200
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(families, name):
    return families[name].samples if name in families else []


def test_metrics_say_when_and_where_with_process_metrics(start_agent):
    started = time.time()
    agent = start_agent()
    wait_until(lambda: agent.get("/healthz")[0] == 200, 30, "/healthz 200")
    node = json.loads(agent.get("/status")[1])["nodes"][0]
    families = scrape(agent)

    # A timestamp of the last success, not an age with a -1 sentinel.
    assert "rtagent_sync_lag_seconds" not in families
    (last,) = samples(families, "rtagent_sync_last_success_timestamp_seconds")
    assert started <= last.value <= time.time()

    # Every per-node sample names the node both ways.
    per_node = [
        s
        for f in families.values()
        if f.name.startswith("rtagent_")
        for s in f.samples
        if "node" in s.labels
    ]
    assert len(per_node) >= 8
    for sample in per_node:
        assert sample.labels["node"] == node["node_uuid"], sample
        assert sample.labels["hostname"] == node["hypervisor_hostname"] == "vm", sample

    # The process itself, as every Prometheus client exports it.
    for name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"):
        assert samples(families, name), name
    (start_time,) = samples(families, "process_start_time_seconds")
    assert start_time.value <= started + 5


def test_a_sync_error_is_counted_under_its_code_while_backing_off(start_agent, placement):
    agent = start_agent()
    wait_until(lambda: agent.get("/healthz")[0] == 200, 30, "/healthz 200")

    def failed():
        found = samples(scrape(agent), "rtagent_audits")
        return {s.labels["outcome"]: s.value for s in found if s.labels["outcome"] != "ok"}

    before = samples(scrape(agent), "rtagent_sync_last_success_timestamp_seconds")
    placement.pause()
    try:
        # [placement] timeout = 2 s: the first failure, then ticks that back off.
        wait_until(lambda: sum(failed().values()) >= 4, 60, "four failed audits")
        outcomes = failed()
        last = samples(scrape(agent), "rtagent_sync_last_success_timestamp_seconds")
    finally:
        placement.resume()
    assert "backs off" in agent.logs()  # ticks that sent nothing were among them
    assert set(outcomes) == {"placement.unavailable"}, outcomes
    # The failures (over 4 s) did not move it; a tick in flight at the pause may have.
    assert len(before) == len(last) == 1
    assert last[0].value <= before[0].value + 1.5


def test_the_default_port_is_no_openstack_port():
    default = rtconf.new_conf().health.port
    assert default not in OPENSTACK_PORTS and default not in EXPORTERS


def test_bind_address_opens_the_endpoint_to_another_address(start_agent):
    # 127.0.0.2 is another loopback address: listening there, not on
    # 127.0.0.1, shows that the option is what the endpoint binds.
    agent = start_agent("[health]\nbind_address = 127.0.0.2\n")
    url = f"http://127.0.0.2:{agent.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.status == 200 and b"rtagent_audits_total" in answer.read()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{agent.port}/metrics", timeout=5)
    assert f"Health and metrics on http://127.0.0.2:{agent.port}/" in agent.logs()
