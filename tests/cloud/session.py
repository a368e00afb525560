"""What the test cloud's pytest sessions share (tests/cloud and
tests/hypervisor): the requirements check, the SIGTERM rule and every
service's last log lines attached to a failed test's report."""

import os
import shutil
import signal


def missing(target, *more):
    """Why the cloud cannot run here, or '' when it can.

    :param target: the make target that runs it in .venv-nova, for the message.
    :param more: callables giving further reasons ('' when none).
    """
    try:
        import nova  # noqa: F401
    except ImportError:
        return f"nova is not installed here (make {target} runs these in .venv-nova)"
    from rtagent.testing.postgres import missing_requirements as postgres_missing
    from rtagent.testing.rabbitmq import missing_requirements as rabbit_missing

    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    if os.geteuid() != 0:
        return "must run as root (UTS namespaces, PostgreSQL as its user)"
    for check in (rabbit_missing, postgres_missing, *more):
        why = check()
        if why:
            return why
    return ""


def end_on_sigterm():
    """A SIGTERM (a CI timeout) ends the run as Ctrl-C does: the fixtures'
    finalizers stop every process by its PID."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def attach_tails(item, report, holders=("scenario", "adoption")):
    """With a failed test's report, the last lines of every service's log
    of the cloud its fixture (one of ``holders``) holds."""
    if report.when == "teardown" or not report.failed:
        return
    for name in holders:
        holder = item.funcargs.get(name) if hasattr(item, "funcargs") else None
        cloud = getattr(holder, "cloud", holder)
        if cloud is not None and hasattr(cloud, "tails"):
            text = "\n".join(f"--- {service}\n{tail}" for service, tail in cloud.tails())
            report.sections.append(("test cloud: last lines of every service's log", text))
            return
