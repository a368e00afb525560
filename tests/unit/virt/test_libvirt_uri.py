"""validate_uri: a table of URIs operators write, good and bad."""

import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt import validate_uri

GOOD = [
    "qemu:///system",
    "qemu:///session",
    "qemu+ssh://root@host/system",
    "qemu+ssh://root@host.example.org/system?keyfile=/root/.ssh/id_rsa&no_verify=1",
    "qemu+tcp://10.0.0.1:16509/system",
    "qemu+tls://[2001:db8::1]:16514/system",
    "qemu+unix:///system?socket=/run/libvirt/libvirt-sock",
    "qemu+libssh2://user@host/system?known_hosts_verify=ignore",
    "test:///default",
    "test:///abs/path/host.xml",
    "test:////abs/path/host.xml",
    "lxc:///",
    "ch:///system",
]

BAD = [
    ("", "empty"),
    (None, "empty"),
    (42, "empty"),
    ("not a uri", "whitespace"),
    ("qemu:///system ", "whitespace"),
    ("qemu//system", "no driver scheme"),
    ("system", "no driver scheme"),
    ("://x", "no driver scheme"),
    ("qemu:/system", "expected '//'"),
    ("qemu:system", "expected '//'"),
    ("qemu://host", "no '/' before the path"),
    ("qemu://", "no '/' before the path"),
    ("1qemu:///system", "bad driver"),
    ("qemu+:///system", "bad driver"),
    ("qemu+ssh+tcp://host/system", "bad driver"),
    ("qe mu:///system", "whitespace"),
    ("qemu+tcp://host:/system", "bad [user@][host][:port]"),
    ("qemu+tcp://host:abc/system", "bad [user@][host][:port]"),
    ("qemu+tcp://host:99999/system", "out of range"),
    ("qemu+tcp://host:0/system", "out of range"),
    ("qemu+ssh://a@b@host/system", "bad [user@][host][:port]"),
    ("qemu+ssh://host?x=1/system", "bad [user@][host][:port]"),
    ("qemu:///system#frag", "bad path or query"),
]


@pytest.mark.parametrize("uri", GOOD)
def test_accepts(uri):
    assert validate_uri(uri) == uri


@pytest.mark.parametrize(("uri", "reason"), BAD)
def test_rejects_with_a_reason(uri, reason):
    with pytest.raises(errors.InvalidConnectionURI) as info:
        validate_uri(uri)
    assert reason in str(info.value)
    assert info.value.code == "virt.invalid_connection_uri"
    # One line, so the config layer can print it as is.
    assert "\n" not in str(info.value)
