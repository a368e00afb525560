"""Placement under gunicorn over PostgreSQL (rtagent.testing.placement_gunicorn):
the workers serve, their PIDs are reported, an outage refuses connections,
a restart serves on the same port, and a stop leaves no process behind.

Skipped where PostgreSQL cannot run, unless CI is set: then it fails.
"""

import os
import socket
import uuid

import pytest

from rtagent.testing import proc
from rtagent.testing.placement_gunicorn import placement_on_postgres
from rtagent.testing.postgres import missing_requirements
from tests.integration.conftest import require

pytestmark = pytest.mark.integration


def _refused(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("preload", [False, True], ids=["lazy", "preload"])
def test_workers_serve_halt_refuses_restart_same_port_stop_leaves_nothing(preload):
    require(missing_requirements(), "PostgreSQL Placement")
    with placement_on_postgres(workers=2, preload=preload) as placement:
        api = placement.admin_adapter()
        master, workers = placement.pid, placement.worker_pids()
        assert len(workers) == 2
        assert all(os.getppid() != w and proc.start_time(w) for w in workers)
        assert sorted(proc.children(master)) == workers
        rp = str(uuid.uuid4())
        resp = api.post("/resource_providers", json={"uuid": rp, "name": "gunicorn-test"})
        assert resp.status_code == 200, resp.text
        # Several requests are shared among the workers; all see one database.
        for _ in range(6):
            assert api.get(f"/resource_providers/{rp}").status_code == 200
        assert sum(placement.cpu_by_pid().values()) > 0

        port = placement.port
        placement.halt()
        assert _refused(port)
        assert not any(proc.start_time(pid) for pid in [master, *workers])
        assert placement.worker_pids() == []

        placement.restart()
        assert placement.port == port
        assert len(placement.worker_pids()) == 2
        assert api.get(f"/resource_providers/{rp}").status_code == 200
        pids, workdir = placement.pids(), placement.workdir
    assert not any(proc.start_time(pid) for pid in pids)
    assert not os.path.exists(workdir)
