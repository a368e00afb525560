# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Serve the real Placement WSGI app on loopback, one request at a time.

Run as::

    OS_PLACEMENT_CONFIG_DIR=DIR python -m rtagent.testing.placement_wsgi \\
        --portfile PATH [--host 127.0.0.1] [--port 0] [--parent-pid PID] [--request-log]

- Placement reads ``$OS_PLACEMENT_CONFIG_DIR/placement.conf`` and nothing else;
  the variable must be set (exit status 2 otherwise).
- Binds ``--port`` (default 0: the OS picks a free port, so there is no race
  between choosing a port and binding it), then writes the bound port as
  decimal text to ``--portfile`` atomically (temporary file + rename) once the
  socket is listening. The portfile is removed again on a clean exit.
- Single-threaded (``wsgiref``): SQLite answers concurrent writers with
  "database is locked" (HTTP 500), so requests are served strictly in turn.
- SIGTERM (and SIGINT) end the process with status 0. With ``--parent-pid``,
  the process also ends within ~1 s of that parent's death, so a killed test
  run does not leave a server behind.
- Placement's per-request INFO log is silenced unless ``--request-log``;
  warnings and errors still go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socketserver
import sys
import threading
import time
from wsgiref import simple_server

CONFIG_DIR_ENV = "OS_PLACEMENT_CONFIG_DIR"
# Seconds a single client may stall a request; the server is single-threaded,
# so an idle half-open connection would otherwise block every other client.
REQUEST_TIMEOUT_S = 60


class _Server(simple_server.WSGIServer):
    """WSGIServer that never resolves its own address.

    HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that
    can hang for seconds on hosts without a resolver.
    """

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = host
        self.server_port = port
        self.setup_environ()

    def service_actions(self) -> None:
        # serve_forever() calls this between requests (at least every poll
        # interval). A SIGTERM that landed while a request was handled was
        # swallowed by wsgiref's bare ``except:``; stop here instead.
        if _stop_requested.is_set():
            raise _Terminated(0)


class _QuietHandler(simple_server.WSGIRequestHandler):
    """Request handler without wsgiref's one-line-per-request stderr log."""

    timeout = REQUEST_TIMEOUT_S

    def log_message(self, fmt, *args):
        pass


def _write_portfile(path: str, port: int) -> None:
    """Write ``port`` to ``path`` so that readers never see a partial file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{port}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class _Terminated(SystemExit):
    """Raised by the SIGTERM/SIGINT handler; exit status 0 if uncaught."""


_stop_requested = threading.Event()


def _terminate(signum, frame):
    # Raising here unwinds serve_forever() in the main thread, so the
    # finally-blocks below close the socket and remove the portfile. The flag
    # covers a raise that lands inside request handling and is swallowed.
    _stop_requested.set()
    raise _Terminated(0)


def _watch_parent(parent_pid: int, interval_s: float = 1.0) -> None:
    """Send ourselves SIGTERM once ``parent_pid`` is no longer our parent."""
    while os.getppid() == parent_pid:
        time.sleep(interval_s)
    os.kill(os.getpid(), signal.SIGTERM)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rtagent.testing.placement_wsgi")
    parser.add_argument("--portfile", required=True, help="where to write the bound port")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 = any free")
    parser.add_argument(
        "--parent-pid", type=int, default=None, help="exit when this process is gone"
    )
    parser.add_argument(
        "--request-log", action="store_true", help="keep placement's per-request INFO log"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the server until SIGTERM; return the process exit status."""
    args = _parse_args(argv)
    if not os.environ.get(CONFIG_DIR_ENV, "").strip():
        print(f"{CONFIG_DIR_ENV} must name the directory holding placement.conf", file=sys.stderr)
        return 2
    # Install before the slow import below so an early SIGTERM still exits cleanly.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    if args.parent_pid is not None:
        threading.Thread(
            target=_watch_parent, args=(args.parent_pid,), name="parent-watch", daemon=True
        ).start()

    # Builds the app at import time from $OS_PLACEMENT_CONFIG_DIR/placement.conf;
    # a broken config raises here and the traceback lands on stderr.
    from placement.wsgi import api

    if not args.request_log:
        logging.getLogger("placement.requestlog").setLevel(logging.WARNING)

    server = simple_server.make_server(
        args.host, args.port, api.application, server_class=_Server, handler_class=_QuietHandler
    )
    try:
        _write_portfile(args.portfile, server.server_port)
        try:
            server.serve_forever()
        except _Terminated:
            pass
        finally:
            try:
                os.unlink(args.portfile)
            except FileNotFoundError:
                pass
    finally:
        server.server_close()
    return 0


def _exit_fast(status: int) -> None:
    """Flush logs and leave without interpreter teardown.

    Tearing down the imported placement stack takes ~0.4 s; every committed
    SQLite transaction is already on disk, so nothing is lost by skipping it.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    _exit_fast(main())
