# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""What code a whole-tree part ran: the commit and the git tree of
``rtagent/`` at it, read from git.

A part is kept only for code git can name again: with uncommitted changes
under ``rtagent/`` the tree at the commit is not what ran, so
:func:`read` says so and the run refuses to keep its result.
"""

import subprocess

PACKAGE = "rtagent"


class StampError(Exception):
    """git cannot say what code runs (not a checkout, git missing)."""


class DirtyTree(StampError):
    """``rtagent/`` has changes no commit holds."""


def read(top, allow_dirty=False):
    """{"commit", "rtagent_tree", "rtagent_dirty"} of the checkout at ``top``.

    :raises DirtyTree: ``rtagent/`` has uncommitted or untracked changes,
        unless ``allow_dirty`` (then ``rtagent_dirty`` is True).
    :raises StampError: git cannot read the checkout.
    """
    changed = _git(top, "status", "--porcelain", "--untracked-files=all", "--", PACKAGE)
    if changed and not allow_dirty:
        first = changed.splitlines()[0].strip()
        raise DirtyTree(
            f"{PACKAGE}/ has uncommitted changes ({first}"
            + (f" and {len(changed.splitlines()) - 1} more" if "\n" in changed else "")
            + "): commit them first, so the part's commit names the code it ran"
        )
    return {
        "commit": _git(top, "rev-parse", "HEAD"),
        "rtagent_tree": tree(top, "HEAD"),
        "rtagent_dirty": bool(changed),
    }


def tree(top, commit):
    """The git tree id of ``rtagent/`` at ``commit``.

    :raises StampError: git cannot resolve it.
    """
    return _git(top, "rev-parse", f"{commit}:{PACKAGE}")


def _git(top, *args):
    try:
        done = subprocess.run(
            ["git", "-C", top, *args], capture_output=True, text=True, check=False, timeout=60
        )
    except OSError as e:
        raise StampError(f"git cannot run: {e}") from None
    if done.returncode != 0:
        why = (done.stderr.strip() or "no reason given").splitlines()[-1]
        raise StampError(f"git {' '.join(args)}: {why}")
    return done.stdout.strip()
