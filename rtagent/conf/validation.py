"""Start-up (and, later, reload) checks of a loaded configuration.

oslo.config checks a value's type and range only when it is first read, deep
inside whatever reads it. We read every option once, up front, so that a bad
value stops the agent before it touches anything, with one line that names
the option.
"""

import importlib.util
import os
import re
import urllib.parse

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from rtagent import exception, excerpt, jsonbounds
from rtagent.conf import default, libvirt, pci, placement, rtagent
from rtagent.virt import hugepages


class ConfigError(exception.RtagentError):
    """A configuration value is unusable. The message names the option."""

    code = "conf.invalid_option"
    msg_fmt = "[{group}] {option}: {reason}"


def validate(conf, uri_validator=None):
    """Check every rtagent option of ``conf``.

    :param uri_validator: callable(uri) raising an RtagentError for a
        malformed hypervisor URI; passed in so this module needs no libvirt.
    :raises ConfigError: on the first bad option found.
    :raises rtagent.virt.errors.InvalidReservedHugePages: a
        ``reserved_huge_pages`` value is malformed (checked against the
        host's NUMA cells later, where the host is read).
    :raises rtagent.pci.errors.InvalidDeviceSpec,
        rtagent.pci.errors.InvalidAlias: a ``[pci] device_spec`` or
        ``alias`` value is invalid (the message names the entry and field).
    """
    for group, opts in (
        ("DEFAULT", default.ALL_OPTS),
        (libvirt.GROUP.name, libvirt.ALL_OPTS),
        (pci.GROUP.name, pci.ALL_OPTS),
        (rtagent.GROUP.name, rtagent.ALL_OPTS),
    ):
        for opt in opts:
            _read(conf, group, opt.dest)
    try:
        default.cpu_monitor_enabled(conf.compute_monitors)
    except ValueError as exc:
        raise ConfigError(group="DEFAULT", option="compute_monitors", reason=str(exc)) from exc
    _check_host(conf.host)
    _check_reserved_cpus(conf)
    hugepages.parse(conf.reserved_huge_pages)
    pci.parse(conf)
    # (A configured ratio of 0.0 means "unset", as in nova; see builder.py.)
    for name in ("initial_" + n for n in default.RATIO_OPTS):
        if conf[name] <= 0:
            raise ConfigError(group="DEFAULT", option=name, reason=f"{conf[name]} must be > 0")
    _check_directory("DEFAULT", "state_path", conf.state_path)
    # Checked with rbd too: nova keeps each guest's console log and disk
    # info there, and the libvirt driver measures it.
    _check_instances_path(conf.libvirt.instances_path)
    if conf.libvirt.images_type == "rbd":
        check_rbd(conf)
    _check_placement(conf)
    if uri_validator is not None:
        try:
            uri_validator(conf.libvirt.connection_uri)
        except exception.RtagentError as exc:
            raise ConfigError(group="libvirt", option="connection_uri", reason=str(exc)) from exc
    _check_test_driver_file(conf.libvirt.connection_uri)


_UNPRINTABLE = re.compile(f"[{jsonbounds.FORBIDDEN_CHARACTERS}]")


def _check_host(host):
    """``host`` names the RPC server's queue and every log line: a newline
    there (an indented line in the file runs on into the value) gives a
    queue no conductor calls, and forges log lines."""
    if not host or len(host) > 255 or _UNPRINTABLE.search(host) or host != host.strip():
        raise ConfigError(
            group="DEFAULT",
            option="host",
            reason=f"{excerpt.clip(repr(host), 80)} is not a host name: 1 to 255 characters, "
            "no control characters or surrounding spaces (is the next line indented?)",
        )


def _check_reserved_cpus(conf):
    """nova refuses ``reserved_host_cpus`` beside a CPU set: the CPUs left
    out of the sets are already the host's, and VCPU is the shared set."""
    if not conf.reserved_host_cpus:
        return
    sets = [n for n in ("cpu_shared_set", "cpu_dedicated_set") if (conf.compute[n] or "").strip()]
    if sets:
        raise ConfigError(
            group="DEFAULT",
            option="reserved_host_cpus",
            reason=f"{conf.reserved_host_cpus} cannot be used with [compute] "
            f"{' and '.join(sets)}; set it to 0 (the CPUs left out of the sets are the host's)",
        )


def _check_test_driver_file(uri):
    """libvirt's test driver reads its host from a file, and says only "XML
    error: failed to parse" when the file is missing, after the state
    directory exists. ``test:///default`` is built in."""
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme != "test" or parsed.netloc or parsed.path in ("", "/", "/default"):
        return

    def fail(reason):
        raise ConfigError(group="libvirt", option="connection_uri", reason=f"{uri}: {reason}")

    path = urllib.parse.unquote(parsed.path)
    if not os.path.exists(path):
        fail(f"the test driver's host file {path} does not exist")
    if not os.path.isfile(path):
        fail(f"the test driver's host file {path} is not a regular file")
    if not os.access(path, os.R_OK):
        fail(f"the test driver's host file {path} is not readable by this user")


def _read(conf, group, name):
    try:
        return conf[name] if group == "DEFAULT" else conf[group][name]
    except (cfg.Error, ValueError) as exc:
        reason = str(exc)
        # oslo.config puts the location first; keep the part an operator acts on.
        if "is not valid: " in reason:
            reason = "invalid value: " + reason.split("is not valid: ", 1)[1]
        raise ConfigError(group=group, option=name, reason=reason) from exc


def check_rbd(conf):
    """images_type = rbd: a pool named, a readable ceph.conf, and the Ceph
    bindings importable (without them no reading can ever succeed). Also
    the embedded agent's check of what it takes from nova.conf
    (:func:`rtagent.nova.inprocess.agent_conf`).

    :raises ConfigError: the first of these that fails.
    """
    if not (conf.libvirt.images_rbd_pool or "").strip():
        raise ConfigError(
            group="libvirt",
            option="images_rbd_pool",
            reason="must name the pool of the guests' disks with images_type = rbd",
        )
    path = libvirt.ceph_conf(conf)
    reason = None
    if not os.path.isabs(path):
        reason = "must be an absolute path"
    elif not os.path.isfile(path):
        reason = "does not exist" if not os.path.exists(path) else "is not a regular file"
    elif not os.access(path, os.R_OK):
        reason = "is not readable by this user"
    if reason:
        raise ConfigError(
            group="libvirt", option="images_rbd_ceph_conf", reason=f"{path}: {reason}"
        )
    if importlib.util.find_spec("rados") is None or importlib.util.find_spec("rbd") is None:
        raise ConfigError(
            group="libvirt",
            option="images_type",
            reason="rbd needs the Ceph Python bindings (python3-rados, python3-rbd; "
            "tools/setup-ceph.sh links them into a virtualenv)",
        )


def _check_instances_path(path):
    def fail(reason):
        raise ConfigError(group="libvirt", option="instances_path", reason=f"{path}: {reason}")

    if not os.path.isabs(path):
        fail("must be an absolute path")
    if not os.path.isdir(path):
        # Not created for the operator: a typo would silently measure the
        # wrong filesystem as DISK_GB.
        fail("is not an existing directory")


def _check_placement(conf):
    """Read every [placement] option and load the auth plugin (no network)."""
    group = placement.GROUP.name
    for name in list(conf[group]):
        _read(conf, group, name)
    if not conf[group].auth_type:
        raise ConfigError(
            group=group,
            option="auth_type",
            reason="is not set; Placement needs credentials (e.g. auth_type = password)",
        )
    try:
        ks_loading.load_auth_from_conf_options(conf, group)
    except ks_exc.NoMatchingPlugin as exc:
        raise ConfigError(group=group, option="auth_type", reason=str(exc)) from exc
    except ks_exc.MissingRequiredOptions as exc:
        names = ", ".join(o.dest for o in exc.options)
        raise ConfigError(group=group, option=names, reason="required by auth_type") from exc
    except (cfg.Error, ValueError) as exc:
        raise ConfigError(group=group, option="auth", reason=str(exc)) from exc
    # Plugin options are registered by the load above; read them too.
    for name in list(conf[group]):
        _read(conf, group, name)
    _check_plugin_secrets(conf, group)


# What these auth plugins cannot work without but keystoneauth does not
# mark required (it would prompt for them on a terminal): left unset, the
# agent would start, contact Keystone and fail there with a traceback.
_PLUGIN_NEEDS = {
    "password": ("password", ("username", "user_id")),
    "v2password": ("password", ("username", "user_id")),
    "v3password": ("password", ("username", "user_id")),
    "http_basic": ("password", ("username",)),
    "token": ("token",),
    "v2token": ("token",),
    "v3token": ("token",),
    "admin_token": ("token",),
}


def _check_plugin_secrets(conf, group):
    auth_type = conf[group].auth_type
    for need in _PLUGIN_NEEDS.get(auth_type, ()):
        names = (need,) if isinstance(need, str) else need
        if not any(conf[group][name] for name in names):
            raise ConfigError(
                group=group,
                option=" or ".join(names),
                reason=f"required when auth_type = {auth_type}",
            )


def _check_directory(group, option, path):
    """A directory the agent uses must exist and be usable, or be creatable."""

    def fail(reason):
        raise ConfigError(group=group, option=option, reason=f"{path}: {reason}")

    if not os.path.isabs(path):
        fail("must be an absolute path")
    if os.path.exists(path):
        if not os.path.isdir(path):
            fail("exists and is not a directory")
        if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
            fail("is not readable and writable by this user")
        return
    parent = os.path.dirname(path.rstrip(os.sep)) or os.sep
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        fail(f"does not exist and cannot be created under {parent}")
