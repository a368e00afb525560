"""RPCStarter: a server that connects after shutdown began stops itself.

The server here is a stand-in whose start() waits for the test: the real
broker cannot be made to connect at a chosen instant."""

import threading

from rtagent.rpc.starter import RPCStarter, scrub


class SlowServer:
    def __init__(self, release):
        self.release = release
        self.started = self.stopped = False

    def start(self):
        self.release.wait(10)
        self.started = True

    def stop(self):
        self.stopped = True


def test_a_server_connecting_after_abandon_stops_itself():
    release, servers, done = threading.Event(), [], threading.Event()
    starter = RPCStarter(
        lambda endpoint: servers.append(SlowServer(release)) or servers[-1], done.set
    )
    starter.begin(endpoint=None)
    assert starter.abandon() is None  # still connecting: nothing to hand over
    release.set()
    assert done.wait(10)
    assert servers[0].started and servers[0].stopped
    assert starter.server is None


def test_a_server_started_before_abandon_is_handed_over():
    release, done = threading.Event(), threading.Event()
    release.set()
    server = SlowServer(release)
    starter = RPCStarter(lambda endpoint: server, done.set)
    starter.begin(endpoint=None)
    assert done.wait(10)
    assert starter.abandon() is server and not server.stopped


def test_urls_lose_their_passwords():
    assert scrub("rabbit://u:secret@h:5672/,u2:pw2@h2/") == "rabbit://u:***@h:5672/,u2:***@h2/"


class Refused:
    def start(self):
        raise ConnectionRefusedError("amqp://u:secret@h:5672/ refused")

    def stop(self):
        pass


def test_failed_starts_are_retried_after_a_doubling_jittered_pause_up_to_the_cap(caplog):
    now, draws = [100.0], iter([0.0, 1.0, 0.5, 0.0, 1.0, 0.0])
    done = threading.Event()
    starter = RPCStarter(
        lambda endpoint: Refused(), done.set, rng=lambda: next(draws), clock=lambda: now[0]
    )
    schedule = []
    for _ in range(6):
        done.clear()
        starter.begin(endpoint=None)
        assert done.wait(10)
        starter.thread.join(10)
        assert starter.collect() is False
        schedule.append(starter.retry_in())
    # min(30, 2^(n-1)) x (0.5 + 0.5 x draw): half of the pause fixed, half drawn.
    assert schedule == [0.5, 2.0, 3.0, 4.0, 16.0, 15.0]
    now[0] += 15.0
    assert starter.retry_in() == 0.0
    state = starter.state()
    assert state["attempts"] == 6 and "secret" not in state["last_error"]
    # Logged once per cause, not once per attempt.
    assert [r.levelname for r in caplog.records if r.name == "rtagent.rpc.starter"] == ["ERROR"]
