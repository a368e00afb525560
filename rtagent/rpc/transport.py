"""oslo.messaging set up the way rtagent needs it: the threading backend, a
private ConfigOpts, the topic and version of the API.

Import oslo_messaging only through :func:`messaging`: the threading backend
of oslo.service must be selected before oslo_messaging is first imported,
or it brings eventlet in.
"""

import threading
import warnings

# Where a conductor's Target must point (docs/rpc-api.md). The exchange is
# named in the server's Target rather than left to the transport's default
# (``[DEFAULT] control_exchange``): a caller in another service (a nova
# process uses its own control_exchange, ``nova``) must name it in its
# Target, so it has to be one fixed name, not a setting of the agent's.
EXCHANGE = "rtagent"
TOPIC = "rtagent"
API_VERSION = "1.9"
NOTIFICATION_TOPIC = "notifications"

_backend_lock = threading.Lock()
_loaded = {}


def messaging():
    """The ``oslo_messaging`` module, with the threading backend selected."""
    with _backend_lock:
        if "oslo_messaging" not in _loaded:
            with warnings.catch_warnings():
                # futurist imports eventlet when it is installed (Placement's
                # test dependencies bring it) only to detect it; nothing is
                # monkey-patched, so its deprecation warning is noise here.
                warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
                warnings.simplefilter("ignore", DeprecationWarning)
                from oslo_service import backend

                try:
                    backend.init_backend(backend.BackendType.THREADING)
                except backend.exceptions.BackendAlreadySelected:
                    # Someone chose first (an embedding program); keep it.
                    pass
                import oslo_messaging
                import oslo_messaging._metrics.client
                import oslo_messaging._tracing.client
                import oslo_messaging.opts

            _loaded["oslo_messaging"] = oslo_messaging
    return _loaded["oslo_messaging"]


def set_defaults():
    """rtagent's defaults for oslo.messaging's options: ``control_exchange``
    ``rtagent`` (the exchange of the agent's notifications; oslo.messaging's
    own default is ``openstack``). Also the ``oslo.config.opts.defaults``
    entry point, so that the generated sample shows what the agent uses."""
    messaging().set_transport_defaults(control_exchange=EXCHANGE)


def register_opts(conf):
    """Register oslo.messaging's options on a private ``conf``.

    oslo.messaging registers its metrics and tracing groups only on the
    global ``cfg.CONF``; a private ConfigOpts needs them too, or the first
    call fails with NoSuchOptError.
    """
    om = messaging()
    set_defaults()
    groups = [
        *om.opts.list_opts(),
        ("oslo_messaging_metrics", om._metrics.client.oslo_messaging_metrics),
        ("oslo_messaging_tracing", om._tracing.client.oslo_messaging_tracing),
    ]
    for name, opts in groups:
        group = name if name not in (None, "DEFAULT") else None
        for opt in opts:
            try:
                conf.register_opt(opt, group=group)
            except Exception:  # noqa: S112 - already registered by a library
                continue


def get_transport(conf, url=None):
    """An RPC transport for ``conf`` (``transport_url``, or ``url``)."""
    return messaging().get_rpc_transport(conf, url=url)


def get_notification_transport(conf, url=None):
    return messaging().get_notification_transport(conf, url=url)


def server_target(host):
    return messaging().Target(exchange=EXCHANGE, topic=TOPIC, server=host, version=API_VERSION)
