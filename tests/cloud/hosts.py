"""One compute host of the test cloud: ``rtagent run`` beside
``rtagent-nova-compute`` (docs/nova.md, "Running it"), or stock
``nova-compute``, both processes in UTS namespaces named after the host.

The host's hypervisor is libvirt's test driver over a host file of its own
(3 online CPUs, whatever the file says; :data:`MEMORY_MB`); the compute
service's virt driver (tests/cloud/virt.py) reads the same host, so nova and
the agent describe one machine.
"""

import json
import os
import subprocess
import uuid

import requests

from rtagent.testing.ports import free_port
from tests.cloud.control import ACCOUNTING, BIN, SITE, service_env, write_conf
from tests.cloud.services import Service, wait_for

MEMORY_MB = 2048
# The agent's audit interval here (the default: 60 s), and how often it
# reads Placement (0: at every audit; the default 300 s would leave
# allocations others wrote unseen for minutes).
AGENT_AUDIT_S = 3
# The window a failed sync is retried within, kept under two audit
# intervals as the option's help asks (its default, 110 s, goes with the
# default 60 s audit): after an outage the agents try again within this
# many seconds of Placement's return (make test-cloud-faults'
# placement_down_60s; with 110 s its convergence depended on where the
# random retry fell in the window, 43-58 s of the 60 s bound).
AGENT_RETRY_WINDOW_S = 5
START_BOUND_S = 120
STATUS_TIMEOUT_S = 10

HOST_XML = f"""<node>
  <cpu><mhz>2400</mhz><model>x86_64</model><nodes>1</nodes>
    <sockets>1</sockets><cores>2</cores><threads>2</threads></cpu>
  <memory>{MEMORY_MB * 1024}</memory>
</node>
"""


class Host:
    """A cloud host named ``name`` under ``workdir``. Nothing runs until
    :meth:`start`."""

    # The stats its virt driver reports itself (nova's fake: none).
    DRIVER_STATS = ()

    def __init__(self, name, control, workdir):
        self.name = name
        self.control = control
        self.dir = os.path.join(workdir, name)
        self.nova_state = os.path.join(self.dir, "nova-state")
        self.agent_state = os.path.join(self.dir, "agent-state")
        self.instances = os.path.join(self.dir, "instances")
        for path in (self.nova_state, self.instances):
            os.makedirs(path, exist_ok=True)
        self.host_xml = os.path.join(self.dir, "host.xml")
        with open(self.host_xml, "w") as f:
            f.write(HOST_XML)
        self.health_port = free_port()
        self.agent_conf = self._write_agent_conf()
        self.nova_conf = os.path.join(self.dir, "nova.conf")
        # The compute services' virt driver is loaded through SITE.
        env = service_env(SITE)
        logdir = control.logdir
        self.agent = Service(
            f"rtagent-{name}",
            [os.path.join(BIN, "rtagent"), "--config-file", self.agent_conf, "run"],
            logdir,
            env=service_env(),
            hostname=name,
        )
        self.rtagent_compute = Service(
            f"rtagent-nova-compute-{name}",
            [os.path.join(BIN, "rtagent-nova-compute"), "--config-file", self.nova_conf],
            logdir,
            env=env,
            hostname=name,
        )
        self.stock_compute = Service(
            f"nova-compute-{name}",
            [os.path.join(BIN, "nova-compute"), "--config-file", self.nova_conf],
            logdir,
            env=env,
            hostname=name,
        )

    @property
    def services(self):
        return [self.agent, self.rtagent_compute, self.stock_compute]

    @property
    def on_rtagent(self):
        return self.agent.running

    @property
    def compute(self):
        """The compute service running now, or None."""
        for service in (self.rtagent_compute, self.stock_compute):
            if service.running:
                return service
        return None

    # -- configuration ----------------------------------------------------------

    def _write_agent_conf(self):
        return write_conf(os.path.join(self.dir, "rtagent.conf"), self._agent_sections())

    def _agent_sections(self):
        """rtagent.conf as ``{section: {option: value}}``."""
        control = self.control
        return {
            "DEFAULT": {
                "host": self.name,
                "state_path": self.agent_state,
                "transport_url": control.rabbit.transport_url,
                **ACCOUNTING,
            },
            "libvirt": {
                "connection_uri": f"test:///{self.host_xml}",
                "instances_path": self.instances,
            },
            "placement": {
                "auth_type": "admin_token",
                "endpoint": control.placement.endpoint,
                "token": "admin",
            },
            "rtagent": {
                "audit_interval": AGENT_AUDIT_S,
                "placement_refresh_interval": "0",
                "placement_retry_window": AGENT_RETRY_WINDOW_S,
            },
            "daemon": {"startup_delay": "0"},
            "health": {"port": self.health_port},
        }

    def _write_nova_conf(self, on_rtagent):
        extra = {
            "DEFAULT": {"compute_driver": "rtagent_cloud.CloudFakeDriver"},
            "libvirt": {"connection_uri": f"test:///{self.host_xml}"},
        }
        extra["DEFAULT"]["instances_path"] = self.instances
        if on_rtagent:
            extra["rtagent"] = {"agent_config_file": self.agent_conf, "rpc_timeout": "30"}
        self.control.write_nova_conf(self.nova_conf, self.name, self.nova_state, extra)

    # -- start and stop -----------------------------------------------------

    def start_on_rtagent(self):
        """A new host on rtagent: nova's node identity written for both
        services (docs/nova.md: they share ``compute_id``), the agent started,
        then the compute service."""
        node = str(uuid.uuid4())
        for path in (self.nova_state, self.agent_state):
            os.makedirs(path, mode=0o700, exist_ok=True)
            with open(os.path.join(path, "compute_id"), "w") as f:
                f.write(node)
        self._write_nova_conf(on_rtagent=True)
        self.agent.start()
        self.rtagent_compute.start()

    def start_on_stock_nova(self):
        self._write_nova_conf(on_rtagent=False)
        self.stock_compute.start()

    def stop(self):
        """Stop whatever runs (the compute service first)."""
        return sum(s.stop() for s in (self.rtagent_compute, self.stock_compute, self.agent))

    def resume(self):
        """Start again what :meth:`stop` stopped, on the same configuration."""
        if (
            os.path.exists(os.path.join(self.agent_state, "compute_id"))
            and self._conf_has_rtagent()
        ):
            self.agent.start()
            self.rtagent_compute.start()
        else:
            self.stock_compute.start()

    def _conf_has_rtagent(self):
        with open(self.nova_conf) as f:
            return "[rtagent]" in f.read()

    def move_to_rtagent(self):
        """docs/nova.md, "Running it", steps 2-4: stop nova-compute, copy
        nova's compute_id into the agent's state directory, start the agent,
        add ``[rtagent] agent_config_file`` to nova.conf, start the command."""
        self.stock_compute.stop()
        os.makedirs(self.agent_state, mode=0o700, exist_ok=True)
        with open(os.path.join(self.nova_state, "compute_id")) as f:
            node = f.read().strip()
        with open(os.path.join(self.agent_state, "compute_id"), "w") as f:
            f.write(node)
        self.agent.start()
        self.wait_agent_ready()
        self._write_nova_conf(on_rtagent=True)
        self.rtagent_compute.start()

    def move_back_to_stock_nova(self):
        """docs/nova.md, step 6: stop the command, take ``[rtagent]`` out of
        nova.conf, stop the agent, start stock nova-compute."""
        self.rtagent_compute.stop()
        self._write_nova_conf(on_rtagent=False)
        self.agent.stop()
        self.stock_compute.start()

    # -- the agent's view ---------------------------------------------------------

    def status(self):
        """The agent's report (``/status``, what ``rtagent status --json``
        prints), or None while it does not answer."""
        try:
            reply = requests.get(
                f"http://127.0.0.1:{self.health_port}/status", timeout=STATUS_TIMEOUT_S
            )
        except requests.RequestException:
            return None
        return reply.json() if reply.status_code == 200 else None

    def status_command(self):
        """``rtagent status --json``, as an operator runs it."""
        done = subprocess.run(
            [os.path.join(BIN, "rtagent"), "--config-file", self.agent_conf, "status", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=service_env(),
        )
        assert done.returncode == 0, f"rtagent status --json on {self.name}: {done.stderr}"
        return json.loads(done.stdout)

    def wait_agent_ready(self):
        def ready():
            status = self.status()
            nodes = (status or {}).get("nodes") or []
            return (
                nodes and nodes[0].get("node_uuid") and (nodes[0].get("sync") or {}).get("in_sync")
            )

        wait_for(ready, f"the agent of {self.name} in sync", START_BOUND_S, [self.agent])
