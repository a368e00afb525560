# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova-compute on rtagent: the ResourceTracker nova's ComputeManager calls,
with rtagent doing the accounting and owning the provider tree in Placement.

An optional extra (``rtagent[nova]``, nova 34.x): nothing else in rtagent
imports this package, and this package imports nova only as a library.

- :mod:`.link`: how the tracker reaches the agent (RPC to the daemon, or an
  agent in the same process), one interface for both.
- :mod:`.hostdriver`: a host driver over nova's virt driver, for an agent
  embedded in nova-compute (nova's fake drivers in nova's tests).
- :mod:`.tracker`: the ResourceTracker interface, translating nova objects
  into the RPC API's requests and writing the rows nova's other services
  read (instance host and node, migration destination and status, the
  ComputeNode record from the agent's compute-node view).
- :mod:`.guard`: nova's own ResourceTracker made unusable while this one is
  in place, so that whatever passes proves rtagent did the accounting.
- :mod:`.compute`: ``rtagent-nova-compute``, nova's compute service with
  this tracker in place, calling the rtagent daemon over RPC.
- :mod:`.testing` and :mod:`.testhook`: the same put into nova's own
  functional tests.
"""
