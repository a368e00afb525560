"""A tampered store is refused at start-up, in one line, and left as it was.

The store is the agent's own: an agent built as the service builds it (the
SR-IOV host of the libvirt test driver given the 2-socket host's NUMA
facts) claims two pinned guests, each with a VF, and stops. Then one row is
edited as an attacker or a careless operator would: usage that is negative,
NaN, 1e308 or 10^30, a pinning of ``"x"``, a row duplicated so that two
instances hold the same CPUs or the same device. Every command that opens
the store (``run``, ``audit``, ``audit --dry-run``) must refuse it with one
line naming the row and the field, exit 2, and change nothing (issue 34).
"""

import json
import shutil
import sqlite3

import pytest

from rtagent.placement.backoff import SyncBackoff
from rtagent.rpc.status import node_status
from rtagent.service import builder
from rtagent.testing.placement_server import admin_adapter as make_adapter
from rtagent.tracker.model import Flavor
from tests.functional.numa_host import DEDICATED, SHARED, read_host, two_socket_driver
from tests.functional.test_cli import rtagent, write_conf
from tests.functional.test_pci_tracking import host_uri
from tests.unit.helpers import make_tracker

pytestmark = pytest.mark.functional

FIRST, SECOND, COPY = (f"5c0e0000-0000-4000-8000-00000000000{n}" for n in (1, 2, 3))
PINNED = {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1"}
VF_ALIAS = '{"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}'


@pytest.fixture
def claimed(placement, make_conf, tmp_path):
    """The state directory of an agent that claimed FIRST and SECOND (two
    pinned vCPUs and one VF each); the agent is stopped."""
    conf = make_conf(
        libvirt__connection_uri=host_uri(tmp_path),
        compute__cpu_dedicated_set=DEDICATED,
        compute__cpu_shared_set=SHARED,
        pci__device_spec=['{"vendor_id": "8086", "product_id": "154c"}'],
        pci__alias=[VF_ALIAS],
    )
    (tmp_path / "instances").mkdir(exist_ok=True)
    agent = builder.build_agent(
        conf,
        driver=two_socket_driver(str(tmp_path / "instances"), host_uri(tmp_path)),
        adapter=make_adapter(placement.endpoint),
        make_backoff=lambda: SyncBackoff(window=0),
    )
    try:
        agent.audit()
        for instance in (FIRST, SECOND):
            agent.tracker.instance_claim(
                instance,
                Flavor(2, 1024, root_gb=1),
                extra_specs=PINNED,
                pci_requests=[{"alias": "vf", "count": 1}],
            )
    finally:
        agent.close()
    return tmp_path / "state"


def _edit_first(change):
    def edit(db):
        (body,) = db.execute("SELECT body FROM instances WHERE uuid = ?", (FIRST,)).fetchone()
        db.execute(
            "UPDATE instances SET body = ? WHERE uuid = ?", (change(json.loads(body)), FIRST)
        )

    return edit


def _set(path, value):
    """A change of FIRST's row: ``path`` set to ``value`` (raw JSON text)."""

    def change(body):
        *parents, last = path
        target = body
        for key in parents:
            target = target[key]
        marker = "@@value@@"
        target[last] = marker
        return json.dumps(body).replace(json.dumps(marker), value)

    return change


def _copy_first(without=()):
    """A row for COPY holding what FIRST holds (less the fields named)."""

    def edit(db):
        node, body = db.execute(
            "SELECT node_uuid, body FROM instances WHERE uuid = ?", (FIRST,)
        ).fetchone()
        body = json.loads(body)
        body["uuid"] = COPY
        for field in without:
            body[field] = None if field == "numa" else []
        db.execute(
            "INSERT INTO instances (node_uuid, uuid, body) VALUES (?, ?, ?)",
            (node, COPY, json.dumps(body)),
        )

    return edit


def _copy_first_holding(change):
    """A row for COPY without FIRST's NUMA claim, holding what ``change``
    makes of FIRST's one VF hold (a list of holds)."""

    def edit(db):
        node, body = db.execute(
            "SELECT node_uuid, body FROM instances WHERE uuid = ?", (FIRST,)
        ).fetchone()
        body = json.loads(body)
        body.update(uuid=COPY, numa=None, pci_devices=change(body["pci_devices"][0]))
        db.execute(
            "INSERT INTO instances (node_uuid, uuid, body) VALUES (?, ?, ?)",
            (node, COPY, json.dumps(body)),
        )

    return edit


def _upper(vf):
    return [dict(vf, address=vf["address"].upper())]


def _its_pf(vf):
    pf = dict(vf, address=vf["parent_addr"], product_id="1572", dev_type="type-PF")
    return [dict(pf, parent_addr=None)]


def _twice(body):
    body["pci_devices"] *= 2
    return json.dumps(body)


CASES = {
    "negative-usage": (
        _edit_first(_set(("resources", "VCPU"), "-4")),
        f"instances row {FIRST} of node {{node}}: resources.VCPU: -4 is not within 0 to 2147483647",
    ),
    "nan-usage": (
        _edit_first(_set(("resources", "VCPU"), "NaN")),
        "resources.VCPU: nan is not of type integer",
    ),
    "1e308-usage": (
        _edit_first(_set(("resources", "MEMORY_MB"), "1e308")),
        "resources.MEMORY_MB: 1e+308 is not of type integer",
    ),
    "10^30-usage": (
        _edit_first(_set(("resources", "DISK_GB"), str(10**30))),
        "resources.DISK_GB: <a 100-bit integer> is not within 0 to 2147483647",
    ),
    "pinning-x": (
        _edit_first(_set(("numa", "cells", 0, "pinning"), '"x"')),
        "numa.cells[0].pinning: 'x' is not of type array",
    ),
    "a-pin-on-a-cpu-it-does-not-keep": (
        _edit_first(_set(("numa", "cells", 0, "taken"), "[]")),
        "numa: cells[0] pins host CPUs",
    ),
    "not-json": (
        _edit_first(lambda body: json.dumps(body)[:-1]),
        "not valid JSON",
    ),
    "duplicate-pins-and-device": (
        _copy_first(),
        f"is pinned by two instances, {FIRST} and {COPY}",
    ),
    "duplicate-device": (
        _copy_first(without=("numa",)),
        f"is held by two instances, {FIRST} and {COPY}",
    ),
    # Issue 49, defect 3: the same holdings in variants the check missed.
    "duplicate-device-in-upper-case": (
        _copy_first_holding(_upper),
        f"is held by two instances, {FIRST} and {COPY}",
    ),
    "a-pf-beside-its-vf": (
        _copy_first_holding(_its_pf),
        f"({COPY}) is held beside its VF 0000:3b:",
    ),
    "a-device-twice-in-one-row": (
        _edit_first(_twice),
        f"is held twice by instance {FIRST}",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_tampered_store_is_refused_at_start_up_in_one_line(claimed, tmp_path, case):
    edit, says = CASES[case]
    node = (claimed / "compute_id").read_text().strip()
    db = sqlite3.connect(claimed / "rtagent.sqlite", isolation_level=None)
    try:
        edit(db)
    finally:
        db.close()
    before = _rows(claimed)
    conf = write_conf(tmp_path)  # the demo host: the store is refused before any reading
    for command in (["run"], ["audit"], ["audit", "--dry-run"]):
        result = rtagent("--config-file", str(conf), *command, timeout=60)
        assert result.returncode == 2, (command, result.stderr[-2000:])
        lines = result.stderr.splitlines()
        assert len(lines) == 1, (command, result.stderr[-2000:])
        (line,) = lines
        assert line.startswith(f"rtagent: error: State store {claimed}"), line
        assert says.format(node=node) in line, line
        assert line.endswith('(docs/operations.md, "A store that does not add up")'), line
        assert len(line) <= 500, line
        assert _rows(claimed) == before, command


def test_the_untampered_store_and_a_changed_copy_of_it_are_believed(claimed, tmp_path):
    """The refusals come from the edits: the agent's own rows load, and so
    does a copy of a row that holds nothing another row holds."""
    copy = tmp_path / "copy"
    shutil.copytree(claimed, copy)
    db = sqlite3.connect(copy / "rtagent.sqlite", isolation_level=None)
    try:
        _copy_first(without=("numa", "pci_devices"))(db)
    finally:
        db.close()
    for path, count in ((claimed, 2), (copy, 3)):
        tracker, store = make_tracker(path)
        try:
            assert len(tracker.snapshot().instances) == count
        finally:
            store.close()


def test_a_lone_upper_case_address_is_the_device_it_names(claimed):
    """Issue 49, defect 3: a row naming its device as ``0000:3B:...`` holds
    the device the host reports in lower case, not a gone one beside it
    (which left the real device free)."""
    db = sqlite3.connect(claimed / "rtagent.sqlite", isolation_level=None)
    try:
        (body,) = db.execute("SELECT body FROM instances WHERE uuid = ?", (FIRST,)).fetchone()
        address = json.loads(body)["pci_devices"][0]["address"]
        _edit_first(_set(("pci_devices", 0, "address"), json.dumps(address.upper())))(db)
    finally:
        db.close()
    tracker, store = make_tracker(claimed)
    try:
        (held,) = {i.uuid: i for i in tracker.snapshot().instances}[FIRST].pci_devices
        assert held.address == address
    finally:
        store.close()


def _rows(state):
    db = sqlite3.connect(f"file:{state}/rtagent.sqlite?mode=ro", uri=True)
    try:
        return sorted(db.execute("SELECT node_uuid, uuid, body FROM instances"))
    finally:
        db.close()


def test_a_claim_pinned_to_cpus_the_host_lacks_is_believed_and_reported_lost(tmp_path, caplog):
    """Not the store's to judge: the host is read after the store, and a
    host that lost a socket is a changed host, not a damaged store
    (docs/operations.md). Its CPUs are reported lost, and claims go on."""
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(read_host())
    tracker.instance_claim(FIRST, Flavor(2, 1024), extra_specs=PINNED)
    store.close()
    db = sqlite3.connect(tmp_path / "rtagent.sqlite", isolation_level=None)
    try:
        _edit_first(_set(("numa", "cells", 0, "host_cell"), "7"))(db)
        _edit_first(_set(("numa", "cells", 0, "pinning"), "[[0, 998], [1, 999]]"))(db)
        _edit_first(_set(("numa", "cells", 0, "taken"), "[998, 999]"))(db)
    finally:
        db.close()
    tracker, store = make_tracker(tmp_path)
    try:
        snap = tracker.update_host(read_host())
        assert dict(snap.numa_lost) == {FIRST: (998, 999)}
        assert node_status(snap, now=0)["numa"]["lost_cpus"] == {FIRST: [998, 999]}
        assert f"{FIRST} keeps pinned CPU(s) 998,999" in caplog.text
        tracker.instance_claim(SECOND, Flavor(2, 1024), extra_specs=PINNED)
    finally:
        store.close()
