"""A stand-in for keystone in the test cloud's nova-api: a paste filter in
the place of keystonemiddleware's ``authtoken``.

This cloud has no keystone. The filter validates nothing: every request is
made by one user with the ``admin``, ``member`` and ``reader`` roles in one
project, as ``authtoken`` would say after checking a token, and nova's own
``keystonecontext`` filter builds the request context from these headers.
Each answer carries ``X-Stand-In: identity`` so nobody mistakes it for
keystone. Loaded through tests/cloud's api-paste.ini (:mod:`tests.cloud.control`).
"""

USER_ID = "c10d0000000000000000000000000001"
PROJECT_ID = "c10d0000000000000000000000000002"

# What keystonemiddleware sets after validating a token (WSGI environ keys).
_IDENTITY = {
    "HTTP_X_IDENTITY_STATUS": "Confirmed",
    "HTTP_X_USER_ID": USER_ID,
    "HTTP_X_USER_NAME": "cloud-test",
    "HTTP_X_USER_DOMAIN_ID": "default",
    "HTTP_X_PROJECT_ID": PROJECT_ID,
    "HTTP_X_PROJECT_NAME": "cloud-test",
    "HTTP_X_PROJECT_DOMAIN_ID": "default",
    "HTTP_X_ROLES": "admin,member,reader",
}


class IdentityStandIn:
    """WSGI middleware: the fixed identity above on every request."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        # Headers a client sent are not believed, as authtoken does not.
        for key in [k for k in environ if k.startswith(("HTTP_X_USER", "HTTP_X_PROJECT"))]:
            del environ[key]
        environ.update(_IDENTITY)
        environ.setdefault("HTTP_X_AUTH_TOKEN", "stand-in-token")

        def start(status, headers, exc_info=None):
            return start_response(status, [*headers, ("X-Stand-In", "identity")], exc_info)

        return self.app(environ, start)


def filter_factory(global_conf, **local_conf):
    """paste.deploy's entry point (``paste.filter_factory``)."""
    return IdentityStandIn
