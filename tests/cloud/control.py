"""The control plane of the test cloud: PostgreSQL (nova's api, cell0 and
cell1 databases; SQLite locks up under several nova services), RabbitMQ,
Placement, the glance and neutron stand-ins, and nova-api, nova-conductor
and nova-scheduler, each a real process on loopback started with the
project's helpers (rtagent.testing) or as a :class:`~tests.cloud.services.Service`.
"""

import os
import shutil
import subprocess
import sys
import threading
import time

from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.postgres import Postgres
from rtagent.testing.rabbitmq import RabbitMQ
from tests.cloud.services import Service, read_port, wait_for

BIN = os.path.dirname(sys.executable)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = os.path.join(REPO, "tests", "cloud", "site")
START_BOUND_S = 120
MANAGE_BOUND_S = 180

# Where the hosts' and nova's accounting must agree: the same ratios and
# reserved amounts in nova.conf (stock nova-compute) and rtagent.conf.
ACCOUNTING = {
    "cpu_allocation_ratio": "1.0",
    "ram_allocation_ratio": "1.0",
    "disk_allocation_ratio": "1.0",
    "reserved_host_memory_mb": "256",
    "reserved_host_disk_mb": "1024",
}
# nova's update_resources_interval here (nova's default: 60 s).
NOVA_AUDIT_S = 5
# nova's default scheduler filters, and IoOpsFilter with a limit the
# scenario's hosts reach only if idle servers count as busy.
SCHEDULER_FILTERS = (
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
    "IoOpsFilter",
)
MAX_IO_OPS = 2


def service_env(*paths):
    """The environment of a cloud process: this one's, with ``paths`` first
    on PYTHONPATH and nothing that would change nova's concurrency mode."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_NOVA", "NOTIFY_SOCKET"))}
    env["PYTHONPATH"] = os.pathsep.join([*paths, REPO])
    return env


def write_conf(path, sections):
    """An ini file from ``{section: {option: value}}``."""
    with open(path, "w") as f:
        for section, options in sections.items():
            f.write(f"[{section}]\n")
            for key, value in options.items():
                f.write(f"{key} = {value}\n")
            f.write("\n")
    return path


class ControlPlane:
    """Everything of the cloud but its hosts. ``figures`` collects
    ``key: seconds`` of the start-up.

    :param nova_options: ``{section: {option: value}}`` in every nova
        service's nova.conf, the hosts' included.
    """

    def __init__(self, workdir, nova_options=None):
        self.workdir = workdir
        self.nova_options = nova_options or {}
        self.logdir = os.path.join(workdir, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.figures = {}
        self.postgres = None
        self.rabbit = None
        self.placement = None
        self.services = []
        self.api_endpoint = None
        self.glance = None
        self.neutron = None
        self.conf_dir = os.path.join(workdir, "control")
        os.makedirs(self.conf_dir, exist_ok=True)

    # -- start and stop -----------------------------------------------------

    def start(self):
        t0 = time.monotonic()
        self._start_backends()
        self.figures["backends_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        self.nova_conf = self.write_nova_conf(
            os.path.join(self.conf_dir, "nova.conf"), "cloud-control", self.conf_dir
        )
        self._write_api_paste()
        self._make_databases()
        self.figures["nova_databases_s"] = time.monotonic() - t1
        t2 = time.monotonic()
        env = service_env()
        portfile = os.path.join(self.conf_dir, "nova-api.port")
        api = self._service(
            "nova-api",
            [
                sys.executable,
                "-m",
                "tests.cloud.novaapi",
                "--config-dir",
                self.conf_dir,
                "--portfile",
                portfile,
            ],
            env,
        )
        for binary in ("nova-conductor", "nova-scheduler"):
            self._service(binary, [os.path.join(BIN, binary), "--config-file", self.nova_conf], env)
        port = wait_for(lambda: read_port(portfile), "nova-api listening", START_BOUND_S, [api])
        self.api_endpoint = f"http://127.0.0.1:{port}"
        self.figures["nova_services_s"] = time.monotonic() - t2

    def _service(self, name, argv, env):
        service = Service(name, argv, self.logdir, env=env).start()
        self.services.append(service)
        return service

    def _start_backends(self):
        """PostgreSQL, RabbitMQ and Placement start side by side (each
        helper waits for its own); the stand-ins meanwhile. PostgreSQL and
        RabbitMQ choose a free port before their server binds it, so on a
        busy machine another process can take it first: each is tried once
        more, on a new port (``backend_retries`` in the figures)."""
        self.placement = PlacementServer(workdir=os.path.join(self.logdir, "placement"))
        self.figures["backend_retries"] = 0
        errors = []

        def started(make):
            for attempt in range(2):
                helper = make(attempt)
                try:
                    helper.start()
                    return helper
                except Exception:
                    if attempt == 1:
                        raise
                    self.figures["backend_retries"] += 1
            return None

        def rabbit():
            self.rabbit = started(
                lambda n: RabbitMQ(os.path.join(self.logdir, f"rabbitmq{'-retry' * n}"))
            )

        def postgres():
            self.postgres = started(lambda n: Postgres())

        def run(start):
            try:
                start()
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=run, args=(start,))
            for start in (rabbit, self.placement.start, postgres)
        ]
        for thread in threads:
            thread.start()
        glance_port = os.path.join(self.conf_dir, "glance.port")
        neutron_port = os.path.join(self.conf_dir, "neutron.port")
        standins = self._service(
            "standins",
            [
                sys.executable,
                "-m",
                "tests.cloud.standins",
                "--glance-portfile",
                glance_port,
                "--neutron-portfile",
                neutron_port,
            ],
            service_env(),
        )
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        port = wait_for(lambda: read_port(glance_port), "the glance stand-in", 30, [standins])
        self.glance = f"http://127.0.0.1:{port}"
        port = wait_for(lambda: read_port(neutron_port), "the neutron stand-in", 30, [standins])
        self.neutron = f"http://127.0.0.1:{port}"

    def stop(self):
        for service in reversed(self.services):
            service.stop()
        if self.postgres is not None and self.postgres.log_path:
            # Postgres removes its own directory: keep its log with the others.
            if os.path.exists(self.postgres.log_path):
                shutil.copy(self.postgres.log_path, os.path.join(self.logdir, "postgres.log"))
        for helper in (self.placement, self.rabbit, self.postgres):
            if helper is not None:
                helper.stop()

    def tails(self):
        """``(name, last lines)`` of every control-plane log."""
        found = [(s.name, s.tail()) for s in self.services]
        for name, path in (
            ("placement", self.placement and self.placement.log_path),
            ("rabbitmq", self.rabbit and self.rabbit.log_path),
            ("postgres", self.postgres and self.postgres.log_path),
        ):
            if path and os.path.exists(path):
                with open(path, errors="replace") as f:
                    found.append((name, "\n".join(f.read().splitlines()[-15:])))
        return found

    # -- configuration ----------------------------------------------------------

    def mapped_hosts(self):
        """The hosts nova-scheduler's discovery has mapped to cell1 (read
        from nova_api: the REST API does not show host mappings, and a host
        not yet mapped gets no server)."""
        import psycopg2

        conn = psycopg2.connect(
            host="127.0.0.1", port=self.postgres.port, user="postgres", dbname="nova_api"
        )
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT host FROM host_mappings")
                return {row[0] for row in cursor.fetchall()}
        finally:
            conn.close()

    def db_url(self, name):
        return self.postgres.url(name)

    def write_nova_conf(self, path, host, state_path, extra=None):
        """nova.conf of one service (``host``), every service the same but
        for its host, state and ``extra`` (``{section: {option: value}}``)."""
        sections = {
            "DEFAULT": {
                "host": host,
                "my_ip": "127.0.0.1",
                "state_path": state_path,
                "transport_url": self.rabbit.transport_url,
                "use_stderr": "true",
                "update_resources_interval": NOVA_AUDIT_S,
                # No random delay of up to a minute before the first periodics.
                "periodic_fuzzy_delay": "0",
                # Stopped within the step's bound, not nova's one minute.
                "graceful_shutdown_timeout": "5",
                # An RPC call to a stopped host fails within a step's bound.
                "rpc_response_timeout": "30",
                **ACCOUNTING,
            },
            "api_database": {"connection": self.db_url("nova_api")},
            "database": {"connection": self.db_url("nova_cell1")},
            "oslo_concurrency": {"lock_path": os.path.join(state_path, "locks")},
            "placement": {
                "auth_type": "admin_token",
                "endpoint": self.placement.endpoint,
                "token": "admin",
            },
            "glance": {"api_servers": self.glance},
            "neutron": {
                "auth_type": "admin_token",
                "endpoint": self.neutron,
                "endpoint_override": self.neutron,
                "token": "admin",
            },
            # Quotas count against keystone's projects, which this cloud has not.
            "quota": {"instances": "-1", "cores": "-1", "ram": "-1"},
            "scheduler": {"workers": "1", "discover_hosts_in_cells_interval": "2"},
            # nova's default filters and IoOpsFilter, which reads the
            # ComputeNode record's io_workload (issue 48: a host whose
            # idle servers counted as building refused every boot).
            "filter_scheduler": {
                "enabled_filters": ",".join(SCHEDULER_FILTERS),
                "max_io_ops_per_host": str(MAX_IO_OPS),
            },
            "conductor": {"workers": "1"},
        }
        for more in (self.nova_options, extra or {}):
            for section, options in more.items():
                sections.setdefault(section, {}).update(options)
        return write_conf(path, sections)

    def _write_api_paste(self):
        """nova's own api-paste.ini, its ``authtoken`` filter the identity
        stand-in (tests/cloud/identity.py)."""
        with open(os.path.join(sys.prefix, "etc", "nova", "api-paste.ini")) as f:
            text = f.read()
        factory = "keystonemiddleware.auth_token:filter_factory"
        marker = f"[filter:authtoken]\npaste.filter_factory = {factory}"
        assert marker in text, "nova's api-paste.ini has no authtoken filter to stand in for"
        text = text.replace(
            marker, "[filter:authtoken]\npaste.filter_factory = tests.cloud.identity:filter_factory"
        )
        with open(os.path.join(self.conf_dir, "api-paste.ini"), "w") as f:
            f.write(text)

    def _make_databases(self):
        """nova's databases, made by nova-manage as an operator makes them
        (one command after the other: run side by side on 2 cores they took
        longer)."""
        for name in ("nova_api", "nova_cell0", "nova_cell1"):
            self.postgres.create_database(name)
        cell0 = self.db_url("nova_cell0")
        for step, args in (
            ("api_db_sync", ["api_db", "sync"]),
            ("map_cell0", ["cell_v2", "map_cell0", "--database_connection", cell0]),
            ("create_cell", ["cell_v2", "create_cell", "--name", "cell1"]),
            ("db_sync", ["db", "sync"]),
        ):
            t0 = time.monotonic()
            log = os.path.join(self.logdir, f"nova-manage-{step}.log")
            with open(log, "wb") as out:
                done = subprocess.run(
                    [os.path.join(BIN, "nova-manage"), "--config-file", self.nova_conf, *args],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=service_env(),
                    timeout=MANAGE_BOUND_S,
                    check=False,
                )
            self.figures[f"nova_manage_{step}_s"] = time.monotonic() - t0
            if done.returncode != 0:
                with open(log, errors="replace") as f:
                    why = f.read()[-3000:]
                raise AssertionError(
                    f"nova-manage {' '.join(args)} exited {done.returncode}:\n{why}"
                )
