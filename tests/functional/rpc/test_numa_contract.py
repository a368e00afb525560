"""docs/rpc-api.md, "Pinned and NUMA guests" (API 1.3): ``extra_specs`` and
``image_properties`` reach the tracker through ``instance_claim`` and
``start_move`` (plain and standalone), the replies and ``get_instance``
show the chosen cells and pinning, and an invalid spec is
``numa.invalid_constraint`` naming its key, changing nothing.

The endpoint object itself (no broker), an agent on the libvirt test
driver's built-in host (``test:///default``: two NUMA cells, CPUs 0-7 and
8-15, of which 0, 2 and 4 online) with ``cpu_dedicated_set = 2,4`` and
``cpu_shared_set = 0``, against Placement's own fixture.
"""

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.rpc.endpoint import AgentEndpoint, validate
from tests.functional.conftest import make_adapter

pytestmark = pytest.mark.functional

OTHER_NODE = "20000000-0000-4000-8000-000000000000"
PINNED = {"hw:cpu_policy": "dedicated"}
DEDICATED_2 = {"vcpus": 2, "memory_mb": 512}
# Every dedicated CPU is on host cell 0; spread puts vCPU 0 on CPU 2.
DEDICATED_2_CELLS = [
    {
        "guest_cell": 0,
        "host_cell": 0,
        "pinning": {"0": 2, "1": 4},
        "emulator_cpus": [],
        "pagesize_kb": None,
    }
]


def new_uuid():
    return str(uuid.uuid4())


def numa_conf(make_conf, **overrides):
    values = {
        "libvirt__connection_uri": "test:///default",
        "compute__cpu_dedicated_set": "2,4",
        "compute__cpu_shared_set": "0",
        "reserved_host_memory_mb": 0,
        # The driver's own running domain would take 2 of its 3 GiB.
        "rtagent__count_untracked_domains": False,
    }
    values.update(overrides)
    return make_conf(**values)


@pytest.fixture
def served(make_agent, make_conf):
    """(agent, endpoint) on the NUMA host, audited once."""
    agent = make_agent(numa_conf(make_conf))
    agent.audit()
    return agent, AgentEndpoint(agent, "numa-host", "127.0.0.1")


def ok(reply):
    """A reply's result, less the node's view that claims and moves carry
    since 1.9 (tests/integration/test_rpc.py checks it)."""
    assert reply["ok"], reply
    got = reply["result"]
    return {k: v for k, v in got.items() if k != "compute_node"} if isinstance(got, dict) else got


def state_of(agent):
    """Everything a refused call must leave as it was."""
    snap = agent.tracker.snapshot()
    return (
        snap.instances,
        snap.migrations,
        dict(snap.usage),
        snap.numa_cells,
        snap.released,
        snap.pending,
    )


def test_the_node_offers_pcpu_from_its_dedicated_set(served):
    agent, _ = served
    snap = agent.tracker.snapshot()
    assert snap.inventories["PCPU"].total == 2
    assert snap.inventories["VCPU"].total == 1
    assert [(c.id, sorted(c.pcpuset)) for c in snap.numa_cells] == [(0, [2, 4]), (1, [])]


def test_cells_that_fit_nowhere_are_refused_with_one_numa_reason(served):
    agent, endpoint = served
    before = state_of(agent)
    # Two PCPU fit the node, but host cell 1 has no dedicated CPU.
    refused = endpoint.instance_claim(
        None,
        instance_uuid=new_uuid(),
        flavor=DEDICATED_2,
        extra_specs={**PINNED, "hw:numa_nodes": "2"},
    )
    assert refused["error"]["code"] == "tracker.compute_resources_unavailable", refused
    # As docs/rpc-api.md says: each reason starts with what did not fit.
    (reason,) = refused["error"]["details"]["reasons"]
    assert reason.startswith("NUMA: the guest's 2 cell(s), 2 pinned"), reason
    assert state_of(agent) == before


def test_a_dedicated_claim_takes_pcpu_and_answers_its_pinning(served):
    _, endpoint = served
    instance = new_uuid()
    result = ok(
        endpoint.instance_claim(
            None, instance_uuid=instance, flavor=DEDICATED_2, extra_specs=PINNED
        )
    )
    assert result["resources"] == {"PCPU": 2, "MEMORY_MB": 512}
    assert result["numa"] == DEDICATED_2_CELLS
    # Retried: the same claim, the same cells.
    again = endpoint.instance_claim(
        None, instance_uuid=instance, flavor=DEDICATED_2, extra_specs=PINNED
    )
    assert ok(again) == result
    record = ok(endpoint.get_instance(None, instance_uuid=instance))
    assert record["claim"]["numa"] == DEDICATED_2_CELLS
    assert record["claim"]["resources"] == {"PCPU": 2, "MEMORY_MB": 512}
    # Every dedicated CPU is pinned: another pinned guest does not fit.
    refused = endpoint.instance_claim(
        None, instance_uuid=new_uuid(), flavor={"vcpus": 1, "memory_mb": 64}, extra_specs=PINNED
    )
    assert refused["error"]["code"] == "tracker.compute_resources_unavailable", refused
    # Aborting frees the CPUs for the next one.
    assert ok(endpoint.abort_instance_claim(None, instance_uuid=instance)) == {"released": True}
    other = new_uuid()
    result = ok(
        endpoint.instance_claim(None, instance_uuid=other, flavor=DEDICATED_2, extra_specs=PINNED)
    )
    assert result["numa"] == DEDICATED_2_CELLS


def test_a_claim_without_a_numa_request_answers_null(served):
    _, endpoint = served
    instance = new_uuid()
    result = ok(
        endpoint.instance_claim(
            None,
            instance_uuid=instance,
            flavor={"vcpus": 1, "memory_mb": 64},
            # Specs and properties that are not NUMA ones are accepted and ignored.
            extra_specs={"quota:cpu_shares": "1024", "aggregate_instance_extra_specs:ssd": "true"},
            image_properties={"os_distro": "debian", "hw_disk_bus": "virtio", "min_ram": 0},
        )
    )
    assert result["numa"] is None
    assert result["resources"] == {"VCPU": 1, "MEMORY_MB": 64}
    assert ok(endpoint.get_instance(None, instance_uuid=instance))["claim"]["numa"] is None


def test_image_properties_alone_can_ask_for_cells(served):
    _, endpoint = served
    result = ok(
        endpoint.instance_claim(
            None,
            instance_uuid=new_uuid(),
            flavor={"vcpus": 1, "memory_mb": 64},
            image_properties={"hw_numa_nodes": 1},
        )
    )
    # A shared guest with one NUMA node: its cell, no pinning.
    assert result["resources"] == {"VCPU": 1, "MEMORY_MB": 64}
    assert result["numa"] == [
        {"guest_cell": 0, "host_cell": 0, "pinning": {}, "emulator_cpus": [], "pagesize_kb": None}
    ]


def test_a_standalone_claim_passes_its_specs_and_writes_pcpu(served, placement):
    agent, endpoint = served
    instance = new_uuid()
    result = ok(
        endpoint.instance_claim(
            None,
            instance_uuid=instance,
            flavor=DEDICATED_2,
            extra_specs=PINNED,
            project_id="proj",
            user_id="user",
        )
    )
    assert result["numa"] == DEDICATED_2_CELLS
    allocations = make_adapter(placement.endpoint).get(f"/allocations/{instance}").json()
    assert allocations["allocations"][agent.tracker.node_uuid]["resources"] == {
        "PCPU": 2,
        "MEMORY_MB": 512,
    }


def test_start_move_answers_the_cells_at_the_destination_only(served):
    agent, endpoint = served
    node = agent.tracker.node_uuid
    # Incoming: this node is the destination.
    incoming, migration = new_uuid(), new_uuid()
    result = ok(
        endpoint.start_move(
            None,
            migration_uuid=migration,
            instance_uuid=incoming,
            migration_type="migration",
            source_node=OTHER_NODE,
            dest_node=node,
            old_flavor=DEDICATED_2,
            extra_specs=PINNED,
        )
    )
    assert result == {"numa": DEDICATED_2_CELLS, "pci_devices": []}
    move = ok(endpoint.get_instance(None, instance_uuid=incoming))["moves"][0]
    assert move["new_numa"] == DEDICATED_2_CELLS
    assert move["old_numa"] is None  # held by the source, not here
    assert move["new_resources"] == {"PCPU": 2, "MEMORY_MB": 512}
    assert ok(endpoint.revert_move(None, migration_uuid=migration)) == {"applied": True}

    # Outgoing: the source answers null, and keeps the instance's own cells.
    local = new_uuid()
    ok(endpoint.instance_claim(None, instance_uuid=local, flavor=DEDICATED_2, extra_specs=PINNED))
    outgoing = new_uuid()
    result = ok(
        endpoint.start_move(
            None,
            migration_uuid=outgoing,
            instance_uuid=local,
            migration_type="live-migration",
            source_node=node,
            dest_node=OTHER_NODE,
            old_flavor=DEDICATED_2,
            extra_specs=PINNED,
        )
    )
    assert result == {"numa": None, "pci_devices": []}
    move = ok(endpoint.get_instance(None, instance_uuid=local))["moves"][0]
    assert move["old_numa"] == DEDICATED_2_CELLS
    assert move["new_numa"] is None


def test_a_same_node_resize_answers_the_new_cells(served):
    agent, endpoint = served
    node = agent.tracker.node_uuid
    instance, migration = new_uuid(), new_uuid()
    small = {"vcpus": 1, "memory_mb": 256}
    held = ok(
        endpoint.instance_claim(None, instance_uuid=instance, flavor=small, extra_specs=PINNED)
    )
    result = ok(
        endpoint.start_move(
            None,
            migration_uuid=migration,
            instance_uuid=instance,
            migration_type="resize",
            source_node=node,
            dest_node=node,
            old_flavor=small,
            new_flavor={"vcpus": 1, "memory_mb": 512},
            extra_specs=PINNED,
        )
    )
    # Both CPUs are held until the resize is confirmed or reverted.
    pinned = {held["numa"][0]["pinning"]["0"], result["numa"][0]["pinning"]["0"]}
    assert pinned == {2, 4}
    move = ok(endpoint.get_instance(None, instance_uuid=instance))["moves"][0]
    assert move["old_numa"] == held["numa"]
    assert move["new_numa"] == result["numa"]


def test_without_a_dedicated_set_a_pinned_guest_pins_shared_cpus_as_vcpu(make_agent, make_conf):
    # nova's upgrade fallback ([compute] cpu_pinning_fallback, on by default).
    agent = make_agent(
        numa_conf(make_conf, compute__cpu_dedicated_set=None, compute__cpu_shared_set=None)
    )
    agent.audit()
    endpoint = AgentEndpoint(agent, "numa-host", "127.0.0.1")
    assert "PCPU" not in agent.tracker.snapshot().inventories
    instance = new_uuid()
    result = ok(
        endpoint.instance_claim(
            None, instance_uuid=instance, flavor=DEDICATED_2, extra_specs=PINNED
        )
    )
    pinned = [cpu for cell in result["numa"] for cpu in cell["pinning"].values()]
    assert len(set(pinned)) == 2 and set(pinned) <= {0, 2, 4}  # the online CPUs
    record = ok(endpoint.get_instance(None, instance_uuid=instance))
    assert record["claim"]["resources"] == {"VCPU": 2, "MEMORY_MB": 512}


def test_without_the_fallback_a_node_with_no_dedicated_set_refuses_a_pinned_guest(
    make_agent, make_conf
):
    agent = make_agent(
        numa_conf(
            make_conf,
            compute__cpu_dedicated_set=None,
            compute__cpu_shared_set=None,
            compute__cpu_pinning_fallback=False,
        )
    )
    agent.audit()
    endpoint = AgentEndpoint(agent, "numa-host", "127.0.0.1")
    assert "PCPU" not in agent.tracker.snapshot().inventories
    before = state_of(agent)
    reply = endpoint.instance_claim(
        None, instance_uuid=new_uuid(), flavor=DEDICATED_2, extra_specs=PINNED
    )
    assert reply["error"]["code"] == "tracker.compute_resources_unavailable", reply
    # As docs/rpc-api.md quotes it.
    assert reply["error"]["details"]["reasons"] == [
        "PCPU: requested 2, the node has no PCPU inventory"
    ]
    assert state_of(agent) == before


@pytest.mark.parametrize(
    "flavor, extra_specs, image_properties, key",
    [
        (DEDICATED_2, {"hw:cpu_policy": "fast"}, None, "hw:cpu_policy"),
        (DEDICATED_2, None, {"hw_cpu_policy": True}, "hw_cpu_policy"),
        (DEDICATED_2, {"hw:numa_nodes": "3"}, None, "hw:numa_nodes"),
        (DEDICATED_2, {"hw:cpu_thread_policy": "isolate"}, None, "hw:cpu_thread_policy"),
        (
            DEDICATED_2,
            {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "500"},
            None,
            "hw:numa_mem.N",
        ),
        (
            DEDICATED_2,
            {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1"},
            None,
            "hw:cpu_dedicated_mask",
        ),
        (DEDICATED_2, {"hw:cpu_policy": "mixed"}, {"hw_cpu_policy": "dedicated"}, "hw_cpu_policy"),
        (DEDICATED_2, {"resources:PCPU": "3"}, None, "resources:PCPU"),
        (DEDICATED_2, None, {"hw_numa_nodes": 0}, "hw_numa_nodes"),
        (DEDICATED_2, None, {"hw_mem_page_size": "large"}, "hw_mem_page_size"),
    ],
)
def test_an_invalid_spec_names_its_key_and_changes_nothing(
    served, flavor, extra_specs, image_properties, key
):
    agent, endpoint = served
    held = new_uuid()
    ok(endpoint.instance_claim(None, instance_uuid=held, flavor={"vcpus": 1, "memory_mb": 64}))
    before = state_of(agent)
    args = {"extra_specs": extra_specs, "image_properties": image_properties}
    replies = [
        endpoint.instance_claim(None, instance_uuid=new_uuid(), flavor=flavor, **args),
        # The same on a resize of the instance held: refused on the node it is on.
        endpoint.start_move(
            None,
            migration_uuid=new_uuid(),
            instance_uuid=held,
            migration_type="resize",
            source_node=agent.tracker.node_uuid,
            dest_node=agent.tracker.node_uuid,
            old_flavor={"vcpus": 1, "memory_mb": 64},
            new_flavor=flavor,
            **args,
        ),
    ]
    for reply in replies:
        assert not reply["ok"], reply
        error = reply["error"]
        assert error["code"] == "numa.invalid_constraint", reply
        assert error["retriable"] is False
        assert error["details"] == {"key": key}
        assert error["message"].startswith(f"{key}: ")
    assert state_of(agent) == before


# -- schema-valid specs never fail internally --------------------------------

_READ_KEYS = [
    "hw:cpu_policy",
    "hw:cpu_thread_policy",
    "hw:cpu_dedicated_mask",
    "hw:emulator_threads_policy",
    "hw:numa_nodes",
    "hw:numa_cpus.0",
    "hw:numa_cpus.1",
    "hw:numa_mem.0",
    "hw:numa_mem.1",
    "hw:mem_page_size",
    "resources:PCPU",
    "resources1:VCPU",
    "trait:HW_CPU_HYPERTHREADING",
    "quota:cpu_shares",
]
_WORDS = [
    "",
    "dedicated",
    "shared",
    "mixed",
    "prefer",
    "isolate",
    "require",
    "share",
    "0",
    "1",
    "2",
    "0-1",
    "^0",
    "1,^1",
    "64",
    "small",
    "large",
    "any",
    "2MB",
    "4",
    "required",
    "forbidden",
    "9999",
    "-1",
    "1.5",
]
_IMAGE_KEYS = [
    "hw_cpu_policy",
    "hw_cpu_thread_policy",
    "hw_numa_nodes",
    "hw_numa_cpus.0",
    "hw_numa_mem.0",
    "hw_mem_page_size",
    "trait:HW_CPU_HYPERTHREADING",
    "os_distro",
]
_IMAGE_VALUES = st.one_of(
    st.sampled_from(_WORDS),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-2, 130),
    st.booleans(),
    st.none(),
)

# Random specs are mostly refused; these fit often, so that claims are held
# while others are tried.
_FITTING = [
    PINNED,
    {"hw:numa_nodes": "1"},
    {"hw:mem_page_size": "small"},
    {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"},
    {"resources:PCPU": "1"},
]

CLAIMS = st.fixed_dictionaries(
    {
        "flavor": st.fixed_dictionaries(
            {"vcpus": st.integers(1, 3), "memory_mb": st.integers(1, 512)}
        )
    },
    optional={
        "extra_specs": st.one_of(
            st.sampled_from(_FITTING),
            st.dictionaries(st.sampled_from(_READ_KEYS), st.sampled_from(_WORDS)),
        ),
        "image_properties": st.dictionaries(st.sampled_from(_IMAGE_KEYS), _IMAGE_VALUES),
    },
)
EXPECTED = {
    "numa.invalid_constraint",
    "tracker.compute_resources_unavailable",
}


def test_schema_valid_specs_get_a_claim_or_a_typed_refusal(make_agent, make_conf):
    """Whatever the schema lets through (image values of every JSON type
    it takes, keys read and not), the answer is a claim or a refusal a
    caller can act on, never ``rpc.internal_error``; every claim's pinning
    is on free dedicated CPUs."""
    agent = make_agent(numa_conf(make_conf))
    agent.audit()
    endpoint = AgentEndpoint(agent, "numa-host", "127.0.0.1")
    dedicated = {2, 4}
    seen = set()

    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(st.lists(CLAIMS, min_size=1, max_size=3))
    def run(claims):
        held = []
        try:
            for args in claims:
                instance = new_uuid()
                validate("instance_claim", {"instance_uuid": instance, **args})
                reply = endpoint.instance_claim(None, instance_uuid=instance, **args)
                if not reply["ok"]:
                    assert reply["error"]["code"] in EXPECTED, (args, reply)
                    seen.add(reply["error"]["code"])
                    continue
                held.append(instance)
                seen.add("pinned" if "PCPU" in reply["result"]["resources"] else "claimed")
                for cell in reply["result"]["numa"] or ():
                    assert set(cell["pinning"].values()) <= dedicated, (args, reply)
            pinned = [
                cpu
                for i in agent.tracker.snapshot().instances
                if i.numa is not None
                for cpu in i.numa.pinned
            ]
            assert len(pinned) == len(set(pinned)), claims
        finally:
            for instance in held:
                endpoint.abort_instance_claim(None, instance_uuid=instance)

    run()
    assert seen == {"pinned", "claimed", *EXPECTED}  # not vacuous


def test_running_cpus_keep_a_running_guest_where_it_runs(served):
    # 1.5: a guest claimed while it already runs pinned on CPU 4 keeps CPU
    # 4, where the agent would otherwise choose CPU 2.
    agent, endpoint = served
    one = {"vcpus": 1, "memory_mb": 64}
    result = ok(
        endpoint.instance_claim(
            None, instance_uuid=new_uuid(), flavor=one, extra_specs=PINNED, running_cpus=[4]
        )
    )
    assert result["numa"][0]["pinning"] == {"0": 4}
    # A guest running on a CPU that is not dedicated (0 is the shared set's)
    # or on one another claim keeps cannot be claimed where it runs.
    before = state_of(agent)
    for cpus in ([0], [4]):
        refused = endpoint.instance_claim(
            None, instance_uuid=new_uuid(), flavor=one, extra_specs=PINNED, running_cpus=cpus
        )
        assert refused["error"]["code"] == "tracker.compute_resources_unavailable", refused
        assert "the guest runs pinned to CPU(s)" in refused["error"]["message"]
    assert state_of(agent) == before


@pytest.mark.parametrize("cpus", [[-1], [2, 2], ["2"], [16384], [2.0], "2", {"2": 1}])
def test_running_cpus_out_of_bounds_are_invalid_requests(served, cpus):
    agent, endpoint = served
    before = state_of(agent)
    reply = endpoint.instance_claim(
        None,
        instance_uuid=new_uuid(),
        flavor={"vcpus": 1, "memory_mb": 64},
        extra_specs=PINNED,
        running_cpus=cpus,
    )
    assert reply["error"]["code"] == "rpc.invalid_request", reply
    assert reply["error"]["details"]["path"].startswith("running_cpus"), reply
    assert state_of(agent) == before
