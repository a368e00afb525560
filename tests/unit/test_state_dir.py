"""The state directory against a hostile host, on a real filesystem: a
directory another user owns or can write, and links (or other non-files)
planted under the names rtagent uses. The agent runs as root, so a link it
followed would let whoever planted it truncate or overwrite any file.

These tests run as root (as the agent does): ``os.chown`` makes the
directory another user's."""

import collections
import contextlib
import os
import threading
import time
import uuid

import pytest

from rtagent.tracker import errors, identity
from rtagent.tracker.model import VCPU, Flavor, Instance, frozen_map
from rtagent.tracker.store import Store

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")

# Every name the agent keeps in the state directory (SQLite's own included).
NAMES = (
    "rtagent.lock",
    "rtagent.sqlite",
    "rtagent.sqlite-wal",
    "rtagent.sqlite-shm",
    "rtagent.sqlite-journal",
    "compute_id",
    "compute_id.tmp",
    "rtagent.store_id",
    "rtagent.store_id.tmp",
)


class Victim:
    """A file outside the state directory that a planted link points at."""

    def __init__(self, path, content):
        self.path = path
        path.write_bytes(content)
        os.chmod(path, 0o644)
        self.before = self.state()

    def state(self):
        st = os.stat(self.path)
        return (self.path.read_bytes(), st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)

    def assert_untouched(self):
        assert self.state() == self.before, "the planted link's target was changed"


def with_store(state):
    """A directory that already held a store (a restart, not a first start)."""
    store = Store(str(state))
    node = identity.load_or_create(str(state), store)
    store.put_instance(node, Instance(str(uuid.uuid4()), Flavor(1, 64), frozen_map({VCPU: 1})))
    store.close()


def start(state):
    """Start as the agent does (store, then identity); the refusal's text,
    or None if it started. Any other exception propagates."""
    try:
        store = Store(str(state))
        try:
            identity.load_or_create(str(state), store)
        finally:
            store.close()
    except errors.StateError as exc:
        return str(exc)
    return None


def plant_link(state, name, target):
    path = state / name
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)
    return path


# -- the directory -------------------------------------------------------------


def test_a_state_dir_owned_by_another_user_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    with pytest.raises(errors.StateError) as caught:
        Store(str(state))
    message = str(caught.value)
    assert str(state) in message and f"uid {NOBODY}" in message
    assert f"chown root {state}" in message  # the fix
    assert "\n" not in message
    assert os.listdir(state) == [], "nothing may be created in it"


@pytest.mark.parametrize("mode, who", [(0o770, "group-writable"), (0o757, "world-writable")])
def test_a_state_dir_others_can_write_is_refused(tmp_path, mode, who):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, mode)
    with pytest.raises(errors.StateError) as caught:
        Store(str(state))
    message = str(caught.value)
    assert str(state) in message and who in message
    assert f"chmod go-w {state}" in message
    assert os.listdir(state) == []


def test_a_state_dir_others_can_read_but_not_write_is_kept(tmp_path):
    # nova's state directory may need to be traversable by qemu
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o751)
    Store(str(state)).close()
    assert os.stat(state).st_mode & 0o777 == 0o751


def test_a_state_path_that_is_a_link_to_a_private_dir_is_accepted(tmp_path):
    # what is checked is the directory opened, whatever path leads there
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, tmp_path / "state")
    Store(str(tmp_path / "state")).close()
    assert (real / "rtagent.sqlite").exists()


# -- links and non-files under the names rtagent uses --------------------------


@pytest.mark.parametrize("content", [b"precious\n", b""], ids=["full", "empty"])
@pytest.mark.parametrize("existing", [False, True], ids=["first-start", "restart"])
@pytest.mark.parametrize("name", NAMES)
def test_a_planted_link_is_refused_and_its_target_untouched(tmp_path, name, existing, content):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if existing:
        with_store(state)
    victim = Victim(tmp_path / "victim", content)
    link = plant_link(state, name, victim.path)
    try:
        message = start(state)
    finally:
        victim.assert_untouched()  # first: whatever else happened
    assert message is not None, "started over a planted link"
    assert f"{link}: is a symbolic link" in message
    assert "remove it" in message  # the fix
    assert "precious" not in message  # the target was never read either
    assert "\n" not in message
    assert os.path.islink(link), "the link is left for the operator to inspect"


def test_a_dangling_link_is_refused_and_never_created_through(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "would-be-created"
    plant_link(state, "rtagent.lock", target)
    with pytest.raises(errors.StateError, match="is a symbolic link"):
        Store(str(state))
    assert not os.path.lexists(target)


@pytest.mark.parametrize("name", ["compute_id", "rtagent.lock", "rtagent.sqlite"])
def test_a_fifo_under_a_known_name_is_refused(tmp_path, name):
    # opening a FIFO to read it would block the start for ever
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.mkfifo(state / name)
    message = start(state)
    assert message is not None and f"{name}: is a FIFO, not a regular file" in message


def test_a_directory_under_a_known_name_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "rtagent.sqlite-wal").mkdir()
    with pytest.raises(errors.StateError, match="sqlite-wal: is a directory, not a regular file"):
        Store(str(state))


def test_an_ordinary_restart_still_works(tmp_path):
    with_store(tmp_path)
    store = Store(str(tmp_path))
    node = identity.load_or_create(str(tmp_path), store)
    assert len(store.load_instances(node)) == 1
    store.close()


# -- a link swapped in while the agent opens its files -------------------------


@pytest.mark.parametrize("name", ["rtagent.sqlite", "rtagent.lock", "rtagent.sqlite-wal"])
def test_a_link_swapped_in_during_the_start_is_never_written_through(tmp_path, name):
    """Something with write access to the directory (which the checks above
    refuse, but it may be root's own mistake) swaps ``name`` between a link
    to the victim and a regular file while starts run. Every start either
    works on the regular file or is refused; the victim never changes.

    (The -wal case held before the checks too: SQLite opens it O_NOFOLLOW
    itself. It pins that, which Store._connect relies on.)"""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = Victim(tmp_path / "victim", b"")  # empty: SQLite would make it a database
    regular = tmp_path / "regular"
    regular.write_bytes(b"")
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            with contextlib.suppress(FileExistsError):
                os.symlink(victim.path, state / "new-link")
            os.replace(state / "new-link", state / name)
            with contextlib.suppress(FileExistsError):
                os.link(regular, state / "new-file")
            os.replace(state / "new-file", state / name)

    swapper = threading.Thread(target=swap)
    swapper.start()
    outcomes = collections.Counter()
    try:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                Store(str(state), accept_empty=True).close()
                outcomes["started"] += 1
            except errors.StateError as exc:
                outcomes[str(exc).split(": ", 2)[1]] += 1
    finally:
        stop.set()
        swapper.join()
    victim.assert_untouched()
    assert sum(outcomes.values()) > 20, outcomes
