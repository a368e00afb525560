# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The exit path every benchmark shares.

A benchmark that stops on an unexpected exception measured nothing: it ends
like any other void run, with a ``summary ... VOID`` line naming the
exception and exit status 1, and the traceback on stderr for whoever reads
the log. ``make bench`` then names the script among those that failed.
"""

import sys
import traceback


def run(main):
    """Call ``main()`` and return its exit status; an exception is VOID.

    :param main: the script's main function, returning 0 (PASS) or 1.
    :returns: ``main``'s status, or 1 after printing the VOID summary.
        argparse's exit and Ctrl-C pass through.
    """
    try:
        return main()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        reason = f"{type(exc).__name__}:{'_'.join(str(exc).split())[:80]}"
        print(f"summary void=exception void_reason={reason} VOID", flush=True)
        return 1
