"""make test-nova's stestr runs (tools/novatests/stestr.py):

- each worker's subunit stream is watched while it is written (``Watch``):
  what it reports after each piece equals what subunit's own parser makes
  of the whole stream so far, and each byte is parsed once however often it
  polls (a run of nova's suites writes about 15 MB, and a poll every 5 s
  that parsed it all again took up to 2 s of CPU by the end of the run);
- the tests are shared among the workers by the record's times (``share``);
- a hang stops and restarts only its own worker's stestr process (real
  stestr runs of a small suite written here).

Run by ``make test-nova`` in .venv-nova, which has stestr and subunit.
"""

import datetime
import io
import json
import os
import textwrap

import subunit
import testtools

from tools.novatests import stestr

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
LOG = b"x" * 70_000  # a test's captured log: several packets


def at(seconds):
    return T0 + datetime.timedelta(seconds=seconds)


def stream():
    """A two-worker run's stream: its tests listed, then a passes, b fails,
    c is still running; a worker's stdout and a stray non-subunit line
    between packets."""
    out = io.BytesIO()
    emit = subunit.StreamResultToBytes(out)
    for test in "abc":  # each worker lists its tests first
        emit.status(test_id=test, test_status="exists", timestamp=at(-60))
    emit.status(test_id="a", test_status="inprogress", timestamp=at(0))
    emit.status(test_id="b", test_status="inprogress", timestamp=at(1))
    emit.status(file_name="stdout", file_bytes=b"worker output\n", timestamp=at(1))
    for start in range(0, len(LOG), 20_000):
        emit.status(
            test_id="a",
            file_name="pythonlogging:''",
            file_bytes=LOG[start : start + 20_000],
            timestamp=at(2),
        )
    emit.status(test_id="a", test_status="success", timestamp=at(3.5))
    out.write(b"not a packet\n")
    emit.status(test_id="c", test_status="inprogress", timestamp=at(4))
    emit.status(test_id="b", file_name="traceback", file_bytes=b"Traceback: boom", timestamp=at(5))
    emit.status(test_id="b", file_name="pythonlogging:''", file_bytes=LOG, timestamp=at(5))
    emit.status(test_id="b", test_status="fail", timestamp=at(6))
    return out.getvalue()


def reference(data):
    """(running, {id: (status, seconds)}) by testtools' own StreamToDict over
    the whole of ``data``."""
    tests = {}

    def on_test(test):
        tests[test["id"]] = test

    result = testtools.StreamToDict(on_test)
    result.startTestRun()
    subunit.ByteStreamToStreamResult(io.BytesIO(data), "stdout").run(result)
    result.stopTestRun()
    running = {t for t, d in tests.items() if d["status"] == "inprogress"}
    ended = {}
    for t, d in tests.items():
        if d["status"] in ("success", "fail"):
            first, last = d["timestamps"]
            ended[t] = (d["status"], (last - first).total_seconds())
    return running, ended


def test_each_piece_reads_as_the_whole_stream_so_far(tmp_path):
    data = stream()
    path = tmp_path / "run.subunit"
    path.write_bytes(b"")
    ends = [*range(0, len(data), 7_777), len(data)]
    # The pieces cut packets: some polls leave bytes waiting for their rest.
    assert any(stestr.complete(data[:end]) < end for end in ends)
    with open(path, "ab") as out, stestr.Watch(str(path)) as watch:
        for end in ends:
            out.write(data[out.tell() : end])
            out.flush()
            watch.poll()
            running, ended = reference(data[: stestr.complete(data[:end])])
            assert watch.running == running
            assert {t: (r.status, r.seconds) for t, r in watch.ended.items()} == ended
    assert watch.running == {"c"}
    assert watch.ended["b"].text == "Traceback: boom"
    assert watch.ended["a"].text == ""
    assert watch.ended["a"].seconds == 3.5


def test_each_byte_is_parsed_once(tmp_path, monkeypatch):
    parsed = []
    real = subunit.ByteStreamToStreamResult

    def counting(source, *args, **kwargs):
        parsed.append(len(source.getvalue()))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(stestr.subunit, "ByteStreamToStreamResult", counting)
    data = stream()
    path = tmp_path / "run.subunit"
    path.write_bytes(b"")
    with open(path, "ab") as out, stestr.Watch(str(path)) as watch:
        for end in [*range(0, len(data), 5_000), len(data)]:
            out.write(data[out.tell() : end])
            out.flush()
            watch.poll()
            watch.poll()  # nothing new: nothing parsed
    assert sum(parsed) <= len(data)
    assert sum(parsed) > len(data) - 100  # only the stray line passed over
    assert watch.running == {"c"} and set(watch.ended) == {"a", "b"}


def test_a_packet_cut_by_a_killed_run_is_not_counted(tmp_path):
    data = stream()
    cut = data[: len(data) - 3]  # b's final status, torn
    path = tmp_path / "run.subunit"
    path.write_bytes(cut)
    with stestr.Watch(str(path)) as watch:
        watch.poll()
    assert "b" not in watch.ended
    assert watch.running == {"b", "c"}


def test_the_tests_are_shared_by_their_times():
    seconds = {"a": 10.0, "b": 6.0, "c": 5.0, "d": 4.0, "e": 3.0}
    parts = stestr.share(sorted(seconds), 2, seconds)
    totals = sorted(sum(seconds[t] for t in part) for part in parts)
    assert totals == [14.0, 14.0]
    assert all(part == sorted(part) for part in parts)
    # A test without a time counts as the mean of the others; every test is
    # in exactly one list, and no list is empty.
    parts = stestr.share(["a", "b", "new"], 2, {"a": 4.0, "b": 2.0})
    assert sorted(map(tuple, parts)) == [("a",), ("b", "new")]
    assert stestr.share(["a"], 3, {}) == [["a"]]


SUITE = """
import json, os, time, unittest

class T(unittest.TestCase):
    def _mark(self):
        with open(os.environ["MARKS"], "a") as f:
            f.write(json.dumps([self.id().rsplit(".", 1)[1], os.getpid()]) + "\\n")

    def test_1(self):
        self._mark()
        time.sleep(2.5)

    def test_2_hangs(self):
        self._mark()
        time.sleep(600)

    def test_3_slow(self):
        self._mark()
        time.sleep(2.5)

    def test_4(self):
        self._mark()

    def test_5_fails(self):
        self._mark()
        time.sleep(2.5)
        self.fail("boom")
"""


def _suite(tmp_path):
    suite = tmp_path / "suite"
    (suite / "fake").mkdir(parents=True)
    (suite / "fake" / "__init__.py").write_text("")
    (suite / "fake" / "test_t.py").write_text(textwrap.dedent(SUITE))
    return suite


def test_the_wall_clock_limit_stops_a_worker_between_tests(tmp_path):
    # Checked at once after its start, the worker has no test in progress:
    # the limit must stop it all the same, not let it run on to its next.
    suite = _suite(tmp_path)
    env = dict(os.environ, MARKS=str(tmp_path / "marks"))
    runner = stestr.Runner(str(tmp_path / "work"), env, "t", 60.0, tests=(str(suite), str(suite)))
    worker = stestr._Worker(runner, 0, ["fake.test_t.T.test_1"])
    try:
        worker.check(0.0, stop=True)
        assert not worker.busy
    finally:
        worker.kill()


def test_a_hang_restarts_only_its_own_worker(tmp_path, monkeypatch):
    suite = _suite(tmp_path)
    marks = tmp_path / "marks"
    env = dict(os.environ, MARKS=str(marks))
    monkeypatch.setattr(stestr, "POLL", 0.5)
    ids = [f"fake.test_t.T.test_{n}" for n in ("1", "2_hangs", "3_slow", "4", "5_fails")]
    # Equal times: 1, 3, 5 on one worker (7.5 s), each shorter than the
    # hang limit; 2 (hangs) then 4 on the other, whose hang is found after
    # 4-5 s, while the first worker is still busy.
    runner = stestr.Runner(str(tmp_path / "work"), env, "t", 4.0, tests=(str(suite), str(suite)))
    found = runner.run(ids, 2, 120, dict.fromkeys(ids, 1.0))
    status = {t.rsplit(".", 1)[1]: r.status for t, r in found.items()}
    assert status == {
        "test_1": "success",
        "test_2_hangs": "hung",
        "test_3_slow": "success",
        "test_4": "success",
        "test_5_fails": "fail",
    }, found
    assert "boom" in found[ids[4]].text
    pids = {}
    for line in marks.read_text().splitlines():
        name, pid = json.loads(line)
        pids.setdefault(name, []).append(pid)
    # Each test ran once; the other worker, busy when the hang was found,
    # was not stopped: it ran all three in one process. The hung worker's
    # next test ran in a new one.
    assert all(len(p) == 1 for p in pids.values()), pids
    assert pids["test_1"] == pids["test_3_slow"] == pids["test_5_fails"]
    assert pids["test_4"] != pids["test_2_hangs"]


def test_a_stray_signature_byte_is_not_a_packet():
    data = stream()
    # 0xB3, two flag bytes, then a length of 0: no packet is that short.
    junk = bytes([0xB3, 0, 0, 0])
    assert stestr.complete(junk + data) == len(junk) + len(data)
    assert stestr.complete(junk) == len(junk)


SCENARIOS = """
import testscenarios, unittest

class S(testscenarios.WithScenarios, unittest.TestCase):
    scenarios = [("one", {"value": 1}), ("two", {"value": 2})]

    def test_both_pass(self):
        pass

    def test_two_fails(self):
        self.assertEqual(1, self.value, "scenario two fails")

    def test_both_skip(self):
        self.skipTest("not here")
"""


def test_a_test_s_scenarios_are_judged_as_the_test_stestr_lists(tmp_path):
    # nova's api_sample_tests run each listed id as one run per scenario,
    # each with the scenario in its id: a listed id must not read as never
    # run, and one failing scenario fails it.
    suite = tmp_path / "suite"
    (suite / "fake").mkdir(parents=True)
    (suite / "fake" / "__init__.py").write_text("")
    (suite / "fake" / "test_s.py").write_text(textwrap.dedent(SCENARIOS))
    ids = [f"fake.test_s.S.test_{n}" for n in ("both_pass", "two_fails", "both_skip")]
    runner = stestr.Runner(
        str(tmp_path / "work"), dict(os.environ), "s", 60.0, tests=(str(suite),) * 2
    )
    found = runner.run(ids, 1, 120)
    assert [found[t].status for t in ids] == ["success", "fail", "skip"], found
    assert all(found[t].scenarios == ("one", "two") for t in ids)
    assert found[ids[1]].text.startswith("two: ") and "scenario two fails" in found[ids[1]].text
    assert "not here" in found[ids[2]].text


def test_a_plain_id_is_its_own_listed_id():
    assert stestr.listed_id("a.B.test_c") == ("a.B.test_c", None)
    assert stestr.listed_id("a.B.test_c(v2_28)") == ("a.B.test_c", "v2_28")
