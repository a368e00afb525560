"""Start-up (and, later, reload) checks of a loaded configuration.

oslo.config checks a value's type and range only when it is first read, deep
inside whatever reads it. We read every option once, up front, so that a bad
value stops the agent before it touches anything, with one line that names
the option.
"""

import os

from oslo_config import cfg

from rtagent import exception
from rtagent.conf import default, libvirt, rtagent


class ConfigError(exception.RtagentError):
    """A configuration value is unusable. The message names the option."""

    code = "conf.invalid_option"
    msg_fmt = "[{group}] {option}: {reason}"


def validate(conf, uri_validator=None):
    """Check every rtagent option of ``conf``.

    :param uri_validator: callable(uri) raising an RtagentError for a
        malformed hypervisor URI; passed in so this module needs no libvirt.
    :raises ConfigError: on the first bad option found.
    """
    for group, opts in (
        ("DEFAULT", default.ALL_OPTS),
        (libvirt.GROUP.name, libvirt.ALL_OPTS),
        (rtagent.GROUP.name, rtagent.ALL_OPTS),
    ):
        for opt in opts:
            _read(conf, group, opt.dest)
    for name in default.RATIO_OPTS + tuple("initial_" + n for n in default.RATIO_OPTS):
        value = conf[name]
        # A ratio of 0 made nova use its built-in default in old releases;
        # refusing it avoids carrying that ambiguity over.
        if value is not None and value <= 0:
            raise ConfigError(group="DEFAULT", option=name, reason=f"{value} must be > 0")
    _check_directory("DEFAULT", "state_path", conf.state_path)
    _check_directory("libvirt", "instances_path", conf.libvirt.instances_path)
    if uri_validator is not None:
        try:
            uri_validator(conf.libvirt.connection_uri)
        except exception.RtagentError as exc:
            raise ConfigError(group="libvirt", option="connection_uri", reason=str(exc)) from exc


def _read(conf, group, name):
    try:
        return conf[name] if group == "DEFAULT" else conf[group][name]
    except (cfg.Error, ValueError) as exc:
        reason = str(exc)
        # oslo.config puts the location first; keep the part an operator acts on.
        if "is not valid: " in reason:
            reason = "invalid value: " + reason.split("is not valid: ", 1)[1]
        raise ConfigError(group=group, option=name, reason=reason) from exc


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
