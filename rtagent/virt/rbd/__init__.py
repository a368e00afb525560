"""Guests' disks in a Ceph RBD pool (nova's ``[libvirt] images_type = rbd``):
the pool's figures, read from the cluster at the audit (``docs/rbd.md``)."""
