"""A thin Placement REST client over a keystoneauth1 Adapter.

One method per request the agent makes; each returns plain data or raises a
:mod:`rtagent.placement.errors` class chosen by Placement's error code. The
client keeps no state. It never retries an answer (a 409 or a 5xx is the
caller's to handle: the sync's, under its policy); it sends an idempotent
request once more when its connection died before any answer came back
(see :data:`RECONNECT`).
"""

import logging
import time

import requests
from keystoneauth1 import exceptions as ks_exc

from rtagent.placement import environment, errors
from rtagent.placement.retry import RetryPolicy

LOG = logging.getLogger(__name__)

# Failures that mean "try again later": connection refused or reset, TLS
# handshake failures, timeouts, and version discovery that could not connect.
_TRANSIENT = (ks_exc.ConnectionError, ks_exc.RequestTimeout, ks_exc.DiscoveryFailure)

# What keystoneauth makes of requests' ConnectionError: refused, reset, or a
# pooled keep-alive connection that the server (or a front's idle timeout)
# closed just as we reused it (RemoteDisconnected). Not timeouts: those
# already cost [placement] timeout, and the request may still be running.
_CONNECTION_LOST = ks_exc.ConnectFailure

# A PUT whose first copy landed (only its answer was lost) comes back as a
# 409 that its caller already handles:
# - put_inventories, put_traits and put_aggregates carry the provider
#   generation that the first copy moved, so the sync re-reads that
#   provider, finds its write there and has nothing left to do
#   (flusher.Flusher._apply_by_provider);
# - the healer's PUT /allocations carries the consumer generation: a
#   conflict, looked at again next pass (allocations.AllocationHealer.heal);
# - a standalone write (consumer generation None) finds the consumer, and
#   one GET sees the same allocations: PRESENT (standalone.write_allocations);
# - update_provider and the custom trait and class PUTs give the same result
#   twice. There is no DELETE today.
# A POST is never sent twice: a landed POST /resource_providers would come
# back as a name conflict, read as ProviderNameTaken (someone else's name).
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
"""Methods sent again when their connection was lost before an answer."""

RECONNECT = RetryPolicy(max_attempts=2, base_delay=0)
"""The default policy for an idempotent request whose connection was lost:
one more attempt, at once (a dead keep-alive connection is not a busy
server). urllib3 has discarded the dead connection, so the attempt goes out
on a new one, or on a pooled one checked for a close already received. A
second loss raises PlacementUnavailable. This is ours rather than
keystoneauth's ``connect_retries`` (an operator option, 0 by default),
which retries every method, POST included, also after read timeouts, with
pauses from 0.5 s doubling, and unseen by the RequestObserver."""

_ONCE = RetryPolicy(max_attempts=1)

MICROVERSION = "1.39"
"""Every request is sent at this microversion; the agent needs >= 1.39
(consumer types in allocation writes, in_tree filtering, name updates)."""


class RequestObserver:
    """Hooks around every request: metrics, tracing and tests use them.

    ``before`` runs just before each attempt goes out, ``after`` when its
    answer (or failure, ``status`` None) is known, and ``retried`` when a
    failed attempt is about to be sent again (``reason``: the failure as
    text, too varied for a metric label).
    """

    def before(self, method, url):
        pass

    def after(self, method, url, status, seconds):
        pass

    def retried(self, method, url, reason):
        pass


class PlacementClient:
    """Placement calls used by the agent.

    :param adapter: a keystoneauth1 Adapter for the placement service.
    :param observer: a :class:`RequestObserver`, or None.
    :param reconnect: the :class:`RetryPolicy` for idempotent requests whose
        connection was lost before an answer (default :data:`RECONNECT`).
    """

    def __init__(self, adapter, observer=None, reconnect=RECONNECT):
        self._adapter = adapter
        # keystoneauth's Adapter -> Session -> requests.Session; an adapter
        # of another shape (a test's wrapper) is left as it is.
        transport = getattr(getattr(adapter, "session", None), "session", None)
        if isinstance(transport, requests.Session):
            # The environment is read once per endpoint, not per request
            # (rtagent.placement.environment).
            environment.read_once(transport)
        self._observer = observer or RequestObserver()
        self._reconnect = reconnect

    def _request(self, method, url, body=None, params=None):
        def on_retry(exc, attempt):
            LOG.warning(
                "Placement connection lost before an answer to %s %s (attempt %d: %s); "
                "sending it again on another connection",
                method,
                url,
                attempt,
                exc,
            )
            self._observer.retried(method, url, str(exc))

        policy = self._reconnect if method in IDEMPOTENT else _ONCE
        try:
            response = policy.call(
                lambda attempt: self._send(method, url, body, params),
                retry_on=_CONNECTION_LOST,
                on_retry=on_retry,
            )
        except _TRANSIENT as exc:
            raise errors.PlacementUnavailable(method=method, url=url, reason=str(exc)) from exc
        except ks_exc.HttpError as exc:
            # From the identity service while authenticating: a 5xx there is
            # transient like ours; anything else is a credentials problem.
            if (exc.http_status or 0) >= 500:
                raise errors.PlacementUnavailable(method=method, url=url, reason=str(exc)) from exc
            raise errors.KeystoneAuthFailed(method=method, url=url, reason=str(exc)) from exc
        except ks_exc.ClientException as exc:
            # No auth plugin, bad credentials, Placement not in the catalog:
            # retrying will not help until the operator fixes the config.
            raise errors.KeystoneAuthFailed(method=method, url=url, reason=str(exc)) from exc
        status = response.status_code
        if status >= 400:
            raise errors.from_response(method, url, response)
        if status == 204 or not response.content:
            return None
        return response.json()

    def _send(self, method, url, body, params):
        """One attempt, seen by the observer; keystoneauth's errors pass.

        With debug logging (``--debug``) each attempt is traced in one line:
        method, path, status (or the failure) and milliseconds. keystoneauth's
        own request log is off at oslo.log's default levels and would print
        headers and bodies.
        """
        self._observer.before(method, url)
        started = time.monotonic()
        status = None
        failure = None
        try:
            response = self._adapter.request(
                url,
                method,
                json=body,
                params=params,
                microversion=MICROVERSION,
                raise_exc=False,
            )
            status = response.status_code
            return response
        except Exception as exc:
            failure = type(exc).__name__
            raise
        finally:
            seconds = time.monotonic() - started
            self._observer.after(method, url, status, seconds)
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "Placement %s %s%s -> %s in %.1f ms",
                    method,
                    url,
                    _query(params),
                    status or failure,
                    seconds * 1000,
                )

    def list_tree(self, root_uuid):
        """Providers in the tree rooted at ``root_uuid`` (empty if none).

        :returns: list of dicts with uuid, name, generation,
            parent_provider_uuid, root_provider_uuid.
        """
        body = self._request("GET", "/resource_providers", params={"in_tree": root_uuid})
        return body["resource_providers"]

    def get_inventories(self, rp_uuid):
        """:returns: (generation, {resource class: inventory dict})."""
        body = self._request("GET", f"/resource_providers/{rp_uuid}/inventories")
        return body["resource_provider_generation"], body["inventories"]

    def get_traits(self, rp_uuid):
        """:returns: (generation, frozenset of trait names)."""
        body = self._request("GET", f"/resource_providers/{rp_uuid}/traits")
        return body["resource_provider_generation"], frozenset(body["traits"])

    def get_aggregates(self, rp_uuid):
        """:returns: (generation, frozenset of aggregate UUIDs)."""
        body = self._request("GET", f"/resource_providers/{rp_uuid}/aggregates")
        return body["resource_provider_generation"], frozenset(body["aggregates"])

    def put_aggregates(self, rp_uuid, generation, aggregates):
        """Replace the provider's aggregates; :returns: the new generation.

        :raises GenerationConflict: ``generation`` is stale.
        """
        payload = {"resource_provider_generation": generation, "aggregates": sorted(aggregates)}
        body = self._request("PUT", f"/resource_providers/{rp_uuid}/aggregates", body=payload)
        return body["resource_provider_generation"]

    def create_provider(self, rp_uuid, name, parent_uuid=None):
        """Create a provider; :returns: its generation (0)."""
        payload = {"uuid": rp_uuid, "name": name}
        if parent_uuid:
            payload["parent_provider_uuid"] = parent_uuid
        body = self._request("POST", "/resource_providers", body=payload)
        return body["generation"]

    def update_provider(self, rp_uuid, name, parent_uuid=None):
        """Rename (or re-parent) a provider; :returns: its generation."""
        payload = {"name": name}
        if parent_uuid:
            payload["parent_provider_uuid"] = parent_uuid
        body = self._request("PUT", f"/resource_providers/{rp_uuid}", body=payload)
        return body["generation"]

    def delete_provider(self, rp_uuid):
        """Delete a provider; True if it was there, False if already gone.

        :raises PlacementRequestFailed: Placement refused (it has
            allocations or children: ``placement.resource_provider.in_use``
            or ``...cannot_delete_parent``).
        """
        try:
            self._request("DELETE", f"/resource_providers/{rp_uuid}")
        except errors.PlacementRequestFailed as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def put_inventories(self, rp_uuid, generation, inventories):
        """Replace all inventories; :returns: the new generation.

        :raises GenerationConflict: ``generation`` is stale.
        """
        payload = {"resource_provider_generation": generation, "inventories": inventories}
        body = self._request("PUT", f"/resource_providers/{rp_uuid}/inventories", body=payload)
        return body["resource_provider_generation"]

    def put_traits(self, rp_uuid, generation, traits):
        """Replace all traits; :returns: the new generation.

        :raises GenerationConflict: ``generation`` is stale.
        """
        payload = {"resource_provider_generation": generation, "traits": sorted(traits)}
        body = self._request("PUT", f"/resource_providers/{rp_uuid}/traits", body=payload)
        return body["resource_provider_generation"]

    def get_usages(self, rp_uuid):
        """:returns: {resource class: amount used} on the provider."""
        return self._request("GET", f"/resource_providers/{rp_uuid}/usages")["usages"]

    # -- traits and resource classes --------------------------------------

    def ensure_trait(self, name):
        """Create custom trait ``name`` if missing (idempotent)."""
        self._request("PUT", f"/traits/{name}")

    def ensure_resource_class(self, name):
        """Create custom resource class ``name`` if missing (idempotent)."""
        self._request("PUT", f"/resource_classes/{name}")

    # -- allocations -------------------------------------------------------

    def get_allocations(self, consumer_uuid):
        """A consumer's allocations.

        :returns: dict with ``allocations`` ({provider uuid: {"resources":
            {...}, "generation": n}}), ``consumer_generation`` (None for an
            unknown consumer), ``project_id``, ``user_id``, ``consumer_type``.
        """
        body = self._request("GET", f"/allocations/{consumer_uuid}")
        body.setdefault("consumer_generation", None)
        return body

    def put_allocations(self, consumer_uuid, allocations, *, consumer_generation, **owner):
        """Replace a consumer's allocations (``{}`` removes them all).

        :param allocations: {provider uuid: {resource class: amount}}.
        :param consumer_generation: the generation read, None for a new consumer.
        :param owner: ``project_id``, ``user_id`` and ``consumer_type``.
        :raises GenerationConflict: the consumer changed since it was read
            (or exists although ``consumer_generation`` is None).
        :raises PlacementRequestFailed: e.g. capacity exceeded (409).
        """
        payload = {
            "allocations": {
                rp: {"resources": dict(resources)} for rp, resources in allocations.items()
            },
            "consumer_generation": consumer_generation,
            "project_id": owner["project_id"],
            "user_id": owner["user_id"],
            "consumer_type": owner["consumer_type"],
        }
        self._request("PUT", f"/allocations/{consumer_uuid}", body=payload)

    def get_provider_allocations(self, rp_uuid):
        """:returns: (generation, {consumer uuid: {resource class: amount}})."""
        body = self._request("GET", f"/resource_providers/{rp_uuid}/allocations")
        allocs = {c: dict(a["resources"]) for c, a in body["allocations"].items()}
        return body["resource_provider_generation"], allocs

    def reshape(self, inventories, allocations):
        """``POST /reshaper``: replace inventories and allocations atomically.

        Needs the ``service`` role.

        :param inventories: {provider uuid: {"resource_provider_generation":
            n, "inventories": {...}}}.
        :param allocations: {consumer uuid: the body of a PUT /allocations}.
        :raises GenerationConflict: a provider or consumer changed.
        """
        payload = {"inventories": inventories, "allocations": allocations}
        self._request("POST", "/reshaper", body=payload)


def _query(params):
    """``?in_tree=...`` for a traced request (our own parameters: UUIDs)."""
    if not params:
        return ""
    return "?" + "&".join(f"{k}={v}" for k, v in sorted(params.items()))
