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
import re
import signal
import subprocess
import sys
import time

import subunit
import testtools

POLL = 5


class Result:
    """One test's end: ``status`` (success, fail, skip, hung, not run), the
    failure's or the skip's ``text``, the ``seconds`` it took and, for a test
    with scenarios, the ``scenarios`` it ran (each a run of its own)."""

    def __init__(self, status, text="", seconds=0.0, scenarios=()):
        self.status, self.text, self.seconds = status, text, seconds
        self.scenarios = tuple(scenarios)

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


def prepare(workdir, python=sys.executable, tests=None):
    """An stestr directory whose tests are nova's installed functional tests.

    :param tests: (test_path, top_dir) of other tests.
    """
    os.makedirs(workdir, exist_ok=True)
    if tests is None:
        site = purelib(python)
        tests = (f"{site}/nova/tests/functional", site)
    with open(os.path.join(workdir, ".stestr.conf"), "w") as f:
        f.write(f"[DEFAULT]\ntest_path={tests[0]}\ntop_dir={tests[1]}\n")
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


def share(ids, workers, seconds):
    """``ids`` in ``workers`` lists whose expected times are about equal.

    Longest first, each test goes to the list with the least time so far;
    a test ``seconds`` does not know counts as the mean of those it does.
    Each list is in id order, as stestr would run it.
    """
    known = [seconds[t] for t in ids if t in seconds]
    default = sum(known) / len(known) if known else 1.0
    parts = [[0.0, []] for _ in range(max(1, workers))]
    for test in sorted(ids, key=lambda t: (-seconds.get(t, default), t)):
        least = min(parts, key=lambda part: part[0])
        least[0] += seconds.get(test, default)
        least[1].append(test)
    return [sorted(tests) for _, tests in parts if tests]


class Runner:
    """Runs given test ids with ``env``, each worker an stestr process of its
    own in a directory of its own under ``workdir``.

    stestr's own workers share out tests it has no times for by count, and
    one run's workers stop together: in nova's suites one worker finished
    2 minutes before the other, and a hang in one cost the other its test
    in progress. Here the tests are shared by the record's times, and a
    hang restarts only its own worker.

    :param hang_limit: seconds after which a test that has not ended is hung.
    :param python: the interpreter of the nova virtualenv.
    :param tests: (test_path, top_dir) of tests other than nova's.
    """

    def __init__(self, workdir, env, label, hang_limit, *, python=sys.executable, tests=None):
        self.workdir, self.env, self.label = workdir, env, label
        self.hang_limit, self.python, self.tests = hang_limit, python, tests

    def run(self, ids, concurrency, wall, seconds=None):
        """{test id: :class:`Result`} for ``ids`` within ``wall`` seconds.

        :param seconds: {test id: expected seconds}, to share the tests out.
        """
        deadline = time.monotonic() + wall
        found, workers = {}, []
        try:
            for index, part in enumerate(share(ids, concurrency, seconds or {})):
                workers.append(_Worker(self, index, part))
            while any(w.busy for w in workers):
                time.sleep(POLL)
                now = time.monotonic()
                if now >= deadline:
                    print(f"{self.label}: stopped after its wall-clock limit", flush=True)
                for worker in workers:
                    worker.check(now, stop=now >= deadline)
        finally:
            for worker in workers:
                worker.kill()
                found.update(worker.found)
        for test in ids:
            found.setdefault(test, Result("not run", "not run: the run ended before it"))
        return {t: found[t] for t in ids}


class _Worker:
    """One worker's tests, run by one stestr process at a time: a hang stops
    it, and the tests it had not ended go on in a new one."""

    def __init__(self, runner, index, ids):
        self.runner, self.todo, self.found = runner, list(ids), {}
        self.name = f"{runner.label}-{index}"
        self.workdir = os.path.join(runner.workdir, self.name)
        self.stream_path = os.path.join(self.workdir, "run.subunit")
        self.proc = self.watch = self._out = None
        self.started = {}
        prepare(self.workdir, runner.python, runner.tests)
        self._start()

    @property
    def busy(self):
        return self.proc is not None

    def _start(self):
        load_list = os.path.join(self.workdir, "run.list")
        with open(load_list, "w") as f:
            f.write("".join(f"{test}\n" for test in self.todo))
        self._out = open(self.stream_path, "wb")  # closed by _end
        self.watch = Watch(self.stream_path)
        command = [self.runner.python, "-m", "stestr", "run", "--subunit"]
        self.proc = subprocess.Popen(
            [*command, "--load-list", load_list, "--concurrency", "1"],
            cwd=self.workdir,
            env=self.runner.env,
            stdout=self._out,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.started = {}

    def check(self, now, stop=False):
        """Reads what the worker's stream says; stops a hung test's process
        (all of them when ``stop``) and starts the rest again."""
        if self.proc is None:
            return
        exited = self.proc.poll() is not None
        self.watch.poll()
        self.started = {t: self.started.get(t, now) for t in self.watch.running}
        if exited:
            self._end()
            return
        limit = self.runner.hang_limit
        hung = sorted(t for t, t0 in self.started.items() if stop or now - t0 > limit)
        if not hung and not stop:
            return
        self._end()
        for test in hung:
            if not stop:
                print(f"{self.runner.label}: hung {test} (stopped after {limit:.0f} s)", flush=True)
            self.found[test] = Result("hung", f"hung: no end after {limit:.0f} s")
        self.todo = [t for t in self.todo if t not in self.found]
        if self.todo and not stop:
            self._start()

    def kill(self):
        if self.proc is not None:
            self._end()

    def _end(self):
        """Ends the process (killed if it still runs) and keeps what ended."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.watch.poll()
        wanted = set(self.todo)
        self.found.update((t, r) for t, r in self.watch.ended.items() if t in wanted)
        self.watch.close()
        self._out.close()
        self.proc = self.watch = self._out = None


# A test's last status in a stream: these end it; "inprogress" starts it.
_ENDS = {
    "success": "success",
    "xfail": "success",
    "skip": "skip",
    "fail": "fail",
    "uxsuccess": "fail",
}
# A run of one scenario of a listed test: testscenarios' WithScenarios (nova's
# api_sample_tests) multiplies a test when it runs, so ``stestr list`` names
# ``...test_x`` and the stream ``...test_x(v2_28)``.
_SCENARIO = re.compile(r"^(?P<listed>[^()]+)\((?P<scenario>[^()]+)\)$")


def listed_id(test_id):
    """(the id ``stestr list`` names, the scenario's name or None)."""
    match = _SCENARIO.match(test_id)
    return (match.group("listed"), match.group("scenario")) if match else (test_id, None)


def merged(runs):
    """One :class:`Result` of a listed test from {scenario: Result}: it
    fails if any scenario failed (each failure's text after its scenario's
    name), passes if the others passed, and is skipped if all were."""
    names = sorted(runs)
    statuses = [runs[n].status for n in names]
    seconds = sum(runs[n].seconds for n in names)
    if "fail" in statuses:
        status = "fail"
        text = "\n".join(f"{n}: {runs[n].text}" for n in names if runs[n].status == "fail")
    elif "success" in statuses:
        status, text = "success", ""
    else:
        status, text = "skip", runs[names[0]].text
    return Result(status, text, seconds, names)


# The attachments of a failed test its outcome quotes; the others (each
# test's captured log, tens of kB) are not kept.
_QUOTED = ("reason", "traceback")
_SIGNATURE = 0xB3
# Signature, flags, a one-byte length and the CRC32: no packet is shorter.
_SHORTEST = 8


def complete(data):
    """The length of the whole subunit v2 packets at the start of ``data``.

    A packet is its signature byte, two bytes of flags, then its whole
    length as a variable-length number of 1 to 3 bytes (the top two bits of
    the first byte say how many). Bytes that do not start a packet are
    passed over (the parser files them as output of no test).
    """
    end, size = 0, len(data)
    while end < size:
        if data[end] != _SIGNATURE:
            end += 1
            continue
        if size - end < 4:
            break
        extra = data[end + 3] >> 6
        length = data[end + 3] & 0x3F
        if size - end < 4 + extra:
            break
        for byte in data[end + 4 : end + 4 + extra]:
            length = (length << 8) | byte
        if length < _SHORTEST:  # not a packet: a stray signature byte
            end += 1
            continue
        if size - end < length:
            break
        end += length
    return end


class _Tally(testtools.StreamResult):
    """Each test's state as a stream's events arrive: ``running`` (started,
    not ended) and ``ended`` ({test id: Result}), by the ids ``stestr list``
    names: the runs of a test's scenarios are that test's."""

    def __init__(self):
        super().__init__()
        self.running, self.ended = set(), {}
        self._first, self._quoted, self._scenarios = {}, {}, {}

    def status(self, test_id=None, test_status=None, file_name=None, file_bytes=None, **kwargs):
        if test_id is None or test_id == "subunit.parser":
            return
        stamp = kwargs.get("timestamp")
        if test_status in ("exists", "inprogress"):
            # A listing ("exists") or a start: what came before is not this
            # run of the test.
            self.running.discard(listed_id(test_id)[0])
            self._first.pop(test_id, None)
            self._quoted.pop(test_id, None)
        if stamp is not None:
            self._first.setdefault(test_id, stamp)
        if file_name in _QUOTED and file_bytes:
            quoted = self._quoted.setdefault(test_id, {})
            quoted[file_name] = quoted.get(file_name, b"") + file_bytes
        if test_status == "inprogress":
            self.running.add(listed_id(test_id)[0])
        elif test_status in _ENDS:
            self._end(test_id, _ENDS[test_status], stamp)

    def _end(self, test_id, status, stamp):
        listed, scenario = listed_id(test_id)
        self.running.discard(listed)
        first = self._first.pop(test_id, None)
        quoted = self._quoted.pop(test_id, {})
        text = ""
        # A skip's reason is kept too: the whole-tree record says why stock
        # nova skips a test.
        if status in ("fail", "skip"):
            text = "\n".join(quoted[name].decode("utf-8", "replace") for name in sorted(quoted))
        seconds = (stamp - first).total_seconds() if first and stamp else 0.0
        if scenario is None:
            self.ended[test_id] = Result(status, text, seconds)
            return
        runs = self._scenarios.setdefault(listed, {})
        runs[scenario] = Result(status, text, seconds)
        self.ended[listed] = merged(runs)


class Watch:
    """What a subunit v2 stream that is still being written has said so far.

    Each :meth:`poll` parses only the bytes written since the last one, so
    watching a run costs its stream's size once, not once per poll (a run
    of nova's suites writes about 15 MB: every test's log is attached). A
    packet cut by the end of what is written waits for its rest; one cut by
    a killed run is never counted.
    """

    def __init__(self, path):
        self._file = open(path, "rb")  # closed by close()
        self._pending = b""
        self._tally = _Tally()
        self._tally.startTestRun()

    @property
    def running(self):
        """The ids of the tests that have started and not ended."""
        return set(self._tally.running)

    @property
    def ended(self):
        """{test id: :class:`Result`} of every test that has ended."""
        return dict(self._tally.ended)

    def poll(self):
        data = self._pending + self._file.read()
        end = complete(data)
        self._pending = data[end:]
        if end:
            parser = subunit.ByteStreamToStreamResult(io.BytesIO(data[:end]), "stdout")
            parser.run(self._tally)

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
