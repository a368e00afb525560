"""One reading of a Ceph pool through librados (Debian's ``python3-rados``
and ``python3-rbd``): the I/O edge of :mod:`.figures`.

Each reading opens a client, asks the monitor for ``df`` (the figures
``ceph df`` prints, and what nova's RBD driver reads), lists the pool's RBD
images, and closes the client: at an audit interval of a minute a
connection costs 10-20 ms, and a client kept open across a cluster outage
is one more thing that can hang. The librados timeouts bound each step; the
caller (:mod:`.watch`) bounds the whole.
"""

import json

from rtagent.virt.rbd import figures

# librados options that bound a client's waits (seconds, as strings).
_TIMEOUT_OPTIONS = ("client_mount_timeout", "rados_mon_op_timeout", "rados_osd_op_timeout")


class CephReadError(Exception):
    """The cluster did not give the pool's figures; the message says why."""


def missing_bindings():
    """Why librados cannot be used here, or '' when it can."""
    try:
        import rados  # noqa: F401
        import rbd  # noqa: F401
    except ImportError as exc:
        return (
            f"the Ceph Python bindings are not importable ({exc}); install python3-rados "
            "and python3-rbd (tools/setup-ceph.sh links them into a virtualenv)"
        )
    return ""


class PoolReader:
    """Reads one pool's :class:`~.figures.PoolFigures`.

    :param conffile: the ceph.conf path (nova's ``images_rbd_ceph_conf``).
    :param pool: the pool name (``images_rbd_pool``).
    :param user: the cephx user without ``client.`` (``rbd_user``), or None.
    :param timeout: seconds librados may wait for the monitor or an OSD.
    """

    def __init__(self, conffile, pool, user=None, timeout=5.0):
        self.conffile = conffile
        self.pool = pool
        self.user = user
        self.timeout = timeout

    def __call__(self):
        """:returns: the pool's figures now.
        :raises CephReadError: the cluster, the pool or a figure is missing.
        """
        import rados
        import rbd

        try:
            client = rados.Rados(conffile=self.conffile, rados_id=self.user or None)
        except rados.Error as exc:
            raise CephReadError(f"cannot read {self.conffile}: {exc}") from exc
        try:
            for name in _TIMEOUT_OPTIONS:
                client.conf_set(name, str(self.timeout))
            client.connect(timeout=int(max(1, self.timeout)))
            fsid = client.get_fsid()
            ret, out, err = client.mon_command(json.dumps({"prefix": "df", "format": "json"}), b"")
            if ret != 0:
                raise CephReadError(f"ceph df failed ({ret}): {err}")
            with client.open_ioctx(self.pool) as ioctx:
                images = rbd.RBD().list(ioctx)
            return figures.from_df(json.loads(out), fsid, self.pool, images)
        except rados.ObjectNotFound as exc:
            raise CephReadError(f"pool {self.pool!r} does not exist") from exc
        except (rados.Error, rbd.Error) as exc:
            raise CephReadError(f"{type(exc).__name__}: {exc}") from exc
        except figures.DfFormatError as exc:
            raise CephReadError(str(exc)) from exc
        finally:
            client.shutdown()
