"""Stand-ins for glance and neutron in the test cloud: two small HTTP
servers in one process, answering only what nova asks of them here.

- glance (image API v2): ``GET /v2/images/{IMAGE_ID}`` (one active raw image),
  ``GET /v2/schemas/image`` and the versions document; nova-api reads the
  image on boot, rebuild and evacuation. Its data, ``GET
  /v2/images/{IMAGE_ID}/file``, is 1 MiB of zeros, which nova's libvirt
  driver downloads (tests/hypervisor): QEMU starts on it, the BIOS finds
  nothing to boot and the guest stays running.
- neutron (networking API v2.0): empty lists for ``ports``, ``networks``,
  ``extensions``, ``security-groups`` and ``floatingips``; nova asks for them
  even for servers booted with ``"networks": "none"``.

They are not glance and neutron: every answer carries ``X-Stand-In`` naming
which, and a request for anything else gets 404 and a log line, so a new
call nova makes shows in the log. Run as::

    python -m tests.cloud.standins --glance-portfile P1 --neutron-portfile P2

Each port is chosen by the OS and written to its file once listening;
SIGTERM ends the process.
"""

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

IMAGE_ID = "c10d0000-0000-4000-8000-00000000000a"
_STAMP = "2026-01-01T00:00:00Z"

IMAGE = {
    "id": IMAGE_ID,
    "name": "stand-in-image",
    "status": "active",
    "visibility": "public",
    "protected": False,
    "os_hidden": False,
    "disk_format": "raw",
    "container_format": "bare",
    "min_disk": 0,
    "min_ram": 0,
    "size": 1048576,
    "virtual_size": None,
    "checksum": None,
    "os_hash_algo": None,
    "os_hash_value": None,
    "owner": None,
    "tags": [],
    "created_at": _STAMP,
    "updated_at": _STAMP,
    "file": f"/v2/images/{IMAGE_ID}/file",
    "self": f"/v2/images/{IMAGE_ID}",
    "schema": "/v2/schemas/image",
}

# glanceclient builds its image model from this schema: any value for the
# fields above, strings for image properties.
IMAGE_SCHEMA = {
    "name": "image",
    "properties": {key: {} for key in IMAGE},
    "additionalProperties": {"type": "string"},
    "links": [
        {"rel": "self", "href": "{self}"},
        {"rel": "enclosure", "href": "{file}"},
        {"rel": "describedby", "href": "{schema}"},
    ],
}

NEUTRON_LISTS = ("ports", "networks", "extensions", "security-groups", "floatingips")


def _glance(path, base):
    if path in ("/", "/versions"):
        version = {
            "id": "v2.16",
            "status": "CURRENT",
            "links": [{"rel": "self", "href": f"{base}/v2/"}],
        }
        return 200, {"versions": [version]}
    if path == f"/v2/images/{IMAGE_ID}":
        return 200, IMAGE
    if path == "/v2/schemas/image":
        return 200, IMAGE_SCHEMA
    return 404, {"message": "not served by the glance stand-in"}


def _neutron(path, base):
    path = path.removesuffix(".json")
    for name in NEUTRON_LISTS:
        if path == f"/v2.0/{name}":
            return 200, {name.replace("-", "_"): []}
    return 404, {"NeutronError": {"message": "not served by the neutron stand-in"}}


def _handler(who, answer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            base = f"http://{self.headers.get('Host', '127.0.0.1')}"
            path = self.path.split("?", 1)[0]
            if who == "glance" and path == IMAGE["file"]:
                self._send_image_data()
                return
            status, body = answer(path, base)
            if status != 200:
                print(f"stand-in {who}: not served: GET {self.path}", file=sys.stderr, flush=True)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Stand-In", who)
            self.end_headers()
            self.wfile.write(data)

        def _send_image_data(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(IMAGE["size"]))
            self.send_header("X-Stand-In", who)
            self.end_headers()
            self.wfile.write(bytes(IMAGE["size"]))

        def _refuse(self):
            line = f"stand-in {who}: refused: {self.command} {self.path}"
            print(line, file=sys.stderr, flush=True)
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.send_header("X-Stand-In", who)
            self.end_headers()

        def do_POST(self):
            self._refuse()

        def do_PUT(self):
            self._refuse()

        def do_DELETE(self):
            self._refuse()

        def log_message(self, format, *args):
            return

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self):
        # No getfqdn(): a reverse lookup can hang where there is no resolver.
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()


def _write_port(path, port):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glance-portfile", required=True)
    parser.add_argument("--neutron-portfile", required=True)
    args = parser.parse_args(argv)
    servers = []
    for who, answer, portfile in (
        ("glance", _glance, args.glance_portfile),
        ("neutron", _neutron, args.neutron_portfile),
    ):
        server = _Server(("127.0.0.1", 0), _handler(who, answer))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        _write_port(portfile, server.server_address[1])
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    while not done.wait(1.0):
        pass
    for server in servers:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
