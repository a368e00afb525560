"""SIGHUP on a real ``rtagent run`` (real RabbitMQ, a real Placement
process): options that reload are declared mutable, so oslo.config does
not warn that it ignores them; a rejected configuration is reported once."""

import json
import signal
import time

import pytest

from tests.integration.test_daemon import Agent, wait_until

pytestmark = pytest.mark.integration

IMMUTABLE = "Ignoring change to immutable option"


@pytest.fixture
def agent(tmp_path, broker, placement):
    agent = Agent(tmp_path, broker, placement)
    agent.start()
    wait_until(lambda: agent.get("/healthz")[0] == 200, 30, "/healthz 200")
    yield agent
    agent.stop()
    agent.notify.close()


def reload(agent, broker, placement, extra, done):
    agent.write_conf(broker, placement, extra)
    agent.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: agent.logs().count(done) >= 1, 15, done)


def test_options_that_reload_raise_no_immutable_warning(agent, broker, placement, tmp_path):
    node = json.loads(agent.get("/status")[1])["nodes"][0]["node_uuid"]
    adapter = placement.admin_adapter()

    def inventories():
        return adapter.get(f"/resource_providers/{node}/inventories").json()["inventories"]

    (tmp_path / "provider_config").mkdir()
    # Every option that apply_conf applies, changed at once.
    reload(
        agent,
        broker,
        placement,
        "[DEFAULT]\n"
        "cpu_allocation_ratio = 20.0\nram_allocation_ratio = 1.5\ndisk_allocation_ratio = 2.0\n"
        "initial_cpu_allocation_ratio = 8.0\ninitial_ram_allocation_ratio = 1.2\n"
        "initial_disk_allocation_ratio = 1.1\n"
        "reserved_host_memory_mb = 1024\nreserved_host_disk_mb = 2048\nreserved_host_cpus = 1\n"
        f"[compute]\nprovider_config_location = {tmp_path}/provider_config\n"
        # Off: Placement's reserved is the configured amounts alone, without
        # the demo host's guests that have no claim.
        "[rtagent]\nreserve_untracked_usage = false\n",
        "Configuration reloaded",
    )
    wait_until(
        lambda: inventories()["VCPU"]["allocation_ratio"] == 20.0, 15, "the new ratio in Placement"
    )
    invs = inventories()
    assert invs["MEMORY_MB"]["reserved"] == 1024 and invs["VCPU"]["reserved"] == 1
    assert invs["DISK_GB"]["allocation_ratio"] == 2.0
    logs = agent.logs()
    assert IMMUTABLE not in logs, [line for line in logs.splitlines() if IMMUTABLE in line]
    # oslo.config says what changed instead.
    assert "Option DEFAULT.cpu_allocation_ratio changed from [16.0] to [20.0]" in logs

    # An option that needs a restart is still named as ignored.
    reload(agent, broker, placement, "[DEFAULT]\nhost = renamed\n", f"{IMMUTABLE} DEFAULT.host")


def test_a_rejected_configuration_is_reported_once(agent, broker, placement):
    agent.write_conf(broker, placement, "[DEFAULT]\ncpu_allocation_ratio = -1\n")
    agent.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "Configuration reload rejected" in agent.logs(), 15, "the rejection")
    time.sleep(2.5)  # two more ticks under the running configuration
    logs = agent.logs()
    rejected = [line for line in logs.splitlines() if "reload rejected" in line]
    assert len(rejected) == 1, rejected
    assert logs.count("Should be greater than or equal to 0") == 1, rejected
    assert rejected[0].endswith(
        "Configuration reload rejected, the running configuration is kept: "
        "[DEFAULT] cpu_allocation_ratio: invalid value: Should be greater than or equal to 0"
    ), rejected
    assert agent.proc.poll() is None
