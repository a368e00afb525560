"""The claim path's own work, cut down (issue 35), gives what the general
code it replaces gave: ``NodeState.replace`` is ``dataclasses.replace``,
rows are written as before, a claim's PCI devices are chosen once per
layout, and a device's provider UUID is computed only for a spec that
names providers. Real trackers and stores, no mocks: the counting
wrappers below call the real functions."""

import dataclasses
import json
import uuid

import pytest

from rtagent.pci import held as pci_held
from rtagent.pci import pools
from rtagent.pci.errors import DevicesUnavailable
from rtagent.pci.held import HeldDevice
from rtagent.resources import frozen_map
from rtagent.tracker import claims, pciholds, store
from rtagent.tracker.model import Flavor, Instance
from rtagent.tracker.state import NodeState
from rtagent.tracker.sums import InstanceSums
from rtagent.tracker.table import Table
from tests.unit.helpers import make_tracker
from tests.unit.test_numa_claims import PINNED
from tests.unit.test_pci_claims import HOST, PCI, SMALL, ask, new_uuid
from tests.unit.test_state_shortcuts import (
    CTX,
    instance,
    migration,
    node_with,
)

FIELDS = {f.name for f in dataclasses.fields(NodeState)}


def states():
    """States with instances, a move, released and pending consumers, ratios."""
    a = node_with(3)
    b = a.with_migration(migration(1, 1, a.node_uuid, "00000000-0000-0000-0000-0000000000bb"))
    c = b.without_instance(b.instances[next(iter(b.instances))].uuid, deleted=True)
    d = c.with_pending(c.instances[next(iter(c.instances))].uuid, 7)
    return [NodeState(a.node_uuid), a, b, c, d.replace(placement_ratios=frozen_map({"VCPU": 4.0}))]


CHANGES = [
    {},
    {"seq": 9, "disabled": "maintenance"},
    {"released": frozenset({"00000000-0000-0000-0000-0000000000cc"})},
    {"failed_builds": 3, "pending": frozen_map({})},
]


@pytest.mark.parametrize("fields", CHANGES)
@pytest.mark.parametrize("index", range(5))
def test_replace_gives_what_dataclasses_replace_gives(index, fields):
    state = states()[index]
    fast, slow = state.replace(**fields), dataclasses.replace(state, **fields)
    assert fast == slow
    assert set(vars(fast)) == set(vars(slow)) == FIELDS
    for name in FIELDS:
        assert getattr(fast, name) is getattr(slow, name) or name == "sums", name
    assert fast.sums.valid_for(fast.instances)
    assert fast.sums.amounts == slow.sums.amounts and fast.sums.stats == slow.sums.stats


def test_replace_runs_post_init_on_a_mapping_given():
    state = node_with(2)
    plain = {i.uuid: i for i in state.instances.values()}
    plain[instance(7).uuid] = instance(7)
    replaced = state.replace(instances=plain)
    assert isinstance(replaced.instances, Table)
    assert replaced.sums.valid_for(replaced.instances)
    assert dict(replaced.sums.amounts) == dict(InstanceSums.over(replaced.instances).amounts)


def test_replace_refuses_a_name_that_is_not_a_field():
    with pytest.raises(TypeError, match="no field"):
        NodeState("00000000-0000-0000-0000-00000000000a").replace(instance_count=1)
    with pytest.raises(TypeError):
        dataclasses.replace(NodeState("00000000-0000-0000-0000-00000000000a"), instance_count=1)


def test_a_claim_made_from_requests_only_is_the_claim_asked_for():
    state = node_with(1)
    asked = instance(5)
    claimed = claims.claim_instance(state, CTX, asked).instances[asked.uuid]
    assert claimed == asked


def test_rows_are_written_as_before():
    flavor = Flavor(2, 2048, root_gb=10, ephemeral_gb=1, swap_mb=512, name="m1")
    assert flavor.to_dict() == dataclasses.asdict(flavor)
    device = HeldDevice("0000:3b:02.1", "req-1", "8086", "154c", "type-VF", 0, "0000:3b:00.0")
    assert device.to_dict() == dataclasses.asdict(device)
    row = Instance(
        str(uuid.uuid4()),
        flavor,
        frozen_map({"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 12}),
        assigned=frozen_map({"CUSTOM_VGPU": ("g1",)}),
        pci_devices=(device,),
    )
    assert store._dump(row) == json.dumps(row.to_dict(), sort_keys=True)
    assert Instance.from_dict(json.loads(store._dump(row))) == row


@pytest.fixture
def tracker(tmp_path):
    made, opened = make_tracker(tmp_path, pci=PCI)
    made.update_host(HOST)
    yield made
    opened.close()


def counting(monkeypatch, module, name):
    """Count the calls of ``module.name`` (still called) by their args."""
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_the_devices_of_the_layout_placed_are_chosen_once(tracker, monkeypatch):
    calls = counting(monkeypatch, pci_held, "choose")
    placed = tracker.instance_claim(new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("vf"))
    assert [h.address for h in placed.pci_devices] == ["0000:3b:02.1"]
    cells = [tuple(sorted(c)) if c is not None else None for _, _, c, *_ in calls]
    assert len(cells) == len(set(cells)) >= 1, cells
    # And a layout the devices do not allow is refused for its devices.
    calls.clear()
    with pytest.raises(DevicesUnavailable, match="required policy allows"):
        tracker.instance_claim(
            new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("gpu-required")
        )


def test_a_device_choice_takes_what_ensure_fits_takes(tracker):
    state = tracker._state
    requests = tracker._pci_requests(ask("vf", 2), new_uuid())
    assert pciholds.DeviceChoice(state, requests).take(None) == pciholds.ensure_fits(
        state, requests
    )
    assert pciholds.DeviceChoice(state, ()).take(None) == ()


def test_no_provider_uuid_is_computed_for_specs_that_name_no_provider(tracker, monkeypatch):
    calls = counting(monkeypatch, pools, "provider_uuid")
    tracker.instance_claim(new_uuid(), SMALL, pci_requests=ask("vf"))
    assert calls == []
    # A spec naming providers still has each device's computed, and admits
    # only the devices of the providers it names.
    table = tracker._state.pci_devices
    pf = pools.provider_uuid(tracker.node_uuid, "0000:3b:00.0")
    calls.clear()

    def vf_of(provider):
        spec = {"vendor_id": "8086", "product_id": "154c", "rp_uuids": [provider]}
        return [pools.PciRequest("r", 1, (spec,))]

    assert pools.select(table, vf_of(pf), node_uuid=tracker.node_uuid) == {"r": ("0000:3b:02.0",)}
    assert calls
    with pytest.raises(DevicesUnavailable):
        pools.select(table, vf_of(str(uuid.uuid4())), node_uuid=tracker.node_uuid)
