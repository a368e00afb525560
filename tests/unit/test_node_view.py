"""Stats, drift, assigned resources and the compute-node view: pure tables."""

import datetime

import pytest

from rtagent.resources import DISK_GB, MEMORY_MB, VCPU, frozen_map
from rtagent.tracker import assigned, drift, errors, stats, view
from rtagent.tracker.ledger import ResourcePolicy, inventories
from rtagent.tracker.model import Flavor, Instance, NodeSnapshot
from rtagent.virt.host import DOMAIN_PAUSED, DOMAIN_RUNNING, DOMAIN_SHUTOFF, DomainInfo, HostView


def inst(uuid, vm_state="active", task_state=None, project="p1", vcpus=1, os_type=None):
    flavor = Flavor(vcpus, 512, 10)
    res = frozen_map({VCPU: vcpus, MEMORY_MB: 512, DISK_GB: 10})
    return Instance(
        uuid,
        flavor,
        res,
        vm_state=vm_state,
        task_state=task_state,
        project_id=project,
        os_type=os_type,
    )


def test_stats_are_novas_keys_as_strings():
    got = stats.stats(
        [
            inst("a"),
            inst("b", "building"),
            inst("c", task_state="resize_migrating", project="p2"),
            inst("d", task_state="powering-off", os_type="linux"),
        ],
        failed_builds=2,
    )
    assert got == {
        "num_instances": "4",
        "num_vm_active": "3",
        "num_vm_building": "1",
        "num_task_None": "2",
        "num_task_resize_migrating": "1",
        "num_task_powering-off": "1",
        # nova spells an image without os_type "None", as it does task_state.
        "num_os_type_None": "3",
        "num_os_type_linux": "1",
        "num_proj_p1": "3",
        "num_proj_p2": "1",
        "io_workload": "2",  # building + resize_migrating
        "failed_builds": "2",
    }
    # Instances with a task under way (nova's current_workload), not I/O.
    assert stats.current_workload(got) == 2


def test_stats_of_an_empty_node():
    # nova's periodic clears the stats and writes io_workload and
    # num_instances only when it counts an instance.
    assert stats.stats([]) == {"failed_builds": "0"}
    assert stats.current_workload(stats.stats([])) == 0


def test_idle_active_instances_load_nothing():
    got = stats.stats([inst("a"), inst("b")])
    assert got["io_workload"] == "0"
    assert stats.current_workload(got) == 0


def dom(uuid, state=DOMAIN_RUNNING, vcpus=2, mem=1024):
    return DomainInfo(uuid, uuid, state, vcpus, mem)


def test_drift_untracked_and_missing_after_grace():
    domains = (dom("a"), dom("x"), dom("y", DOMAIN_SHUTOFF), dom("m"))
    first = drift.compare(domains, {"a", "gone"}, {"m"}, previous=drift.Drift(), now=100, grace=60)
    assert [d.uuid for d in first.untracked] == ["x", "y"]
    assert first.missing == ()  # "gone" first missed now
    later = drift.compare(domains, {"a", "gone"}, set(), previous=first, now=161, grace=60)
    assert later.missing == ("gone",)
    assert [d.uuid for d in later.untracked] == ["x", "y", "m"]
    # shut-off domains use nothing
    assert first.untracked_usage() == [{VCPU: 2, MEMORY_MB: 1024}]
    back = drift.compare((dom("gone"),), {"gone"}, set(), previous=later, now=200, grace=60)
    assert back.missing == () and back.missing_since == {}


def test_paused_untracked_domains_still_use_memory():
    d = drift.compare(
        (dom("p", DOMAIN_PAUSED),), set(), set(), previous=drift.Drift(), now=0, grace=1
    )
    assert d.untracked_usage() == [{VCPU: 2, MEMORY_MB: 1024}]


HELD = [({}, {"CUSTOM_VGPU": ("gpu-0",)})]
OFFERED = {"CUSTOM_VGPU": ("gpu-0", "gpu-1", "gpu-2")}


def test_assigned_picks_lowest_free_ids():
    assert assigned.pick(OFFERED, HELD, {"CUSTOM_VGPU": 2}, "i") == {
        "CUSTOM_VGPU": ("gpu-1", "gpu-2")
    }


@pytest.mark.parametrize(
    "request_, error",
    [
        ({"CUSTOM_VGPU": 3}, errors.ComputeResourcesUnavailable),
        ({"CUSTOM_PMEM": 1}, errors.ComputeResourcesUnavailable),
        ({"CUSTOM_VGPU": 0}, errors.InvalidClaimRequest),
        ({"CUSTOM_VGPU": "1"}, errors.InvalidClaimRequest),
    ],
)
def test_assigned_refusals(request_, error):
    with pytest.raises(error):
        assigned.pick(OFFERED, HELD, request_, "i")


def test_assigned_missing_reports_ids_no_longer_offered():
    held = [({}, {"CUSTOM_VGPU": ("gpu-0", "gpu-9")})]
    assert assigned.missing(OFFERED, held) == {"CUSTOM_VGPU": ("gpu-9",)}


def test_compute_node_view_fields():
    host = HostView("node1", "QEMU", 8002000, vcpus=16, memory_mb=32768, local_gb=500)
    policy = ResourcePolicy(reserved_host_memory_mb=512, reserved_host_disk_mb=2048)
    snap = NodeSnapshot(
        node_uuid="n",
        host=host,
        inventories=frozen_map(inventories(host, policy)),
        usage=frozen_map({VCPU: 3, MEMORY_MB: 1024, DISK_GB: 20}),
        instances=(inst("a", vcpus=3),),
        policy=policy,
        stats=frozen_map(stats.stats([inst("a", vcpus=3)])),
    )
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    cn = view.compute_node(snap, "192.0.2.7", now=now)
    assert {
        k: cn[k]
        for k in (
            "vcpus",
            "vcpus_used",
            "memory_mb",
            "memory_mb_used",
            "free_ram_mb",
            "local_gb",
            "local_gb_used",
            "free_disk_gb",
            "disk_available_least",
            "running_vms",
            "current_workload",
            "cpu_allocation_ratio",
            "ram_allocation_ratio",
            "disk_allocation_ratio",
            "host_ip",
            "hypervisor_type",
            "hypervisor_version",
            "hypervisor_hostname",
            "updated_at",
        )
    } == {
        "vcpus": 16,
        "vcpus_used": 3,
        "memory_mb": 32768,
        "memory_mb_used": 1536,
        "free_ram_mb": 31232,
        "local_gb": 500,
        "local_gb_used": 22.0,
        "free_disk_gb": 478.0,
        "disk_available_least": 478,
        "running_vms": 1,
        "current_workload": 0,
        "cpu_allocation_ratio": 4.0,
        "ram_allocation_ratio": 1.0,
        "disk_allocation_ratio": 1.0,
        "host_ip": "192.0.2.7",
        "hypervisor_type": "QEMU",
        "hypervisor_version": 8002000,
        "hypervisor_hostname": "node1",
        "updated_at": "2026-01-01T00:00:00+00:00",
    }
    assert cn["stats"]["num_instances"] == "1"


@pytest.mark.parametrize(
    ("shared", "dedicated", "vcpus", "ratio"),
    [
        (None, None, 16, 4.0),  # every online CPU
        (frozenset({0, 1, 2}), None, 3, 4.0),
        (frozenset({0, 1}), frozenset({2, 3}), 2, 4.0),
        (None, frozenset({2, 3}), 0, None),  # no VCPU inventory, as nova reports
    ],
)
def test_compute_node_vcpus_is_the_vcpu_total(shared, dedicated, vcpus, ratio):
    host = HostView(
        "node1",
        "QEMU",
        1,
        vcpus=16,
        memory_mb=1024,
        local_gb=10,
        cpu_shared_set=shared,
        cpu_dedicated_set=dedicated,
    )
    policy = ResourcePolicy()
    snap = NodeSnapshot(
        "n", host, frozen_map(inventories(host, policy)), frozen_map({}), (), policy=policy
    )
    cn = view.compute_node(snap, "192.0.2.7")
    assert (cn["vcpus"], cn["cpu_allocation_ratio"]) == (vcpus, ratio)


def test_restart_report_says_what_to_do():
    snap = NodeSnapshot(
        node_uuid="n",
        host=None,
        inventories=frozen_map({}),
        usage=frozen_map({}),
        instances=(),
        drift=drift.Drift(untracked=(dom("x"),)),
        assigned_missing=frozen_map({"CUSTOM_VGPU": ("g9",)}),
    )
    counted, gpus = drift.restart_report(snap, counted=True)
    assert "1 domain(s) on the host have no claim here (x)" in counted
    assert "count as used" in counted
    assert "NOT counted" in drift.restart_report(snap, counted=False)[0]
    assert "g9" in gpus
    clean = NodeSnapshot("n", None, frozen_map({}), frozen_map({}), (), drift=drift.Drift())
    assert drift.restart_report(clean, counted=True) == []


def test_cpu_info_is_novas_json():
    import dataclasses
    import json

    from rtagent.virt.host import CpuTopology

    host = dataclasses.replace(
        HostView("n", "QEMU", 1, vcpus=4, memory_mb=1, local_gb=1),
        cpu_arch="x86_64",
        cpu_model="EPYC",
        cpu_vendor="AMD",
        cpu_topology=CpuTopology(sockets=1, cores=2, threads=2),
        cpu_features=frozenset({"sse2", "avx"}),
    )
    assert json.loads(view.cpu_info(host)) == {
        "arch": "x86_64",
        "model": "EPYC",
        "vendor": "AMD",
        "topology": {"sockets": 1, "cores": 2, "threads": 2},
        "features": ["avx", "sse2"],
    }
    assert view.cpu_info(None) == "{}"


def test_the_view_from_carried_sums_equals_the_view_from_a_snapshot(tmp_path):
    # nova's tracker asks for the view after every claim; it is built from
    # the sums the state carries (O(moves)), and must equal the view of a
    # full snapshot, whatever the node went through.
    import dataclasses
    import random
    import uuid

    from rtagent.tracker.state import view_inputs
    from tests.unit.helpers import HOST, make_tracker

    rng = random.Random(7)
    # A domain no claim accounts for: untracked usage counts in the view.
    stray = DomainInfo("5d8b0b5e-0000-4000-8000-00000000beef", "stray", DOMAIN_RUNNING, 2, 2048)
    host = dataclasses.replace(HOST, vcpus=64, memory_mb=1 << 20, local_gb=10_000, domains=(stray,))
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(host)
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    here, moves, flavors = [], [], {}
    small, big = Flavor(1, 512, 1), Flavor(2, 1024, 2)
    for _ in range(300):
        step = rng.choice(["claim", "claim", "state", "abort", "build", "move", "end_move"])
        if step == "claim" or not here:
            uuid_ = str(uuid.uuid4())
            tracker.instance_claim(uuid_, small, project_id=rng.choice(["p1", "p2", "p3"]))
            here.append(uuid_)
        elif step == "state":
            tracker.update_instance(
                rng.choice(here),
                vm_state=rng.choice(["active", "building", "stopped"]),
                task_state=rng.choice([None, "rebuilding", "spawning"]),
                set_task=True,
            )
        elif step == "abort":
            gone = here.pop(rng.randrange(len(here)))
            tracker.abort_instance_claim(gone)
            moves = [m for m in moves if m[1] != gone]
            flavors.pop(gone, None)
        elif step == "build":
            rng.choice([tracker.build_failed, tracker.build_succeeded])()
        elif step == "move":
            incoming = rng.random() < 0.5
            instance = str(uuid.uuid4()) if incoming else rng.choice(here)
            old = flavors.get(instance, small)
            new = big if old == small else small
            migration = str(uuid.uuid4())
            tracker.start_move(
                migration,
                instance,
                "resize",
                source_node=str(uuid.uuid4()) if incoming else tracker.node_uuid,
                dest_node=tracker.node_uuid,
                old_flavor=old,
                new_flavor=new,
            )
            moves.append((migration, instance, new))
        elif moves:
            migration, instance, new = moves.pop(rng.randrange(len(moves)))
            if rng.random() < 0.5:
                tracker.revert_move(migration)
            else:
                tracker.confirm_move(migration)
                if instance in tracker._state.instances:
                    flavors[instance] = new
                    if instance not in here:
                        here.append(instance)
        state = tracker._state
        light = view.compute_node(view_inputs(state, True), "192.0.2.1", now=now)
        full = view.compute_node(tracker.snapshot(), "192.0.2.1", now=now)
        assert light == full
    store.close()
