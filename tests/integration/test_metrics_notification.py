"""rtagent.metrics.update (nova's compute.metrics.update) received by a real
listener on a real RabbitMQ, from an agent over the libvirt test driver with
host metrics on."""

import pytest

from rtagent.rpc import notifications, transport
from rtagent.service import builder
from rtagent.testing.placement_server import PlacementServer
from rtagent.virt.libvirt import LibvirtDriver
from tests.functional.conftest import DEMO_URI, make_adapter
from tests.functional.rpc.harness import make_conf
from tests.integration.test_notifications import Collector

pytestmark = pytest.mark.integration


def test_metrics_update_is_sent_once_per_reading(broker, tmp_path):
    om = transport.messaging()
    with PlacementServer(db_sync=False) as placement:
        conf = make_conf(str(tmp_path), broker.transport_url)
        driver = LibvirtDriver(DEMO_URI, conf.libvirt.instances_path, cpu_metrics=True)
        agent = builder.build_agent(conf, driver=driver, adapter=make_adapter(placement.endpoint))
        notify_transport = transport.get_notification_transport(conf)
        collector = Collector()
        listener = om.get_notification_listener(
            notify_transport, [om.Target(topic=transport.NOTIFICATION_TOPIC)], [collector]
        )
        listener.start()
        try:
            agent.audit()
            sender = notifications.Notifications(
                notifications.oslo_sender(notify_transport, conf.host),
                agent,
                conf.host,
                "192.0.2.10",
                interval=3600,
            )
            sender.send_once()
            events = {e[1]: e for e in (collector.next(), collector.next(), collector.next())}
            publisher_id, _, payload = events["rtagent.metrics.update"]
            assert publisher_id == f"rtagent.{conf.host}"
            assert payload["host"] == conf.host
            assert payload["host_ip"] == "192.0.2.10"
            assert payload["nodename"] == agent.tracker.snapshot().hypervisor_hostname
            assert payload["node_uuid"] == agent.tracker.node_uuid
            values = {m["name"]: m["value"] for m in payload["metrics"]}
            assert values["cpu.kernel.percent"] == 0.99
            assert values["cpu.frequency"] == 2400
            assert {m["source"] for m in payload["metrics"]} == {"libvirt.LibvirtDriver"}

            agent.audit()  # a new reading: metrics again, the view unchanged
            sender.send_once()
            assert [e[1] for e in collector.drain(timeout=2)] == ["rtagent.metrics.update"]
        finally:
            listener.stop()
            listener.wait()
            notify_transport.cleanup()
            agent.close()
