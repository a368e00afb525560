"""Schema-valid call sequences through the RPC endpoint (no broker: the
endpoint object itself, against the real Placement fixture and the libvirt
test driver): never an internal error, never over capacity.

The fuzzing of malformed calls (tests/integration/test_rpc.py) checks the
refusals; this checks what the schema lets through.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.rpc.endpoint import AgentEndpoint, validate

pytestmark = pytest.mark.functional

INSTANCES = [f"00000000-0000-4000-8000-00000000000{i}" for i in range(3)]
MIGRATIONS = [f"10000000-0000-4000-8000-00000000000{i}" for i in range(3)]
OTHER_NODE = "20000000-0000-4000-8000-000000000000"

FLAVOR = st.fixed_dictionaries(
    {"vcpus": st.integers(1, 8), "memory_mb": st.integers(1, 8000)},
    optional={"root_gb": st.integers(0, 50)},
)
LIMITS = st.fixed_dictionaries(
    {},
    optional={
        "vcpu": st.one_of(st.none(), st.floats(0, 100)),
        "memory_mb": st.floats(0, 1e5),
    },
)


def calls(node):
    nodes = st.sampled_from([node, OTHER_NODE])
    instance = st.sampled_from(INSTANCES)
    migration = st.sampled_from(MIGRATIONS)
    return st.one_of(
        st.tuples(
            st.just("instance_claim"),
            st.fixed_dictionaries(
                {"instance_uuid": instance, "flavor": FLAVOR},
                optional={
                    "limits": LIMITS,
                    "assigned": st.dictionaries(
                        st.sampled_from(["VCPU", "PCPU", "CUSTOM_X", "MEMORY_MB"]),
                        st.integers(1, 3),
                        max_size=2,
                    ),
                },
            ),
        ),
        st.tuples(
            st.just("abort_instance_claim"), st.fixed_dictionaries({"instance_uuid": instance})
        ),
        st.tuples(
            st.just("update_instance"),
            st.fixed_dictionaries(
                {"instance_uuid": instance},
                optional={
                    "vm_state": st.sampled_from(["active", "deleted", "shelved_offloaded", None]),
                    "task_state": st.one_of(st.none(), st.just("resize_prep")),
                },
            ),
        ),
        st.tuples(
            st.just("start_move"),
            st.fixed_dictionaries(
                {
                    "migration_uuid": migration,
                    "instance_uuid": instance,
                    "migration_type": st.sampled_from(
                        ["resize", "migration", "live-migration", "evacuation"]
                    ),
                    "source_node": nodes,
                    "dest_node": nodes,
                    "old_flavor": FLAVOR,
                },
                optional={"new_flavor": st.one_of(st.none(), FLAVOR)},
            ),
        ),
        st.tuples(
            st.sampled_from(["finish_move", "confirm_move", "revert_move"]),
            st.fixed_dictionaries({"migration_uuid": migration}),
        ),
        st.tuples(
            st.sampled_from(["build_failed", "build_succeeded", "get_compute_node", "get_status"]),
            st.just({}),
        ),
    )


def test_schema_valid_sequences_never_fail_internally_nor_oversubscribe(make_agent):
    agent = make_agent()
    agent.audit()
    node = agent.tracker.node_uuid
    endpoint = AgentEndpoint(agent, "fuzz-host", "127.0.0.1")

    @settings(
        max_examples=250,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(st.lists(calls(node), min_size=1, max_size=12))
    def run(sequence):
        for uuid in INSTANCES:
            endpoint.abort_instance_claim(None, instance_uuid=uuid)
        for uuid in MIGRATIONS:
            endpoint.revert_move(None, migration_uuid=uuid)
        for method, args in sequence:
            validate(method, args)  # the generator only makes schema-valid calls
            reply = getattr(endpoint, method)(None, **args)
            assert reply["ok"] or reply["error"]["code"] != "rpc.internal_error", (
                method,
                args,
                reply,
            )
            snap = agent.tracker.snapshot()
            for rc, inv in snap.inventories.items():
                assert snap.usage.get(rc, 0) <= inv.capacity, (rc, sequence)

    run()
