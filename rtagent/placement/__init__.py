"""Publishing the node to OpenStack Placement: client, pure provider tree and
diff, and the sync that flushes the diff with one bounded retry policy."""
