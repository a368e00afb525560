"""The whole-tree record's pure parts (tools/novatests/parts.py, full.py,
stamp.py) and tools/nova_full.py's summary over kept files."""

import hashlib
import json
import os
import random
import subprocess
import sys

import pytest

from tools.novatests import full, parts, stamp, verdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
TOOL = os.path.join(ROOT, "tools", "nova_full.py")
F = "nova.tests.functional."
# A tree shaped like nova's: areas with different estimates.
TREE = sorted(
    [f"{F}libvirt.test_numa_servers.T.test_{i}" for i in range(40)]
    + [f"{F}api_sample_tests.test_keypairs.T.test_{i}" for i in range(90)]
    + [f"{F}regressions.test_bug_{i}.T.test_it" for i in range(25)]
    + [f"{F}test_images.T.test_{i}" for i in range(7)]
)
KEY = {"nova": "34.0.0", "python": "3.11", "constraints_sha256": "c0"}


@pytest.mark.parametrize("n", [1, 2, 3, 8, 13])
def test_the_split_covers_the_tree_once_and_is_balanced(n):
    split = parts.split(TREE, n)
    assert len(split) == n
    flat = [t for part in split for t in part]
    assert sorted(flat) == TREE  # every test, once
    loads = [sum(parts.estimate(t) for t in part) for part in split]
    # Within the heaviest single test's estimate of each other.
    assert max(loads) - min(loads) <= max(map(parts.estimate, TREE))
    assert all(part == sorted(part) for part in split)


def test_the_split_depends_on_the_ids_alone():
    shuffled = list(TREE) + TREE[:5]  # order and duplicates do not matter
    random.Random(4).shuffle(shuffled)
    assert parts.split(shuffled, 5) == parts.split(TREE, 5)


def test_estimates_follow_the_area():
    assert parts.estimate(f"{F}libvirt.test_pci_sriov_servers.T.test_a") == 5.0
    assert parts.estimate(f"{F}api_sample_tests.test_x.T.test_a") == 1.5
    assert parts.estimate(f"{F}test_images.T.test_a") == 3.0


@pytest.mark.parametrize("text", ["", "3", "0/4", "5/4", "a/b", "1/0", "-1/2", None])
def test_a_part_not_named_k_of_n_is_refused(text):
    with pytest.raises(parts.PartError, match="k/n"):
        parts.parse(text)


def test_a_part_named_k_of_n_is_read():
    assert parts.parse("3/8") == (3, 8) and parts.parse(" 1 / 1 ") == (1, 1)


def _part(k, n, code, outcomes, restricted=False, stock=None):
    share = parts.split(TREE, n)[k - 1]
    tests = {}
    for i, test in enumerate(share):
        status = (stock or {}).get(test, "success")
        if status in full.STOCK_PASSES:
            outcome = outcomes.get(test, verdict.PASSED)
            tests[test] = full.entry(status, 1.0 + i, "", outcome, "")
        else:
            tests[test] = full.entry(status, 0.1, f"{status}: why", None)
    if restricted:
        tests = dict(list(tests.items())[:2])
    return full.part(
        k, n, key=KEY, code=code, tree_ids=TREE, share=share, tests=tests, restricted=restricted
    )


CODE = {"commit": "a" * 40, "rtagent_tree": "t1", "rtagent_dirty": False}


def _summary(records, head="t1", constraints="c0", listed=(), n=3):
    return full.summarize(records, head, constraints, set(listed), n)


def test_the_summary_counts_each_outcome_of_the_tree():
    split = parts.split(TREE, 3)
    listed, flaky, skipped = split[0][0], split[1][0], split[2][0]
    records = [
        _part(1, 3, CODE, {listed: verdict.LISTED}),
        _part(2, 3, CODE, {flaky: verdict.FLAKY_ON_STOCK}, stock={flaky: "flaky"}),
        _part(3, 3, CODE, {}, stock={skipped: "skip", split[2][1]: "fail"}),
    ]
    figures, problems = _summary(records, listed=[listed])
    assert problems == []
    assert figures["full_tests"] == figures["full_recorded"] == len(TREE)
    assert figures["full_stock_passed"] == len(TREE) - 2
    assert (figures["full_stock_failed"], figures["full_stock_skipped"]) == (1, 1)
    assert figures["full_listed"] == 1 and figures["full_flaky_on_stock"] == 1
    assert figures["full_rtagent_passed"] == len(TREE) - 3  # listed one out; flaky on stock in
    assert figures["full_parts_stale"] == figures["full_parts_missing"] == 0


@pytest.mark.parametrize(
    "outcome, figure",
    [
        (verdict.UNLISTED, "full_unlisted"),
        (verdict.OTHER_FAILURE, "full_unlisted"),
        (verdict.FLAKY, "full_flaky"),
        (verdict.NOT_INJECTED, "full_not_injected"),
        (verdict.LISTED_PASSES, "full_listed_but_passes"),
        (verdict.FAILS_ON_STOCK, "full_fails_on_stock"),
    ],
)
def test_a_bad_outcome_is_counted_and_fails_the_summary(outcome, figure):
    test = parts.split(TREE, 1)[0][3]
    figures, problems = _summary([_part(1, 1, CODE, {test: outcome})], n=1)
    assert figures[figure] == 1
    assert problems == [f"{outcome} {test}: "]


def test_a_listed_exception_no_longer_listed_counts_as_unlisted():
    test = parts.split(TREE, 1)[0][0]
    figures, problems = _summary([_part(1, 1, CODE, {test: verdict.LISTED})], n=1)
    assert figures["full_unlisted"] == 1 and figures["full_listed"] == 0
    assert "no longer listed" in problems[0]


@pytest.mark.parametrize(
    "code, head, constraints, says",
    [
        (CODE, "t2", "c0", "differs from rtagent/ at HEAD"),
        (dict(CODE, rtagent_dirty=True), "t1", "c0", "uncommitted changes"),
        (CODE, "t1", "c1", "nova-constraints.txt changed"),
    ],
    ids=["rtagent-changed", "ran-dirty", "constraints-changed"],
)
def test_a_part_is_stale_when_what_it_ran_is_not_head_s(code, head, constraints, says):
    records = [_part(k, 2, dict(CODE), {}) for k in (1, 2)]
    records[1] = _part(2, 2, code, {})
    figures, problems = _summary(records, head=head, constraints=constraints, n=2)
    assert figures["full_parts_stale"] == (2 if head != "t1" or constraints != "c0" else 1)
    assert any(p.startswith("stale part 2/2") and says in p for p in problems), problems


def test_missing_and_partial_parts_are_counted():
    records = [_part(2, 4, CODE, {}, restricted=True)]
    figures, problems = _summary(records, n=4)
    assert figures["full_parts_missing"] == 3 and figures["full_parts_partial"] == 1
    assert "missing parts of 4: 1, 3-4" in problems
    assert figures["full_parts"] == 4 and figures["full_recorded"] == 2


def test_no_part_kept_is_every_part_missing():
    figures, problems = _summary([], n=8)
    assert figures["full_parts_missing"] == 8 and figures["full_recorded"] == 0
    assert problems == ["missing parts of 8: 1-8"]


def test_parts_of_different_splits_cannot_be_summed():
    with pytest.raises(full.FullRecordError, match="different splits"):
        _summary([_part(1, 2, CODE, {}), _part(1, 3, CODE, {})])


def test_a_part_file_is_written_and_read_back(tmp_path):
    record = _part(2, 3, CODE, {})
    path = full.write(str(tmp_path), record)
    assert os.path.basename(path) == "part-02-of-03.json"
    (tmp_path / "README.md").write_text("not a part")
    assert full.load_all(str(tmp_path)) == [json.loads(json.dumps(record))]
    assert full.load_all(str(tmp_path / "none")) == []


@pytest.mark.parametrize(
    "name, content, says",
    [
        ("part-01-of-02.json", "not json", "Expecting value"),
        ("part-01-of-02.json", "[]", "not a part's record"),
        ("part-01-of-02.json", None, "holds part 1/3"),
    ],
)
def test_a_part_file_that_is_not_one_is_refused(tmp_path, name, content, says):
    if content is None:
        content = json.dumps(_part(1, 3, CODE, {}))
    (tmp_path / name).write_text(content)
    with pytest.raises(full.FullRecordError, match=says):
        full.load_all(str(tmp_path))


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "rtagent").mkdir(parents=True)
    (repo / "rtagent" / "tracker.py").write_text("CLAIMS = True\n")
    (repo / "docs.md").write_text("x\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return repo


def test_a_clean_checkout_is_stamped_with_its_rtagent_tree(repo):
    code = stamp.read(str(repo))
    assert code["rtagent_dirty"] is False and len(code["commit"]) == 40
    assert code["rtagent_tree"] == stamp.tree(str(repo), code["commit"])
    (repo / "docs.md").write_text("changed outside rtagent/\n")
    assert stamp.read(str(repo)) == code


@pytest.mark.parametrize(
    "change",
    [
        lambda repo: (repo / "rtagent" / "tracker.py").write_text("CLAIMS = False\n"),
        lambda repo: (repo / "rtagent" / "new.py").write_text(""),
    ],
    ids=["modified", "untracked"],
)
def test_uncommitted_changes_under_rtagent_are_refused(repo, change):
    change(repo)
    with pytest.raises(stamp.DirtyTree, match="rtagent/ has uncommitted changes"):
        stamp.read(str(repo))
    assert stamp.read(str(repo), allow_dirty=True)["rtagent_dirty"] is True


def test_a_directory_git_cannot_read_is_a_stamp_error(tmp_path):
    with pytest.raises(stamp.StampError):
        stamp.read(str(tmp_path))


def _summary_tool(directory):
    return subprocess.run(
        [sys.executable, TOOL, "summary", "--dir", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_summary_reads_the_kept_files_and_exits_on_what_it_finds(tmp_path):
    head = stamp.tree(ROOT, "HEAD")
    with open(os.path.join(ROOT, "tools", "nova-constraints.txt"), "rb") as f:
        constraints = hashlib.sha256(f.read()).hexdigest()
    key = dict(KEY, constraints_sha256=constraints)
    code = dict(CODE, rtagent_tree=head)
    for k in (1, 2):
        share = parts.split(TREE, 2)[k - 1]
        tests = {t: full.entry("success", 1.0, "", verdict.PASSED) for t in share}
        record = full.part(k, 2, key=key, code=code, tree_ids=TREE, share=share, tests=tests)
        full.write(str(tmp_path), record)
    done = _summary_tool(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"full_tests={len(TREE)} "), done.stdout
    assert "full_parts_stale=0 " in done.stdout
    assert done.stdout.rstrip().endswith("PASS")
    # The same parts stamped with another rtagent/ tree: stale, exit 1.
    for k in (1, 2):
        path = tmp_path / full.file_name(k, 2)
        record = json.loads(path.read_text())
        record["stamp"]["rtagent_tree"] = "0" * 40
        path.write_text(json.dumps(record))
    done = _summary_tool(tmp_path)
    assert done.returncode == 1 and "full_parts_stale=2 " in done.stdout, done.stdout
    (tmp_path / full.file_name(1, 2)).write_text("{")
    done = _summary_tool(tmp_path)
    assert done.returncode == 2 and done.stdout.startswith("nova_full: "), done.stdout
    assert len(done.stdout.splitlines()) == 1
