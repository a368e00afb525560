# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Host probes: pure functions from facts libvirt returned to host values.

Each probe takes plain data (tuples, dicts, ``os.statvfs_result``) that the
driver gathered, never a connection, so tests feed it canned data. A probe
raises :class:`rtagent.virt.errors.HostReadError` when the facts make no sense.
"""
