"""nova's REST API as the test cloud's user calls it (the only way the
scenario drives the cloud), and the reads of Placement the checks make.

Microversion 2.87: the last in which os-hypervisors shows the hypervisors'
usage (vcpus_used, memory_mb_used, local_gb_used, running_vms); servers
boot with ``"networks": "none"`` (2.37), migrations carry their UUID (2.59),
services are addressed by UUID (2.53), evacuation chooses the host (2.68).
"""

import time

import requests

from tests.cloud.standins import IMAGE_ID

MICROVERSION = "2.87"
POLL_S = 0.5


class NovaError(AssertionError):
    """nova answered otherwise than the step expects."""


class Nova:
    def __init__(self, endpoint, services):
        self.base = f"{endpoint}/v2.1"
        self.session = requests.Session()
        self.session.headers.update(
            {
                "X-Auth-Token": "stand-in-token",
                "OpenStack-API-Version": f"compute {MICROVERSION}",
                "Accept": "application/json",
            }
        )
        # Checked while waiting (a callable giving them): a service that
        # died fails the wait at once.
        self.services = services
        self.requests = 0

    def call(self, method, path, body=None, expect=(200,)):
        self.requests += 1
        reply = self.session.request(method, self.base + path, json=body, timeout=60)
        if reply.status_code not in expect:
            raise NovaError(f"{method} {path} -> {reply.status_code}: {reply.text[:2000]}")
        return reply.json() if reply.content else None

    # -- flavors and servers ------------------------------------------------

    def create_flavor(self, name, vcpus, ram, disk):
        body = {"flavor": {"name": name, "vcpus": vcpus, "ram": ram, "disk": disk}}
        return self.call("POST", "/flavors", body)["flavor"]["id"]

    def boot(self, name, flavor_id, count=1):
        """Boot ``count`` servers in one request; their ids."""
        body = {
            "server": {
                "name": name,
                "imageRef": IMAGE_ID,
                "flavorRef": flavor_id,
                "networks": "none",
                "min_count": count,
                "max_count": count,
                "return_reservation_id": True,
            }
        }
        reservation = self.call("POST", "/servers", body, expect=(202,))["reservation_id"]
        servers = self.call("GET", f"/servers?reservation_id={reservation}")["servers"]
        assert len(servers) == count, servers
        return sorted(s["id"] for s in servers)

    def server(self, server_id):
        reply = self.session.get(f"{self.base}/servers/{server_id}", timeout=60)
        if reply.status_code == 404:
            return None
        if reply.status_code != 200:
            raise NovaError(f"GET /servers/{server_id} -> {reply.status_code}: {reply.text}")
        return reply.json()["server"]

    def servers(self):
        return self.call("GET", "/servers/detail?all_tenants=1")["servers"]

    def wait_server(self, server_id, status, bound, task_state_none=True):
        """Until the server has ``status`` (and no task), within ``bound`` s.

        :raises NovaError: it went to ERROR instead, or the bound passed."""
        deadline = time.monotonic() + bound
        while True:
            for service in self.services():
                service.check()
            server = self.server(server_id)
            got = server["status"] if server else "gone"
            task = server and server.get("OS-EXT-STS:task_state")
            if got == status and (task is None or not task_state_none):
                return server
            if got == "ERROR" and status != "ERROR":
                raise NovaError(f"server {server_id} is in ERROR: {server.get('fault')}")
            if time.monotonic() >= deadline:
                raise NovaError(
                    f"server {server_id}: {got} (task {task}), not {status} within {bound} s"
                )
            time.sleep(POLL_S)

    def delete(self, server_id):
        self.call("DELETE", f"/servers/{server_id}", expect=(204,))

    def wait_gone(self, server_id, bound):
        deadline = time.monotonic() + bound
        while self.server(server_id) is not None:
            for service in self.services():
                service.check()
            if time.monotonic() >= deadline:
                raise NovaError(f"server {server_id} not deleted within {bound} s")
            time.sleep(POLL_S)

    def action(self, server_id, name, value=None):
        self.call("POST", f"/servers/{server_id}/action", {name: value}, expect=(200, 202, 204))

    # -- migrations, services, hypervisors ------------------------------------

    def migrations(self, server_id):
        """The server's migrations, newest first."""
        found = self.call("GET", f"/os-migrations?instance_uuid={server_id}")["migrations"]
        return sorted(found, key=lambda m: m["id"], reverse=True)

    def wait_migration(self, server_id, status, bound):
        def latest():
            found = self.migrations(server_id)
            return found[0] if found and found[0]["status"] == status else None

        deadline = time.monotonic() + bound
        while True:
            for service in self.services():
                service.check()
            found = latest()
            if found:
                return found
            if time.monotonic() >= deadline:
                raise NovaError(
                    f"no migration of {server_id} {status} within {bound} s: "
                    f"{self.migrations(server_id)[:1]}"
                )
            time.sleep(POLL_S)

    def compute_services(self):
        """host -> its nova-compute service record."""
        found = self.call("GET", "/os-services?binary=nova-compute")["services"]
        return {s["host"]: s for s in found}

    def force_down(self, host, down):
        service = self.compute_services()[host]
        self.call("PUT", f"/os-services/{service['id']}", {"forced_down": down})

    def delete_compute_service(self, host):
        service = self.compute_services().get(host)
        if service is not None:
            self.call("DELETE", f"/os-services/{service['id']}", expect=(204,))

    def hypervisors(self):
        """hypervisor hostname -> os-hypervisors' detail of it."""
        found = self.call("GET", "/os-hypervisors/detail")["hypervisors"]
        return {h["hypervisor_hostname"]: h for h in found}


class PlacementReader:
    """The reads of Placement the checks make (admin token, 1.39)."""

    def __init__(self, placement):
        self.adapter = placement.admin_adapter()

    def get(self, path):
        reply = self.adapter.get(path)
        assert reply.status_code == 200, f"GET {path} -> {reply.status_code}: {reply.text}"
        return reply.json()

    def provider(self, name):
        found = self.get(f"/resource_providers?name={name}")["resource_providers"]
        return found[0]["uuid"] if found else None

    def usages(self, rp):
        return self.get(f"/resource_providers/{rp}/usages")["usages"]

    def allocations(self, rp):
        """consumer -> resources on ``rp``."""
        found = self.get(f"/resource_providers/{rp}/allocations")["allocations"]
        return {consumer: a["resources"] for consumer, a in found.items()}

    def inventories(self, rp):
        return self.get(f"/resource_providers/{rp}/inventories")["inventories"]

    def consumer(self, consumer):
        """provider -> resources of ``consumer``."""
        found = self.get(f"/allocations/{consumer}")["allocations"]
        return {rp: a["resources"] for rp, a in found.items()}
