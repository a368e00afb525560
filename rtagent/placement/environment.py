"""Proxies and the CA bundle from the process environment, read once per
endpoint rather than on every request.

A requests session that trusts the environment (the default, and the one
keystoneauth builds) reads it on every request: urllib's proxy lookup walks
the whole of ``os.environ`` twice (``*_proxy``, then ``no_proxy``),
``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE`` are looked up, and ``~/.netrc``
is searched for. On a steady tick that was a quarter of the agent's CPU
(0.31 ms of a 1.24 ms GET, issue 35). A service's environment is fixed when
it starts, so the agent reads the proxies once for each endpoint (scheme,
host and port: Placement's, the identity service's), and the CA bundle once,
and turns the per-request reading off.

What a request uses is what it used before: the same proxies, ``no_proxy``
honoured, the environment's CA bundle where the configuration does not name
one. One difference: ``~/.netrc`` is not read; keystoneauth's auth plugin
gives the credentials.
"""

import os
import urllib.parse

from requests import utils as requests_utils

_APPLIED = "_rtagent_environment_read_once"


def read_once(session):
    """Make a ``requests.Session`` read the environment once per endpoint.

    Idempotent. The session may be shared (nova's report client hands its
    own): every user of it gets the same proxies and bundle as before.

    :param session: a ``requests.Session`` (keystoneauth's
        ``Session.session``).
    """
    if getattr(session, _APPLIED, False):
        return
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    found = {}
    merge = session.merge_environment_settings

    def merge_environment_settings(url, proxies, stream, verify, cert):
        proxies = dict(proxies or {})
        no_proxy = proxies.get("no_proxy")
        parts = urllib.parse.urlsplit(url)
        key = (parts.scheme, parts.netloc, no_proxy)
        env_proxies = found.get(key)
        if env_proxies is None:
            # Two threads may both look it up first: same answer, no harm.
            env_proxies = found[key] = requests_utils.get_environ_proxies(url, no_proxy=no_proxy)
        for scheme, proxy in env_proxies.items():
            proxies.setdefault(scheme, proxy)
        if verify is True or verify is None:
            verify = bundle or verify
        # With trust_env off, requests' own method only merges the session's
        # settings under these.
        return merge(url, proxies, stream, verify, cert)

    session.trust_env = False
    session.merge_environment_settings = merge_environment_settings
    setattr(session, _APPLIED, True)
