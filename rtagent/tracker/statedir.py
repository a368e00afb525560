"""The state directory, opened once and held open, and the only way to its files.

The agent runs as root. A link planted in its state directory would make it
truncate or overwrite a file of the planter's choosing, so the directory
must belong to the agent's user with no group or other write, and every
file in it is opened relative to the directory's descriptor, never through a
symlink, and only if it is a regular file.
"""

import contextlib
import errno
import os
import pwd
import stat

from rtagent.tracker import errors

_MAX_READ = 4096  # a UUID and a newline; never read a planted giant whole
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class StateDir:
    """The state directory, opened once and held open.

    It is created 0700 if it is missing. An existing one keeps its mode (it
    may be shared: nova's state directory holds instances that qemu must
    traverse), but it must belong to this process's effective user and be
    writable by nobody else: whoever can write it can plant names in it.
    ``path`` itself may be a symlink (to such a directory); the checks are
    made on the directory opened.

    :raises StateError: it cannot be created or opened, is not a directory,
        or is owned or writable by another user; the reason names the fix.
    """

    def __init__(self, path):
        self.path = path
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise errors.StateError(path=path, reason=exc.strerror or str(exc)) from exc
        try:
            self._check(os.fstat(self.fd))
        except BaseException:
            self.close()
            raise

    def _check(self, st):
        euid = os.geteuid()
        if st.st_uid != euid:
            me = _user(euid)
            raise errors.StateError(
                path=self.path,
                reason=f"is owned by uid {st.st_uid}, not by {me} that rtagent runs as; "
                f"its owner could make rtagent overwrite any file. Run `chown {me} "
                f"{self.path}` (after checking what is in it), or use another state_path",
            )
        if st.st_mode & 0o022:
            who = "world-writable" if st.st_mode & 0o002 else "group-writable"
            raise errors.StateError(
                path=self.path,
                reason=f"is {who} (mode {stat.S_IMODE(st.st_mode):04o}); anyone who can "
                f"write it could make rtagent overwrite any file. Run `chmod go-w {self.path}`",
            )

    def join(self, name):
        """The path of ``name`` in this directory (for messages)."""
        return os.path.join(self.path, name)

    def exists(self, name):
        """Whether ``name`` exists (a dangling link counts)."""
        return self._lstat(name) is not None

    def check_names(self, names):
        """Refuse if any of ``names`` is a symlink or not a regular file:
        checked before a library that opens them by path (SQLite) does.

        :raises StateError: naming the first such path and the fix.
        """
        for name in names:
            st = self._lstat(name)
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise self._refusal(name, st)

    def open(self, name, flags, mode=0o600):
        """An fd of regular file ``name`` (created ``mode`` with O_CREAT).
        Never through a symlink; a FIFO or device is not opened for I/O.

        :raises StateError: ``name`` is a symlink or not a regular file.
        :raises OSError: the open failed otherwise (FileNotFoundError too).
        """
        # O_NONBLOCK: a FIFO's open would wait for a writer; no effect on files.
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(name, flags, mode, dir_fd=self.fd)
        except OSError as exc:
            # ELOOP: it was a link when opened (even if it is not one now).
            st = self._lstat(name) if exc.errno != errno.ELOOP else None
            if exc.errno == errno.ELOOP or (st is not None and not stat.S_ISREG(st.st_mode)):
                raise self._refusal(name, st) from exc
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise self._refusal(name, st)
        return fd

    def read(self, name, limit=_MAX_READ):
        """Up to ``limit`` bytes of ``name``; None if it does not exist.

        :raises StateError: it is a symlink or not a regular file.
        :raises OSError: it cannot be read.
        """
        try:
            fd = self.open(name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def write_atomically(self, name, text):
        """Replace ``name`` with ``text``, durably: a crash leaves the old
        file or the new one. Written 0600 to ``name.tmp`` (a leftover one is
        removed, never followed), then renamed over ``name``.

        :raises StateError: ``name.tmp`` is not a regular file.
        :raises OSError: the write failed.
        """
        tmp = name + ".tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=self.fd)  # unlink never follows a link
        fd = self.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        try:
            os.write(fd, text.encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        os.fsync(self.fd)

    def close(self):
        """Close the directory's descriptor. Idempotent."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _lstat(self, name):
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _refusal(self, name, st):
        path = self.join(name)
        if st is None or stat.S_ISLNK(st.st_mode):
            try:
                target = f" (to {os.readlink(name, dir_fd=self.fd)[:200]!r})"
            except OSError:  # swapped back already
                target = ""
            reason = (
                f"is a symbolic link{target}; rtagent never follows links in its state "
                f"directory. Find out who planted it, then remove it (`rm {path}`)"
            )
        else:
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a file")
            reason = (
                f"is {kind}, not a regular file; rtagent does not open it. Find out who "
                "created it, then remove it"
            )
        return errors.StateError(path=path, reason=reason)


def _user(uid):
    """``uid``'s name for a command line (the number if it has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
