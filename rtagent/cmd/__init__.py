"""Console entry points."""

import sys

from rtagent.excerpt import clip

# The longest error line a command prints: a refused value is quoted
# clipped, never whole (an option value may be a megabyte).
MAX_ERROR_LINE = 500
_PREFIX = "rtagent: error: "


def error_line(problem):
    """``problem`` as the one line a command prints for it: control
    characters escaped, at most :data:`MAX_ERROR_LINE` characters."""
    return _PREFIX + clip(str(problem), MAX_ERROR_LINE - len(_PREFIX) - 3)


def say_error(problem):
    print(error_line(problem), file=sys.stderr)
