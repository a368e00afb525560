"""K real agents in one process, for benchmarks/fleet.py.

Each agent is what ``rtagent run`` builds (:func:`rtagent.service.builder.build_agent`)
with its own state directory, its own libvirt test-driver host (a host XML
whose running domains are its claimed instances) and its own Placement
session, run by its own :class:`~rtagent.service.periodic.PeriodicLoop` thread with
the daemon's start-up delay, audit interval and jitter (scaled by the
caller). The test driver reports the machine's hostname for every host, so
each connection is put behind :class:`NamedHost`, which answers the host's
own name and passes every other call through. With a :class:`Broker`, each
agent also sends the daemon's notifications
(:class:`rtagent.rpc.notifications.Notifications`, poked after every audit as the
daemon pokes it) to a real RabbitMQ, which counts them.
"""

import os
import random
import subprocess
import threading
import time
import uuid

import libvirt

from benchmarks.placement_cost import FLAVOR, host_xml, schedule
from rtagent import conf as rtconf
from rtagent.placement.backoff import SyncBackoff
from rtagent.placement.client import RequestObserver
from rtagent.rpc import notifications, transport
from rtagent.service import builder
from rtagent.service.periodic import PeriodicLoop, Trigger
from rtagent.testing import rabbitmq
from rtagent.testing.placement_server import admin_adapter

# Production values the run scales (seconds); the retry window is
# [rtagent] placement_retry_window's default, [placement] timeout is not
# scaled (it bounds a hung request, it is no cadence).
AUDIT_INTERVAL_S = 60
REFRESH_INTERVAL_S = 300
STARTUP_DELAY_S = 10.0
RETRY_WINDOW_S = 110.0
SYNC_RETRY_DELAY_S = 0.2
AUDIT_JITTER = 0.1
PLACEMENT_TIMEOUT_S = 30.0
INSTANCE_INFO_INTERVAL_S = 300  # [daemon] instance_info_interval's default


class Recorder(RequestObserver):
    """Every Placement request of every agent: (end time, agent, method,
    url, status or None when no answer came, seconds). Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._records = []

    def bind(self, index):
        recorder = self

        class _Agent(RequestObserver):
            def after(self, method, url, status, seconds):
                with recorder._lock:
                    recorder._records.append(
                        (time.monotonic(), index, method, url, status, seconds)
                    )

        return _Agent()

    def between(self, start, end):
        with self._lock:
            return [r for r in self._records if start <= r[0] < end]


class NamedHost:
    """A test-driver connection that reports ``name`` as its hostname."""

    def __init__(self, conn, name):
        self._conn = conn
        self._name = name

    def __getattr__(self, attr):
        return getattr(self._conn, attr)

    def getHostname(self):  # noqa: N802 (libvirt's name)
        return self._name


class Scale:
    """Production timing times ``factor`` (0.1: a 60 s audit every 6 s)."""

    def __init__(self, factor, refresh_interval=REFRESH_INTERVAL_S):
        self.factor = factor
        self.audit_interval = max(1, round(AUDIT_INTERVAL_S * factor))
        self.refresh_interval = round(refresh_interval * factor)
        self.instance_info_interval = INSTANCE_INFO_INTERVAL_S * factor
        self.startup_delay = STARTUP_DELAY_S * factor
        self.retry_window = RETRY_WINDOW_S * factor
        self.sync_retry_delay = SYNC_RETRY_DELAY_S * factor


class Broker:
    """A private RabbitMQ and one notification transport to it, shared by
    the agents (the messages are what is counted, not the connections):
    every notification lands in the ``notifications.info`` queue, which
    nothing consumes, so its depth counts them at the broker."""

    QUEUE = f"{transport.NOTIFICATION_TOPIC}.info"

    def __init__(self, workdir):
        self._broker = rabbitmq.RabbitMQ(workdir)
        self._transport = None

    def __enter__(self):
        self._broker.start()
        try:
            conf = rtconf.new_conf()
            conf([], project="rtagent", default_config_files=[])
            url = self._broker.transport_url
            self._transport = transport.get_notification_transport(conf, url=url)
        except BaseException:
            # __exit__ does not run for a failed __enter__: stop it here.
            self._broker.stop()
            raise
        return self

    def __exit__(self, *exc_info):
        if self._transport is not None:
            self._transport.cleanup()
        self._broker.stop()

    def sender(self, host):
        return notifications.oslo_sender(self._transport, host)

    def messages(self):
        """Messages in the notifications queue (0 before the first)."""
        ctl = os.path.join(rabbitmq.sbin_dir(), "rabbitmqctl")
        out = subprocess.run(
            [ctl, "-n", self._broker.nodename, "list_queues", "-q", "name", "messages"],
            env=self._broker.env(),
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == self.QUEUE:
                return int(fields[1])
        return 0


class FleetAgent:
    """One agent: its files, its build, its loop thread."""

    def __init__(self, index, root, scale, recorder, endpoint, broker=None):
        self.index = index
        self.broker = broker
        self.notifications = None
        self.name = f"fleet-host-{index:04d}"
        self.workdir = os.path.join(root, self.name)
        self.scale = scale
        self.observer = recorder.bind(index)
        self.endpoint = endpoint
        self.instances = [str(uuid.uuid4()) for _ in range(20)]
        self.agent = None
        self.loop = None
        self._thread = None
        self._stopping = threading.Event()
        os.makedirs(os.path.join(self.workdir, "instances"), exist_ok=True)
        self.host_path = os.path.join(self.workdir, "host.xml")
        with open(self.host_path, "w") as f:
            f.write(host_xml(self.instances))

    def conf(self):
        conf = rtconf.new_conf()
        conf([], project="rtagent", default_config_files=[])
        conf.set_override("state_path", os.path.join(self.workdir, "state"))
        conf.set_override("instances_path", os.path.join(self.workdir, "instances"), "libvirt")
        conf.set_override("connection_uri", f"test://{self.host_path}", "libvirt")
        # As placement_cost.py: room for the 20 guests, which count as
        # untracked usage until their claims arrive.
        conf.set_override("cpu_allocation_ratio", 1000.0)
        conf.set_override("audit_interval", self.scale.audit_interval, "rtagent")
        conf.set_override("placement_refresh_interval", self.scale.refresh_interval, "rtagent")
        conf.set_override("sync_retry_delay", self.scale.sync_retry_delay, "rtagent")
        conf.set_override("audit_jitter", AUDIT_JITTER, "daemon")
        conf.set_override("startup_delay", self.scale.startup_delay, "daemon")
        return conf

    def build(self):
        """Build the agent from its state directory (a restart keeps it)."""
        conf = self.conf()
        self.trigger = Trigger()
        driver = builder.libvirt_driver(
            conf,
            on_change=self.trigger.pull,
            opener=lambda uri: NamedHost(libvirt.open(uri), self.name),
        )
        api = admin_adapter(self.endpoint)
        api.session.timeout = PLACEMENT_TIMEOUT_S
        window = self.scale.retry_window
        self.agent = builder.build_agent(
            conf,
            driver=driver,
            adapter=api,
            observer=self.observer,
            make_backoff=lambda: SyncBackoff(window=window),
        )
        if self.broker is not None:
            self.notifications = notifications.Notifications(
                self.broker.sender(self.name),
                self.agent,
                self.name,
                "127.0.0.1",
                interval=self.scale.instance_info_interval,
            )
        self._conf = conf

    def _audit(self):
        # As the daemon: the notifications look for changes after each audit.
        try:
            self.agent.audit()
        finally:
            if self.notifications is not None:
                self.notifications.poke()

    def place(self, api):
        """First start: the node's provider, then its 20 instances claimed
        and their allocations written as a scheduler does; audits until a
        tick sends nothing new."""
        self.agent.audit()
        tracker = self.agent.tracker
        for instance in self.instances:
            tracker.instance_claim(instance, FLAVOR, project_id="fleet")
        schedule(api, tracker.node_uuid, self.instances)
        for _ in range(3):
            self.agent.audit()
        snapshot = tracker.snapshot()
        assert len(snapshot.instances) == len(snapshot.host.domains) == 20, self.name
        assert not snapshot.drift.untracked and not snapshot.drift.missing, snapshot.drift

    def start(self, delay=None):
        """The daemon's loop: a random start-up delay (``delay`` seconds
        instead, if given), then audits every interval with jitter, sooner
        when a failed sync's retry is due."""
        conf = self._conf
        self.loop = PeriodicLoop(
            self._audit,
            conf.rtagent.audit_interval,
            jitter=conf.daemon.audit_jitter,
            trigger=self.trigger,
            due_in=self.agent.retry_in,
        )
        if delay is None:
            delay = conf.daemon.startup_delay * random.random()
        self._stopping.clear()
        if self.notifications is not None:
            self.notifications.start()

        def run():
            if not self._stopping.wait(delay):
                self.loop.run()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()

    def halt_loop(self):
        """Stop the loop (the agent stays open)."""
        if self.loop is not None:
            self._stopping.set()
            self.loop.stop()
            self._thread.join(60)
            assert not self._thread.is_alive(), f"{self.name}: audit loop did not stop"
        if self.notifications is not None:
            self.notifications.stop()

    def stop(self, final_audit=True):
        """Stop the loop; the daemon's final flush; close."""
        self.halt_loop()
        if final_audit:
            try:
                self.agent.audit()
            except Exception:  # the daemon logs it; the restart's figures show it
                pass
        self.agent.close()
        self.agent = None

    @property
    def in_sync(self):
        """The node's last sync attempt succeeded (``rtagent status``)."""
        agent = self.agent
        if agent is None:
            return False
        return agent.publisher(agent.nodes.primary_uuid).backoff.status().in_sync


def rss_mb():
    """This process's resident memory (MiB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
