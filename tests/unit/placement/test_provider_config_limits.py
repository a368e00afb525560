"""Provider config files as hostile input: real files in tmp dirs.

Limits before parsing (size, count, nesting, aliases), numbers within
Placement's own bounds, and messages that never echo the document.
"""

import json
import os
import subprocess
import sys
import threading

import pytest

import rtagent
from rtagent.placement import provider_config as pc

GOOD = """
meta: {schema_version: '1.0'}
providers:
  - identification: {uuid: $COMPUTE_NODE}
    inventories:
      additional:
        - CUSTOM_FPGA: {total: 4}
"""

# 362 bytes: 9**8 "lol"s in nested lists (a "billion laughs"); the issue's
# SIGHUP took 27 s, 2.4 GiB and logged a 431 MiB line for one like it.
BOMB = (
    "# 9**8 laughs\n"
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefg", "bcdefgh", strict=True)
    )
    + "meta:\n  schema_version: *h\nproviders: []\n"
)

# The documented limits (pc.MAX_FILE_BYTES, MAX_FILES, MAX_TOTAL_BYTES).
FILE_BYTES = 1 << 20
FILES = 100
TOTAL_BYTES = 4 << 20
# Longest message we accept: a few KiB, whatever the input.
MESSAGE_BOUND = 2048


def write(directory, name, text):
    path = directory / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def refusal(directory):
    """The error load() raises for ``directory``, checked to be one short line."""
    with pytest.raises(pc.ProviderConfigError) as err:
        pc.load(str(directory))
    message = str(err.value)
    assert len(message) < MESSAGE_BOUND and "\n" not in message, message[:300]
    assert err.value.code == "placement.provider_config_invalid"
    return message


def test_the_362_byte_alias_bomb_is_refused_at_once_in_bounded_memory(tmp_path):
    """Measured in a child process under a memory cap (so that code which
    expands the bomb fails on the cap instead of swapping the machine):
    seconds, tracemalloc's peak, the RSS high-water mark's growth, and the
    length of the line a SIGHUP reload logs; the last good config stays."""
    assert len(BOMB.encode()) == 362
    script = r"""
import io, json, logging, resource, sys, time, tracemalloc
from rtagent.placement import provider_config as pc
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
vm = int(status["VmSize"].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), vm + (512 << 20)))
log = io.StringIO()
logging.getLogger().addHandler(logging.StreamHandler(log))
source = pc.ProviderConfigSource(sys.argv[1], pc.load(sys.argv[1]))
open(sys.argv[2], "w").write(sys.argv[3])
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
started = time.process_time()  # CPU: what expanding burns, whatever else runs
adopted = source.reload()
seconds = time.process_time() - started
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({
    "adopted": adopted, "seconds": seconds, "peak": peak,
    "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss,
    "log": log.getvalue(), "message": str(source.last_error),
    "kept": [c.inventories["CUSTOM_FPGA"].total for c in source.configs],
}))
"""
    path = write(tmp_path, "node.yaml", GOOD)
    child = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), path, BOMB],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(rtagent.__file__))},
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout)
    assert result["adopted"] is False and result["kept"] == [4]
    # CPU seconds; 2 ms measured, so only expanding the bomb comes near.
    assert result["seconds"] < 0.5, result["seconds"]
    assert result["peak"] < 16 << 20, result["peak"]
    assert result["rss_kib"] < 64 << 10, result["rss_kib"]
    assert len(result["log"]) < MESSAGE_BOUND and result["log"].count("\n") == 1
    assert "node.yaml" in result["message"] and "aliases expand too far" in result["message"]


def test_anchors_shared_between_providers_are_still_read(tmp_path):
    # nova's yaml.safe_load takes anchors; files that share a block keep working
    write(
        tmp_path,
        "a.yaml",
        """
meta: {schema_version: '1.0'}
providers:
  - identification: {name: pf0}
    inventories: &fpga
      additional:
        - CUSTOM_FPGA: {total: 4, allocation_ratio: 1.0}
    traits: &rack {additional: [CUSTOM_RACK_12]}
  - identification: {name: pf1}
    inventories: *fpga
    traits: *rack
""",
    )
    first, second = pc.load(str(tmp_path))
    assert first.inventories == second.inventories and second.traits == {"CUSTOM_RACK_12"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("meta: &m {schema_version: '1.0', x: [*m]}\n", "alias *m is undefined or recursive"),
        ("meta: {schema_version: '1.0'}\nx: " + "[" * 40 + "]" * 40, "nested deeper than 32"),
        (
            "meta: {schema_version: '1.0'}\nx: &x 1\ny: [" + ",".join(["*x"] * 1001) + "]\n",
            "aliases expand too far",
        ),
        ("meta: {schema_version: '1.0'}\n" + "x" * 300_000 + ": &a [", "line 2, column"),
        ("meta: {schema_version: '1.0', x: *" + "n" * 300_000 + "}", "undefined or recursive"),
        (
            "meta: {schema_version: '1.0', x: !" + "t" * 300_000 + " 1}",
            "line 1, column 34: could not determine a constructor",
        ),
        ("meta: {schema_version: '1.0', x: " + "9" * 5000 + "}", "a value cannot be read"),
        ("meta: {schema_version: '1.0', x: 2024-13-45}", "a value cannot be read"),
        ("meta: {schema_version: " + "x" * 300_000 + "}", "unsupported schema_version"),
    ],
)
def test_shapes_and_syntax_errors_give_one_short_line(tmp_path, text, message):
    path = write(tmp_path, "a.yaml", text)
    found = refusal(tmp_path)
    assert path in found and message in found, found[:300]


def test_a_file_over_the_size_limit_is_not_read(tmp_path):
    path = write(tmp_path, "big.yaml", GOOD + "#" * FILE_BYTES + "\n")
    found = refusal(tmp_path)
    assert path in found and f"bigger than {FILE_BYTES} bytes" in found


def test_more_files_than_the_limit_are_refused(tmp_path):
    for i in range(FILES + 1):
        write(tmp_path, f"{i:03}.yaml", "meta: {schema_version: '1.0'}\n")
    assert f"{FILES + 1} *.yaml files, at most {FILES}" in refusal(tmp_path)


def test_more_bytes_than_the_limit_in_all_files_are_refused(tmp_path):
    # about 3 s of loading per MiB: a reload stays within seconds
    for i in range(5):
        last = write(tmp_path, f"{i}.yaml", "meta: {schema_version: '1.0'}\n" + "#" * 1_000_000)
    found = refusal(tmp_path)
    assert last in found and f"hold more than {TOTAL_BYTES} bytes" in found


def test_a_fifo_does_not_hang_the_reload(tmp_path):
    fifo = tmp_path / "a.yaml"
    os.mkfifo(fifo)
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_error_of(tmp_path)), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # unblock the reader (a writer end appears, then EOF)
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
    assert outcome and "not a regular file" in outcome[0]


def _error_of(directory):
    try:
        pc.load(str(directory))
    except pc.ProviderConfigError as exc:
        return str(exc)
    return "accepted"


def test_text_that_is_not_utf8_is_refused(tmp_path):
    write(tmp_path, "a.yaml", b"meta: {schema_version: '1.0'}\n# \xff\xfe\n")
    assert "not UTF-8 text (byte 32)" in refusal(tmp_path)


INT_FIELDS = ["total", "reserved", "min_unit", "max_unit", "step_size"]
BAD_INTS = [".nan", ".inf", "-.inf", "-1", str(2**40), "true", "1.5", "~", "'3'"]


def inventory_file(tmp_path, fields):
    return write(
        tmp_path,
        "a.yaml",
        "meta: {schema_version: '1.0'}\nproviders:\n"
        "- identification: {name: pf0}\n"
        f"  inventories: {{additional: [{{CUSTOM_X: {{{fields}}}}}]}}\n",
    )


@pytest.mark.parametrize("value", BAD_INTS)
@pytest.mark.parametrize("field", INT_FIELDS)
def test_integer_fields_outside_placement_bounds_are_refused(tmp_path, field, value):
    fields = {"total": "8", "reserved": "0", "min_unit": "1", "max_unit": "8", "step_size": "1"}
    fields[field] = value
    path = inventory_file(tmp_path, ", ".join(f"{k}: {v}" for k, v in fields.items()))
    found = refusal(tmp_path)
    assert found.startswith(f"Provider config {path}: providers[0] (name 'pf0')"), found
    low = 0 if field == "reserved" else 1
    assert f".inventories.CUSTOM_X.{field}: must be an integer from {low} to 2147483647" in found


@pytest.mark.parametrize(
    "value", [".nan", ".inf", "-.inf", "-1", "0", "-0.0", "true", "3.5e38", "1" + "0" * 400, "'2'"]
)
def test_allocation_ratios_outside_placement_bounds_are_refused(tmp_path, value):
    path = inventory_file(tmp_path, f"total: 8, allocation_ratio: {value}")
    found = refusal(tmp_path)
    assert found.startswith(
        f"Provider config {path}: providers[0] (name 'pf0').inventories.CUSTOM_X."
        "allocation_ratio: must be a number above 0 and at most 3.40282e+38, got "
    ), found


def test_placement_limits_themselves_are_accepted(tmp_path):
    inventory_file(
        tmp_path,
        "total: 2147483647, reserved: 2147483647, max_unit: 2147483647, "
        "step_size: 2147483647, allocation_ratio: 3.40282e+38",
    )
    ((config),) = pc.load(str(tmp_path))
    inv = config.inventories["CUSTOM_X"]
    assert (inv.total, inv.allocation_ratio) == (2147483647, 3.40282e38)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("total: 0x" + "f" * 300_000, "got <a 1200000-bit integer>"),
        (
            # an explicit key (?) may be longer than 1024 characters
            "total: 8, 1: a, ? " + "k" * 300_000 + " : b",
            "unknown field(s) ['" + "k" * 27 + "..." + "k" * 28 + "', 1]",
        ),
        ("total: 8, reserved: 9", "needs reserved <= total (reserved 9, total 8)"),
        ("total: 8, min_unit: 9", "needs min_unit <= max_unit <= total (min_unit 9, max_unit 8"),
    ],
)
def test_messages_quote_at_most_an_excerpt(tmp_path, fields, message):
    inventory_file(tmp_path, fields)
    assert message in refusal(tmp_path)


@pytest.mark.parametrize(
    "entry",
    [
        "{identification: {uuid: " + "u" * 300_000 + "}}",
        "{identification: {name: n}, traits: {additional: [CUSTOM_" + "a" * 300_000 + "]}}",
        "{identification: {name: n}, traits: {additional: [[" + "x, " * 100_000 + "]]}}",
    ],
)
def test_identifiers_are_quoted_as_an_excerpt(tmp_path, entry):
    write(tmp_path, "a.yaml", "meta: {schema_version: '1.0'}\nproviders: [" + entry + "]")
    assert "..." in refusal(tmp_path)


# (The bomb through reload() is measured in a child process, above.)
REFUSED = [
    GOOD + "#" * FILE_BYTES,
    GOOD.replace("{total: 4}", "{total: 4, allocation_ratio: .nan}"),
    GOOD.replace("{total: 4}", "{total: 4, allocation_ratio: .inf}"),
    GOOD.replace("{total: 4}", f"{{total: {2**40}}}"),
    GOOD.replace("{total: 4}", "{total: 4, reserved: -1}"),
    GOOD.replace("{total: 4}", "{total: 4, step_size: true}"),
    GOOD.replace("{total: 4}", "{total: ~}"),
]


@pytest.mark.parametrize("text", REFUSED, ids=range(len(REFUSED)))
def test_sighup_with_a_refused_file_keeps_the_last_good_config(tmp_path, caplog, text):
    write(tmp_path, "node.yaml", GOOD)
    source = pc.ProviderConfigSource(str(tmp_path), pc.load(str(tmp_path)))
    write(tmp_path, "node.yaml", text)
    assert source.reload() is False
    assert [c.inventories["CUSTOM_FPGA"].total for c in source.configs] == [4]
    assert "node.yaml" in str(source.last_error)
    (record,) = [r for r in caplog.records if "keeping the last good" in r.getMessage()]
    assert len(record.getMessage()) < MESSAGE_BOUND


def test_a_long_unquoted_number_is_refused_before_it_is_built(tmp_path):
    """PyYAML builds a base-60 integer in quadratic time: 510 KB took 8 s."""
    digits = ":".join(["59"] * 20000)  # ~60 KB: ~0.1 s to build, refused first
    (tmp_path / "p.yaml").write_text(
        "meta: {schema_version: '1.0'}\nproviders:\n"
        "- identification: {uuid: $COMPUTE_NODE}\n"
        f"  inventories: {{additional: [{{CUSTOM_X: {{total: {digits}}}}}]}}\n"
    )
    with pytest.raises(pc.ProviderConfigError, match="unquoted number of"):
        pc.load(str(tmp_path))
