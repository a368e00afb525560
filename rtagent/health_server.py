"""A loopback HTTP endpoint: ``/healthz`` (200 or 503 with reasons, JSON),
``/metrics`` (Prometheus text) and ``/status`` (the nodes' status, JSON).

Bound to 127.0.0.1 only: it is for the local monitoring agent and for
``rtagent status``, never for the network.
"""

import http.server
import json
import logging
import threading

from rtagent import metrics as metricsmod

LOG = logging.getLogger(__name__)
HOST = "127.0.0.1"


class HealthServer:
    """:param check: callable() -> list of reasons (empty when healthy).
    :param metrics: a :class:`rtagent.metrics.Metrics`.
    :param status: callable() -> JSON-able status.
    :param port: TCP port on 127.0.0.1 (0: any free port; see ``port``).
    """

    def __init__(self, check, metrics, status, port):
        self._check = check
        self._metrics = metrics
        self._status = status
        handler = _handler_class(self)
        self._httpd = http.server.ThreadingHTTPServer((HOST, port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = None

    def start(self):
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="health-http", daemon=True
        )
        self._thread.start()
        LOG.info("Health and metrics on http://%s:%d/", HOST, self.port)

    def stop(self):
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()


def _handler_class(server):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            try:
                if path == "/healthz":
                    reasons = server._check()
                    body = {"status": "ok" if not reasons else "unhealthy", "reasons": reasons}
                    self._send(200 if not reasons else 503, _json(body), "application/json")
                elif path == "/metrics":
                    self._send(200, server._metrics.render(), metricsmod.CONTENT_TYPE)
                elif path == "/status":
                    self._send(200, _json(server._status()), "application/json")
                else:
                    self._send(404, _json({"error": "not found"}), "application/json")
            except Exception:
                LOG.exception("Health endpoint %s failed", path)
                self._send(500, _json({"error": "internal error"}), "application/json")

        def _send(self, code, body, content_type):
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            LOG.debug("health %s", fmt % args)

    return Handler


def _json(data):
    return (json.dumps(data, sort_keys=True) + "\n").encode("utf-8")
