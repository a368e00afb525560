# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""make test-nova's parts: the recorded baseline (:mod:`.record`), the
exceptions docs/nova.md lists (:mod:`.exceptions`), stestr runs watched as
they go (:mod:`.stestr`), and the verdict over them (:mod:`.verdict`)."""
