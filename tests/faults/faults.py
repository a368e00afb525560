"""The faults, each injected at a moment it waits for (a log line of the
step under way, written by the step itself or by the virt driver's gate,
tests/cloud/virt.py), then recovered from as an operator's units would
(a killed process started again, a stopped service started again). Each
returns ``(evidence, recovered_at)``: the line it waited for, and when the
last piece was back (``time.monotonic()``).

On stock nova, "the tracker" is nova-compute itself (its ResourceTracker
lives in it); on rtagent it is ``rtagent run``.
"""

import os
import signal
import time

from tests.cloud.harness import ACTION_BOUND_S
from tests.faults.gates import LogWatch, wait_line

# How long Placement stays down (the 60 s: an outage longer than
# any retry of nova's report client or the agent's sync backoff start).
PLACEMENT_DOWN_S = 60
BURST = 8


def boot_on(cloud, name, flavor, host=None, count=1):
    """Boot ``count`` servers, on ``host`` if given (microversion 2.74);
    their ids, without waiting."""
    server = {
        "name": name,
        "imageRef": cloud_image(),
        "flavorRef": flavor.id,
        "networks": "none",
        "min_count": count,
        "max_count": count,
        "return_reservation_id": True,
    }
    if host:
        server["host"] = host
    reply = cloud.nova.call("POST", "/servers", {"server": server}, expect=(202,))
    found = cloud.nova.call("GET", f"/servers?reservation_id={reply['reservation_id']}")
    return sorted(s["id"] for s in found["servers"])


def cloud_image():
    from tests.cloud.standins import IMAGE_ID

    return IMAGE_ID


def claim_line(run, uuid=None):
    """The line a host's compute service writes as it claims: the link's
    call to the agent (rtagent), nova's own claim (stock)."""
    who = uuid or "[0-9a-f-]{36}"
    if run.on_rtagent:
        return rf"Calling instance_claim on the rtagent daemon \(instance {who}\)"
    return rf"\[instance: {who}\] Claim successful on node"


def gate_line(step, uuid=None):
    return rf"cloud gate {step}: instance {uuid or '[0-9a-f-]{36}'} waits"


def one_server(run, host, flavor):
    """A server of ``flavor`` ACTIVE on ``host``."""
    (uuid,) = boot_on(run.cloud, "fault", flavor, host)
    run.cloud.nova.wait_server(uuid, "ACTIVE", ACTION_BOUND_S)
    return uuid


def restart(service):
    """SIGKILL by PID, then started again as its unit would."""
    service.kill()
    service.start()
    return time.monotonic()


# -- 1. the tracker killed ---------------------------------------------------


def tracker_kill_boot(run):
    """rtagent: the agent is stopped (SIGSTOP), a boot is sent to its host,
    and once the compute service has sent the claim (its link's DEBUG
    line) the agent is killed and started again: the claim was in flight,
    sent and unanswered. Stock nova: nova-compute is killed once it has
    claimed and its spawn waits at the gate."""
    host = run.hosts[0]
    watch = LogWatch(host.compute_service)
    if run.on_rtagent:
        os.kill(host.agent.pid, signal.SIGSTOP)
        (uuid,) = boot_on(run.cloud, "fault", run.small, host.name)
        _, line = wait_line([watch], claim_line(run, uuid), "the claim sent")
    else:
        host.gates.arm("spawn")
        (uuid,) = boot_on(run.cloud, "fault", run.small, host.name)
        _, line = wait_line([watch], gate_line("spawn", uuid), "the spawn at its gate")
    return line, restart(host.tracker)


def _resize_at_gate(run):
    """A server resized from the first host (it can go only to the other),
    waiting at its source's migrate_disk_and_power_off gate: the
    destination has claimed, nothing has finished. ``(uuid, line)``."""
    source = run.hosts[0]
    uuid = one_server(run, source.name, run.small)
    watch = LogWatch(source.compute_service)
    source.gates.arm("migrate_disk_and_power_off")
    run.cloud.nova.action(uuid, "resize", {"flavorRef": run.large.id})
    _, line = wait_line(
        [watch], gate_line("migrate_disk_and_power_off", uuid), "the resize at its gate"
    )
    return uuid, line


def tracker_kill_resize(run):
    """The destination's tracker killed between the resize's claim there
    and its finish, started again; then the resize goes on."""
    _, line = _resize_at_gate(run)
    recovered = restart(run.hosts[1].tracker)
    run.hosts[0].gates.open("migrate_disk_and_power_off")
    return line, recovered


# -- 2. the compute service killed --------------------------------------------


def compute_kill_resize(run):
    """The source's compute service killed while it migrates the disk,
    started again."""
    _, line = _resize_at_gate(run)
    return line, restart(run.hosts[0].compute_service)


def compute_kill_live_migration(run):
    """The source's compute service killed while the guest live-migrates
    (the destination has claimed and is prepared), started again."""
    source = run.hosts[0]
    uuid = one_server(run, source.name, run.small)
    watch = LogWatch(source.compute_service)
    source.gates.arm("live_migration")
    run.cloud.nova.action(uuid, "os-migrateLive", {"block_migration": "auto", "host": None})
    _, line = wait_line(
        [watch], gate_line("live_migration", uuid), "the live migration at its gate"
    )
    return line, restart(source.compute_service)


# -- 3. the broker -------------------------------------------------------------


def rabbitmq_restart_burst(run):
    """RabbitMQ restarted once the first of a burst of boots over both
    hosts is being claimed."""
    watches = [LogWatch(host.compute_service) for host in run.hosts]
    boot_on(run.cloud, "burst", run.small, count=BURST)
    _, line = wait_line(watches, claim_line(run), "the burst's first claim")
    run.control.rabbit.restart()
    return line, time.monotonic()


# -- 4. Placement ---------------------------------------------------------------


def placement_down(run):
    """Placement stopped while a live migration and two boots wait at
    their gates (the destination prepared; the boots claimed), the gates
    opened at once, Placement started again after
    :data:`PLACEMENT_DOWN_S` s."""
    source = run.hosts[0]
    mover = one_server(run, source.name, run.small)
    watches = {host.name: LogWatch(host.compute_service) for host in run.hosts}
    source.gates.arm("live_migration")
    run.cloud.nova.action(mover, "os-migrateLive", {"block_migration": "auto", "host": None})
    _, moving = wait_line(
        [watches[source.name]], gate_line("live_migration", mover), "the live migration at its gate"
    )
    for host in run.hosts:
        host.gates.arm("spawn")
    boot_on(run.cloud, "outage", run.small, count=2)
    _, spawning = wait_line(list(watches.values()), gate_line("spawn"), "a boot at its gate")
    run.control.placement.stop()
    for host in run.hosts:
        host.gates.open("spawn")
        host.gates.open("live_migration")
    time.sleep(PLACEMENT_DOWN_S)  # the outage itself, not a wait for a state
    run.control.placement.start_again()
    return f"{moving} | {spawning}", time.monotonic()


# -- 5. nova's database -----------------------------------------------------------


def postgres_restart_confirm(run):
    """PostgreSQL restarted while a resize's confirmation runs on its
    source (at the confirm_migration gate)."""
    source = run.hosts[0]
    uuid = one_server(run, source.name, run.small)
    run.cloud.nova.action(uuid, "resize", {"flavorRef": run.large.id})
    run.cloud.nova.wait_server(uuid, "VERIFY_RESIZE", ACTION_BOUND_S)
    watch = LogWatch(source.compute_service)
    source.gates.arm("confirm_migration")
    run.cloud.nova.action(uuid, "confirmResize")
    _, line = wait_line([watch], gate_line("confirm_migration", uuid), "the confirm at its gate")
    run.control.postgres.restart()
    source.gates.open("confirm_migration")
    return line, time.monotonic()


FAULTS = {
    "tracker_kill_boot": tracker_kill_boot,
    "tracker_kill_resize": tracker_kill_resize,
    "compute_kill_resize": compute_kill_resize,
    "compute_kill_live_migration": compute_kill_live_migration,
    "rabbitmq_restart_burst": rabbitmq_restart_burst,
    "placement_down_60s": placement_down,
    "postgres_restart_confirm": postgres_restart_confirm,
}
