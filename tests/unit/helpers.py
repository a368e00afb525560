"""Small builders shared by the tests (no fakes of real services)."""

from rtagent.tracker import identity
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.store import Store
from rtagent.tracker.tracker import Tracker
from rtagent.virt.host import HostView

HOST = HostView("node1", "QEMU", 8002000, vcpus=4, memory_mb=4096, local_gb=100)


def make_tracker(state_path, policy=None, **kwargs):
    """A tracker over a real store in ``state_path`` (reopened if it exists);
    ``kwargs`` go to the Tracker."""
    store = Store(str(state_path))
    node_uuid = identity.load_or_create(str(state_path), store)
    policy = policy or ResourcePolicy(reserved_host_memory_mb=0)
    return Tracker(node_uuid, store, policy, **kwargs), store
