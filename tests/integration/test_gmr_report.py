"""SIGUSR2's Guru Meditation Report from a real ``rtagent run`` (real
RabbitMQ, a real Placement process): rtagent's own configuration with
secrets masked, and no empty green-thread section."""

import signal

import pytest

from tests.integration.test_daemon import Agent, wait_until

pytestmark = pytest.mark.integration


def section(report, title):
    """The text of the report's section ``title`` (up to the next one)."""
    found = [i for i, line in enumerate(report) if line.startswith("====") and title in line]
    assert found, f"no {title} section"
    start = found[0] + 2
    end = next((i for i in range(start, len(report)) if report[i].startswith("=====")), None)
    return report[start:end]


def test_the_report_shows_rtagents_configuration_masked(tmp_path, broker, placement):
    agent = Agent(tmp_path, broker, placement, "[rtagent]\nheal_max_consumers = 77\n")
    agent.start()
    try:
        agent.proc.send_signal(signal.SIGUSR2)
        # rtagent's own group, last in the sorted configuration section.
        wait_until(lambda: "sync_retry_delay = " in agent.logs(), 15, "the configuration")
        assert agent.proc.poll() is None
    finally:
        agent.stop()
        agent.notify.close()
    logs = agent.logs()
    report = logs[logs.index("Guru Meditation") :].splitlines()

    titles = [line.strip("= ") for line in report if line.startswith("====  ")]
    # No "Green Threads": rtagent runs OS threads, never an eventlet hub.
    assert titles == ["Package", "Threads", "Processes", "Configuration"], titles
    conf = "\n".join(section(report, "Configuration"))
    for shown in (
        "rtagent: \n  audit_interval = 1\n",
        "  heal_max_consumers = 77\n",
        f"health: \n  bind_address = 127.0.0.1\n  enabled = True\n  port = {agent.port}\n",
        "  cpu_allocation_ratio = 16.0\n",
        "  connection_uri = test://",
        "  command = run\n",
    ):
        assert shown in conf, shown
    # Secrets: the broker's credentials and Placement's token.
    assert "  transport_url = ***\n" in conf
    assert "  token = ***\n" in conf
    assert broker.transport_url not in logs
    assert "token = admin" not in conf
