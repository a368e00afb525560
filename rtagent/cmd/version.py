"""rtagent's version: the installed package's metadata (pyproject.toml's
``version``), so ``rtagent --version``, the start-up log line and Guru
Meditation reports agree with what pip installed."""

from importlib import metadata

UNKNOWN = "unknown"


def version_string():
    """The installed rtagent's version, or ``"unknown"`` when rtagent runs
    from a source tree that was never installed."""
    try:
        return metadata.version("rtagent")
    except metadata.PackageNotFoundError:
        return UNKNOWN


def startup_line(conf, agent, command):
    """The one line logged when ``command`` starts: what runs, with what
    configuration, as which node (what an operator checks first)."""
    files = list(conf.config_file or ()) + [f"{d}/*.conf" for d in conf.config_dir or ()]
    return (
        f"rtagent {version_string()} {command}: config files {', '.join(files) or 'none'}; "
        f"host {conf.host}; state_path {conf.state_path}; node {agent.nodes.primary_uuid}"
    )
