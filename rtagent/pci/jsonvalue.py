# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""One ``[pci]`` option value read as JSON at a bounded cost: a value is at
most :data:`MAX_CHARS` long (nova's are a few hundred), and nesting that
would exhaust the parser's recursion (``[[[[...`` 100,000 deep) is refused
with a reason, not a RecursionError."""

import json

MAX_CHARS = 64 * 1024


def load(text):
    """The JSON value in ``text``.

    :raises ValueError: with a one-line reason that never quotes ``text``.
    """
    if not isinstance(text, str):
        raise ValueError("not valid JSON")
    if len(text) > MAX_CHARS:
        raise ValueError(f"longer than {MAX_CHARS} characters")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    except ValueError:
        raise ValueError("not valid JSON") from None
