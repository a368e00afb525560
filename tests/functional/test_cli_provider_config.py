"""Hostile provider config files at start-up, through the ``rtagent``
command: each is one line on stderr and exit 2, at once, before anything
is written (the limits are in :mod:`rtagent.placement.provider_config`)."""

import os
import resource
import subprocess

import pytest

import rtagent
from tests.functional.test_cli import RTAGENT, write_conf
from tests.unit.placement.test_provider_config_limits import BOMB, FILE_BYTES, GOOD

pytestmark = pytest.mark.functional


def capped():
    # Code that expands the bomb fails on this cap instead of taking the
    # machine's memory; the agent refusing it needs a tenth of it.
    resource.setrlimit(resource.RLIMIT_DATA, (512 << 20, 512 << 20))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BOMB, "aliases expand too far"),
        (GOOD + "#" * FILE_BYTES, f"bigger than {FILE_BYTES} bytes"),
        (
            GOOD.replace("{total: 4}", "{total: 4, allocation_ratio: .nan}"),
            ".allocation_ratio: must be a number above 0 and at most 3.40282e+38, got nan",
        ),
        (
            GOOD.replace("{total: 4}", "{total: 4, allocation_ratio: .inf}"),
            ".allocation_ratio: must be a number above 0 and at most 3.40282e+38, got inf",
        ),
        (
            GOOD.replace("{total: 4}", f"{{total: {2**40}}}"),
            ".total: must be an integer from 1 to 2147483647, got 1099511627776",
        ),
        (
            GOOD.replace("{total: 4}", "{total: 4, reserved: -1}"),
            ".reserved: must be an integer from 0 to 2147483647, got -1",
        ),
        (
            GOOD.replace("{total: 4}", "{total: 4, step_size: true}"),
            ".step_size: must be an integer from 1 to 2147483647, got True",
        ),
        (
            "meta: [\n" + "x" * 100_000,
            "not valid YAML: line 3, column 1: while parsing a flow sequence",
        ),
        (b"meta: {schema_version: '1.0'}\n# \xff\n", "not UTF-8 text (byte 32)"),
    ],
    ids=["bomb", "size", "nan", "inf", "2**40", "-1", "true", "syntax", "utf8"],
)
def test_a_hostile_provider_config_is_one_short_line_and_exit_2(tmp_path, text, message):
    configs = tmp_path / "provider_config"
    configs.mkdir()
    path = configs / "node.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    conf = write_conf(tmp_path, extra=f"[compute]\nprovider_config_location = {configs}\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [RTAGENT, "--config-file", str(conf), "audit"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=capped,
        # the rtagent this test imported (a scratch tree on PYTHONPATH too)
        env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(rtagent.__file__))},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and len(result.stderr) < 2048, result.stderr[:2000]
    assert lines[0].startswith(f"rtagent: error: Provider config {path}: "), lines[0]
    assert message in lines[0], lines[0]
    # "At once": the command's CPU seconds, which a loaded machine does not
    # stretch as it does wall time (1.1-1.6 s measured, start-up included;
    # the run's timeout above only catches a hang).
    assert cpu < 15, cpu
    assert not (tmp_path / "state").exists()
