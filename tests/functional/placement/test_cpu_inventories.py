"""PCPU and VCPU inventories from ``[compute] cpu_dedicated_set`` and
``cpu_shared_set`` in the real Placement, by nova's libvirt driver's rules.

The demo host (libvirt's test driver) has CPUs 0, 2 and 4 online. Its
running guests have no claim; their reservation is turned off here so the
figures are the CPU rules alone (tests/functional/placement/
test_untracked_reserved.py covers it).
"""

import pytest

from tests.functional.placement.conftest import get

pytestmark = pytest.mark.functional


def cpu_inventories(operator, node):
    """{class: (total, reserved, allocation_ratio)} of VCPU and PCPU; also
    checks the unit fields every CPU inventory has."""
    invs = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    found = {}
    for rc in ("VCPU", "PCPU"):
        if rc in invs:
            inv = invs[rc]
            assert (inv["min_unit"], inv["max_unit"], inv["step_size"]) == (1, inv["total"], 1)
            found[rc] = (inv["total"], inv["reserved"], inv["allocation_ratio"])
    return found


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # neither set: every online CPU is VCPU, as before
        ({}, {"VCPU": (3, 0, 4.0)}),
        # both: the shared set is VCPU (with the configured ratio), the
        # dedicated set PCPU (ratio 1.0 whatever is configured)
        (
            {
                "compute__cpu_shared_set": "0,2",
                "compute__cpu_dedicated_set": "4",
                "cpu_allocation_ratio": 16.0,
            },
            {"VCPU": (2, 0, 16.0), "PCPU": (1, 0, 1.0)},
        ),
        # dedicated only: no VCPU inventory at all
        ({"compute__cpu_dedicated_set": "0,2,4"}, {"PCPU": (3, 0, 1.0)}),
        # shared only: a subset of the online CPUs
        ({"compute__cpu_shared_set": "2"}, {"VCPU": (1, 0, 4.0)}),
    ],
)
def test_cpu_sets_make_the_inventories(make_agent, make_conf, operator, options, expected):
    agent = make_agent(make_conf(rtagent__reserve_untracked_usage=False, **options))
    node = agent.audit().snapshot.node_uuid
    assert cpu_inventories(operator, node) == expected


def test_adding_and_removing_a_dedicated_set_across_restarts(make_agent, make_conf, operator):
    plain = make_conf(rtagent__reserve_untracked_usage=False)
    agent = make_agent(plain)
    node = agent.audit().snapshot.node_uuid
    assert cpu_inventories(operator, node) == {"VCPU": (3, 0, 4.0)}
    agent.close()

    split = make_conf(
        rtagent__reserve_untracked_usage=False,
        compute__cpu_shared_set="0",
        compute__cpu_dedicated_set="2,4",
    )
    agent = make_agent(split)
    assert agent.audit().snapshot.node_uuid == node
    assert cpu_inventories(operator, node) == {"VCPU": (1, 0, 4.0), "PCPU": (2, 0, 1.0)}
    agent.close()

    # Without the set, PCPU is the agent's to remove, and VCPU is whole again.
    agent = make_agent(plain)
    agent.audit()
    assert cpu_inventories(operator, node) == {"VCPU": (3, 0, 4.0)}


def test_an_operators_pcpu_ratio_is_put_back_to_1(make_agent, make_conf, operator):
    agent = make_agent(
        make_conf(rtagent__reserve_untracked_usage=False, compute__cpu_dedicated_set="2,4")
    )
    node = agent.audit().snapshot.node_uuid
    invs = get(operator, f"/resource_providers/{node}/inventories")
    pcpu = dict(invs["inventories"]["PCPU"], allocation_ratio=4.0)
    resp = operator.put(
        f"/resource_providers/{node}/inventories/PCPU",
        json=dict(pcpu, resource_provider_generation=invs["resource_provider_generation"]),
    )
    assert resp.status_code == 200, resp.text
    assert cpu_inventories(operator, node) == {"PCPU": (2, 0, 4.0)}

    # (An unset VCPU ratio set this way would be kept; PCPU's is not the
    # operator's to choose.)
    snapshot = agent.audit().snapshot
    assert cpu_inventories(operator, node) == {"PCPU": (2, 0, 1.0)}
    assert snapshot.inventories["PCPU"].allocation_ratio == 1.0


def test_a_reload_keeps_the_reserved_huge_pages_the_agent_started_with(make_agent, make_conf):
    # The host driver checks the start-up value against the cells; a
    # reloaded policy with another one would hold pages nobody checked.
    from rtagent.cmd.run import apply_conf

    running = make_conf()
    agent = make_agent(running)
    agent.audit()
    new = make_conf(reserved_host_cpus=1, reserved_huge_pages=["node:0,size:2048,count:8"])
    apply_conf(running, new, agent)
    policy = agent.tracker.policy
    assert (policy.reserved_host_cpus, policy.reserved_huge_pages) == (1, ())
