"""What signal handlers (and other threads) ask of the main thread.

A handler that took a lock or logged could interrupt the main thread while
it held that same lock, and deadlock it (3,000 SIGHUPs did). So a request
is a plain attribute written without a lock plus one byte written to a
pipe, the same pipe ``signal.set_wakeup_fd`` writes to; the main thread
waits on that pipe with ``select`` and acts on what it finds, in ordinary
code.
"""

import dataclasses
import os
import select


@dataclasses.dataclass(frozen=True)
class Requests:
    """What was asked since the last :meth:`Wakeup.wait`.

    :param stop: the signal number that asked to stop (0 if not a signal),
        or None; once asked, a stop stays asked.
    :param reload: reload the configuration (SIGHUP).
    :param report: write the diagnostic report (SIGUSR2).
    """

    stop: int | None = None
    reload: bool = False
    report: bool = False


class Wakeup:
    """A self-pipe and the requests it wakes the main thread for.

    The ``request_*`` methods and :meth:`poke` are safe in a signal handler
    and from any thread: they write an attribute and a byte, nothing else.
    :meth:`wait` is for the main thread only.
    """

    def __init__(self):
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        self._stop = None
        self._reload = False
        self._report = False

    @property
    def fd(self):
        """The write end, for ``signal.set_wakeup_fd``."""
        return self._write

    def request_stop(self, signum=0):
        self._stop = signum
        self.poke()

    def request_reload(self):
        self._reload = True
        self.poke()

    def request_report(self):
        self._report = True
        self.poke()

    def poke(self):
        """Wake the main thread (a thread it waits for has finished, say)."""
        fd = self._write
        if fd is None:
            return
        try:
            os.write(fd, b"\0")
        except OSError:
            pass  # full: wake-ups are pending anyway; or closed

    def wait(self, seconds):
        """Block until poked or ``seconds`` pass; :returns: the
        :class:`Requests` made meanwhile (reload and report are taken)."""
        if seconds > 0 and self._read is not None:
            select.select([self._read], [], [], seconds)
        try:
            while os.read(self._read, 4096):
                pass
        except (BlockingIOError, TypeError):
            pass  # empty (or closed)
        taken = Requests(stop=self._stop, reload=self._reload, report=self._report)
        # Several requests of one kind before they are taken are one (a
        # second reload adds nothing to the first).
        if taken.reload:
            self._reload = False
        if taken.report:
            self._report = False
        return taken

    def close(self):
        """Close the pipe (after the signal handlers are restored)."""
        fds, self._read, self._write = (self._read, self._write), None, None
        for fd in fds:
            if fd is not None:
                os.close(fd)
