"""Ports for the test services that are given theirs (rtagent.testing.ports).

Two ``make test`` runs side by side on one machine (issue 35): epmd was
given a port the kernel had just handed to one of the other run's
connections, exited, and seven tests of the broker's module errored.
"""

import os
import socket
import subprocess
import sys

import kombu

from rtagent.testing import ports, rabbitmq
from tests.requirements import require


def test_a_chosen_port_is_below_the_ephemeral_range_and_free():
    first, _ = ports.ephemeral_range()
    for _ in range(200):
        port = ports.free_port()
        assert ports.LOWEST <= port < first
        assert ports.is_free(port)


def test_a_pair_leaves_both_below_the_ephemeral_range():
    first, _ = ports.ephemeral_range()
    for _ in range(50):
        port = ports.free_port(offset=20000)
        assert port + 20000 < first
        assert ports.is_free(port) and ports.is_free(port + 20000)


def test_no_room_for_the_offset_is_a_typed_error():
    first, _ = ports.ephemeral_range()
    try:
        ports.free_port(offset=first)
    except ports.NoFreePort as e:
        assert "no room" in str(e)
    else:
        raise AssertionError("an offset past the range gave a port")


def test_listens_tells_whose_socket_it_is():
    with socket.socket() as mine:
        mine.bind(("127.0.0.1", 0))
        mine.listen()
        port = mine.getsockname()[1]
        assert ports.listens(os.getpid(), port)
        other = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
        )
        try:
            assert not ports.listens(other.pid, port)
        finally:
            other.communicate(b"")
    assert not ports.listens(os.getpid(), port)


def test_epmd_whose_port_was_taken_starts_on_another(monkeypatch):
    """The race made to happen: the first port given to epmd is taken."""
    require(rabbitmq.missing_requirements(), "RabbitMQ")
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", ports.free_port()))
        thief.listen()
        taken = thief.getsockname()[1]
        choices = iter([taken])
        choose = ports.free_port

        def first_taken(offset=0):
            if offset == 0:
                return next(choices, None) or choose()
            return choose(offset)

        monkeypatch.setattr(ports, "free_port", first_taken)
        with rabbitmq.RabbitMQ() as broker:
            assert broker.epmd_port != taken
            assert ports.listens(broker.epmd_pid, broker.epmd_port)
            with kombu.Connection(broker.transport_url.replace("rabbit:", "amqp:")) as conn:
                conn.ensure_connection(max_retries=3)
