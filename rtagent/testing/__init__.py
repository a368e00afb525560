# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Helpers for tests, demos and benchmarks; not used by the agent at run time.

- :mod:`rtagent.testing.placement_server`: run a real OpenStack Placement
  process on loopback (:class:`~rtagent.testing.placement_server.PlacementServer`).
- :mod:`rtagent.testing.placement_wsgi`: the launcher that process runs.

These need the ``test`` extra (``openstack-placement``) installed.
"""
