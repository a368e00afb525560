"""Put tests/cloud/virt.py under ``nova.virt`` as ``nova.virt.rtagent_cloud``
in the compute services of the test cloud (this directory is on their
PYTHONPATH, and nowhere else): nova loads ``[DEFAULT] compute_driver`` only
from ``nova.virt``. Nothing of nova is changed or replaced."""

import importlib.abc
import importlib.util
import os
import sys

NAME = "nova.virt.rtagent_cloud"
PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "virt.py")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME:
            return None
        return importlib.util.spec_from_file_location(fullname, PATH)


sys.meta_path.append(_Finder())
