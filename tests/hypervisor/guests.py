"""What libvirt itself says of the guests: each domain's power state and the
host CPUs its vCPUs are pinned to (``<cputune><vcpupin cpuset=...>``), read
with libvirt-python over the daemon's read-only socket; and the comparison
with what the servers should be and the agent pinned. The comparison is
pure (:func:`compare`)."""

import dataclasses
import xml.etree.ElementTree as ET

import libvirt

# virDomainState
_STATES = {
    libvirt.VIR_DOMAIN_RUNNING: "running",
    libvirt.VIR_DOMAIN_BLOCKED: "running",
    libvirt.VIR_DOMAIN_PAUSED: "paused",
    libvirt.VIR_DOMAIN_SHUTDOWN: "shutting down",
    libvirt.VIR_DOMAIN_SHUTOFF: "shutoff",
    libvirt.VIR_DOMAIN_CRASHED: "crashed",
}


@dataclasses.dataclass(frozen=True)
class Domain:
    uuid: str
    state: str
    pinned: frozenset  # host CPUs of its <vcpupin> elements


def cpuset(text):
    """``"0-2,5"`` -> {0, 1, 2, 5} (libvirt's cpuset syntax, no negation)."""
    found = set()
    for part in (p.strip() for p in text.split(",")):
        if "-" in part:
            low, high = part.split("-", 1)
            found.update(range(int(low), int(high) + 1))
        elif part:
            found.add(int(part))
    return found


def parse(uuid, state, xml):
    pinned = set()
    for pin in ET.fromstring(xml).findall("./cputune/vcpupin"):
        pinned |= cpuset(pin.get("cpuset", ""))
    return Domain(uuid, _STATES.get(state, f"state {state}"), frozenset(pinned))


def read(uri):
    """{domain UUID: :class:`Domain`} of every domain libvirt at ``uri`` has."""
    conn = libvirt.openReadOnly(uri)
    try:
        return {
            dom.UUIDString(): parse(dom.UUIDString(), dom.state()[0], dom.XMLDesc(0))
            for dom in conn.listAllDomains(0)
        }
    finally:
        conn.close()


def agent_pins(node):
    """{instance UUID: host CPUs} the agent's status (one node of ``rtagent
    status --json``) has each pinned instance keep."""
    pins = {}
    for cell in ((node or {}).get("numa") or {}).get("cells", ()):
        for cpu, owner in cell.get("pinned", {}).items():
            if owner:
                pins.setdefault(owner, set()).add(int(cpu))
    return pins


def compare(expected_states, domains, pins, dedicated):
    """What libvirt disagrees with, as lines; [] when it agrees.

    :param expected_states: {server UUID: "running" | "shutoff"} of the
        servers on this host.
    :param domains: :func:`read`'s answer.
    :param pins: :func:`agent_pins`' answer, or None when the agent is
        down (pins are then not compared).
    :param dedicated: the host's dedicated CPUs (``cpu_dedicated_set``).
    """
    found = []
    extra = sorted(set(domains) - set(expected_states))
    if extra:
        found.append(f"libvirt domains of no server here: {extra}")
    for server, state in sorted(expected_states.items()):
        domain = domains.get(server)
        if domain is None:
            found.append(f"{server}: no domain")
            continue
        if domain.state != state:
            found.append(f"{server}: domain {domain.state}, server {state}")
        if pins is None:
            continue
        kept = pins.get(server)
        if kept:
            if set(domain.pinned) != kept:
                found.append(
                    f"{server}: vcpupin {sorted(domain.pinned)}, agent pinned {sorted(kept)}"
                )
        elif domain.pinned & dedicated:
            found.append(
                f"{server}: unpinned by the agent, vcpupin on dedicated {sorted(domain.pinned)}"
            )
    return found
