# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The libvirt host driver: reads the host through one reused connection.

Use :class:`LibvirtDriver` to audit a host and :func:`validate_uri` to check a
connection URI from config before anything connects.
"""

from rtagent.virt.libvirt.driver import LibvirtDriver
from rtagent.virt.libvirt.uri import validate_uri

__all__ = ["LibvirtDriver", "validate_uri"]
