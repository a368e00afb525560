"""``get_status``'s ``resources.<class>.claims`` is what claims are checked
against (issue 34): over each way untracked domains count, its ``free`` is
exactly what further claims take, and ``placement`` is the inventory the
agent sends."""

import dataclasses
import uuid

import pytest

from rtagent.resources import MEMORY_MB, VCPU
from rtagent.rpc.status import node_status
from rtagent.tracker import errors
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor
from rtagent.virt.host import DOMAIN_RUNNING, DomainInfo
from tests.unit.helpers import HOST, make_tracker

# 4 CPUs at the initial ratio 4.0 (16 vCPUs), 4096 MiB; a guest without a
# claim uses 5 vCPUs and 1000 MiB.
SQUATTER = DomainInfo(str(uuid.uuid4()), "by-hand", DOMAIN_RUNNING, 5, 1000)
FILLED = Flavor(1, 96)


@pytest.mark.parametrize(
    "count, reserve, vcpu, memory, plain_free",
    [
        # reserved: ceil(5 / 4) = 2 CPUs (8 vCPUs), 1000 MiB; the plain
        # figures count 5 vCPUs as used: 16 - 6 = 10 free, 3 more than fit.
        (True, True, {"reserved": 2, "capacity": 8.0, "used": 1, "free": 7.0}, 3000.0, 10.0),
        (True, False, {"reserved": 0, "capacity": 16.0, "used": 6, "free": 10.0}, 3000.0, 10.0),
        (False, True, {"reserved": 0, "capacity": 16.0, "used": 1, "free": 15.0}, 4000.0, 15.0),
    ],
    ids=["counted-reserved", "counted-used", "not-counted"],
)
def test_claims_free_is_what_further_claims_take(
    tmp_path, count, reserve, vcpu, memory, plain_free
):
    tracker, store = make_tracker(
        tmp_path,
        ResourcePolicy(reserved_host_memory_mb=0, reserve_untracked=reserve),
        count_untracked=count,
    )
    try:
        tracker.update_host(dataclasses.replace(HOST, domains=(SQUATTER,)))
        tracker.instance_claim(str(uuid.uuid4()), FILLED)
        resources = node_status(tracker.snapshot(), now=0)["resources"]
        assert resources[VCPU]["claims"] == {**vcpu, "max_unit": 4}
        assert resources[VCPU]["free"] == plain_free
        assert resources[VCPU]["placement"] == {
            "total": 4,
            "reserved": vcpu["reserved"] if reserve else 0,
            "allocation_ratio": 4.0,
            "capacity": (4 - (vcpu["reserved"] if reserve else 0)) * 4.0,
        }
        assert resources[MEMORY_MB]["claims"]["free"] == memory

        # A claim of exactly the free memory fits, one MiB more does not.
        with pytest.raises(errors.ComputeResourcesUnavailable, match="MEMORY_MB"):
            tracker.instance_claim(str(uuid.uuid4()), Flavor(1, int(memory) + 1))
        probe = str(uuid.uuid4())
        tracker.instance_claim(probe, Flavor(1, int(memory)))
        assert node_status(tracker.snapshot(), now=0)["resources"][MEMORY_MB]["claims"]["free"] == 0
        tracker.abort_instance_claim(probe)

        fitted = 0
        while True:
            try:
                tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 1))
            except errors.ComputeResourcesUnavailable as exc:
                assert "VCPU: requested 1, free 0" in str(exc)
                break
            fitted += 1
        assert fitted == vcpu["free"]
        assert node_status(tracker.snapshot(), now=0)["resources"][VCPU]["claims"]["free"] == 0
    finally:
        store.close()
