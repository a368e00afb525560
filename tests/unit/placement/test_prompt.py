"""The prompt sync's coalescing (rtagent.placement.prompt): requests made
while a sync runs are served by one more sync, named nodes are merged, a
request for every node wins, a failing sync does not stop the thread, and
stop ends it. The syncs are gated by events, so nothing here depends on how
fast the machine is."""

import threading

from rtagent.placement.prompt import PromptSync


class GatedSync:
    """A sync that records what it was asked and blocks until released."""

    def __init__(self, fail_first=False):
        self.calls = []
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self.fail_first = fail_first

    def __call__(self, nodes):
        self.calls.append(nodes)
        self.started.release()
        self.release.wait(10)
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("a bug in the sync")


def _idle(prompt):
    """Wait until the prompt has nothing pending and no sync running."""
    for _ in range(1000):
        if prompt.idle():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the prompt sync never went idle")


def test_a_burst_during_a_sync_costs_one_more_sync_with_every_node():
    sync = GatedSync()
    prompt = PromptSync(sync, gather=0, spacing=0)
    prompt.start()
    try:
        prompt.request("a")
        assert sync.started.acquire(timeout=10)
        for i in range(100):
            prompt.request(f"n{i % 3}")
        sync.release.set()
        assert sync.started.acquire(timeout=10)
        _idle(prompt)
        assert sync.calls == [frozenset({"a"}), frozenset({"n0", "n1", "n2"})]
        assert prompt.syncs == 2
    finally:
        sync.release.set()
        assert prompt.stop(timeout=10)


def test_a_request_for_every_node_wins_over_named_ones():
    seen = []
    prompt = PromptSync(seen.append)
    prompt.request("a")
    prompt.request()
    assert prompt.run_pending()
    assert seen == [None]
    assert not prompt.run_pending()  # nothing pending: no sync
    assert seen == [None]


def test_a_failing_sync_is_logged_and_the_next_request_still_syncs(caplog):
    sync = GatedSync(fail_first=True)
    sync.release.set()
    prompt = PromptSync(sync, gather=0, spacing=0)
    prompt.start()
    try:
        prompt.request("a")
        assert sync.started.acquire(timeout=10)
        _idle(prompt)
        prompt.request("b")
        assert sync.started.acquire(timeout=10)
        _idle(prompt)
    finally:
        assert prompt.stop(timeout=10)
    assert sync.calls == [frozenset({"a"}), frozenset({"b"})]
    assert prompt.failures == 1
    assert "Prompt sync failed unexpectedly" in caplog.text


def test_stop_ends_the_thread_while_waiting_out_the_spacing():
    seen = []
    prompt = PromptSync(seen.append, gather=0, spacing=3600)
    prompt.start()
    prompt.request("a")
    for _ in range(500):
        if seen:
            break
        threading.Event().wait(0.01)
    prompt.request("b")  # due an hour after the first: stop must not wait for it
    assert prompt.stop(timeout=10)
    assert seen == [frozenset({"a"})]
