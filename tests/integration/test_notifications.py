"""Notifications for schedulers, received by a real listener on a real
RabbitMQ: the compute-node view when it changes, instance info on change."""

import queue
import uuid

import pytest

from rtagent.rpc import notifications, transport
from rtagent.testing.placement_server import PlacementServer
from rtagent.tracker.model import Flavor
from tests.functional.rpc.harness import ServedAgent, make_conf

pytestmark = pytest.mark.integration


class Collector:
    """A notification endpoint: every info notification, in a queue."""

    def __init__(self):
        self.events = queue.Queue()

    def info(self, ctxt, publisher_id, event_type, payload, metadata):
        self.events.put((publisher_id, event_type, payload))

    def next(self, timeout=20):
        return self.events.get(timeout=timeout)

    def drain(self, timeout):
        got = []
        try:
            while True:
                got.append(self.events.get(timeout=timeout))
        except queue.Empty:
            return got


def test_changes_are_notified_and_nothing_else(broker, tmp_path):
    om = transport.messaging()
    with PlacementServer(db_sync=False) as placement:
        conf = make_conf(str(tmp_path), broker.transport_url, cpu_allocation_ratio=16.0)
        served = ServedAgent(conf, placement.endpoint)
        notify_transport = transport.get_notification_transport(conf)
        collector = Collector()
        listener = om.get_notification_listener(
            notify_transport,
            [om.Target(topic=transport.NOTIFICATION_TOPIC)],
            [collector],
        )
        listener.start()
        try:
            sender = notifications.Notifications(
                notifications.oslo_sender(notify_transport, conf.host),
                served.agent,
                conf.host,
                "192.0.2.10",
                interval=3600,
            )
            sender.send_once()
            first = {collector.next()[1], collector.next()[1]}
            assert first == {"rtagent.compute_node.update", "rtagent.instance_info.update"}

            uid = str(uuid.uuid4())
            served.agent.tracker.instance_claim(uid, Flavor(1, 128, 1))
            sender.send_once()
            events = {e[1]: e for e in (collector.next(), collector.next())}
            publisher_id, _, view = events["rtagent.compute_node.update"]
            assert publisher_id == f"rtagent.{conf.host}"
            assert view["compute_node"]["host_ip"] == "192.0.2.10"
            assert view["compute_node"]["stats"]["num_instances"] == "1"
            info = events["rtagent.instance_info.update"][2]
            assert info == {
                "host": conf.host,
                "node_uuid": served.node_uuid,
                "instance_uuids": [uid],
            }

            sender.send_once()  # nothing changed: nothing is sent
            assert collector.drain(timeout=2) == []
        finally:
            listener.stop()
            listener.wait()
            notify_transport.cleanup()
            served.stop()
