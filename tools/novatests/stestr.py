# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""stestr runs of nova's functional tests, watched as they go.

The subunit stream is read while it is written, so a run stopped at its
wall-clock limit still reports every test that ended. A test that started
and has not ended after the hang limit is stopped, named ``hung`` and the
tests not finished yet go on in a new stestr process: one hang costs
minutes, not the rest of the suite.
"""

import io
import os
import signal
import subprocess
import sys
import time

POLL = 5


class Result:
    """One test's end: ``status`` (success, fail, skip, hung, not run), the
    failure's ``text`` and the ``seconds`` it took."""

    def __init__(self, status, text="", seconds=0.0):
        self.status, self.text, self.seconds = status, text, seconds

    def __repr__(self):
        return f"Result({self.status!r}, {self.seconds:.1f}s)"


def purelib(python):
    """The site-packages directory of the interpreter ``python``."""
    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def prepare(workdir, python=sys.executable):
    """An stestr directory whose tests are nova's installed functional tests."""
    os.makedirs(workdir, exist_ok=True)
    site = purelib(python)
    with open(os.path.join(workdir, ".stestr.conf"), "w") as f:
        f.write(f"[DEFAULT]\ntest_path={site}/nova/tests/functional\ntop_dir={site}\n")
    if not os.path.isdir(os.path.join(workdir, ".stestr")):
        subprocess.run(
            [python, "-m", "stestr", "init"], cwd=workdir, check=True, capture_output=True
        )


def list_ids(workdir, regex, python=sys.executable):
    """Every test id of nova's functional tree that ``regex`` selects."""
    out = subprocess.run(
        [python, "-m", "stestr", "list", regex],
        cwd=workdir,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sorted(line.strip() for line in out.splitlines() if line.startswith("nova.tests."))


class Runner:
    """Runs given test ids with ``env`` in ``workdir``.

    :param hang_limit: seconds after which a test that has not ended is hung.
    :param python: the interpreter of the nova virtualenv.
    """

    def __init__(self, workdir, env, label, hang_limit, python=sys.executable):
        self.workdir, self.env, self.label = workdir, env, label
        self.hang_limit, self.python = hang_limit, python
        self.stream_path = os.path.join(workdir, f"{label}.subunit")

    def run(self, ids, concurrency, wall):
        """{test id: :class:`Result`} for ``ids`` within ``wall`` seconds."""
        deadline = time.monotonic() + wall
        found = {}
        left = sorted(ids)
        while left:
            part, hung = self._one(left, concurrency, deadline)
            for test in hung:
                print(
                    f"{self.label}: hung {test} (stopped after {self.hang_limit:.0f} s)", flush=True
                )
                part[test] = Result("hung", f"hung: no end after {self.hang_limit:.0f} s")
            found.update(part)
            left = sorted(t for t in left if t not in found)
            if not hung or time.monotonic() >= deadline:
                break
        for test in ids:
            found.setdefault(test, Result("not run", "not run: the run ended before it"))
        return {t: found[t] for t in ids}

    def _one(self, ids, concurrency, deadline):
        """({test id: Result} of the tests that ended, [hung test ids])."""
        load_list = os.path.join(self.workdir, f"{self.label}.list")
        with open(load_list, "w") as f:
            f.write("".join(f"{test}\n" for test in ids))
        started, hung = {}, []
        command = [self.python, "-m", "stestr", "run", "--subunit", "--load-list", load_list]
        with open(self.stream_path, "wb") as out:
            proc = subprocess.Popen(
                [*command, "--concurrency", str(concurrency)],
                cwd=self.workdir,
                env=self.env,
                stdout=out,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                while True:
                    try:
                        proc.wait(timeout=POLL)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    now = time.monotonic()
                    running = self._running()
                    started = {t: started.get(t, now) for t in running}
                    if now >= deadline:
                        print(f"{self.label}: stopped after its wall-clock limit", flush=True)
                        hung = running
                    else:
                        hung = [t for t, t0 in started.items() if now - t0 > self.hang_limit]
                    if hung:
                        break
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        ended = {t: r for t, r in self._read().items() if r.status not in ("exists", "inprogress")}
        return {t: r for t, r in ended.items() if t in set(ids)}, hung

    def _running(self):
        return [t for t, r in self._read().items() if r.status == "inprogress"]

    def _read(self):
        with open(self.stream_path, "rb") as f:
            return results(f.read())


def results(stream):
    """{test id: :class:`Result`} from a subunit v2 stream (a cut one too)."""
    import subunit
    import testtools

    found = {}

    def record(test):
        if test["id"] == "subunit.parser":
            return
        status = {"success": "success", "skip": "skip", "xfail": "success"}.get(
            test["status"], test["status"]
        )
        if status in ("fail", "uxsuccess"):
            status = "fail"
        text = ""
        if status == "fail":
            text = "\n".join(
                content.as_text()
                for name, content in sorted(test["details"].items())
                if name in ("traceback", "reason")
            )
        stamps = [t for t in test.get("timestamps", ()) if t is not None]
        seconds = (stamps[-1] - stamps[0]).total_seconds() if len(stamps) == 2 else 0.0
        found[test["id"]] = Result(status, text, seconds)

    result = testtools.StreamToDict(record)
    result.startTestRun()
    subunit.ByteStreamToStreamResult(io.BytesIO(stream)).run(result)
    result.stopTestRun()
    return found
