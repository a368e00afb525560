"""Host metrics (nova's cpu.virt_driver monitor) end to end in one process:
the libvirt test driver (whose getCPUStats answers fixed counters), a real
Placement, the RPC endpoint's get_compute_node, the notifications and
/metrics."""

import os
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rtagent.rpc.endpoint import AgentEndpoint
from rtagent.rpc.notifications import Notifications
from rtagent.service import builder
from rtagent.service.prometheus import Metrics
from rtagent.virt.libvirt import LibvirtDriver
from tests.functional.conftest import DEMO_URI, make_adapter

pytestmark = pytest.mark.functional

HOST_IP = "192.0.2.7"
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "rpc-api.md")
# The test driver's fixed getCPUStats (libvirt 9.0): kernel time dominates,
# and with no time passing between readings the shares are those since boot.
EXPECTED = {
    "cpu.frequency": 2400,  # the demo host's getInfo()[3]
    "cpu.user.time": 9797400000,
    "cpu.kernel.time": 34678723400000,
    "cpu.idle.time": 87264900000,
    "cpu.iowait.time": 763600000,
    "cpu.user.percent": 0.0,
    "cpu.kernel.percent": 0.99,
    "cpu.idle.percent": 0.0,
    "cpu.iowait.percent": 0.0,
    "cpu.percent": 0.99,
}
TIMESTAMP = re.compile(r"\A\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\Z")  # nova's strtime


@pytest.fixture
def make_metrics_agent(placement, make_conf):
    agents = []

    def make(cpu_metrics):
        conf = make_conf()
        driver = LibvirtDriver(DEMO_URI, conf.libvirt.instances_path, cpu_metrics=cpu_metrics)
        agent = builder.build_agent(conf, driver=driver, adapter=make_adapter(placement.endpoint))
        agents.append(agent)
        agent.audit()
        return agent

    yield make
    for agent in agents:
        agent.close()


class Sent:
    def __init__(self):
        self.events = []

    def __call__(self, event_type, payload):
        self.events.append((event_type, payload))

    def take(self):
        events, self.events = self.events, []
        return events


def view_of(agent):
    reply = AgentEndpoint(agent, "host-1", HOST_IP).get_compute_node({})
    assert reply["ok"], reply
    return reply["result"]


def test_get_compute_node_lists_novas_metrics(make_metrics_agent):
    agent = make_metrics_agent(cpu_metrics=True)
    metrics = view_of(agent)["metrics"]
    assert {m["name"]: m["value"] for m in metrics} == EXPECTED
    assert {m["source"] for m in metrics} == {"libvirt.LibvirtDriver"}
    assert all(TIMESTAMP.match(m["timestamp"]) for m in metrics)
    assert all(list(m) == ["name", "timestamp", "source", "value"] for m in metrics)


def test_rpc_api_doc_lists_every_field_of_the_view(make_metrics_agent):
    with open(DOC, encoding="utf-8") as f:
        section = f.read().split("### `get_compute_node`", 1)[1].split("\n### ", 1)[0]
    listed = re.search(r"Result: An object with (.*?)\.\n", section, re.S).group(1)
    assert set(re.findall(r"`(\w+)`", listed)) == set(view_of(make_metrics_agent(True)))


def test_metrics_notification_once_per_reading(make_metrics_agent):
    agent = make_metrics_agent(cpu_metrics=True)
    sent = Sent()
    notifications = Notifications(sent, agent, "host-1", HOST_IP, interval=3600)
    notifications.send_once()
    events = dict(sent.take())
    assert set(events) == {
        "rtagent.compute_node.update",
        "rtagent.metrics.update",
        "rtagent.instance_info.update",
    }
    payload = events["rtagent.metrics.update"]
    assert payload == {
        "host": "host-1",
        "host_ip": HOST_IP,
        "nodename": agent.tracker.snapshot().hypervisor_hostname,
        "node_uuid": agent.tracker.node_uuid,
        "metrics": payload["metrics"],
    }
    assert {m["name"]: m["value"] for m in payload["metrics"]} == EXPECTED
    assert payload["metrics"] == events["rtagent.compute_node.update"]["compute_node"]["metrics"]

    notifications.send_once()  # no new reading: nothing
    assert sent.take() == []

    agent.audit()  # a new reading (its own timestamp); the view is the same
    notifications.send_once()
    assert [event for event, _ in sent.take()] == ["rtagent.metrics.update"]


def samples(meter):
    """{(sample name, frozenset of labels): value} of the host CPU families."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(meter.render().decode())
        if family.name.startswith("rtagent_host_cpu")
        for sample in family.samples
    }


def test_prometheus_gauges(make_metrics_agent):
    agent = make_metrics_agent(cpu_metrics=True)
    meter = Metrics()
    meter.watch(agent.nodes.trackers, dict)
    ids = {
        ("node", agent.tracker.node_uuid),
        ("hostname", agent.tracker.snapshot().hypervisor_hostname),
    }

    def key(name, kind=None):
        return (name, frozenset(ids | ({("kind", kind)} if kind else set())))

    got = samples(meter)
    assert got == {
        key("rtagent_host_cpu_frequency_mhz"): 2400,
        key("rtagent_host_cpu_percent", "user"): 0,
        key("rtagent_host_cpu_percent", "kernel"): 99,
        key("rtagent_host_cpu_percent", "idle"): 0,
        key("rtagent_host_cpu_percent", "iowait"): 0,
        key("rtagent_host_cpu_percent", "used"): 99,
        key("rtagent_host_cpu_time_seconds_total", "user"): 9.7974,
        key("rtagent_host_cpu_time_seconds_total", "kernel"): 34678.7234,
        key("rtagent_host_cpu_time_seconds_total", "idle"): 87.2649,
        key("rtagent_host_cpu_time_seconds_total", "iowait"): 0.7636,
    }


def test_off_nothing_is_read_sent_or_exported(make_metrics_agent):
    agent = make_metrics_agent(cpu_metrics=False)
    assert view_of(agent)["metrics"] == []
    sent = Sent()
    Notifications(sent, agent, "host-1", HOST_IP, interval=3600).send_once()
    assert "rtagent.metrics.update" not in dict(sent.take())
    meter = Metrics()
    meter.watch(agent.nodes.trackers, dict)
    assert samples(meter) == {}


def test_compute_monitors_turns_metrics_on(make_agent, make_conf):
    agent = make_agent(make_conf(compute_monitors=["cpu.virt_driver"]))
    agent.audit()
    assert {m["name"] for m in view_of(agent)["metrics"]} == set(EXPECTED)
