"""``rtagent check-config``: every start-up check, plus the names in the
config files that no option or group has.

oslo.config ignores an option it does not know: a misspelt
``reserved_host_memroy_mb`` or ``[placment]`` is silently the default. The
running agent logs a warning for each such name; this command makes them
errors, one line each, with the closest known name.
"""

import difflib
import glob
import os

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from rtagent import exception
from rtagent.cmd import say_error
from rtagent.conf import placement


def unknown_names(conf):
    """Names in ``conf``'s files that ``conf`` has no option or group for.

    The options of the configured ``[placement]`` auth plugin count as
    known whether or not a start-up check got as far as loading it.

    :returns: a list of one-line descriptions, in file order.
    """
    known = _known(conf)
    problems = []
    for path in _files(conf):
        sections = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError):
            continue  # oslo.config read the files already and said so
        for section, items in sections.items():
            group = "DEFAULT" if section.upper() == "DEFAULT" else section
            if group not in known:
                problems.append(f"{path}: [{section}]: unknown group{_hint(group, known)}")
                continue
            for name in items:
                if name not in known[group]:
                    hint = _hint(name, known[group]) or _plugin_hint(conf, group)
                    problems.append(f"{path}: [{section}] {name}: unknown option{hint}")
    return problems


def _known(conf):
    """{group name: {option names, deprecated ones included}}."""
    known = {}
    for group_name, opts in _registered(conf):
        names = known.setdefault(group_name, set())
        for opt in opts:
            names.update((opt.dest, opt.name))
            # Deprecated names, which oslo.config still honours (perhaps
            # in another group).
            for old in opt.deprecated_opts:
                known.setdefault(old.group or group_name, set()).add(old.name or opt.name)
    known.setdefault(placement.GROUP.name, set()).update(_plugin_options(conf))
    return known


def _plugin_options(conf):
    """Option names of the ``[placement]`` auth plugin, read without
    registering anything (an unknown plugin has none)."""
    try:
        auth_type = conf[placement.GROUP.name].auth_type
        if not auth_type:
            return set()
        opts = ks_loading.get_auth_plugin_conf_options(auth_type)
    except (cfg.Error, ks_exc.NoMatchingPlugin):
        return set()
    return {name for opt in opts for name in (opt.dest, opt.name)}


def _registered(conf):
    # Reads oslo.config's registry of options: ConfigOpts has no public
    # way to list an option's deprecated names.
    yield "DEFAULT", [info["opt"] for info in conf._opts.values()]
    for name, group in conf._groups.items():
        yield name, [info["opt"] for info in group._opts.values()]


def _files(conf):
    files = list(conf.config_file or ())
    for directory in conf.config_dir or ():
        files.extend(sorted(glob.glob(os.path.join(directory, "*.conf"))))
    return files


def _plugin_hint(conf, group):
    # [placement] has the options of its auth plugin only: a password
    # plugin's username means nothing to admin_token.
    if group == placement.GROUP.name and conf[group].auth_type:
        return f" (not one of auth_type = {conf[group].auth_type})"
    return ""


def _hint(name, candidates):
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def main(conf, checks):
    """Run ``checks`` (callables of ``conf`` raising RtagentError or
    cfg.Error, and returning None or lines of what the running agent
    only warns of), then look for unknown names; print one line per
    problem.

    :returns: 0 when all is well, 2 otherwise.
    """
    problems = []
    for check in checks:
        try:
            problems.extend(check(conf) or ())
        except (cfg.Error, exception.RtagentError) as exc:
            problems.append(str(exc))
    problems.extend(unknown_names(conf))
    for problem in problems:
        say_error(problem)
    if problems:
        return 2
    files = ", ".join(_files(conf)) or "no config files"
    print(f"rtagent: configuration OK ({files})")
    return 0
